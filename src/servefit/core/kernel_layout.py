"""Weights as vLLM's kernels lay them out, per (format, compute capability, layer kind).

A checkpoint's bytes are not always what a GPU holds after loading. On a GPU without native
support for a weight format, vLLM 0.32 repacks the weights for a fallback kernel in
``process_weights_after_loading``: it pads shapes to the kernel's tiles, converts scales
(fp8 per-tensor scales become one scale per output channel, block scales one per group and
channel, in the model dtype), and frees the originals (not the MXFP4 scales of the
triton_kernels MoE, which stay beside their swizzled copy). "Model loading took" is measured
after that step (``DeviceMemoryProfiler`` reads ``torch.cuda.max_memory_allocated`` after
``empty_cache`` and a peak reset, vllm/utils/mem_utils.py and vllm/platforms/cuda.py, v0.32),
so it counts the laid-out tensors, not the checkpoint's, and never the freed originals.

Every rule below names the vLLM 0.32 source it mirrors. Rules are looked up by
:func:`kernel_layout` and applied to one rank's shapes by :func:`laid_out_bytes`; a format,
capability or layer kind without a rule here keeps its checkpoint bytes (``None``).

Rules left out on purpose, because vLLM's own source does not determine them:

- MXFP4 MoE on Hopper (``TRITON``): the triton_kernels value/scale swizzle
  (``HopperMXValueLayout``, ``HopperMXScaleLayout``) pads again, by rules of the
  triton_kernels release bundled into the wheel, which is not in vLLM's tree. Only the
  padding vLLM itself applies is counted.
- NVFP4 on compute capability 9.0, where vLLM prefers its Humming kernels
  (``prefers_humming``), and MXFP4 MoE on 11.x (triton_kernels' Blackwell layouts): their
  layouts live in Humming and triton_kernels.
- AWQ / GPTQ / compressed-tensors int weights on 9.0 (Machete, or Humming) and int MoE
  experts (the WNA16 MoE oracle): their repacking is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from servefit.core.quant_formats import FP32_BYTES, WeightFormat
from servefit.units import cdiv, round_up

MXFP4_BLOCK = 32  # OCP MX block: one E8M0 scale per 32 elements
NVFP4_BLOCK = 16  # one FP8 scale per 16 elements


class LayerKind(StrEnum):
    DENSE = "dense"  # a linear layer (attention, dense MLP, shared experts)
    MOE = "moe"  # a fused MoE layer's routed experts (w13 = gate + up, w2 = down)


class Kernel(StrEnum):
    """The kernel vLLM 0.32 picks, named as its log line names it."""

    MARLIN_FP8 = "Marlin (weight-only FP8)"
    MARLIN_MOE_FP8 = "MARLIN Fp8 MoE"
    MARLIN_NVFP4 = "Marlin (weight-only FP4)"
    MARLIN_MOE_NVFP4 = "MARLIN NvFp4 MoE"
    MARLIN_MOE_MXFP4 = "MARLIN Mxfp4 MoE"
    TRITON_MOE_MXFP4 = "TRITON Mxfp4 MoE"
    TRTLLM_MOE_MXFP4 = "FLASHINFER_TRTLLM_MXFP4_BF16 Mxfp4 MoE"
    MARLIN_WNA16 = "MarlinLinearKernel"


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelLayout:
    """How one kernel lays a format's weights out on one rank."""

    kernel: Kernel
    source: str  # the vLLM 0.32 file and function the rule mirrors
    note: str  # what the layout changes, in words (for the plan's assumptions)


# -- the rules -------------------------------------------------------------------------------

_MARLIN_FP8 = KernelLayout(
    kernel=Kernel.MARLIN_FP8,
    source=(
        "vllm/model_executor/layers/quantization/utils/marlin_utils_fp8.py "
        "prepare_fp8_layer_for_marlin; marlin_utils.py marlin_padded_nk (v0.32)"
    ),
    note=(
        "fp8 weights repacked for Marlin (no fp8 tensor cores below compute capability 8.9): "
        "N x K padded to (64, 128) or (128, 64) tiles, scales one per output channel "
        "(per group of K for block fp8) in the model dtype"
    ),
)
_MARLIN_MOE_FP8 = KernelLayout(
    kernel=Kernel.MARLIN_MOE_FP8,
    source=(
        "vllm/model_executor/layers/quantization/utils/marlin_utils_fp8.py "
        "prepare_fp8_moe_layer_for_marlin; marlin_utils.py marlin_moe_padded_intermediate "
        "(v0.32)"
    ),
    note=(
        "fp8 experts repacked for Marlin MoE (Triton fp8 MoE needs compute capability 8.9): "
        "intermediate padded to lcm(64, block), scales per output channel (per group for "
        "block fp8) in the model dtype"
    ),
)
_MARLIN_NVFP4 = KernelLayout(
    kernel=Kernel.MARLIN_NVFP4,
    source=(
        "vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py "
        "prepare_fp4_layer_for_marlin, nvfp4_marlin_process_scales (v0.32)"
    ),
    note=(
        "nvfp4 weights repacked for Marlin: N x K padded to Marlin tiles, one 8-bit scale "
        "per 16 elements"
    ),
)
_MARLIN_MOE_NVFP4 = KernelLayout(
    kernel=Kernel.MARLIN_MOE_NVFP4,
    source=(
        "vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py "
        "prepare_nvfp4_moe_layer_for_marlin (v0.32)"
    ),
    note=(
        "nvfp4 experts repacked for Marlin MoE: intermediate padded to 64 (128 when the "
        "hidden size is not a multiple of 128)"
    ),
)
_MARLIN_MOE_MXFP4 = KernelLayout(
    kernel=Kernel.MARLIN_MOE_MXFP4,
    source=(
        "vllm/model_executor/layers/fused_moe/oracle/mxfp4.py "
        "mxfp4_round_up_hidden_size_and_intermediate_size (MARLIN: intermediate to 128, "
        "hidden to 256), marlin_utils_fp4.py prepare_moe_mxfp4_layer_for_marlin (v0.32)"
    ),
    note=(
        "MXFP4 experts allocated padded for Marlin (intermediate per rank to a multiple of "
        "128, hidden to 256), scales kept at one byte per 32, biases in the model dtype"
    ),
)
_TRITON_MOE_MXFP4 = KernelLayout(
    kernel=Kernel.TRITON_MOE_MXFP4,
    source=(
        "vllm/model_executor/layers/fused_moe/oracle/mxfp4.py "
        "mxfp4_round_up_hidden_size_and_intermediate_size (intermediate to 64) and "
        "convert_gpt_oss_weight_to_mxfp4_moe_kernel_format (biases to float32); "
        "quantization/utils/mxfp4_utils.py _swizzle_mxfp4 (scale groups to 4 on 9.0); "
        "quantization/mxfp4.py Mxfp4MoEMethod._setup_kernel (TRITON_BACKENDS: weights "
        "reassigned, scales only moved into the PrecisionConfig) (v0.32)"
    ),
    note=(
        "MXFP4 experts for the triton_kernels MoE: intermediate per rank padded to a multiple "
        "of 64, scale groups along K to a multiple of 4 in the swizzled copy while the "
        "checkpoint's scales stay loaded, biases in float32; the triton_kernels swizzle's own "
        "value padding is not counted (not in vLLM's source)"
    ),
)

_TRTLLM_MOE_MXFP4 = KernelLayout(
    kernel=Kernel.TRTLLM_MOE_MXFP4,
    source=(
        "vllm/model_executor/layers/fused_moe/oracle/mxfp4.py "
        "mxfp4_round_up_hidden_size_and_intermediate_size (TRTLLM: intermediate to 128, "
        "hidden to 256) and convert_gpt_oss_weight_to_mxfp4_moe_kernel_format (shuffled "
        "weights and scales at their size, biases to float32) (v0.32)"
    ),
    note=(
        "MXFP4 experts for FlashInfer TRT-LLM (a CUDA-wheel dependency, requirements/cuda.txt): "
        "intermediate per rank padded to a multiple of 128, hidden to 256, biases in float32"
    ),
)
_MARLIN_WNA16 = KernelLayout(
    kernel=Kernel.MARLIN_WNA16,
    source=(
        "vllm/model_executor/kernels/linear/mixed_precision/marlin.py "
        "MarlinLinearKernel.process_weights_after_loading; quantization/auto_gptq.py "
        "AutoGPTQLinearMethod.create_weights (zero_points=False, no g_idx) (v0.32)"
    ),
    note=(
        "int weights repacked for Marlin: N x K padded to Marlin tiles; GPTQ keeps no zero "
        "points (AutoGPTQ asks the kernel for none; Marlin frees qzeros) and no g_idx "
        "(never allocated: vLLM 0.32 refuses desc_act with groups)"
    ),
)

# Compute capabilities as (major, minor)
_FP8_NATIVE = (8, 9)  # cutlass_scaled_mm_supports_fp8 / Platform.supports_fp8 (v0.32)
_MARLIN_MIN = (7, 5)  # is_fp8_marlin_supported / is_fp4_marlin_supported (v0.32)
_HUMMING_PREFERRED = (9, 0)  # utils/humming/priority.py _HUMMING_PREFERRED_CAPABILITIES {90}
_TRITON_MOE_MIN = (9, 0)  # gpt_oss_triton_kernels_moe.py: 9.0 <= cc < 13.0
_TRTLLM_MAJOR = 10  # is_device_capability_family(100)


def kernel_layout(
    fmt: WeightFormat,
    capability: tuple[int, int] | None,
    kind: LayerKind,
    *,
    has_triton_kernels: bool = True,
) -> KernelLayout | None:
    """The kernel layout vLLM 0.32 gives ``fmt`` on a GPU of ``capability``, or None where the
    checkpoint's bytes are what the GPU holds (native kernels, or a rule not modelled).
    ``has_triton_kernels``: whether the release ships the triton_kernels package (vLLM's
    ``has_triton_kernels()``); without it MXFP4 MoE on Hopper runs on Marlin."""
    if capability is None or capability < _MARLIN_MIN:
        return None
    if fmt.name == "mxfp4" and kind is LayerKind.MOE:
        # select_mxfp4_moe_backend over _get_priority_backends_for_gpt_oss (oracle/mxfp4.py):
        # TRITON needs 9.0 <= cc < 13.0 and is moved after MARLIN on 12.x; FlashInfer CUTLASS
        # takes MXFP4 x BF16 only on 9.0; FLASHINFER_TRTLLM_MXFP4_BF16 ranks first and runs on
        # the 10.x family (TrtLlmMxfp4ExpertsBase._supports_current_device, with FlashInfer).
        if capability[0] == 12 or capability < _TRITON_MOE_MIN:
            return _MARLIN_MOE_MXFP4
        if capability == (9, 0):
            # get_mxfp4_backend (quantization/mxfp4.py, v0.11-v0.14): "if
            # envs.VLLM_MXFP4_USE_MARLIN or not triton_kernels_supported: MARLIN"
            return _TRITON_MOE_MXFP4 if has_triton_kernels else _MARLIN_MOE_MXFP4
        if capability[0] == _TRTLLM_MAJOR:
            return _TRTLLM_MOE_MXFP4
        return None
    if fmt.compute_dtype == "fp8" and fmt.bits == 8 and capability < _FP8_NATIVE:
        # Fp8 linear: CUTLASS / torch._scaled_mm need cc >= 8.9, so MarlinFP8ScaledMMLinearKernel
        # (kernels/linear/__init__.py _POSSIBLE_FP8_KERNELS); MoE: oracle/fp8.py falls to MARLIN
        # (TritonExperts takes fp8 only when current_platform.supports_fp8()).
        return _MARLIN_MOE_FP8 if kind is LayerKind.MOE else _MARLIN_FP8
    if fmt.name.startswith("nvfp4") and capability < _HUMMING_PREFERRED:
        # CUTLASS / FlashInfer FP4 need Blackwell; Marlin ranks first below 9.0, Humming on 9.0.
        return _MARLIN_MOE_NVFP4 if kind is LayerKind.MOE else _MARLIN_NVFP4
    if _is_marlin_int(fmt) and kind is LayerKind.DENSE and capability != _HUMMING_PREFERRED:
        # choose_mp_linear_kernel over _POSSIBLE_KERNELS: CutlassW4A8 (fp8 activations) and
        # Machete (is_device_capability(90) only) pass, so MarlinLinearKernel (min 75)
        return _MARLIN_WNA16
    return None


def _is_marlin_int(fmt: WeightFormat) -> bool:
    """AWQ, GPTQ and compressed-tensors / ModelOpt weight-only int4 or int8 (bf16 compute)."""
    return (
        fmt.compute_dtype == "bf16"
        and fmt.name.startswith(("int", "awq-int", "gptq-int"))
        and fmt.bits in (4, 8)
    )


# -- shapes and bytes --------------------------------------------------------------------------


def marlin_padded_nk(size_n: int, size_k: int, group_size: int | None) -> tuple[int, int]:
    """vLLM 0.32 ``marlin_padded_nk`` (quantization/utils/marlin_utils.py): the cheaper of
    (n to 64, k to lcm(128, group)) and (n to 128, k to lcm(64, group)), by padded area."""
    group = group_size if group_size and group_size > 0 else 1
    candidates = (
        (round_up(size_n, 64), round_up(size_k, math.lcm(128, group))),
        (round_up(size_n, 128), round_up(size_k, math.lcm(64, group))),
    )
    return min(candidates, key=lambda nk: (nk[0] * nk[1], nk[0] + nk[1]))


def moe_padded_dims(
    layout: KernelLayout, fmt: WeightFormat, *, hidden_size: int, intermediate_per_rank: int
) -> tuple[int, int]:
    """(hidden, intermediate per rank) as the kernel allocates or pads a MoE layer's experts."""
    h, i = hidden_size, intermediate_per_rank
    if layout.kernel in (Kernel.MARLIN_MOE_MXFP4, Kernel.TRTLLM_MOE_MXFP4):
        return round_up(h, 256), round_up(i, 128)
    if layout.kernel is Kernel.TRITON_MOE_MXFP4:
        return h, round_up(i, 64)
    if layout.kernel is Kernel.MARLIN_MOE_FP8:
        group = fmt.block_shape[1] if fmt.block_shape else 1
        return h, round_up(i, math.lcm(64, group))
    if layout.kernel is Kernel.MARLIN_MOE_NVFP4:
        return h, round_up(i, 64 if h % 128 == 0 else 128)
    return h, i


def laid_out_bytes(
    layout: KernelLayout,
    fmt: WeightFormat,
    *,
    in_features: int,
    out_features: int,
    model_dtype_bytes: float,
) -> float:
    """Bytes of one ``out x in`` weight (one rank's shape, already padded for MoE by
    :func:`moe_padded_dims`) with its scales, as ``layout`` keeps it."""
    k, n = in_features, out_features
    if layout.kernel in (Kernel.MARLIN_FP8, Kernel.MARLIN_NVFP4):
        group = fmt.block_shape[1] if fmt.block_shape else fmt.group_size
        n, k = marlin_padded_nk(n, k, group)
    if layout.kernel in (Kernel.MARLIN_FP8, Kernel.MARLIN_MOE_FP8):
        # one fp8 byte a weight; scales in the model dtype (layer.orig_dtype): per output
        # channel, or per (K group x output channel) for block fp8
        groups = cdiv(k, fmt.block_shape[1]) if fmt.block_shape else 1
        return n * k + groups * n * model_dtype_bytes
    if layout.kernel in (Kernel.MARLIN_NVFP4, Kernel.MARLIN_MOE_NVFP4):
        # 4-bit weights, one fp8 byte per 16 (nvfp4_marlin_process_scales), fp32 globals
        return n * k / 2 + n * cdiv(k, NVFP4_BLOCK) + fmt.per_tensor_bytes
    if layout.kernel is Kernel.MARLIN_WNA16:
        n, k = marlin_padded_nk(n, k, fmt.group_size)
        groups = k // fmt.group_size if fmt.group_size else 1
        # scales in the model dtype (params_dtype); zero points repacked at the same width
        # (marlin_zero_points) unless GPTQ, whose qzeros Marlin frees
        zero_bits = 0 if fmt.name.startswith("gptq-int") else fmt.zero_bits
        return n * k * fmt.bits / 8 + groups * n * (model_dtype_bytes + zero_bits / 8)
    if layout.kernel in (Kernel.MARLIN_MOE_MXFP4, Kernel.TRTLLM_MOE_MXFP4):
        return n * k / 2 + n * cdiv(k, MXFP4_BLOCK)  # scales stay one byte per 32
    if layout.kernel is Kernel.TRITON_MOE_MXFP4:
        # _swizzle_mxfp4 pads the scale groups along K to a multiple of 4 on 9.0 (#47303) in
        # a new tensor held by the PrecisionConfig; the checkpoint's w13/w2_weight_scale stay
        # registered on the layer (the TRITON branch reassigns the weights only), so both
        # copies of the scales are resident
        swizzled_scales = n * round_up(cdiv(k, MXFP4_BLOCK), 4)
        return n * k / 2 + swizzled_scales + n * cdiv(k, MXFP4_BLOCK)
    raise AssertionError(layout.kernel)  # every Kernel has its rule above


def laid_out_bias_bytes(layout: KernelLayout, model_dtype_bytes: float) -> float:
    """Bytes per bias element: the TRITON and TRTLLM MXFP4 paths convert expert biases to
    float32."""
    if layout.kernel in (Kernel.TRITON_MOE_MXFP4, Kernel.TRTLLM_MOE_MXFP4):
        return FP32_BYTES
    return model_dtype_bytes
