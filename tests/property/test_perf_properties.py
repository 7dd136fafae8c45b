"""Hypothesis properties of the performance model: what must hold whatever the model, GPU
and workload."""

from __future__ import annotations

import itertools

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from servefit.adapters.catalog import efficiency_table, gpu_catalog
from servefit.adapters.model_source import load_model
from servefit.core.ops import OpKind, decode_step, model_coeffs, prefill_step, step_ops
from servefit.core.perf import fixed_workload, simulate_load
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.core.roofline import op_time, step_time

MODELS = [
    "meta-llama/Llama-3.1-8B",
    "Qwen/Qwen3-30B-A3B",
    "google/gemma-3-27b-it",
    "deepseek-ai/DeepSeek-V2-Lite",
    "Qwen/Qwen3.6-27B-FP8",
    "openai/gpt-oss-20b",
]
LOADED = {m: load_model(m, allow_hub=False) for m in MODELS}
GPUS = ["H100-SXM", "A100-80GB-SXM", "H200-SXM", "L40S", "RTX-4090", "M4-Max"]
models = st.sampled_from(MODELS)
gpus = st.sampled_from(GPUS)


@settings(max_examples=40, deadline=None)
@given(
    model=models,
    gpu=gpus,
    batch=st.integers(1, 256),
    context=st.integers(0, 60_000),
    more=st.integers(1, 60_000),
)
def test_decode_time_is_monotone_in_context_and_batch(model, gpu, batch, context, more):
    spec, device = LOADED[model].spec, gpu_catalog().get(gpu)
    profile = efficiency_table().for_gpu(device)
    m = model_coeffs(spec)
    base = step_time(m, decode_step(batch, context), device, profile).time_s
    assert step_time(m, decode_step(batch, context + more), device, profile).time_s >= base
    assert step_time(m, decode_step(batch + 1, context), device, profile).time_s >= base


@settings(max_examples=30, deadline=None)
@given(model=models, tokens=st.integers(1, 16_384), cached=st.integers(0, 32_768))
def test_prefill_time_grows_with_tokens_and_cached_context(model, tokens, cached):
    spec, device = LOADED[model].spec, gpu_catalog().get("H100-SXM")
    profile = efficiency_table().for_gpu(device)
    m = model_coeffs(spec)
    t = step_time(m, prefill_step(tokens, cached), device, profile).time_s
    assert step_time(m, prefill_step(tokens + 1, cached), device, profile).time_s >= t
    assert step_time(m, prefill_step(tokens, cached + 1024), device, profile).time_s >= t


@settings(max_examples=25, deadline=None)
@given(
    model=st.sampled_from(["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B", "openai/gpt-oss-20b"]),
    batch=st.integers(1, 64),
    tp=st.sampled_from([2, 4, 8]),
)
def test_tensor_parallel_shrinks_weight_time_and_adds_comm_time(model, batch, tp):
    spec, device = LOADED[model].spec, gpu_catalog().get("H100-SXM")
    profile = efficiency_table().for_gpu(device)

    def parts(n):
        rows = step_ops(model_coeffs(spec, tp=n), decode_step(batch, 2048))
        weight = sum(op_time(r, device, profile).time_s for r in rows if r.weight_bytes > 0)
        comm = sum(op_time(r, device, profile).time_s for r in rows if r.kind is OpKind.COMM)
        return weight, comm

    w1, c1 = parts(1)
    wn, cn = parts(tp)
    assert wn < w1
    assert c1 == 0 < cn


def _curve(model: str, gpu: str, input_len: int, output_len: int):
    loaded = LOADED[model]
    device = gpu_catalog().get(gpu)
    plan = plan_capacity(
        loaded.spec, device, ServeSettings(max_model_len=8192), with_suggestions=False
    )
    assume(plan.starts)  # e.g. Qwen3-30B-A3B in bf16 does not fit a 48 GB L40S
    profile = efficiency_table().for_gpu(device)
    m = model_coeffs(plan.model, kv_cache_dtype=plan.settings.kv_cache_dtype)
    out = []
    for c in (1, 2, 4, 8, 16, 32, 64):
        w = fixed_workload(input_len, output_len, concurrency=c)
        out.append(simulate_load(plan, m, profile, w))
    return out


@settings(max_examples=8, deadline=None, derandomize=True)
@given(
    model=st.sampled_from(["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B"]),
    gpu=st.sampled_from(["H100-SXM", "A100-80GB-SXM", "L40S"]),
    input_len=st.integers(64, 2048),
    output_len=st.integers(16, 512),
)
def test_throughput_and_ttft_rise_with_concurrency_until_saturation(
    model, gpu, input_len, output_len
):
    curve = _curve(model, gpu, input_len, output_len)
    for lo, hi in itertools.pairwise(curve):
        if hi.num_preemptions or hi.kv_blocked_fraction > 0:
            break  # past saturation the curve may bend
        assert hi.output_throughput_tok_per_s >= lo.output_throughput_tok_per_s * 0.999
        assert hi.tpot_s.mean >= lo.tpot_s.mean * 0.999
        # fixed-length closed loops run in lockstep: when all prompts of one wave share a
        # prefill step, the mean TTFT may dip by ~1 % as waves desynchronise
        assert hi.ttft_s.mean >= lo.ttft_s.mean * 0.98
