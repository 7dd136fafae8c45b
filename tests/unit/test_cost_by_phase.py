"""GPU time by phase: the simulation splits every step between prefill and decode, and cost
charges input tokens the prefill part and output tokens the decode part (issue 11)."""

from __future__ import annotations

from functools import cache

import pytest
from tests.unit.test_serving import DECODE_STEP_S, PREFILL_S_PER_TOKEN, blocks, limits, timer
from tests.unit.test_serving import workload as tiny_workload

from servefit.core.cost import CostInputs, cost_inputs_for, estimate_cost
from servefit.core.serving import simulate
from servefit.core.workload import LengthDist
from servefit.errors import InvalidArgumentError


def test_pure_steps_go_to_their_phase():
    # one request at a time: a 1000-token prefill step (10 + 1 ms), then 100 decode steps
    r = simulate(tiny_workload(1), limits(), timer, blocks, request_overhead_s=0.005)
    assert r.prefill_gpu_s == pytest.approx(4 * (DECODE_STEP_S + 1000 * PREFILL_S_PER_TOKEN))
    assert r.decode_gpu_s == pytest.approx(4 * 100 * DECODE_STEP_S)
    assert r.prefill_gpu_s + r.decode_gpu_s == pytest.approx(r.busy_s)
    # a closed loop never idles: busy = duration less the last request's overhead
    assert r.busy_s == pytest.approx(r.duration_s - 0.005)


def test_a_mixed_step_is_split_by_each_part_alone():
    # a 1000-token budget: A prefills alone (11 ms); B's prompt then rides along A's
    # decodes in two mixed steps (999 tokens, then the last one); B decodes alone
    r = simulate(
        tiny_workload(2, num_requests=2, output_len=LengthDist(mean=3)),
        limits(max_num_batched_tokens=1000),
        timer,
        blocks,
    )
    step1 = 0.010 + 1000e-6  # A's prefill alone
    mixed2 = 0.010 + 999e-6  # A decodes, B prefills 999 tokens
    mixed3 = 0.010 + 1e-6  # A decodes its last token, B prefills its last one
    decode4 = 2 * 0.010  # B's two decode steps
    # a mixed step's prefill part: T x T_prefill_alone / (T_prefill_alone + T_decode_alone)
    prefill = step1 + mixed2 * mixed2 / (mixed2 + 0.010) + mixed3 * mixed3 / (mixed3 + 0.010)
    assert r.busy_s == pytest.approx(step1 + mixed2 + mixed3 + decode4)
    assert r.prefill_gpu_s == pytest.approx(prefill)
    assert r.decode_gpu_s == pytest.approx(r.busy_s - prefill)
    assert 0 < r.prefill_share < 1


def test_cached_prefix_costs_no_prefill():
    cold = simulate(tiny_workload(1), limits(), timer, blocks)
    warm = simulate(tiny_workload(1, prefix_len=800), limits(), timer, blocks)
    # the first request computes all 1000 tokens, the three after it 200
    assert warm.prefill_gpu_s == pytest.approx(4 * DECODE_STEP_S + (1000 + 3 * 200) * 1e-6)
    assert cold.prefill_gpu_s - warm.prefill_gpu_s == pytest.approx(3 * 800 * 1e-6)
    assert warm.num_cached_tokens == 3 * 800
    assert warm.num_input_tokens == cold.num_input_tokens == 4 * 1000
    assert warm.decode_gpu_s == pytest.approx(cold.decode_gpu_s)


def test_cost_charges_each_phase_its_share():
    c = CostInputs(
        usd_per_gpu_hour=3.6,
        num_gpus=1,
        request_throughput_per_s=0.5,
        prefill_share=0.25,
        input_tokens=2000,
        output_tokens=100,
        requests_per_session=6,
    )
    e = estimate_cost(c)
    # $3.6/hour = $0.001/s; a request costs 2 s of the replica: $0.002
    assert e.usd_per_request == pytest.approx(0.002)
    assert e.usd_per_million_input_tokens == pytest.approx(0.002 * 0.25 / 2000 * 1e6)
    assert e.usd_per_million_output_tokens == pytest.approx(0.002 * 0.75 / 100 * 1e6)
    assert e.decode_share == pytest.approx(0.75)
    assert e.usd_per_session == pytest.approx(6 * 0.002)
    assert any("25%" in a for a in e.assumptions)


def test_cost_inputs_need_a_prefill_share():
    base = {
        "usd_per_gpu_hour": 1.0,
        "num_gpus": 1,
        "request_throughput_per_s": 1.0,
        "input_tokens": 10,
        "output_tokens": 10,
    }
    with pytest.raises(InvalidArgumentError, match="prefill share"):
        CostInputs(**base)
    with pytest.raises(InvalidArgumentError, match="prefill share"):
        CostInputs(**base, prefill_share=1.5)


# --------------------------------------------------------------------------------------
# the reproducer through the core: `servefit cost Qwen/Qwen3.6-27B-FP8 --gpu A40
# --max-model-len 32768 --max-num-seqs 16 --concurrency 4 --input-len 2504 --prefix-len
# 2000 --output-len 64` said $0.000 per 1M output tokens ("prefill is 100% of GPU time")


@cache
def a40_plan(enable_prefix_caching: bool = True):
    from servefit.adapters.catalog import efficiency_table, gpu_catalog
    from servefit.adapters.model_source import load_model
    from servefit.core.plan import ServeSettings, plan_capacity

    loaded = load_model("Qwen/Qwen3.6-27B-FP8", allow_hub=False)
    gpu = gpu_catalog().get("A40")
    plan = plan_capacity(
        loaded.spec,
        gpu,
        ServeSettings(
            max_model_len=32768, max_num_seqs=16, enable_prefix_caching=enable_prefix_caching
        ),
        mamba_ssm_dtype=loaded.mamba_ssm_dtype,
    )
    return plan, efficiency_table().for_gpu(gpu, None)


@cache
def a40_perf(turns: int = 1):
    from servefit.core.perf import fixed_workload, plan_performance

    plan, profile = a40_plan()
    w = fixed_workload(2504, 64, concurrency=4, prefix_len=2000, turns=turns)
    return plan_performance(plan, w, profile)


def test_reproducer_prices_both_phases():
    plan, profile = a40_plan()
    perf = a40_perf()
    load = perf.load
    # closed loop: the server is never idle, so the phases add up to the whole run
    assert load.prefill_gpu_s + load.decode_gpu_s == pytest.approx(load.busy_s)
    assert load.busy_s == pytest.approx(load.duration_s - profile.request_overhead_s)
    assert 0 < load.prefill_gpu_s < load.busy_s
    c = cost_inputs_for(
        perf, num_gpus=plan.settings.num_gpus, usd_per_gpu_hour=0.44, price_source="test"
    )
    assert c.prefill_share == pytest.approx(load.prefill_gpu_s / load.busy_s)
    assert c.input_tokens == 2504 and c.output_tokens == 64
    assert c.requests_per_task == 1 and c.requests_per_session == 1
    e = estimate_cost(c)
    assert e.usd_per_million_output_tokens > 0
    assert e.usd_per_million_input_tokens > 0
    assert e.prefill_share + e.decode_share == pytest.approx(1)
    # GPU time per output token is far above per input token (decode makes one token per
    # sequence per step; a prefill step computes thousands)
    assert e.usd_per_million_output_tokens > 10 * e.usd_per_million_input_tokens
    # the per-token prices add back up to the cost of a request
    per_request = (
        e.usd_per_million_input_tokens * c.input_tokens
        + e.usd_per_million_output_tokens * c.output_tokens
    ) / 1e6
    assert per_request == pytest.approx(e.usd_per_request)
