"""Quantization: how many bytes a linear layer's weights really take, and which layers stay
unquantized.

A checkpoint's ``quantization_config`` (inside ``config.json``) or ``hf_quant_config.json``
(NVIDIA ModelOpt) is turned into a :class:`QuantSpec`: a default :class:`WeightFormat` plus
ordered rules (module-name pattern -> format, or ``None`` for "left unquantized"). Byte counts
include the scales and zero points each format stores.

This module parses those configs (:func:`quant_from_hf`). The formats, with a table of what
each stores, are in :mod:`servefit.core.quant_formats`; :class:`QuantSpec` and its rule
matching in :mod:`servefit.core.quant_spec`. Both stay importable from here.

Routers, norms, convolutions, embeddings and (unless a rule names it) ``lm_head`` are never
quantized here, as in vLLM, which builds MoE routers and embeddings without a quant method.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# `X as X`: re-exported, so ``servefit.core.quant.<name>`` keeps working
from servefit.core.quant_formats import FP16_BYTES as FP16_BYTES
from servefit.core.quant_formats import FP32_BYTES as FP32_BYTES
from servefit.core.quant_formats import INT32_BYTES as INT32_BYTES
from servefit.core.quant_formats import WeightFormat as WeightFormat
from servefit.core.quant_formats import (
    bnb_int8,
    bnb_nf4,
    fp8_block,
    fp8_per_channel,
    fp8_per_tensor,
    int8_per_channel,
    int_grouped,
    mlx_affine,
    mxfp4,
    nvfp4,
)
from servefit.core.quant_formats import gguf as gguf
from servefit.core.quant_spec import NO_QUANT, QuantRule, QuantSpec
from servefit.core.quant_spec import module_matches as module_matches
from servefit.core.quant_spec import uniform_quant as uniform_quant
from servefit.errors import ConfigError

_SUPPORTED_METHODS = (
    "fp8, compressed-tensors, awq, gptq, mxfp4, modelopt (FP8, NVFP4, MIXED_PRECISION), "
    "bitsandbytes"
)


def quant_from_hf(
    quantization_config: Mapping[str, Any] | None,
    hf_quant_config: Mapping[str, Any] | None = None,
    mlx_quantization: Mapping[str, Any] | None = None,
) -> QuantSpec:
    """Build a :class:`QuantSpec` from ``config.json``'s ``quantization_config`` and/or a
    ModelOpt ``hf_quant_config.json``, or MLX's ``quantization`` block. None present means
    unquantized."""
    if hf_quant_config is not None and "quantization" in hf_quant_config:
        return _from_modelopt(hf_quant_config["quantization"])
    if quantization_config and "quant_method" not in quantization_config:
        mlx_quantization = mlx_quantization or quantization_config
        quantization_config = None
    if not quantization_config and mlx_quantization:
        return _from_mlx(mlx_quantization)
    if not quantization_config:
        return NO_QUANT
    method = str(quantization_config.get("quant_method", "")).lower()
    if method == "modelopt":
        return _from_modelopt(quantization_config)
    parser = _PARSERS.get(method)
    if parser is None:
        raise ConfigError(
            f"quantization_config.quant_method {method!r} is not supported; supported: "
            f"{_SUPPORTED_METHODS}"
        )
    return parser(quantization_config)


def _from_mlx(q: Mapping[str, Any]) -> QuantSpec:
    """mlx-lm's ``"quantization": {"group_size": 64, "bits": 4, <module>: {...} | false}``:
    a default, with per-module overrides (a dict) or exclusions (``false``). mlx-lm
    quantizes every linear layer, the embedding and the LM head."""
    try:
        default = mlx_affine(int(q["bits"]), int(q.get("group_size", 64)))
    except (KeyError, TypeError, ValueError):
        raise ConfigError(
            f"MLX quantization block needs integer 'bits' (and 'group_size'), got {dict(q)!r}"
        ) from None
    rules = []
    for key, value in q.items():
        if key in ("bits", "group_size", "mode"):
            continue
        if value is False:
            rules.append(QuantRule(pattern=str(key), fmt=None))
        elif isinstance(value, Mapping) and "bits" in value:
            fmt = mlx_affine(int(value["bits"]), int(value.get("group_size", 64)))
            rules.append(QuantRule(pattern=str(key), fmt=fmt))
    rules.append(QuantRule(pattern="lm_head", fmt=default))
    return QuantSpec(
        method="mlx",
        default=default,
        rules=tuple(rules),
        description=f"MLX affine {default.bits:g}-bit, group {default.group_size}",
    )


def _ignore_rules(patterns: Any) -> tuple[QuantRule, ...]:
    if patterns is None:
        return ()
    if not isinstance(patterns, list | tuple):
        raise ConfigError(f"expected a list of module names to leave unquantized, got {patterns!r}")
    return tuple(QuantRule(pattern=str(p), fmt=None) for p in patterns)


def _from_fp8(qc: Mapping[str, Any]) -> QuantSpec:
    block = qc.get("weight_block_size")
    if block:
        if len(block) != 2:
            raise ConfigError(f"fp8 weight_block_size must have two entries, got {block!r}")
        fmt = fp8_block(int(block[0]), int(block[1]))
    else:
        fmt = fp8_per_tensor(has_static_input_scale=qc.get("activation_scheme") == "static")
    ignored = qc.get("modules_to_not_convert") or qc.get("ignored_layers")
    return QuantSpec(
        method="fp8",
        default=fmt,
        rules=_ignore_rules(ignored),
        description=f"FP8 ({fmt.name}, activations {qc.get('activation_scheme', 'dynamic')})",
    )


def _ct_weight_format(weights: Mapping[str, Any], has_activations: bool) -> WeightFormat:
    num_bits = int(weights.get("num_bits", 8))
    kind = str(weights.get("type", "int"))
    strategy = str(weights.get("strategy", "tensor"))
    group_size = weights.get("group_size")
    symmetric = bool(weights.get("symmetric", True))
    if kind == "float" and num_bits == 8:
        if strategy == "block":
            block = weights.get("block_structure") or [128, 128]
            return fp8_block(int(block[0]), int(block[1]))
        if strategy == "channel":
            return fp8_per_channel()
        return fp8_per_tensor(has_static_input_scale=has_activations)
    if kind == "float" and num_bits == 4:
        return nvfp4(weight_only=not has_activations)
    if kind == "int" and num_bits == 8 and has_activations:
        return int8_per_channel()
    if kind == "int":
        size = int(group_size) if group_size and strategy == "group" else None
        return int_grouped(num_bits, size, has_zero_point=not symmetric, name="int")
    raise ConfigError(
        f"compressed-tensors weights {{type: {kind!r}, num_bits: {num_bits}}} are not supported"
    )


def _from_compressed_tensors(qc: Mapping[str, Any]) -> QuantSpec:
    groups = qc.get("config_groups") or {}
    if not groups:
        raise ConfigError("compressed-tensors quantization_config has no config_groups")
    rules: list[QuantRule] = list(_ignore_rules(qc.get("ignore")))
    default: WeightFormat | None = None
    names = []
    for group_name, group in groups.items():
        weights = group.get("weights")
        if not weights:
            continue
        fmt = _ct_weight_format(weights, bool(group.get("input_activations")))
        names.append(fmt.name)
        for target in group.get("targets", []):
            if target == "Linear":  # a class name: every linear layer
                default = fmt
            else:
                rules.append(QuantRule(pattern=str(target), fmt=fmt))
        if not group.get("targets"):
            raise ConfigError(f"compressed-tensors group {group_name!r} has no targets")
    return QuantSpec(
        method="compressed-tensors",
        default=default,
        rules=tuple(rules),
        is_targets_only=default is None,
        description=f"compressed-tensors ({', '.join(dict.fromkeys(names))})",
    )


def _from_awq(qc: Mapping[str, Any]) -> QuantSpec:
    bits = int(qc.get("bits", qc.get("w_bit", 4)))
    group = int(qc.get("group_size", qc.get("q_group_size", 128)))
    fmt = int_grouped(bits, group, has_zero_point=bool(qc.get("zero_point", True)), name="awq-int")
    return QuantSpec(
        method="awq",
        default=fmt,
        rules=_ignore_rules(qc.get("modules_to_not_convert")),
        description=f"AWQ {bits}-bit, group {group}",
    )


def _from_gptq(qc: Mapping[str, Any]) -> QuantSpec:
    bits = int(qc.get("bits", 4))
    group = int(qc.get("group_size", 128))
    # GPTQ checkpoints store qzeros even when symmetric, and g_idx for every layer.
    fmt = int_grouped(bits, group, has_zero_point=True, has_g_idx=True, name="gptq-int")
    rules = list(_ignore_rules(qc.get("modules_to_not_convert")))
    if qc.get("lm_head"):
        rules.insert(0, QuantRule(pattern="lm_head", fmt=fmt))
    return QuantSpec(
        method="gptq",
        default=fmt,
        rules=tuple(rules),
        description=f"GPTQ {bits}-bit, group {group}"
        + (", act-order" if qc.get("desc_act") else ""),
    )


def _from_mxfp4(qc: Mapping[str, Any]) -> QuantSpec:
    return QuantSpec(
        method="mxfp4",
        default=mxfp4(),
        rules=_ignore_rules(qc.get("modules_to_not_convert")),
        description="MXFP4 (OCP microscaling, 32-element blocks)",
    )


def _from_bitsandbytes(qc: Mapping[str, Any]) -> QuantSpec:
    if qc.get("load_in_4bit"):
        quant_type = str(qc.get("bnb_4bit_quant_type", "nf4"))
        fmt = bnb_nf4(double_quant=bool(qc.get("bnb_4bit_use_double_quant")), quant_type=quant_type)
    elif qc.get("load_in_8bit"):
        fmt = bnb_int8()
    else:
        raise ConfigError(
            "bitsandbytes quantization_config sets neither load_in_4bit nor load_in_8bit"
        )
    return QuantSpec(
        method="bitsandbytes",
        default=fmt,
        rules=_ignore_rules(qc.get("llm_int8_skip_modules")),
        description=f"bitsandbytes {fmt.name}",
    )


def _modelopt_format(algo: str, group_size: int | None) -> WeightFormat:
    algo = algo.upper()
    if algo == "FP8":
        return fp8_per_tensor(has_static_input_scale=True)
    if algo in ("FP8_PER_CHANNEL_PER_TOKEN",):
        return fp8_per_channel()
    if algo == "FP8_PB_WO" or algo == "FP8_BLOCK":
        return fp8_block(128, 128)
    if algo in ("NVFP4", "W4A16_NVFP4", "NVFP4_AWQ"):
        fmt = nvfp4(weight_only=algo == "W4A16_NVFP4")
        if group_size and group_size != 16:
            raise ConfigError(f"NVFP4 group_size must be 16, got {group_size}")
        return fmt
    if algo in ("W4A8_AWQ", "W4A16_AWQ", "INT4_AWQ"):
        return int_grouped(4, group_size or 128, has_zero_point=False, name="int")
    if algo in ("INT8_SQ", "W8A8_SQ_PER_CHANNEL"):
        return int8_per_channel()
    raise ConfigError(f"ModelOpt quant_algo {algo!r} is not supported")


def _from_modelopt(q: Mapping[str, Any]) -> QuantSpec:
    algo = str(q.get("quant_algo", "")).upper()
    kv_algo = q.get("kv_cache_quant_algo")
    kv_hint = "fp8" if kv_algo and str(kv_algo).upper() == "FP8" else None
    excluded = _ignore_rules(q.get("exclude_modules") or q.get("ignore"))
    if algo == "MIXED_PRECISION":
        layers = q.get("quantized_layers") or {}
        if not layers:
            raise ConfigError("ModelOpt MIXED_PRECISION config lists no quantized_layers")
        rules = [
            QuantRule(pattern=name, fmt=_modelopt_format(str(v["quant_algo"]), v.get("group_size")))
            for name, v in layers.items()
        ]
        algos = sorted({str(v["quant_algo"]) for v in layers.values()})
        return QuantSpec(
            method="modelopt",
            rules=(*excluded, *rules),
            is_targets_only=True,
            kv_cache_dtype_hint=kv_hint,
            description=f"ModelOpt mixed precision ({', '.join(algos)})",
        )
    if not algo:
        raise ConfigError("ModelOpt quantization config has no quant_algo")
    fmt = _modelopt_format(algo, q.get("group_size"))
    return QuantSpec(
        method="modelopt",
        default=fmt,
        rules=excluded,
        kv_cache_dtype_hint=kv_hint,
        description=f"ModelOpt {algo}",
    )


_PARSERS = {
    "fp8": _from_fp8,
    "fbgemm_fp8": _from_fp8,
    "compressed-tensors": _from_compressed_tensors,
    "compressed_tensors": _from_compressed_tensors,
    "awq": _from_awq,
    "awq_marlin": _from_awq,
    "gptq": _from_gptq,
    "gptq_marlin": _from_gptq,
    "mxfp4": _from_mxfp4,
    "bitsandbytes": _from_bitsandbytes,
}
