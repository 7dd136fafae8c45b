"""Each engine's admission into the KV cache, and TensorRT-LLM's KV pool (issue 14).

Sources:
- TensorRT-LLM's capacity scheduler policy defaults to GUARANTEED_NO_EVICT ("TensorRT-LLM
  currently supports three batch scheduler policies: GUARANTEED_NO_EVICT (default),
  MAX_UTILIZATION and STATIC_BATCH", docs/source/performance/performance-tuning-guide/
  useful-runtime-flags.md): a request is admitted only when the cache holds its prompt and
  all its output, so a request is never evicted.
- vLLM's V1 scheduler allocates blocks for the tokens it schedules and preempts
  (recomputes) the most recently admitted request when running ones outgrow the cache.
- SGLang reserves new_token_ratio x remaining output; its floor is 0.7 x 0.14
  (SGLANG_INIT_NEW_TOKEN_RATIO, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, sglang/srt/environ.py).
- TensorRT-LLM's KV pool is KvCacheConfig.free_gpu_memory_fraction ("Default is 90%") of the
  memory free once the model is loaded (tensorrt_llm/llmapi/llm_args.py).

The simulation's numbers are worked by hand with 16-token blocks: a request of 1,000 prompt
and 101 output tokens holds 63 blocks after its prefill and 69 at its full 1,101 tokens.
"""

from __future__ import annotations

import pytest

from servefit.core.engine_scheduling import ADMISSION_RULES, admission_rule
from servefit.core.engines import get_engine
from servefit.core.engines.vllm import free_memory_kv_bytes
from servefit.core.ops import StepShape
from servefit.core.perf import serving_limits
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.core.roofline import StepTime
from servefit.core.serving import ServingLimits, simulate
from servefit.core.workload import LengthDist, Workload
from servefit.errors import ConfigError, InvalidArgumentError

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


def timer(shape: StepShape) -> StepTime:
    t = 0.010 + 1e-6 * sum(n for n, _ in shape.prefill_chunks)
    return StepTime(time_s=t, compute_s=0.0, memory_s=t, comm_s=0.0, overhead_s=0.0)


def blocks(length: int) -> int:
    return -(-length // 16)


def _saturated(reserved: float, num_blocks: int = 700):
    """32 requests of 1,000 + 101 tokens, all queued at once (an offline throughput run)."""
    limits = ServingLimits(
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        num_kv_blocks=num_blocks,
        block_size=16,
        reserved_output_fraction=reserved,
    )
    w = Workload(
        input_len=LengthDist(mean=1000),
        output_len=LengthDist(mean=101),
        concurrency=32,
        num_requests=32,
    )
    return simulate(w, limits, timer, blocks)


def test_no_evict_admits_only_what_fits_at_full_length_and_never_preempts():
    # 700 blocks hold floor(700 / 69) = 10 requests at 1,101 tokens
    r = _saturated(reserved=1.0)
    assert r.max_batch == 10
    assert r.num_preemptions == 0
    assert r.num_requests == 32


def test_on_demand_admission_overfills_the_cache_and_preempts():
    # vLLM admits on the prompt's 63 blocks: 11 x 63 = 693 <= 700, then decodes outgrow it
    r = _saturated(reserved=0.0)
    assert r.max_batch == 11
    assert r.num_preemptions > 0
    assert r.num_requests == 32


def test_a_partial_reserve_admits_between_the_two():
    # SGLang's floor (9.8 %) keeps 0.098 x 6 blocks of each request's growth free: 11 x 63 +
    # 0.098 x 11 x 6 = 699.5 <= 700 admits 11; 10 % more capacity margin than on demand
    assert _saturated(reserved=0.098).max_batch == 11
    assert _saturated(reserved=0.5).max_batch == 10


def test_every_engine_names_its_rule():
    assert admission_rule("trtllm").reserved_output_fraction == 1.0
    assert admission_rule("vllm").reserved_output_fraction == 0.0
    assert admission_rule("sglang").reserved_output_fraction == pytest.approx(0.098)
    assert admission_rule("llama.cpp").reserved_output_fraction == 1.0
    assert admission_rule("tgi").reserved_output_fraction == 0.0  # unknown: vLLM's, said so
    assert "vLLM's assumed" in admission_rule("tgi").describe
    from servefit.core.engines import engine_names

    assert set(engine_names()) <= set(ADMISSION_RULES)


def test_reserved_fraction_is_range_checked():
    with pytest.raises(InvalidArgumentError, match="reserved_output_fraction"):
        ServingLimits(
            max_num_seqs=1,
            max_num_batched_tokens=1,
            num_kv_blocks=1,
            block_size=16,
            reserved_output_fraction=1.5,
        )


def test_trtllm_pool_is_90_percent_of_the_memory_free_after_loading(catalog_model, gpu):
    spec = catalog_model(LLAMA_8B).spec
    h100 = gpu("H100-SXM")
    asked = ServeSettings(max_model_len=2016)
    plan = get_engine("trtllm").plan(spec, h100, asked, mamba_ssm_dtype=None)
    vllm = plan_capacity(spec, h100, asked)
    m = vllm.memory
    loaded = m.weights_bytes + m.activation_peak_bytes + m.non_torch_bytes + m.cuda_graph_bytes
    assert plan.memory.kv_cache_bytes == int(0.9 * (m.total_bytes - loaded))
    assert free_memory_kv_bytes(m, 0.9) == plan.memory.kv_cache_bytes
    # 0.9 x (T - L) > 0.92 x T - L (vLLM 0.33's default) whenever L > 0.2 T: 21 of 85 GB here
    assert loaded > 0.2 * m.total_bytes
    assert plan.num_blocks > vllm.num_blocks
    assert "90% of the memory free after loading" in plan.assumptions[0]
    # the simulation schedules the plan with TensorRT-LLM's rule
    assert serving_limits(plan).reserved_output_fraction == 1.0
    assert serving_limits(vllm).reserved_output_fraction == 0.0


def test_a_utilization_the_user_gives_keeps_vllms_meaning(catalog_model, gpu):
    spec = catalog_model(LLAMA_8B).spec
    asked = ServeSettings(max_model_len=2016, gpu_memory_utilization=0.8)
    plan = get_engine("trtllm").plan(spec, gpu("H100-SXM"), asked, mamba_ssm_dtype=None)
    assert plan.num_blocks == plan_capacity(spec, gpu("H100-SXM"), asked).num_blocks


def test_kv_reads_stream_at_their_own_efficiency(catalog_model, gpu):
    """Attention rows (the KV cache read at decode) use kv_memory_efficiency when a profile
    sets it, everything else memory_efficiency; unset, both are memory_efficiency. At the
    saturated batch of a 1,000/1,000 run the KV reads are most of a decode step, while
    memory_efficiency is what batch-1 weight streaming measures (issue 14)."""
    from dataclasses import replace

    from servefit.adapters.catalog import efficiency_table
    from servefit.core.ops import OpKind, decode_step, model_coeffs, step_ops
    from servefit.core.roofline import op_time

    h100 = gpu("H100-SXM")
    profile = efficiency_table().for_gpu(h100, "vllm")
    assert profile.kv_memory_efficiency is None
    split = replace(profile, memory_efficiency=0.5, kv_memory_efficiency=1.0)
    rows = step_ops(model_coeffs(catalog_model(LLAMA_8B).spec), decode_step(256, 1500))
    for row in rows:
        t = op_time(row, h100, split)
        eff = 1.0 if row.kind is OpKind.ATTENTION else 0.5
        assert t.memory_s == pytest.approx(row.memory_bytes / (3.35e12 * eff))
    attention = next(r for r in rows if r.kind is OpKind.ATTENTION)
    assert op_time(attention, h100, profile).memory_s == pytest.approx(
        attention.memory_bytes / (3.35e12 * profile.memory_efficiency)
    )
    with pytest.raises(ConfigError, match="kv_memory_efficiency"):
        replace(profile, kv_memory_efficiency=1.5)
