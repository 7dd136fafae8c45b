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

from servefit.core.hf_values import show

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
    unquantized. Every value is type- and range-checked here (a ``ConfigError`` naming the
    field), so a wrong type is never read as a default."""
    if hf_quant_config is not None:
        hf_quant_config = _obj(hf_quant_config, "hf_quant_config.json")
        if "quantization" in hf_quant_config:
            block = _obj(hf_quant_config["quantization"], "hf_quant_config.json: quantization")
            return _from_modelopt(block, "hf_quant_config.json: quantization")
    if quantization_config and "quant_method" not in quantization_config:
        mlx_quantization = mlx_quantization or quantization_config
        quantization_config = None
    if not quantization_config and mlx_quantization:
        return _from_mlx(mlx_quantization)
    if not quantization_config:
        return NO_QUANT
    method = _text(quantization_config, "quant_method", _WHERE, default="").lower()
    if method == "modelopt":
        return _from_modelopt(quantization_config, _WHERE)
    parser = _PARSERS.get(method)
    if parser is None:
        raise ConfigError(
            f"quantization_config.quant_method {method!r} is not supported; supported: "
            f"{_SUPPORTED_METHODS}"
        )
    return parser(quantization_config)


# -- typed reads: a quantization block's values, checked where they are read ---------------

_WHERE = "quantization_config"
MAX_GROUP_SIZE = 2**20  # published groups are 32 to 128 inputs; beyond a layer's width
MAX_BLOCK = 2**16  # published fp8 blocks are 128 x 128


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a JSON object, got {show(value)}")
    return value


def _text(block: Mapping[str, Any], key: str, where: str, *, default: str) -> str:
    value = block.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key} must be a string, got {show(value)}")
    return value


def _flag(block: Mapping[str, Any], key: str, where: str, *, default: bool) -> bool:
    value = block.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key} must be true or false, got {show(value)}")
    return value


def _bits(block: Mapping[str, Any], keys: tuple[str, ...], where: str, default: int) -> int:
    key = next((k for k in keys if k in block), keys[0])
    value = block.get(key, default)  # absent: the default; present: an integer (not null)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}.{key} must be an integer bit width, got {show(value)}")
    if not 1 <= value <= 32:
        raise ConfigError(f"{where}.{key} = {value} is not a bit width (1 to 32)")
    return value


def _group(
    block: Mapping[str, Any], keys: tuple[str, ...], where: str, default: int | None
) -> int | None:
    """A group size: inputs per scale, or None for one scale per output channel (-1)."""
    key = next((k for k in keys if k in block), keys[0])
    value = block.get(key, default)
    if value is None or (value == -1 and not isinstance(value, bool)):
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}.{key} must be an integer, got {show(value)}")
    if not 1 <= value <= MAX_GROUP_SIZE:
        raise ConfigError(
            f"{where}.{key} = {value}: a group size is 1 to {MAX_GROUP_SIZE:,} inputs per scale "
            "(-1 for one scale per output channel)"
        )
    return value


def _block_shape(value: Any, where: str) -> tuple[int, int]:
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        or not all(1 <= v <= MAX_BLOCK for v in value)
    ):
        raise ConfigError(
            f"{where} must be two block sizes [out, in] from 1 to {MAX_BLOCK:,}, got {show(value)}"
        )
    return value[0], value[1]


def _module_names(value: Any, where: str) -> list[str]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of module names, got {show(value)}")
    return list(value)


def _from_mlx(q: Mapping[str, Any]) -> QuantSpec:
    """mlx-lm's ``"quantization": {"group_size": 64, "bits": 4, <module>: {...} | false}``:
    a default, with per-module overrides (a dict) or exclusions (``false``). mlx-lm
    quantizes every linear layer, the embedding and the LM head."""
    where = "quantization"
    if q.get("bits") is None:
        raise ConfigError(
            f"MLX quantization block needs integer 'bits' (and 'group_size'), got {show(dict(q))}"
        )
    default = mlx_affine(_bits(q, ("bits",), where, 4), _group(q, ("group_size",), where, 64) or 0)
    rules = []
    for key, value in q.items():
        if key in ("bits", "group_size", "mode"):
            continue
        if value is False:
            rules.append(QuantRule(pattern=str(key), fmt=None))
        elif isinstance(value, Mapping) and "bits" in value:
            inner = f"{where}.{key}"
            fmt = mlx_affine(
                _bits(value, ("bits",), inner, 4), _group(value, ("group_size",), inner, 64) or 0
            )
            rules.append(QuantRule(pattern=str(key), fmt=fmt))
    rules.append(QuantRule(pattern="lm_head", fmt=default))
    return QuantSpec(
        method="mlx",
        default=default,
        rules=tuple(rules),
        description=f"MLX affine {default.bits:g}-bit, group {default.group_size}",
    )


def _ignore_rules(patterns: Any, where: str = _WHERE) -> tuple[QuantRule, ...]:
    if patterns is None:
        return ()
    names = _module_names(patterns, f"{where} (modules to leave unquantized)")
    return tuple(QuantRule(pattern=p, fmt=None) for p in names)


def _from_fp8(qc: Mapping[str, Any]) -> QuantSpec:
    block = qc.get("weight_block_size")
    scheme = _text(qc, "activation_scheme", _WHERE, default="dynamic")
    if block is not None:
        fmt = fp8_block(*_block_shape(block, f"{_WHERE}.weight_block_size"))
    else:
        fmt = fp8_per_tensor(has_static_input_scale=scheme == "static")
    ignored = qc.get("modules_to_not_convert") or qc.get("ignored_layers")
    return QuantSpec(
        method="fp8",
        default=fmt,
        rules=_ignore_rules(ignored),
        description=f"FP8 ({fmt.name}, activations {scheme})",
    )


def _ct_weight_format(
    weights: Mapping[str, Any], has_activations: bool, where: str
) -> WeightFormat:
    num_bits = _bits(weights, ("num_bits",), where, 8)
    kind = _text(weights, "type", where, default="int")
    strategy = _text(weights, "strategy", where, default="tensor")
    symmetric = _flag(weights, "symmetric", where, default=True)
    if kind == "float" and num_bits == 8:
        if strategy == "block":
            block = weights.get("block_structure") or [128, 128]
            return fp8_block(*_block_shape(block, f"{where}.block_structure"))
        if strategy == "channel":
            return fp8_per_channel()
        return fp8_per_tensor(has_static_input_scale=has_activations)
    if kind == "float" and num_bits == 4:
        return nvfp4(weight_only=not has_activations)
    if kind == "int" and num_bits == 8 and has_activations:
        return int8_per_channel()
    if kind == "int":
        group = _group(weights, ("group_size",), where, None)
        size = group if strategy == "group" else None
        return int_grouped(num_bits, size, has_zero_point=not symmetric, name="int")
    raise ConfigError(
        f"compressed-tensors weights {{type: {kind!r}, num_bits: {num_bits}}} are not supported"
    )


def _from_compressed_tensors(qc: Mapping[str, Any]) -> QuantSpec:
    groups = qc.get("config_groups") or {}
    if not groups:
        raise ConfigError("compressed-tensors quantization_config has no config_groups")
    groups = _obj(groups, f"{_WHERE}.config_groups")
    rules: list[QuantRule] = list(_ignore_rules(qc.get("ignore")))
    default: WeightFormat | None = None
    names = []
    for group_name, raw_group in groups.items():
        where = f"{_WHERE}.config_groups.{group_name}"
        group = _obj(raw_group, where)
        weights = group.get("weights")
        if not weights:
            continue
        weights = _obj(weights, f"{where}.weights")
        fmt = _ct_weight_format(weights, bool(group.get("input_activations")), f"{where}.weights")
        names.append(fmt.name)
        targets = _module_names(group.get("targets") or [], f"{where}.targets")
        if not targets:
            raise ConfigError(f"compressed-tensors group {group_name!r} has no targets")
        for target in targets:
            if target == "Linear":  # a class name: every linear layer
                default = fmt
            else:
                rules.append(QuantRule(pattern=target, fmt=fmt))
    return QuantSpec(
        method="compressed-tensors",
        default=default,
        rules=tuple(rules),
        is_targets_only=default is None,
        description=f"compressed-tensors ({', '.join(dict.fromkeys(names))})",
    )


def _from_awq(qc: Mapping[str, Any]) -> QuantSpec:
    bits = _bits(qc, ("bits", "w_bit"), _WHERE, 4)
    group = _group(qc, ("group_size", "q_group_size"), _WHERE, 128)
    has_zero = _flag(qc, "zero_point", _WHERE, default=True)
    fmt = int_grouped(bits, group, has_zero_point=has_zero, name="awq-int")
    return QuantSpec(
        method="awq",
        default=fmt,
        rules=_ignore_rules(qc.get("modules_to_not_convert")),
        description=f"AWQ {bits}-bit, " + (f"group {group}" if group else "per channel"),
    )


def _from_gptq(qc: Mapping[str, Any]) -> QuantSpec:
    bits = _bits(qc, ("bits",), _WHERE, 4)
    group = _group(qc, ("group_size",), _WHERE, 128)
    # GPTQ checkpoints store qzeros even when symmetric, and g_idx for every layer.
    fmt = int_grouped(bits, group, has_zero_point=True, has_g_idx=True, name="gptq-int")
    rules = list(_ignore_rules(qc.get("modules_to_not_convert")))
    if _flag(qc, "lm_head", _WHERE, default=False):
        rules.insert(0, QuantRule(pattern="lm_head", fmt=fmt))
    return QuantSpec(
        method="gptq",
        default=fmt,
        rules=tuple(rules),
        description=f"GPTQ {bits}-bit, "
        + (f"group {group}" if group else "per channel")
        + (", act-order" if _flag(qc, "desc_act", _WHERE, default=False) else ""),
    )


def _from_mxfp4(qc: Mapping[str, Any]) -> QuantSpec:
    return QuantSpec(
        method="mxfp4",
        default=mxfp4(),
        rules=_ignore_rules(qc.get("modules_to_not_convert")),
        description="MXFP4 (OCP microscaling, 32-element blocks)",
    )


def _from_bitsandbytes(qc: Mapping[str, Any]) -> QuantSpec:
    if _flag(qc, "load_in_4bit", _WHERE, default=False):
        quant_type = _text(qc, "bnb_4bit_quant_type", _WHERE, default="nf4")
        double = _flag(qc, "bnb_4bit_use_double_quant", _WHERE, default=False)
        fmt = bnb_nf4(double_quant=double, quant_type=quant_type)
    elif _flag(qc, "load_in_8bit", _WHERE, default=False):
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


def _from_modelopt(q: Mapping[str, Any], where: str = _WHERE) -> QuantSpec:
    algo = _text(q, "quant_algo", where, default="").upper()
    kv_algo = _text(q, "kv_cache_quant_algo", where, default="")
    kv_hint = "fp8" if kv_algo.upper() == "FP8" else None
    excluded = _ignore_rules(q.get("exclude_modules") or q.get("ignore"), where)
    if algo == "MIXED_PRECISION":
        layers = _obj(q.get("quantized_layers") or {}, f"{where}.quantized_layers")
        if not layers:
            raise ConfigError("ModelOpt MIXED_PRECISION config lists no quantized_layers")
        rules = []
        algos = set()
        for name, raw in layers.items():
            inner = f"{where}.quantized_layers.{name}"
            layer = _obj(raw, inner)
            layer_algo = _text(layer, "quant_algo", inner, default="")
            if not layer_algo:
                raise ConfigError(f"{inner} has no quant_algo")
            algos.add(layer_algo)
            fmt = _modelopt_format(layer_algo, _group(layer, ("group_size",), inner, None))
            rules.append(QuantRule(pattern=name, fmt=fmt))
        return QuantSpec(
            method="modelopt",
            rules=(*excluded, *rules),
            is_targets_only=True,
            kv_cache_dtype_hint=kv_hint,
            description=f"ModelOpt mixed precision ({', '.join(sorted(algos))})",
        )
    if not algo:
        raise ConfigError("ModelOpt quantization config has no quant_algo")
    fmt = _modelopt_format(algo, _group(q, ("group_size",), where, None))
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
