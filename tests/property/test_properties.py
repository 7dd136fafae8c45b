"""Hypothesis properties of the memory model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servefit.adapters.catalog import gpu_catalog
from servefit.adapters.model_source import load_model
from servefit.core.kv_cache import (
    CacheSettings,
    blocks_per_request,
    kv_layout,
    largest_fitting_len,
    layer_specs,
    num_blocks,
)
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.core.weights import Role, weight_bytes, weight_tensors
from servefit.units import GIB_BYTES

MODELS = [
    "meta-llama/Llama-3.1-8B",
    "Qwen/Qwen3-30B-A3B",
    "google/gemma-3-27b-it",
    "deepseek-ai/DeepSeek-V2-Lite",
    "Qwen/Qwen3.6-27B-FP8",
    "openai/gpt-oss-20b",
    "nvidia/Nemotron-H-56B-Base-8K",
]
LOADED = {m: load_model(m, allow_hub=False) for m in MODELS}
GPUS = ["H100-SXM", "A40", "A100-80GB-SXM", "H200-SXM", "L4", "RTX-4090"]
models = st.sampled_from(MODELS)
contexts = st.integers(min_value=1, max_value=131_072)


@settings(max_examples=60, deadline=None)
@given(
    model=models,
    gpu=st.sampled_from(GPUS),
    util=st.floats(0.5, 0.98),
    length=st.integers(512, 65_536),
)
def test_breakdown_sums_to_total_when_kv_fits(model, gpu, util, length):
    loaded = LOADED[model]
    plan = plan_capacity(
        loaded.spec,
        gpu_catalog().get(gpu),
        ServeSettings(gpu_memory_utilization=util, max_model_len=length),
        mamba_ssm_dtype=loaded.mamba_ssm_dtype,
        with_suggestions=False,
    )
    m = plan.memory
    if m.kv_cache_bytes >= 0:
        assert sum(m.parts_bytes.values()) == m.total_bytes
        budget = m.weights_bytes + m.activation_peak_bytes + m.non_torch_bytes + m.kv_cache_bytes
        if m.is_cuda_graph_in_budget:
            budget += m.cuda_graph_bytes
        assert abs(budget - m.requested_bytes) <= 1


@settings(max_examples=60, deadline=None)
@given(model=models, a=contexts, b=contexts)
def test_request_memory_monotone_in_context(model, a, b):
    spec = LOADED[model].spec
    layout = kv_layout(layer_specs(spec, None, CacheSettings()))
    short, long = sorted((a, b))
    assert blocks_per_request(layout, short, 8192) <= blocks_per_request(layout, long, 8192)


@settings(max_examples=60, deadline=None)
@given(model=models, gib_a=st.floats(0, 200), gib_b=st.floats(0, 200))
def test_blocks_monotone_in_kv_memory(model, gib_a, gib_b):
    layout = kv_layout(layer_specs(LOADED[model].spec, None, CacheSettings()))
    low, high = sorted((gib_a, gib_b))
    assert num_blocks(layout, low * GIB_BYTES) <= num_blocks(layout, high * GIB_BYTES)


@settings(max_examples=40, deadline=None)
@given(model=models, kv_gib=st.floats(1, 100), c1=contexts, c2=contexts)
def test_concurrency_falls_as_context_grows(model, kv_gib, c1, c2):
    loaded = LOADED[model]
    short, long = sorted((c1, c2))

    def at(context):
        return plan_capacity(
            loaded.spec,
            gpu_catalog().get("H200"),
            ServeSettings(
                max_model_len=131_072,
                context_tokens=context,
                kv_cache_memory_bytes=int(kv_gib * GIB_BYTES),
            ),
            mamba_ssm_dtype=loaded.mamba_ssm_dtype,
            with_suggestions=False,
        )

    assert at(short).concurrency_at_context >= at(long).concurrency_at_context


@settings(max_examples=20, deadline=None)
@given(model=models)
def test_tp2_halves_sharded_weights(model):
    spec = LOADED[model].spec
    sharded = [t for t in weight_tensors(spec) if t.role is not Role.MTP]
    one = weight_bytes(spec, tp=1).per_gpu_bytes
    two = weight_bytes(spec, tp=2).per_gpu_bytes
    assert two < one
    assert two >= one / 2 - 1  # replicated parts (norms, routers, MLA down-projections) only add
    assert sharded


@settings(max_examples=200, deadline=None)
@given(
    model=models,
    blocks=st.integers(0, 5000),
    mnbt=st.sampled_from([512, 2048, 8192]),
    upper=st.integers(1, 300_000),
)
def test_largest_fitting_len_is_the_exact_boundary(model, blocks, mnbt, upper):
    layout = kv_layout(layer_specs(LOADED[model].spec, None, CacheSettings()))
    longest = largest_fitting_len(layout, blocks, mnbt, upper)
    if longest == 0:
        assert blocks_per_request(layout, 1, mnbt) > blocks
        return
    assert longest <= upper
    assert blocks_per_request(layout, longest, mnbt) <= blocks
    if longest < upper:
        assert blocks_per_request(layout, longest + 1, mnbt) > blocks


@settings(max_examples=40, deadline=None)
@given(model=models, gpu=st.sampled_from(GPUS), a=st.integers(1, 512), b=st.integers(1, 512))
def test_meeting_the_target_is_monotone_in_concurrency(model, gpu, a, b):
    loaded = LOADED[model]
    low, high = sorted((a, b))

    def meets(concurrency):
        return plan_capacity(
            loaded.spec,
            gpu_catalog().get(gpu),
            ServeSettings(max_model_len=16_384, concurrency=concurrency),
            mamba_ssm_dtype=loaded.mamba_ssm_dtype,
            with_suggestions=False,
        ).meets_target

    assert meets(low) or not meets(high)  # if the larger target is met, so is the smaller
