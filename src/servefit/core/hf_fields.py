"""The generic half of reading a Hugging Face ``config.json``: HF field names become ours.

:class:`Fields` reads config fields and remembers which were consumed, so that a structural
field (:data:`STRUCTURAL_FIELDS`) no parser consumed can be refused instead of ignored. The
helpers here build the parts every family shares (an attention layer, a dense MLP, the
sliding window, the ``layer_types`` list) and assemble the :class:`ModelSpec`
(:func:`build_spec`). Every value is typed and range-checked where it is read
(:data:`FIELD_LIMITS`): the core never sees NaN, a bool or a float where a count belongs, a
negative count, a zero divisor or a size beyond the physical world. The per-family parsers
are in :mod:`servefit.core.hf_families` and :mod:`servefit.core.hf_hybrid`; the entry point
is :mod:`servefit.core.hf_config`.

Pure: takes dictionaries, returns values.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

# `X as X`: re-exported, so ``servefit.core.hf_fields.<name>`` keeps working
from servefit.core.hf_defaults import FAMILY_DEFAULTS as FAMILY_DEFAULTS
from servefit.core.hf_defaults import STRUCTURAL_FIELDS as STRUCTURAL_FIELDS
from servefit.core.hf_values import GENERIC, Limit, checked_fraction, show
from servefit.core.hf_values import checked_int as _checked_int
from servefit.core.model_spec import (
    AttentionSpec,
    DenseMlpSpec,
    LayerSpec,
    MlaSpec,
    ModelSpec,
    VisionSpec,
)
from servefit.errors import ConfigError
from servefit.units import DTYPE_BYTES

Config = Mapping[str, Any]

_MAX_LAYERS = 1_000
LAYERS = Limit(1, _MAX_LAYERS, "the deepest published LLM has 126 layers (Llama 3.1 405B)")
LAYER_INDEX = Limit(0, _MAX_LAYERS, "a layer index or a number of layers (at most 1,000)")
PERIOD = Limit(1, _MAX_LAYERS, "a layer period: 0 divides by zero, a negative one picks nonsense")
WIDTH = Limit(1, 2**17, "the widest published hidden size is 18,432 (PaLM 540B)")
MLP_WIDTH = Limit(1, 2**20, "the widest published MLP is 73,728 (PaLM 540B)")
MLP_WIDTH_OR_0 = Limit(0, 2**20, "the widest published MLP is 73,728; 0 means none")
HEADS = Limit(
    1, 2**14, "the most heads published: 128 attention (DeepSeek-V3), 256 Mamba (Nemotron-H)"
)
HEAD_DIM = Limit(1, 2**14, "published heads are 64 to 256 wide (Gemma 2/3, Qwen3-Next: 256)")
HEAD_DIM_OR_0 = Limit(0, 2**14, "published heads are 64 to 256 wide; 0 means none")
RANK = Limit(1, 2**16, "the largest published latent rank is 1,536 (DeepSeek-V3 q_lora_rank)")
STATE = Limit(1, 2**14, "published SSM states are 16 to 256 wide")
KERNEL = Limit(1, 2**10, "published convolution kernels are 4 wide")
EXPAND = Limit(1, 64, "published Mamba expansions are 2")
EXPERTS = Limit(0, 2**14, "the most experts published is 512 (Qwen3-Next); 0 means dense")
EXPERTS_PER_TOKEN = Limit(
    1, 2**14, "published models route 1 to 10 experts per token (Qwen3-Next: 10)"
)
SHARED_EXPERTS = Limit(0, 2**10, "published models share 0 to 2 experts")
VOCAB = Limit(1, 2**24, "the largest published vocabulary is 262,208 (Gemma 3)")
CONTEXT = Limit(1, 2**24, "the longest published context is 10,485,760 tokens (Llama 4 Scout)")
CONTEXT_OR_0 = Limit(0, 2**24, "the longest published context is 10,485,760 tokens; 0 means off")
GROUPS = Limit(1, 2**14, "published Mamba-2 models use 1 to 8 groups")
PATCH = Limit(1, 2**12, "published vision patches are 14 to 16 pixels")
IMAGE = Limit(1, 2**16, "published vision towers take 224 to 1,024 pixel images")
CHANNELS = Limit(1, 64, "images have 3 channels (RGB)")
MERGE = Limit(1, 64, "published spatial merges are 2 x 2, temporal patches 2")

# Every integer field a config reader takes -> its range. An alias shares its name's limit.
FIELD_LIMITS: dict[str, Limit] = {
    **dict.fromkeys(("num_hidden_layers", "depth"), LAYERS),
    **dict.fromkeys(
        (
            "first_k_dense_replace",
            "attn_layer_offset",
            "expert_layer_offset",
            "max_window_layers",
            "num_nextn_predict_layers",
            "num_kv_shared_layers",
            "mtp_num_hidden_layers",
        ),
        LAYER_INDEX,
    ),
    **dict.fromkeys(
        (
            "moe_layer_freq",
            "decoder_sparse_step",
            "full_attention_interval",
            "interleave_moe_layer_step",
            "attn_layer_period",
            "expert_layer_period",
            "sliding_window_pattern",
        ),
        PERIOD,
    ),
    **dict.fromkeys(("hidden_size", "embed_dim", "out_hidden_size"), WIDTH),
    "hidden_size_per_layer_input": Limit(0, 2**17, "Gemma 4: 256 a layer; 0 means none"),
    **dict.fromkeys(
        ("intermediate_size", "moe_intermediate_size", "intermediate_size_mlp", "mamba_d_ssm"),
        MLP_WIDTH,
    ),
    **dict.fromkeys(
        ("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size"), MLP_WIDTH_OR_0
    ),
    "shared_intermediate_size": MLP_WIDTH_OR_0,
    **dict.fromkeys(
        (
            "num_attention_heads",
            "num_key_value_heads",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "mamba_num_heads",
            "mamba_n_heads",
            "num_heads",
            "num_global_key_value_heads",
        ),
        HEADS,
    ),
    **dict.fromkeys(
        (
            "head_dim",
            "attention_head_dim",
            "qk_rope_head_dim",
            "v_head_dim",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "mamba_head_dim",
            "mamba_d_head",
            "attn_rotary_emb",
            "global_head_dim",
        ),
        HEAD_DIM,
    ),
    "qk_nope_head_dim": HEAD_DIM_OR_0,
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank", "mamba_dt_rank", "time_step_rank"), RANK),
    **dict.fromkeys(("mamba_d_state", "ssm_state_size", "state_size"), STATE),
    **dict.fromkeys(("linear_conv_kernel_dim", "mamba_d_conv", "conv_kernel"), KERNEL),
    **dict.fromkeys(("mamba_expand", "expand"), EXPAND),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts"), EXPERTS),
    **dict.fromkeys(
        ("num_experts_per_tok", "experts_per_token", "top_k_experts"), EXPERTS_PER_TOKEN
    ),
    "n_shared_experts": SHARED_EXPERTS,
    **dict.fromkeys(("vocab_size", "vocab_size_per_layer_input"), VOCAB),
    **dict.fromkeys(("max_position_embeddings", "attention_chunk_size", "index_topk"), CONTEXT),
    "sliding_window": CONTEXT_OR_0,
    **dict.fromkeys(("n_groups", "mamba_n_groups"), GROUPS),
    "patch_size": PATCH,
    "image_size": IMAGE,
    **dict.fromkeys(("in_channels", "num_channels"), CHANNELS),
    **dict.fromkeys(("spatial_merge_size", "temporal_patch_size"), MERGE),
    "num_position_embeddings": CONTEXT,
}
# A model beyond this many parameters is a wrong field, not a model: 100x Kimi-K2 (1.04 T).
MAX_PARAMS = 10**14


def checked_int(where: str, name: str, value: Any, limit: Limit | None = None) -> int:
    """``value`` as a count in ``limit``, by default the field's row of :data:`FIELD_LIMITS`."""
    return _checked_int(where, name, value, limit or FIELD_LIMITS.get(name, GENERIC))


class Fields:
    """Read config fields, typed and range-checked, remembering which were consumed."""

    def __init__(self, config: Config, where: str) -> None:
        model_type = config.get("model_type", "")
        defaults = FAMILY_DEFAULTS.get(model_type, {}) if isinstance(model_type, str) else {}
        self.config = {**defaults, **config}
        self.where = where
        self.used: set[str] = set()

    def find(self, *names: str) -> tuple[str, Any]:
        """The first of ``names`` the config sets (not null), and its value."""
        for name in names:
            self.used.add(name)
            if name in self.config and self.config[name] is not None:
                return name, self.config[name]
        return names[0], None

    def get(self, *names: str, default: Any = None) -> Any:
        """A value whatever its type: for fields only passed on (marked consumed)."""
        _, value = self.find(*names)
        return default if value is None else value

    def int(self, *names: str, default: int | None = None) -> int:
        name, value = self.find(*names)
        if value is None:
            if default is None:
                raise ConfigError(f"{self.where}: missing required field {' / '.join(names)!r}")
            value = default
        return checked_int(self.where, name, value)

    def optional_int(self, *names: str) -> builtins.int | None:
        name, value = self.find(*names)
        return None if value is None else checked_int(self.where, name, value)

    def bool(self, *names: str, default: bool = False) -> bool:
        name, value = self.find(*names)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"{self.where}: {name} must be true or false, got {show(value)}")
        return value

    def text(self, *names: str, default: str = "") -> str:
        name, value = self.find(*names)
        if value is None:
            return default
        if not isinstance(value, str):
            raise ConfigError(f"{self.where}: {name} must be a string, got {show(value)}")
        return value

    def fraction(self, name: str) -> float | None:
        """A share in (0, 1] (``partial_rotary_factor``), or None when absent."""
        _, value = self.find(name)
        if value is None:
            return None
        return checked_fraction(self.where, name, value)

    def texts(self, name: str) -> list[str] | None:
        """A list of strings (``layer_types``), or None when absent."""
        _, value = self.find(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{self.where}: {name} must be a list of strings, got {show(value)}")
        return value

    def layer_indices(self, name: str) -> frozenset[builtins.int]:
        """A list of layer indices (``mlp_only_layers``); empty when absent."""
        _, value = self.find(name)
        if value is None:
            return frozenset()
        if not isinstance(value, list):
            raise ConfigError(
                f"{self.where}: {name} must be a list of layer indices, got {show(value)}"
            )
        return frozenset(checked_int(self.where, name, v, LAYER_INDEX) for v in value)

    def mapping(self, name: str) -> Mapping[str, Any]:
        """A nested object (``rope_parameters``); empty when absent."""
        _, value = self.find(name)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{self.where}: {name} must be an object, got {show(value)}")
        return value

    def unconsumed_structural(self) -> list[str]:
        return sorted(k for k in self.config if k in STRUCTURAL_FIELDS and k not in self.used)


def text_and_vision(config: Config, where: str = "config.json") -> tuple[Config, Config | None]:
    """Nested multimodal configs keep the language model under ``text_config``."""
    text = config.get("text_config")
    if text is not None and not isinstance(text, Mapping):
        raise ConfigError(f"{where}: text_config must be an object, got {show(text)}")
    if isinstance(text, Mapping):
        merged = dict(text)
        for key in (
            "tie_word_embeddings",
            "torch_dtype",
            "dtype",
            "quantization_config",
            "quantization",
        ):
            if key not in merged and key in config:
                merged[key] = config[key]
        if "model_type" not in merged:
            merged["model_type"] = config.get("model_type", "")
        vision = config.get("vision_config")
        if vision is not None and not isinstance(vision, Mapping):
            raise ConfigError(f"{where}: vision_config must be an object, got {show(vision)}")
        return merged, vision
    vision = config.get("vision_config")
    if isinstance(vision, Mapping) and config.get("model_type") in FLAT_VISION_MODEL_TYPES:
        # Qwen2-VL / Qwen2.5-VL's own config.json: the text fields at the top level
        return {k: v for k, v in config.items() if k != "vision_config"}, vision
    return config, None


# multimodal configs that keep the language model's fields at the top level beside
# vision_config (transformers' Qwen2VLConfig / Qwen2_5_VLConfig as the checkpoints ship them)
FLAT_VISION_MODEL_TYPES = frozenset({"qwen2_vl", "qwen2_5_vl"})


# The dtypes a model computes in (vLLM's _STR_DTYPE_TO_TORCH_DTYPE, vllm/config/model.py):
# an integer or 8/4-bit torch_dtype is a storage format, which only a quantization_config
# can make loadable; without one vLLM has no dtype to run it in.
COMPUTE_DTYPES = frozenset(
    {"float32", "float", "fp32", "float16", "half", "fp16", "bfloat16", "bf16"}
)


def _dtype(f: Fields) -> str:
    dtype = f.text("torch_dtype", "dtype", default="bfloat16").removeprefix("torch.")
    if dtype.lower() not in DTYPE_BYTES:
        raise ConfigError(
            f"{f.where}: torch_dtype {dtype!r} is not a dtype; expected one of "
            f"{', '.join(sorted(DTYPE_BYTES))}"
        )
    is_quantized = any(f.config.get(k) is not None for k in ("quantization_config", "quantization"))
    if dtype.lower() not in COMPUTE_DTYPES and not is_quantized:
        raise ConfigError(
            f"{f.where}: torch_dtype {dtype!r} is a storage format, not a dtype vLLM computes "
            "in, and the config has no quantization_config to say how the weights are "
            "packed: vLLM cannot load it. A quantized checkpoint carries its "
            "quantization_config (and a float torch_dtype, e.g. bfloat16)"
        )
    return dtype


def attention_spec(f: Fields, *, window: int | None = None, **flags: Any) -> AttentionSpec:
    """The attention of a layer; ``flags`` are AttentionSpec's own fields, checked there."""
    h = f.int("hidden_size")
    num_heads = f.int("num_attention_heads")
    num_kv = f.int("num_key_value_heads", default=num_heads)
    head_dim = f.optional_int("head_dim", "attention_head_dim") or h // num_heads
    if head_dim < 1:
        raise ConfigError(
            f"{f.where}: hidden_size {h} / num_attention_heads {num_heads} gives heads of 0 "
            "dimensions; set head_dim"
        )
    return AttentionSpec(
        num_q_heads=num_heads,
        num_kv_heads=num_kv,
        head_dim=head_dim,
        sliding_window_tokens=window,
        **flags,
    )


def window_of(f: Fields) -> int | None:
    """The sliding window in tokens; None when absent, 0 (off) or as long as the context."""
    window = f.optional_int("sliding_window")
    max_pos = f.optional_int("max_position_embeddings")
    if not window:
        return None
    if max_pos and window >= max_pos:  # a window as long as the context is full attention
        return None
    return window


def dense_mlp_spec(f: Fields, *, size_field: str = "intermediate_size") -> DenseMlpSpec:
    act = f.text("hidden_act", "hidden_activation", "mlp_hidden_act", default="silu")
    return DenseMlpSpec(
        intermediate_size=f.int(size_field),
        is_gated=act not in ("relu2", "gelu_new", "gelu_fast") or f.bool("is_gated"),
        has_bias=f.bool("mlp_bias"),
    )


def layer_types_of(f: Fields, n: int) -> list[str] | None:
    types = f.texts("layer_types")
    if types is None:
        return None
    if len(types) != n:
        raise ConfigError(
            f"{f.where}: layer_types has {len(types)} entries but num_hidden_layers is {n}"
        )
    return types


def build_spec(
    f: Fields,
    *,
    name: str,
    layers: list[LayerSpec],
    naming: str = "default",
    mtp: list[LayerSpec] | None = None,
    vision: VisionSpec | None = None,
    prefix: str = "model.",
    tie_default: bool = False,
    rope_caches: int = 1,
) -> ModelSpec:
    positions = f.optional_int("max_position_embeddings") or 0
    # Read (and so checked) for every family, used or not: a config servefit accepts
    # holds no junk in a field it knows.
    window_of(f)
    _rotary_factor(f)
    f.optional_int("intermediate_size")  # unread when every layer is MoE or Mamba
    return ModelSpec(
        name=name,
        architecture="",
        model_type=f.text("model_type"),
        hidden_size=f.int("hidden_size"),
        vocab_size=f.int("vocab_size"),
        layers=tuple(layers),
        dtype=_dtype(f),
        tie_word_embeddings=f.bool("tie_word_embeddings", default=tie_default),
        max_position_embeddings=f.optional_int("max_position_embeddings"),
        mtp_layers=tuple(mtp or ()),
        vision=vision,
        module_prefix=prefix,
        naming=naming,
        rope_cache_positions=positions if rope_caches else 0,
        rope_cache_dims=(_rotary_dim(f, layers),) * rope_caches if rope_caches else (),
    )


def _rotary_dim(f: Fields, layers: list[LayerSpec]) -> int:
    """Rotary dimensions of the first attention layer: the rope part of MLA's key, or
    head_dim x partial_rotary_factor."""
    for layer in layers:
        if isinstance(layer.mixer, MlaSpec):
            return layer.mixer.qk_rope_head_dim
        if isinstance(layer.mixer, AttentionSpec):
            return max(1, int(layer.mixer.head_dim * _rotary_factor(f)))
    return 0


def _rotary_factor(f: Fields) -> float:
    """``partial_rotary_factor`` (top level, or in ``rope_parameters``); 1 when absent."""
    factor = f.fraction("partial_rotary_factor")
    nested = f.mapping("rope_parameters").get("partial_rotary_factor")
    if factor is None and nested is not None:
        factor = checked_fraction(f.where, "rope_parameters.partial_rotary_factor", nested)
    return factor or 1.0
