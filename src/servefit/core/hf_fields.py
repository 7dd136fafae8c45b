"""The generic half of reading a Hugging Face ``config.json``: HF field names become ours.

:class:`Fields` reads config fields and remembers which were consumed, so that a structural
field (:data:`STRUCTURAL_FIELDS`) no parser consumed can be refused instead of ignored. The
helpers here build the parts every family shares (an attention layer, a dense MLP, the
sliding window, the ``layer_types`` list) and assemble the :class:`ModelSpec`
(:func:`build_spec`). The per-family parsers are in :mod:`servefit.core.hf_families` and
:mod:`servefit.core.hf_hybrid`; the entry point is :mod:`servefit.core.hf_config`.

Pure: takes dictionaries, returns values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servefit.core.model_spec import (
    AttentionSpec,
    DenseMlpSpec,
    LayerSpec,
    MlaSpec,
    ModelSpec,
    VisionSpec,
)
from servefit.errors import ConfigError

Config = Mapping[str, Any]

# Fields that change the shape of a model. A parser must consume every one present, or the
# config is rejected: an MoE or hybrid field we ignore would silently mis-size the model.
STRUCTURAL_FIELDS = frozenset(
    {
        "num_experts",
        "num_local_experts",
        "n_routed_experts",
        "moe_intermediate_size",
        "num_experts_per_tok",
        "experts_per_token",
        "n_shared_experts",
        "shared_expert_intermediate_size",
        "first_k_dense_replace",
        "moe_layer_freq",
        "decoder_sparse_step",
        "mlp_only_layers",
        "kv_lora_rank",
        "q_lora_rank",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "layer_types",
        "full_attention_interval",
        "linear_num_value_heads",
        "linear_num_key_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel_dim",
        "hybrid_override_pattern",
        "attn_layer_period",
        "attn_layer_offset",
        "expert_layer_period",
        "expert_layer_offset",
        "mamba_d_state",
        "mamba_d_conv",
        "mamba_expand",
        "mamba_dt_rank",
        "mamba_num_heads",
        "mamba_head_dim",
        "ssm_state_size",
        "sliding_window_pattern",
        "attention_chunk_size",
        "interleave_moe_layer_step",
        "num_nextn_predict_layers",
        "mtp_num_hidden_layers",
        "block_configs",
        "attn_output_gate",
        "mamba_ssm_dtype",
    }
)


# Fields a family's transformers config class defaults when config.json omits them.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers Gemma3TextConfig defaults (vocab 262,208; 5 local : 1 global)
    "gemma3_text": {"vocab_size": 262_208, "hidden_activation": "gelu_pytorch_tanh"},
    "gemma3": {"vocab_size": 262_208, "hidden_activation": "gelu_pytorch_tanh"},
}


class Fields:
    """Read config fields, remembering which were consumed."""

    def __init__(self, config: Config, where: str) -> None:
        defaults = FAMILY_DEFAULTS.get(str(config.get("model_type", "")), {})
        self.config = {**defaults, **config}
        self.where = where
        self.used: set[str] = set()

    def get(self, *names: str, default: Any = None) -> Any:
        for name in names:
            self.used.add(name)
            if name in self.config and self.config[name] is not None:
                return self.config[name]
        return default

    def int(self, *names: str, default: int | None = None) -> int:
        value = self.get(*names, default=default)
        if value is None:
            raise ConfigError(f"{self.where}: missing required field {' / '.join(names)!r}")
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise ConfigError(f"{self.where}: field {names[0]!r} must be an integer, got {value!r}")
        return int(value)

    def optional_int(self, *names: str) -> int | None:
        value = self.get(*names)
        return None if value is None else self.int(*names)

    def unconsumed_structural(self) -> list[str]:
        return sorted(k for k in self.config if k in STRUCTURAL_FIELDS and k not in self.used)


def text_and_vision(config: Config) -> tuple[Config, Config | None]:
    """Nested multimodal configs keep the language model under ``text_config``."""
    text = config.get("text_config")
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
        return merged, vision if isinstance(vision, Mapping) else None
    return config, None


def _dtype(f: Fields) -> str:
    dtype = str(f.get("torch_dtype", "dtype", default="bfloat16"))
    return dtype.removeprefix("torch.")


def attention_spec(f: Fields, *, window: int | None = None, **flags: bool) -> AttentionSpec:
    h = f.int("hidden_size")
    num_heads = f.int("num_attention_heads")
    num_kv = f.int("num_key_value_heads", default=num_heads)
    head_dim = f.optional_int("head_dim", "attention_head_dim") or h // num_heads
    return AttentionSpec(
        num_q_heads=num_heads,
        num_kv_heads=num_kv,
        head_dim=head_dim,
        sliding_window_tokens=window,
        **flags,
    )


def window_of(f: Fields) -> int | None:
    window = f.get("sliding_window")
    max_pos = f.get("max_position_embeddings")
    if window is None or window <= 0:
        return None
    if max_pos and window >= max_pos:  # a window as long as the context is full attention
        return None
    return int(window)


def dense_mlp_spec(f: Fields, *, size_field: str = "intermediate_size") -> DenseMlpSpec:
    act = str(f.get("hidden_act", "hidden_activation", "mlp_hidden_act", default="silu"))
    return DenseMlpSpec(
        intermediate_size=f.int(size_field),
        is_gated=act not in ("relu2", "gelu_new", "gelu_fast") or bool(f.get("is_gated")),
        has_bias=bool(f.get("mlp_bias", default=False)),
    )


def layer_types_of(f: Fields, n: int) -> list[str] | None:
    types = f.get("layer_types")
    if types is None:
        return None
    if len(types) != n:
        raise ConfigError(
            f"{f.where}: layer_types has {len(types)} entries but num_hidden_layers is {n}"
        )
    return [str(t) for t in types]


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
    return ModelSpec(
        name=name,
        architecture="",
        model_type=str(f.get("model_type", default="")),
        hidden_size=f.int("hidden_size"),
        vocab_size=f.int("vocab_size"),
        layers=tuple(layers),
        dtype=_dtype(f),
        tie_word_embeddings=bool(f.get("tie_word_embeddings", default=tie_default)),
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
            params = f.get("rope_parameters") or {}
            factor = f.get("partial_rotary_factor") or (
                params.get("partial_rotary_factor") if isinstance(params, Mapping) else None
            )
            return int(layer.mixer.head_dim * float(factor or 1.0))
    return 0
