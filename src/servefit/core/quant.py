"""Quantization: how many bytes a linear layer's weights really take, and which layers stay
unquantized.

A checkpoint's ``quantization_config`` (inside ``config.json``) or ``hf_quant_config.json``
(NVIDIA ModelOpt) is turned into a :class:`QuantSpec`: a default :class:`WeightFormat` plus
ordered rules (module-name pattern -> format, or ``None`` for "left unquantized"). Byte counts
include the scales and zero points each format stores:

=====================  ==========  ==========================================================
format                 bits/elem   per-weight overhead
=====================  ==========  ==========================================================
fp8 per-tensor         8           one fp32 weight scale (+ one input scale when static)
fp8 block [bn, bk]     8           one fp32 scale per bn x bk block
int8 / fp8 channel     8           one fp32 scale per output channel
int4 group g (AWQ)     4           fp16 scale + packed 4-bit zero per g inputs per output
int4 group g (GPTQ)    4           as AWQ, plus an int32 ``g_idx`` per input feature
MXFP4 (OCP)            4           one 8-bit (E8M0) scale per 32 elements
NVFP4                  4           one FP8 (E4M3) scale per 16 elements + fp32 global scales
bnb NF4                4           absmax per 64 elements (fp32, or 8-bit + fp32 per 256 blocks
                                   with double quantization)
=====================  ==========  ==========================================================

Routers, norms, convolutions, embeddings and (unless a rule names it) ``lm_head`` are never
quantized here, as in vLLM, which builds MoE routers and embeddings without a quant method.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from servefit.errors import ConfigError
from servefit.units import cdiv

FP32_BYTES = 4
FP16_BYTES = 2
INT32_BYTES = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightFormat:
    """Storage format of one quantized linear layer's weight."""

    name: str
    bits: float
    compute_dtype: str  # the dtype the matmul runs in on hardware that supports it natively
    group_size: int | None = None  # scales per group of inputs, per output row
    is_per_channel: bool = False  # one scale per output row
    block_shape: tuple[int, int] | None = None  # 2-D block scales [out, in]
    scale_bytes: float = FP32_BYTES
    zero_bits: float = 0  # packed zero point per scale (0 = symmetric)
    per_tensor_bytes: int = 0  # global/input scales stored once per tensor
    index_bytes_per_input: int = 0  # GPTQ act-order g_idx

    def num_scales(self, in_features: int, out_features: int) -> int:
        if self.block_shape is not None:
            block_out, block_in = self.block_shape
            return cdiv(out_features, block_out) * cdiv(in_features, block_in)
        if self.group_size is not None:
            return out_features * cdiv(in_features, self.group_size)
        if self.is_per_channel:
            return out_features
        return 1

    def linear_bytes(self, in_features: int, out_features: int) -> float:
        """Bytes of one (out_features x in_features) weight in this format."""
        num_scales = self.num_scales(in_features, out_features)
        return (
            in_features * out_features * self.bits / 8
            + num_scales * self.scale_bytes
            + num_scales * self.zero_bits / 8
            + self.per_tensor_bytes
            + in_features * self.index_bytes_per_input
        )


def fp8_per_tensor(*, has_static_input_scale: bool = False) -> WeightFormat:
    return WeightFormat(
        name="fp8",
        bits=8,
        compute_dtype="fp8",
        per_tensor_bytes=FP32_BYTES * (2 if has_static_input_scale else 1),
        scale_bytes=0,
    )


def fp8_per_channel() -> WeightFormat:
    return WeightFormat(name="fp8-channel", bits=8, compute_dtype="fp8", is_per_channel=True)


def fp8_block(block_out: int, block_in: int) -> WeightFormat:
    return WeightFormat(
        name=f"fp8-block{block_out}x{block_in}",
        bits=8,
        compute_dtype="fp8",
        block_shape=(block_out, block_in),
    )


def int8_per_channel(*, compute_dtype: str = "int8") -> WeightFormat:
    return WeightFormat(
        name="int8-channel", bits=8, compute_dtype=compute_dtype, is_per_channel=True
    )


def int_grouped(
    bits: int,
    group_size: int | None,
    *,
    has_zero_point: bool,
    has_g_idx: bool = False,
    name: str = "int",
) -> WeightFormat:
    """AWQ / GPTQ / compressed-tensors pack-quantized weight-only integer formats."""
    if bits not in (2, 3, 4, 8):
        raise ConfigError(f"unsupported integer weight width: {bits} bits (expected 2, 3, 4 or 8)")
    per_channel = group_size is None or group_size <= 0
    return WeightFormat(
        name=f"{name}{bits}-" + ("channel" if per_channel else f"g{group_size}"),
        bits=bits,
        compute_dtype="bf16",
        group_size=None if per_channel else group_size,
        is_per_channel=per_channel,
        scale_bytes=FP16_BYTES,
        zero_bits=bits if has_zero_point else 0,
        index_bytes_per_input=INT32_BYTES if has_g_idx else 0,
    )


def mxfp4() -> WeightFormat:
    return WeightFormat(name="mxfp4", bits=4, compute_dtype="fp4", group_size=32, scale_bytes=1)


def nvfp4(*, weight_only: bool = False) -> WeightFormat:
    return WeightFormat(
        name="nvfp4-w4a16" if weight_only else "nvfp4",
        bits=4,
        compute_dtype="bf16" if weight_only else "fp4",
        group_size=16,
        scale_bytes=1,
        per_tensor_bytes=2 * FP32_BYTES,
    )


def bnb_nf4(*, double_quant: bool, quant_type: str = "nf4") -> WeightFormat:
    # Double quantization stores each 64-element absmax as 8 bits plus one fp32 per 256 blocks.
    scale_bytes = 1 + FP32_BYTES / 256 if double_quant else FP32_BYTES
    return WeightFormat(
        name=f"bnb-{quant_type}",
        bits=4,
        compute_dtype="bf16",
        group_size=64,
        scale_bytes=scale_bytes,
    )


def bnb_int8() -> WeightFormat:
    return WeightFormat(name="bnb-int8", bits=8, compute_dtype="int8", is_per_channel=True)


def mlx_affine(bits: int, group_size: int) -> WeightFormat:
    """MLX affine quantization (mlx-lm): per ``group_size`` elements one 16-bit scale and one
    16-bit bias; matmuls dequantize to 16-bit."""
    if bits not in (2, 3, 4, 5, 6, 8):
        raise ConfigError(f"unsupported MLX quantization width: {bits} bits")
    return WeightFormat(
        name=f"mlx-{bits}bit-g{group_size}",
        bits=bits,
        compute_dtype="fp16",
        group_size=group_size,
        scale_bytes=2 * FP16_BYTES,  # scale + bias
    )


def gguf(kind: str) -> WeightFormat:
    """llama.cpp GGUF block formats (ggml-common.h block layouts). Q4_0 and Q8_0: 32 weights
    and one fp16 scale per block. Q4_K_M mixes Q4_K (4.5 bits/weight) with Q6_K (6.5625) for
    some tensors; 4.85 bits/weight is its average on Llama-class models (llama.cpp
    ``quantize`` README: 7B Q4_K_M 3.80 GiB / 6.74 B weights). Prompt processing runs at
    about 16-bit matmul speed (llama-bench pp512 of Q4_K_M is 0.76x that of F16 on an
    RTX 4090, XiongjieDai/GPU-Benchmarks-on-LLM-Inference), so servefit computes in fp16."""
    formats = {
        "q4_0": WeightFormat(
            name="gguf-q4_0", bits=4, compute_dtype="fp16", group_size=32, scale_bytes=2
        ),
        "q8_0": WeightFormat(
            name="gguf-q8_0", bits=8, compute_dtype="fp16", group_size=32, scale_bytes=2
        ),
        "q4_k_m": WeightFormat(name="gguf-q4_k_m", bits=4.85, compute_dtype="fp16", scale_bytes=0),
    }
    fmt = formats.get(kind.lower())
    if fmt is None:
        raise ConfigError(f"unknown GGUF type {kind!r}; known: {', '.join(formats)}")
    return fmt


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantRule:
    """``pattern`` -> ``fmt``; ``fmt`` None means the matched module stays unquantized."""

    pattern: str
    fmt: WeightFormat | None


def module_matches(pattern: str, module_name: str) -> bool:
    """Does an ignore/target entry name this module (or a parent of it)?

    Supports the three spellings checkpoints use: ``re:<regex>`` (compressed-tensors),
    shell wildcards (ModelOpt, gpt-oss), and plain dotted names matched on component
    boundaries (``lm_head``, ``model.layers.3.mlp``; ``layers.1`` does not match ``layers.10``).
    """
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module_name) is not None
    if any(ch in pattern for ch in "*?["):
        return fnmatchcase(module_name, pattern) or fnmatchcase(module_name, pattern + ".*")
    return f".{pattern}." in f".{module_name}."


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantSpec:
    """How a checkpoint stores its linear weights."""

    method: str = "none"
    default: WeightFormat | None = None
    rules: tuple[QuantRule, ...] = ()
    is_targets_only: bool = False  # a module no rule names stays unquantized
    kv_cache_dtype_hint: str | None = None  # e.g. ModelOpt kv_cache_quant_algo FP8
    description: str = "unquantized"
    # Plain dotted names are looked up by dictionary (checkpoints list hundreds of layers);
    # wildcard and regex rules are scanned. The first rule that matches wins.
    _plain: dict[str, int] = field(init=False, repr=False, compare=False, hash=False)
    _patterns: tuple[tuple[int, QuantRule], ...] = field(
        init=False, repr=False, compare=False, hash=False
    )
    _plain_lengths: tuple[int, ...] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        plain: dict[str, int] = {}
        patterns = []
        for index, rule in enumerate(self.rules):
            if rule.pattern.startswith("re:") or any(ch in rule.pattern for ch in "*?["):
                patterns.append((index, rule))
            else:
                plain.setdefault(rule.pattern, index)
        object.__setattr__(self, "_plain", plain)
        object.__setattr__(self, "_patterns", tuple(patterns))
        object.__setattr__(self, "_plain_lengths", tuple(sorted({p.count(".") + 1 for p in plain})))

    @property
    def is_quantized(self) -> bool:
        return self.method != "none"

    def rule_for(self, module_name: str) -> QuantRule | None:
        """The first rule that names this module (or a parent of it), if any."""
        best: int | None = None
        if self._plain:
            parts = module_name.split(".")
            for length in self._plain_lengths:  # only the dotted lengths some rule has
                for start in range(len(parts) - length + 1):
                    index = self._plain.get(".".join(parts[start : start + length]))
                    if index is not None and (best is None or index < best):
                        best = index
        for index, rule in self._patterns:
            if best is not None and index > best:
                break
            if module_matches(rule.pattern, module_name):
                best = index
                break
        return None if best is None else self.rules[best]

    def format_for(self, module_name: str) -> WeightFormat | None:
        """The format of one linear module, ``None`` when it stays in the model dtype."""
        rule = self.rule_for(module_name)
        if rule is not None:
            return rule.fmt
        if self.is_targets_only:
            return None
        return self.default


NO_QUANT = QuantSpec()

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


def uniform_quant(fmt: WeightFormat, *, method: str, include_lm_head: bool = True) -> QuantSpec:
    """Every linear layer (and the LM head) in one format: how GGUF and MLX exports, or a
    whole-model FP8/FP4 export, are described when no config says more."""
    rules = (QuantRule(pattern="lm_head", fmt=fmt),) if include_lm_head else ()
    return QuantSpec(method=method, default=fmt, rules=rules, description=fmt.name)


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
