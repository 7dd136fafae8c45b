"""Hugging Face ``config.json`` -> :class:`ModelSpec`: HF field names become our names.

Each supported ``model_type`` has a parser that *understands* its fields: which layers are
sliding-window, linear-attention, Mamba or MoE, and how wide each part is. A config whose
``model_type`` is unknown, or that carries structural fields its parser does not consume
(say ``num_experts`` on a model type we treat as dense), is rejected with
:class:`UnsupportedArchitectureError` naming those fields: never silently treated as dense.

This module is the entry point: the ``model_type`` -> parser table, the vision tower
estimate and :func:`spec_from_hf_config`. The generic field mapping is in
:mod:`servefit.core.hf_fields`; the parsers are in :mod:`servefit.core.hf_families`
(attention-only decoders), :mod:`servefit.core.hf_hybrid` (linear attention / Mamba hybrids)
and :mod:`servefit.core.hf_ssm` (pure Mamba-1/2, Granite-4.0-H, Falcon-H1) and
:mod:`servefit.core.hf_nas` (Nemotron-NAS's per-layer blocks).

Pure: takes dictionaries, returns values. Reading files and the Hub is the adapters' job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# `X as X`: re-exported, so ``servefit.core.hf_config.<name>`` keeps working
from servefit.core.hf_families import (
    GEMMA3_DEFAULT_SLIDING_PATTERN as GEMMA3_DEFAULT_SLIDING_PATTERN,
)
from servefit.core.hf_families import LLAMA4_NOPE_INTERVAL as LLAMA4_NOPE_INTERVAL
from servefit.core.hf_families import (
    parse_deepseek,
    parse_gemma,
    parse_glm4_moe,
    parse_gpt_oss,
    parse_llama4,
    parse_mixtral,
    parse_qwen_moe,
    parse_standard,
)
from servefit.core.hf_fields import FAMILY_DEFAULTS as FAMILY_DEFAULTS
from servefit.core.hf_fields import (
    MAX_PARAMS,
    STRUCTURAL_FIELDS,
    Config,
    Fields,
    show,
    text_and_vision,
)
from servefit.core.hf_gemma4 import parse_gemma4
from servefit.core.hf_hybrid import NEMOTRON_H_SYMBOLS as NEMOTRON_H_SYMBOLS
from servefit.core.hf_hybrid import parse_jamba, parse_nemotron_h, parse_qwen_hybrid
from servefit.core.hf_nas import parse_nemotron_nas
from servefit.core.hf_ssm import (
    parse_falcon_h1,
    parse_granite_hybrid,
    parse_mamba,
    parse_mamba2,
)
from servefit.core.image_tokens import image_rule
from servefit.core.model_spec import ModelSpec, VisionSpec
from servefit.core.quant import quant_from_hf
from servefit.core.weights import count_params
from servefit.errors import ConfigError, UnsupportedArchitectureError

_FAMILIES: dict[str, Callable[[Fields, str], ModelSpec]] = {
    **dict.fromkeys(
        (
            "llama",
            "mistral",
            "qwen2",
            "qwen3",
            "phi3",
            "granite",
            "olmo",
            "olmo2",
            "internlm2",
            "cohere",
            "exaone",
            "starcoder2",
            "ministral",
            "qwen3_vl_text",
            *("qwen2_vl", "qwen2_5_vl", "qwen2_vl_text", "qwen2_5_vl_text"),
            # Llama-shaped decoders of later releases: SmolLM3 (RoPE left out of some layers,
            # no_rope_layers), OLMo 3 and EXAONE 4 (sliding-window layers by layer_types),
            # Ministral 3 / Devstral 2 (a Mistral decoder with YaRN)
            "smollm3",
            "olmo3",
            "exaone4",
            "ministral3",
        ),
        parse_standard,
    ),
    **dict.fromkeys(("gemma", "gemma2", "gemma3", "gemma3_text"), parse_gemma),
    **dict.fromkeys(("gemma4", "gemma4_text"), parse_gemma4),
    "qwen2_moe": parse_qwen_moe,
    "qwen3_moe": parse_qwen_moe,
    "qwen3_vl_moe_text": parse_qwen_moe,
    "glm4_moe": parse_glm4_moe,
    "glm4_moe_lite": parse_deepseek,
    "llama4": parse_llama4,
    "llama4_text": parse_llama4,
    "mixtral": parse_mixtral,
    "gpt_oss": parse_gpt_oss,
    "deepseek_v2": parse_deepseek,
    "deepseek_v3": parse_deepseek,
    "deepseek_v32": parse_deepseek,
    "kimi_k2": parse_deepseek,
    "qwen3_next": parse_qwen_hybrid,
    "qwen3_5": parse_qwen_hybrid,
    "qwen3_5_text": parse_qwen_hybrid,
    "qwen3_5_moe": parse_qwen_hybrid,
    "qwen3_5_moe_text": parse_qwen_hybrid,
    "nemotron_h": parse_nemotron_h,
    "jamba": parse_jamba,
    "mamba": parse_mamba,
    "falcon_mamba": parse_mamba,
    "mamba2": parse_mamba2,
    "granitemoehybrid": parse_granite_hybrid,
    "falcon_h1": parse_falcon_h1,
    "nemotron-nas": parse_nemotron_nas,
}

SUPPORTED_MODEL_TYPES = tuple(sorted(_FAMILIES))

# Families vLLM 0.32 serves that servefit does not plan yet, and why: refused by name rather
# than as an unknown model_type (issue 13's list; each reason read in vLLM 0.32's source).
_KIMI_LINEAR = (
    "Kimi-Linear (KimiLinearForCausalLM) interleaves Kimi Delta Attention layers with MLA: "
    "vLLM 0.32 (vllm/models/kimi_k3, KimiK3DeltaAttention) keeps a KDA state of a conv "
    "window plus a float32 heads x head_dim x head_dim recurrent state, and a prefill-"
    "checkpoint block whose count depends on the CUDA prefill kernel chosen at startup; "
    "servefit does not model KDA layers yet"
)
_GEMMA3N = (
    "Gemma 3n (Gemma3nForCausalLM / Gemma3nForConditionalGeneration): its last "
    "num_kv_shared_layers layers reuse earlier layers' KV cache (no cache of their own, vLLM "
    "0.32 model_executor/models/gemma3n.py kv_sharing_target_layer_name), and its AltUp, "
    "Laurel and per-layer-embedding weights are not modelled; servefit does not plan it yet"
)
REFUSED_MODEL_TYPES: dict[str, str] = {
    "kimi_linear": _KIMI_LINEAR,
    "gemma3n": _GEMMA3N,
    "gemma3n_text": _GEMMA3N,
}
# Multimodal Gemma 4 (E2B, E4B, 12B): vLLM 0.32 gemma4_mm.py builds a conformer audio tower
# whose weights servefit does not count; the text and vision parts alone would under-count
AUDIO_TOWER_REFUSAL = (
    "its audio_config describes an audio tower (a conformer) that vLLM 0.32 loads "
    "(model_executor/models/gemma4_mm.py) and servefit does not size yet; plan the text "
    "model (its text_config alone, or audio_config removed) and add the tower's weights"
)


def _vision_params(
    v: Config, text_hidden: int, where: str, config: Config | None = None
) -> VisionSpec:
    """Parameters of a ViT-style vision tower and its projector, from ``vision_config``.

    Per block: Q/K/V/O with biases, an MLP (gated when the activation is SiLU), two norms.
    Plus the patch embedding, position embeddings and a merger/projector into the text
    width. An estimate (stated in reports): towers differ in small details.
    """
    f = Fields(v, where=f"{where}: vision_config")
    depth = f.int("depth", "num_hidden_layers")
    hv = f.int("hidden_size", "embed_dim")
    iv = f.int("intermediate_size", default=4 * hv)
    gated = f.text("hidden_act", default="gelu") == "silu"
    block = 4 * hv * hv + 4 * hv + (3 if gated else 2) * hv * iv + iv + hv + 4 * hv
    patch = f.int("patch_size", default=14)
    channels = f.int("in_channels", "num_channels", default=3)
    temporal = f.int("temporal_patch_size", default=1)
    patch_embed = channels * temporal * patch * patch * hv + hv
    positions = f.optional_int("num_position_embeddings")
    if positions is None:
        image = f.optional_int("image_size")
        positions = (image // patch) ** 2 if image else 0
    merge = f.int("spatial_merge_size", default=1)
    out = f.int("out_hidden_size", default=text_hidden)
    merged = hv * merge * merge
    projector = (
        merged + merged * merged + merged + merged * out + out if merge > 1 else hv * out + hv
    )
    total = depth * block + patch_embed + positions * hv + 2 * hv + projector
    full = v.get("fullatt_block_indexes")
    window = v.get("window_size")
    blocks: tuple[int, ...] | None = None
    window_patches = 0
    if (
        isinstance(full, list)
        and all(isinstance(b, int) and not isinstance(b, bool) for b in full)
        and isinstance(window, int)
        and window >= patch
    ):
        blocks = tuple(int(b) for b in full)  # Qwen2.5-VL: window attention elsewhere
        window_patches = (window // patch) ** 2
    return VisionSpec(
        num_params=total,
        description=f"ViT {depth} x {hv} (patch {patch}), projector to {out}",
        image_rule=image_rule(dict(config or {}), dict(v)),
        depth=depth,
        hidden_size=hv,
        full_attention_blocks=blocks,
        window_patches=window_patches,
    )


def spec_from_hf_config(
    config: Config,
    *,
    name: str = "model",
    hf_quant_config: Config | None = None,
) -> ModelSpec:
    """Interpret a Hugging Face ``config.json`` (and optional ``hf_quant_config.json``)."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{name}: config.json must be a JSON object, got {type(config).__name__}")
    text, vision_config = text_and_vision(config, name)
    architecture = _architecture(config, name)
    model_type = text.get("model_type") or config.get("model_type") or ""
    if not isinstance(model_type, str):
        raise ConfigError(f"{name}: model_type must be a string, got {show(model_type)}")
    parser = _FAMILIES.get(model_type)
    if model_type in REFUSED_MODEL_TYPES:
        raise UnsupportedArchitectureError(
            f"{name}: model_type {model_type!r} (architecture {architecture or 'unknown'}) is "
            f"not planned: {REFUSED_MODEL_TYPES[model_type]}. Refusing rather than guessing."
        )
    if parser is None:
        structural = sorted(k for k in text if k in STRUCTURAL_FIELDS)
        detail = f"; structural fields present: {', '.join(structural)}" if structural else ""
        raise UnsupportedArchitectureError(
            f"{name}: model_type {model_type or '(missing)'!r} "
            f"(architecture {architecture or 'unknown'}) is not one servefit understands{detail}. "
            f"Supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}."
        )
    if config.get("audio_config") is not None:
        raise UnsupportedArchitectureError(
            f"{name}: model_type {model_type!r} (architecture {architecture or 'unknown'}): "
            f"{AUDIO_TOWER_REFUSAL}. Refusing rather than guessing."
        )
    fields = Fields(text, where=name)
    spec = parser(fields, name)
    leftover = fields.unconsumed_structural()
    if leftover:
        raise UnsupportedArchitectureError(
            f"{name}: model_type {model_type!r} carries fields servefit cannot interpret for "
            f"this family: {', '.join(leftover)}. Refusing to guess (it would mis-size the model)."
        )
    vision = (
        _vision_params(vision_config, spec.hidden_size, name, config) if vision_config else None
    )
    quant = quant_from_hf(
        _mapping_or_none(text, "quantization_config", name),
        hf_quant_config,
        _mapping_or_none(text, "quantization", name),
    )
    prefix = spec.module_prefix
    if vision_config is not None and prefix == "model.":
        prefix = "model.language_model."
    model = ModelSpec(
        name=name,
        architecture=architecture,
        model_type=model_type,
        hidden_size=spec.hidden_size,
        vocab_size=spec.vocab_size,
        layers=spec.layers,
        dtype=spec.dtype,
        tie_word_embeddings=spec.tie_word_embeddings,
        max_position_embeddings=spec.max_position_embeddings,
        mtp_layers=spec.mtp_layers,
        vision=vision,
        quant=quant,
        module_prefix=prefix,
        naming=spec.naming,
        rope_cache_positions=spec.rope_cache_positions,
        rope_cache_dims=spec.rope_cache_dims,
        per_layer_input_size=spec.per_layer_input_size,
        per_layer_input_vocab_size=spec.per_layer_input_vocab_size,
    )
    _check_size(model)
    return model


def _architecture(config: Config, name: str) -> str:
    """The first of ``architectures`` (a list of class names), or "" when absent."""
    architectures = config.get("architectures")
    if architectures is None:
        return ""
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise ConfigError(
            f"{name}: architectures must be a list of class names, got {show(architectures)}"
        )
    return architectures[0] if architectures else ""


def _check_size(model: ModelSpec) -> None:
    """Every field within its limit can still multiply into an impossible model."""
    total = count_params(model).total
    if total >= MAX_PARAMS:
        raise ConfigError(
            f"{model.name}: the config describes {total:.3g} parameters, beyond the "
            f"{MAX_PARAMS:.0e} servefit accepts (100x the largest published model, Kimi-K2's "
            "1.04e12): a size field is wrong"
        )


# vLLM's per-architecture hooks that set the recurrent (SSM) state's dtype when
# --mamba-ssm-cache-dtype is "auto" (vllm/model_executor/models/config.py, read in the v0.32.0
# wheel); every other architecture keeps its state in the model dtype.
# - Qwen3.5/3.6 (and Qwen4Exp, built on them): the config's ``mamba_ssm_dtype``.
QWEN3_5_STATE_ARCHITECTURES = frozenset(
    {
        "Qwen3_5ForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen4ExpForCausalLM",
        "Qwen4ExpForConditionalGeneration",
    }
)
# - Nemotron-H: the config's ``mamba_ssm_cache_dtype``, else float32. The hook came with
#   vllm-project/vllm#29978 (merged 2025-12, default float16); #39032 (merged 2026-04) made the
#   default float32, as v0.32 has it. servefit mirrors v0.32: a Nemotron-H config without the
#   field plans a float32 state (older releases used float16 or the model dtype).
NEMOTRON_H_STATE_ARCHITECTURES = frozenset(
    {"NemotronHForCausalLM", "NemotronHPuzzleForCausalLM", "NemotronH_Nano_VL_V2"}
)
NEMOTRON_H_DEFAULT_STATE_DTYPE = "float32"


def state_dtype(config: Config) -> str | None:
    """The recurrent state's dtype vLLM picks for this architecture when
    ``--mamba-ssm-cache-dtype`` is auto (None: the model dtype)."""
    text, _ = text_and_vision(config)
    architecture = _architecture(config, "config.json")
    if architecture in NEMOTRON_H_STATE_ARCHITECTURES:
        value = text.get("mamba_ssm_cache_dtype") or NEMOTRON_H_DEFAULT_STATE_DTYPE
    elif architecture in QWEN3_5_STATE_ARCHITECTURES:
        value = text.get("mamba_ssm_dtype")
    else:
        value = None
    return str(value) if value else None


def _mapping_or_none(text: Mapping[str, Any], key: str, name: str) -> Mapping[str, Any] | None:
    """A quantization block is an object or absent: anything else is a malformed config,
    never a silently unquantized model."""
    value = text.get(key)
    if value is None or isinstance(value, Mapping):
        return value
    raise ConfigError(
        f"{name}: {key} must be a JSON object (as the checkpoint's tooling writes it), got "
        f"{show(value)}; fix or remove it"
    )
