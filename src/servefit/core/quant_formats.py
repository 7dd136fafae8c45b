"""Weight formats: how many bytes one quantized linear layer's weight really takes.

A :class:`WeightFormat` counts the packed weights plus the scales and zero points each format
stores; the constructors below build the formats checkpoints use:

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
"""

from __future__ import annotations

from dataclasses import dataclass

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
    if block_out < 1 or block_in < 1:
        raise ConfigError(f"fp8 block sizes must be positive, got [{block_out}, {block_in}]")
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
    if group_size is not None and group_size == 0:
        raise ConfigError("a group size of 0 inputs per scale divides by zero (-1: per channel)")
    per_channel = group_size is None or group_size < 0
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
    if group_size < 1:
        raise ConfigError(f"MLX quantization group_size must be positive, got {group_size}")
    return WeightFormat(
        name=f"mlx-{bits}bit-g{group_size}",
        bits=bits,
        compute_dtype="fp16",
        group_size=group_size,
        scale_bytes=2 * FP16_BYTES,  # scale + bias
    )


# llama.cpp's quantization types with their whole-model bits per weight: the sizes
# llama-quantize lists for Llama-3-8B (tools/quantize/quantize.cpp QUANT_OPTIONS, e.g.
# "Q4_K_M ... 4.58G, +0.1754 ppl @ Llama-3-8B"; G is GiB: Q8_0's 7.96G over Llama-3-8B's
# 8,030,261,248 weights is its 8.5 bits) divided by those weights. A mix (K-quants) keeps
# some tensors in a wider type, which the average carries.
LLAMA3_8B_WEIGHTS = 8_030_261_248
GGUF_SIZES_GIB_AT_LLAMA3_8B = {
    "q2_k": 2.96,
    "q3_k_s": 3.41,
    "q3_k_m": 3.74,
    "q3_k_l": 4.03,
    "q4_0": 4.34,
    "q4_1": 4.78,
    "q4_k_s": 4.37,
    "q4_k_m": 4.58,
    "q5_0": 5.21,
    "q5_1": 5.65,
    "q5_k_s": 5.21,
    "q5_k_m": 5.33,
    "q6_k": 6.14,
    "q8_0": 7.96,
}
GGUF_ALIASES = {"q3_k": "q3_k_m", "q4_k": "q4_k_m", "q5_k": "q5_k_m"}


GGUF_MXFP4_MOE = "mxfp4_moe"  # llama.cpp's LLAMA_FTYPE_MOSTLY_MXFP4_MOE: a mix, not one type


def gguf_mxfp4() -> WeightFormat:
    """ggml's ``block_mxfp4``: 32 four-bit values and one E8M0 scale byte (17 bytes a block,
    4.25 bits a weight, ggml-common.h)."""
    return WeightFormat(
        name="gguf-mxfp4", bits=4, compute_dtype="fp16", group_size=32, scale_bytes=1
    )


def gguf(kind: str) -> WeightFormat:
    """A llama.cpp GGUF type as one whole-model format: its bits per weight from
    llama-quantize's own size table (:data:`GGUF_SIZES_GIB_AT_LLAMA3_8B`); F16 and BF16 are
    16 bits. Prompt processing runs at about 16-bit matmul speed (llama-bench pp512 of
    Q4_K_M is 0.76x that of F16 on an RTX 4090, XiongjieDai/GPU-Benchmarks-on-LLM-Inference),
    so servefit computes in fp16."""
    key = GGUF_ALIASES.get(kind.lower(), kind.lower())
    if key in ("f16", "bf16"):
        return WeightFormat(name=f"gguf-{key}", bits=16, compute_dtype="fp16", scale_bytes=0)
    size_gib = GGUF_SIZES_GIB_AT_LLAMA3_8B.get(key)
    if size_gib is None:
        known = ", ".join(
            k.upper() for k in (*GGUF_SIZES_GIB_AT_LLAMA3_8B, "f16", "bf16", GGUF_MXFP4_MOE)
        )
        raise ConfigError(f"unknown GGUF type {kind!r}; known: {known}")
    bits = round(size_gib * 2**30 * 8 / LLAMA3_8B_WEIGHTS, 3)
    return WeightFormat(name=f"gguf-{key}", bits=bits, compute_dtype="fp16", scale_bytes=0)
