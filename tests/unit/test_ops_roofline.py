"""Operator rows and the roofline, against hand calculations written out here."""

from __future__ import annotations

import pytest

from servefit.core.ops import (
    OpKind,
    StepShape,
    _causal_pairs,
    decode_step,
    expected_experts_touched,
    model_coeffs,
    prefill_step,
    step_ops,
    total,
)
from servefit.core.roofline import (
    Bound,
    EfficiencyProfile,
    kernel_dtype,
    op_time,
    peak_flops_per_s,
    step_time,
)
from servefit.errors import InvalidArgumentError

# Llama-3.1-8B shapes (config.json): hidden 4096, 32 layers, 32 q heads, 8 KV heads, head 128,
# MLP 14336, vocab 128256, bf16.
H, L, HQ, HKV, D, FF, V = 4096, 32, 32, 8, 128, 14336, 128256
LAYER_LINEAR_PARAMS = H * (HQ * D) + 2 * H * (HKV * D) + (HQ * D) * H + 3 * H * FF  # q,k,v,o,MLP
KV_BYTES_PER_TOKEN_PER_LAYER = 2 * HKV * D * 2  # K and V, bf16

IDEAL = EfficiencyProfile(
    hardware_class="test",
    engine="test",
    gemm_efficiency=1.0,
    attention_efficiency=1.0,
    memory_efficiency=1.0,
    step_overhead_s=0.0,
    per_seq_overhead_s=0.0,
    request_overhead_s=0.0,
    collective_latency_s=0.0,
    interconnect_efficiency=1.0,
    internode_bandwidth_bytes_per_s=50e9,
)


@pytest.fixture(scope="module")
def llama(catalog_model):
    return catalog_model("meta-llama/Llama-3.1-8B").spec


def test_causal_pairs_by_hand():
    # 4 new tokens after 2 cached: rows attend 3, 4, 5, 6 keys
    assert _causal_pairs(4, 2, None) == 3 + 4 + 5 + 6
    # window 4 caps the rows at 4: 3, 4, 4, 4
    assert _causal_pairs(4, 2, 4) == 3 + 4 + 4 + 4
    # already past the window: every row attends W
    assert _causal_pairs(3, 10, 4) == 12
    # one decode token at context c attends c + 1
    assert _causal_pairs(1, 99, None) == 100


def test_experts_touched_formula():
    assert expected_experts_touched(128, 8, 1) == pytest.approx(8)
    assert expected_experts_touched(128, 8, 0) == 0
    # E (1 - (1 - k/E)^T) for T = 16: 128 * (1 - (120/128)^16)
    assert expected_experts_touched(128, 8, 16) == pytest.approx(128 * (1 - (120 / 128) ** 16))
    assert expected_experts_touched(128, 8, 10_000) == pytest.approx(128)


def test_llama_decode_batch1_reads_every_weight_once(llama):
    m = model_coeffs(llama)
    rows = step_ops(m, decode_step(1, 1023))
    t = total(rows)
    # weights: 32 layers of linears + norms, the LM head, and one embedding row
    norms = L * 2 * H
    expected = (L * LAYER_LINEAR_PARAMS + norms + V * H) * 2 + H * 2
    assert t.weight_bytes == pytest.approx(expected, rel=1e-9)
    # KV read: 1024 keys x 32 layers; KV written: one token x 32 layers
    assert t.kv_read_bytes == 1024 * L * KV_BYTES_PER_TOKEN_PER_LAYER
    assert t.kv_write_bytes == L * KV_BYTES_PER_TOKEN_PER_LAYER
    # FLOPs: 2 per linear parameter + attention 2 x Hq x (2 D) per key + the LM head
    attention = 1024 * 2 * HQ * (2 * D) * L
    assert t.flops == pytest.approx(2 * L * LAYER_LINEAR_PARAMS + attention + 2 * V * H)


def test_prefill_flops_have_the_quadratic_term(llama):
    m = model_coeffs(llama)
    rows = step_ops(m, prefill_step(2048))
    attention = next(r for r in rows if r.kind is OpKind.ATTENTION)
    assert attention.flops == pytest.approx(2 * HQ * 2 * D * (2048 * 2049 / 2) * L)
    gemm = sum(r.flops for r in rows if r.kind is OpKind.GEMM)
    # linears for every token, the LM head only for the sampled one
    assert gemm == pytest.approx(2 * 2048 * L * LAYER_LINEAR_PARAMS + 2 * V * H)


def test_decode_at_batch1_is_bandwidth_bound_on_h100(llama, gpu):
    h100 = gpu("H100-SXM")
    st = step_time(model_coeffs(llama), decode_step(1, 1024), h100, IDEAL)
    assert st.bound is Bound.MEMORY
    rows = step_ops(model_coeffs(llama), decode_step(1, 1024))
    read = sum(r.memory_bytes for r in rows)
    # ideal roofline: bytes / 3.35 TB/s (compute-bound rows are tiny at batch 1)
    assert st.time_s == pytest.approx(read / 3.35e12, rel=0.02)


def test_long_prefill_is_compute_bound(llama, gpu):
    st = step_time(model_coeffs(llama), prefill_step(8192), gpu("H100-SXM"), IDEAL)
    assert st.bound is Bound.COMPUTE


def test_tensor_parallel_halves_weights_and_adds_allreduce(llama, gpu):
    one = total(step_ops(model_coeffs(llama, tp=1), decode_step(8, 512)))
    rows2 = step_ops(model_coeffs(llama, tp=2), decode_step(8, 512))
    two = total(rows2)
    assert two.weight_bytes == pytest.approx(one.weight_bytes / 2, rel=0.01)
    comm = [r for r in rows2 if r.kind is OpKind.COMM]
    assert comm and sum(r.num_collectives for r in comm) == 2 * L
    # ring all-reduce: 2 (tp-1)/tp of 8 tokens x hidden x 2 bytes, twice per layer
    assert sum(r.comm_bytes for r in comm) == pytest.approx(2 * 8 * H * 2 * 1.0 * L)


def test_fp8_runs_in_16bit_on_ampere(gpu):
    assert kernel_dtype(gpu("A100-80GB-SXM"), "fp8") == "bf16"
    assert kernel_dtype(gpu("H100-SXM"), "fp8") == "fp8"
    assert peak_flops_per_s(gpu("A100-80GB-SXM"), "fp8") == 312e12


def test_apple_compute_comes_from_the_profile_ratio(gpu):
    m4 = gpu("M4-Pro")
    assert peak_flops_per_s(m4, "bf16", 40.0) == pytest.approx(273e9 * 40)


def test_op_time_memory_bound_row(llama, gpu):
    h100 = gpu("H100-SXM")
    rows = step_ops(model_coeffs(llama), decode_step(1, 1))
    row = max(rows, key=lambda r: r.weight_bytes)
    t = op_time(row, h100, IDEAL)
    assert t.time_s == pytest.approx(row.memory_bytes / 3.35e12)
    assert t.bound is Bound.MEMORY


def test_moe_decode_reads_only_touched_experts(catalog_model):
    spec = catalog_model("Qwen/Qwen3-30B-A3B").spec  # 48 layers, 128 experts, top-8
    m = model_coeffs(spec)
    one = next(r for r in step_ops(m, decode_step(1, 100)) if "routed" in r.name)
    many = next(r for r in step_ops(m, decode_step(64, 100)) if "routed" in r.name)
    per_expert = 3 * 2048 * 768 * 2  # gate, up, down of one expert, bf16
    assert one.weight_bytes == pytest.approx(8 * per_expert * 48)
    touched = expected_experts_touched(128, 8, 64)
    assert many.weight_bytes == pytest.approx(touched * per_expert * 48)


def test_step_shape_validates():
    with pytest.raises(InvalidArgumentError):
        StepShape(prefill_chunks=((0, 5),))
    with pytest.raises(InvalidArgumentError):
        StepShape(decode_contexts=(-1,))
