"""Weights as vLLM 0.32's kernels lay them out (servefit.core.kernel_layout): one worked
example per rule, shapes -> bytes by hand, the vLLM source named next to each."""

from __future__ import annotations

import pytest

from servefit.core.kernel_layout import (
    Kernel,
    LayerKind,
    kernel_layout,
    laid_out_bytes,
    marlin_padded_nk,
    moe_padded_dims,
)
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.core.quant_formats import fp8_block, fp8_per_tensor, int_grouped, mxfp4, nvfp4
from servefit.core.weights import weight_bytes
from servefit.units import GIB_BYTES

A100, L40S, H100, B200, RTX5090, T4_MINUS = (8, 0), (8, 9), (9, 0), (10, 0), (12, 0), (7, 0)
BF16 = 2


@pytest.mark.parametrize(
    ("fmt", "cc", "kind", "kernel"),
    [
        # oracle/mxfp4.py select_mxfp4_moe_backend: TRITON needs 9.0 <= cc < 13.0 and ranks
        # after MARLIN on 12.x; FlashInfer CUTLASS MXFP4 x BF16 only on 9.0
        (mxfp4(), A100, LayerKind.MOE, Kernel.MARLIN_MOE_MXFP4),
        (mxfp4(), L40S, LayerKind.MOE, Kernel.MARLIN_MOE_MXFP4),
        (mxfp4(), H100, LayerKind.MOE, Kernel.TRITON_MOE_MXFP4),
        (mxfp4(), RTX5090, LayerKind.MOE, Kernel.MARLIN_MOE_MXFP4),
        (mxfp4(), B200, LayerKind.MOE, Kernel.TRTLLM_MOE_MXFP4),  # FlashInfer: 10.x family
        (mxfp4(), (10, 3), LayerKind.MOE, Kernel.TRTLLM_MOE_MXFP4),
        (mxfp4(), (11, 0), LayerKind.MOE, None),  # triton_kernels' Blackwell layout
        # fp8: CUTLASS / torch._scaled_mm / Triton fp8 MoE need cc >= 8.9
        (fp8_per_tensor(), A100, LayerKind.DENSE, Kernel.MARLIN_FP8),
        (fp8_block(128, 128), A100, LayerKind.MOE, Kernel.MARLIN_MOE_FP8),
        (fp8_per_tensor(), L40S, LayerKind.DENSE, None),
        (fp8_block(128, 128), H100, LayerKind.MOE, None),
        # nvfp4: Marlin below 9.0; Humming preferred on 9.0 (not modelled); native on 10.x
        (nvfp4(), A100, LayerKind.DENSE, Kernel.MARLIN_NVFP4),
        (nvfp4(), L40S, LayerKind.MOE, Kernel.MARLIN_MOE_NVFP4),
        (nvfp4(), H100, LayerKind.DENSE, None),
        (nvfp4(), B200, LayerKind.MOE, None),
        # Marlin needs cc >= 7.5; int4 and unknown GPUs keep checkpoint bytes
        (fp8_per_tensor(), T4_MINUS, LayerKind.DENSE, None),
        # int weight-only (AWQ, GPTQ, compressed-tensors): MarlinLinearKernel unless 9.0
        # (Machete first; not modelled); int MoE experts: not modelled
        (int_grouped(4, 128, has_zero_point=False), A100, LayerKind.DENSE, Kernel.MARLIN_WNA16),
        (int_grouped(4, 128, has_zero_point=True), B200, LayerKind.DENSE, Kernel.MARLIN_WNA16),
        (int_grouped(4, 128, has_zero_point=False), H100, LayerKind.DENSE, None),
        (int_grouped(4, 128, has_zero_point=False), A100, LayerKind.MOE, None),
        (fp8_per_tensor(), None, LayerKind.DENSE, None),
    ],
)
def test_kernel_per_format_and_capability(fmt, cc, kind, kernel):
    layout = kernel_layout(fmt, cc, kind)
    assert (layout.kernel if layout else None) is kernel


def test_marlin_padded_nk_picks_the_cheaper_tile_family():
    # marlin_utils.py marlin_padded_nk: (n to 64, k to 128) vs (n to 128, k to 64)
    assert marlin_padded_nk(4096, 4096, None) == (4096, 4096)
    # 2880 x 2880: (2880, 2944) and (2944, 2880) have one area; the first wins the tie
    assert marlin_padded_nk(2880, 2880, None) == (2880, 2944)
    # 1000 x 1000, group 128: (1024, 1024) either way
    assert marlin_padded_nk(1000, 1000, 128) == (1024, 1024)


def test_fp8_per_tensor_on_marlin_gets_a_scale_per_output_channel():
    # Llama-3.1-8B q_proj, 4096 x 4096, on an A100 (prepare_fp8_layer_for_marlin):
    # weights 4096 x 4096 x 1 B = 16,777,216; the one fp32 scale becomes 4,096 bf16 = 8,192
    fmt = fp8_per_tensor()
    layout = kernel_layout(fmt, A100, LayerKind.DENSE)
    got = laid_out_bytes(layout, fmt, in_features=4096, out_features=4096, model_dtype_bytes=BF16)
    assert got == 16_777_216 + 8_192
    assert fmt.linear_bytes(4096, 4096) == 16_777_216 + 4  # the checkpoint


def test_fp8_block_on_marlin_gets_a_scale_per_group_and_channel():
    # Qwen3-32B-FP8 q_proj, in 5,120, out 8,192, blocks 128 x 128, on an A100:
    # weights 41,943,040; scales 5,120 / 128 = 40 groups x 8,192 channels x 2 B = 655,360
    # (the checkpoint's 64 x 40 fp32 block scales: 10,240 B)
    fmt = fp8_block(128, 128)
    layout = kernel_layout(fmt, A100, LayerKind.DENSE)
    got = laid_out_bytes(layout, fmt, in_features=5120, out_features=8192, model_dtype_bytes=BF16)
    assert got == 41_943_040 + 655_360
    assert fmt.linear_bytes(5120, 8192) == 41_943_040 + 10_240


def test_fp8_marlin_pads_to_tiles():
    # a 2,880 x 2,880 fp8 linear: K padded to 2,944 (marlin_padded_nk), 2,880 scales
    fmt = fp8_per_tensor()
    layout = kernel_layout(fmt, A100, LayerKind.DENSE)
    got = laid_out_bytes(layout, fmt, in_features=2880, out_features=2880, model_dtype_bytes=BF16)
    assert got == 2880 * 2944 + 2880 * 2


def test_fp8_moe_marlin_pads_the_intermediate_to_the_block():
    # Qwen3-30B-A3B-FP8 experts (hidden 2,048, intermediate 768, blocks 128) at TP 4:
    # 192 per rank -> lcm(64, 128) = 128 -> 256 (marlin_moe_padded_intermediate)
    fmt = fp8_block(128, 128)
    layout = kernel_layout(fmt, A100, LayerKind.MOE)
    assert moe_padded_dims(layout, fmt, hidden_size=2048, intermediate_per_rank=192) == (2048, 256)
    # one gate_proj of an expert: 256 x 2,048 x 1 B + 16 groups x 256 x 2 B
    got = laid_out_bytes(layout, fmt, in_features=2048, out_features=256, model_dtype_bytes=BF16)
    assert got == 524_288 + 8_192


def test_nvfp4_moe_marlin_pads_the_intermediate_to_64():
    # prepare_nvfp4_moe_layer_for_marlin: hidden 2,048 % 128 == 0, so 96 -> 128
    fmt = nvfp4()
    layout = kernel_layout(fmt, A100, LayerKind.MOE)
    assert moe_padded_dims(layout, fmt, hidden_size=2048, intermediate_per_rank=96) == (2048, 128)
    # hidden 2,880 (% 128 != 0): 96 -> 128 too, 1,440 -> 1,536
    assert moe_padded_dims(layout, fmt, hidden_size=2880, intermediate_per_rank=1440)[1] == 1536
    # one 128 x 2,048 weight: 131,072 B of nibbles + 128 x 128 one-byte scales + 8 B globals
    got = laid_out_bytes(layout, fmt, in_features=2048, out_features=128, model_dtype_bytes=BF16)
    assert got == 131_072 + 16_384 + 8


def test_mxfp4_marlin_pads_hidden_to_256_and_intermediate_to_128():
    # gpt-oss-120b experts (hidden 2,880, intermediate 2,880) on an A100 at TP 1
    # (mxfp4_round_up_hidden_size_and_intermediate_size, MARLIN): 2,880 -> 3,072 and 2,944
    fmt = mxfp4()
    layout = kernel_layout(fmt, A100, LayerKind.MOE)
    assert moe_padded_dims(layout, fmt, hidden_size=2880, intermediate_per_rank=2880) == (
        3072,
        2944,
    )
    # one gate_proj: 2,944 x 3,072 / 2 = 4,521,984 B + 2,944 x 96 E8M0 scales = 282,624 B
    # (checkpoint: 2,880 x 1,440 + 2,880 x 90 = 4,406,400 B)
    got = laid_out_bytes(layout, fmt, in_features=3072, out_features=2944, model_dtype_bytes=BF16)
    assert got == 4_521_984 + 282_624
    assert fmt.linear_bytes(2880, 2880) == 4_406_400


def test_mxfp4_triton_on_hopper_pads_intermediate_to_64_and_scale_groups_to_4():
    # gpt-oss-20b at TP 2 on an H100: 1,440 per rank -> 1,472 (the 64 of the default branch)
    fmt = mxfp4()
    layout = kernel_layout(fmt, H100, LayerKind.MOE)
    assert moe_padded_dims(layout, fmt, hidden_size=2880, intermediate_per_rank=1440) == (
        2880,
        1472,
    )
    # down_proj (in 1,472, out 2,880): 2,880 x 736 = 2,119,680 B of nibbles; 46 scale groups
    # padded to 48 in the swizzled copy (_swizzle_mxfp4, #47303): 2,880 x 48 = 138,240 B;
    # the checkpoint's 46 groups kept on the layer: 2,880 x 46 = 132,480 B
    got = laid_out_bytes(layout, fmt, in_features=1472, out_features=2880, model_dtype_bytes=BF16)
    assert got == 2_119_680 + 138_240 + 132_480


def test_gpt_oss_120b_weights_per_gpu_by_capability(catalog_model):
    spec = catalog_model("openai/gpt-oss-120b").spec
    checkpoint = weight_bytes(spec).per_gpu_bytes
    a100 = weight_bytes(spec, capability=A100).per_gpu_bytes
    h100 = weight_bytes(spec, capability=H100).per_gpu_bytes
    # 36 layers x 128 experts x 3 matrices; per gate/up: 4,804,608 - 4,406,400 = 398,208 B;
    # per down (in 2,944, out 3,072): 3,072 x 1,472 + 3,072 x 92 = 4,804,608 B, the same;
    # biases: gate/up 2,944 and down 3,072 bf16 instead of 2,880 each
    experts = 36 * 128
    extra = experts * (3 * 398_208 + 2 * (2944 - 2880) * 2 + (3072 - 2880) * 2)
    assert a100 - checkpoint == extra  # 5.13 GiB more than the checkpoint on an A100
    assert round(a100 / GIB_BYTES, 2) == 65.91
    # Hopper (no padding of 2,880): scale groups 90 -> 92 on gate, up and down (2 more
    # one-byte scales on each of 2,880 rows), biases bf16 -> float32 (2 more bytes on each
    # of 2,880 gate, up and down outputs): 3 x 5,760 + 3 x 5,760 = 34,560 B an expert; and
    # the checkpoint's 90 scales of each of the 3 x 2,880 rows, kept beside the swizzled copy
    extra_h100 = experts * (3 * 2 * 2880 + 3 * 2880 * 2 + 3 * 2880 * 90)
    assert h100 - checkpoint == extra_h100
    # B200 (FLASHINFER_TRTLLM_MXFP4_BF16): Marlin's padding, biases in float32 besides:
    # gate/up 2,944 and down 3,072 more bytes an element than the A100's bf16 biases
    b200 = weight_bytes(spec, capability=B200).per_gpu_bytes
    assert b200 - a100 == experts * (2 * 2944 * 2 + 3072 * 2)


def test_plan_counts_the_layout_and_says_so(catalog_model, gpu):
    spec = catalog_model("openai/gpt-oss-120b").spec
    settings = ServeSettings(max_model_len=8192)
    on_a100 = plan_capacity(spec, gpu("A100-80GB-SXM"), settings)
    on_h200 = plan_capacity(spec, gpu("H200-SXM"), settings)
    assert on_a100.memory.weights_bytes == int(weight_bytes(spec, capability=A100).per_gpu_bytes)
    assert any("MARLIN Mxfp4 MoE" in a for a in on_a100.assumptions)
    assert any("TRITON Mxfp4 MoE" in a for a in on_h200.assumptions)


def test_dense_bf16_models_are_untouched(catalog_model):
    spec = catalog_model("meta-llama/Llama-3.1-8B-Instruct").spec
    assert weight_bytes(spec, capability=A100) == weight_bytes(spec)


def test_plan_document_keeps_the_checkpoint_bytes_apart(catalog_model, gpu):
    from servefit.adapters.plan_document import plan_document

    spec = catalog_model("openai/gpt-oss-120b").spec
    plan = plan_capacity(spec, gpu("A100-80GB-SXM"), ServeSettings(max_model_len=8192))
    doc = plan_document(plan, model_id="openai/gpt-oss-120b", source="catalog", vllm_command="")
    memory = doc.memory
    assert memory.weights_checkpoint_bytes_per_gpu == int(weight_bytes(spec).per_gpu_bytes)
    # the Marlin layout: 5.13 GiB more than the checkpoint (the test above, by hand)
    extra = memory.weights_bytes_per_gpu - memory.weights_checkpoint_bytes_per_gpu
    assert round(extra / GIB_BYTES, 2) == 5.13


def test_gptq_on_marlin_keeps_neither_zero_points_nor_g_idx():
    # a GPTQ 4-bit, group-128 q_proj 4,096 x 4,096 in fp16 on an A100. The checkpoint:
    # weights 4,096 x 4,096 / 2 = 8,388,608; scales 32 groups x 4,096 x 2 = 262,144;
    # qzeros 32 x 4,096 x 4 bits = 65,536; g_idx 4,096 x 4 = 16,384: 8,732,672 B.
    # vLLM 0.32: AutoGPTQLinearMethod allocates no g_idx and asks for no zero points, and
    # MarlinLinearKernel replaces qzeros with an empty tensor: 8,650,752 B.
    fmt = int_grouped(4, 128, has_zero_point=True, has_g_idx=True, name="gptq-int")
    assert fmt.linear_bytes(4096, 4096) == 8_732_672
    layout = kernel_layout(fmt, A100, LayerKind.DENSE)
    got = laid_out_bytes(layout, fmt, in_features=4096, out_features=4096, model_dtype_bytes=2)
    assert got == 8_388_608 + 262_144


def test_awq_on_marlin_keeps_its_zero_points_and_pads_to_tiles():
    # AWQ keeps zero points (marlin_zero_points repacks them at 4 bits): 4,096 x 4,096 is
    # 8,388,608 + 262,144 + 65,536 B, as in the checkpoint. An output width of 2,912 (not a
    # multiple of 64) is padded to 2,944 (marlin_padded_nk): 2,944 x 4,096 / 2 of weights
    # and 32 groups x 2,944 x (2 B scale + 4-bit zero)
    fmt = int_grouped(4, 128, has_zero_point=True, name="awq-int")
    layout = kernel_layout(fmt, A100, LayerKind.DENSE)
    got = laid_out_bytes(layout, fmt, in_features=4096, out_features=4096, model_dtype_bytes=2)
    assert got == fmt.linear_bytes(4096, 4096) == 8_388_608 + 262_144 + 65_536
    padded = laid_out_bytes(layout, fmt, in_features=4096, out_features=2912, model_dtype_bytes=2)
    assert padded == 2944 * 4096 / 2 + 32 * 2944 * 2.5
