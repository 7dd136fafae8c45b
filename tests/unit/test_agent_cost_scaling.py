"""Agent sessions, cost and scaling: decision logic checked by hand."""

from __future__ import annotations

import pytest

from servefit.core.agent import plan_agent_session
from servefit.core.cost import ApiPrice, CostInputs, estimate_cost
from servefit.core.scaling import Layout, candidate_layouts, layout_commands, replica_workload
from servefit.core.workload import LengthDist, Workload
from servefit.errors import InvalidArgumentError


def prefill(new: int, cached: int) -> float:
    return 1e-4 * new + 1e-8 * new * cached  # a linear term and an attention term


def decode(n: int, context: int) -> float:
    return n * 0.01


def session(**kw):
    base = {
        "turns": 4,
        "prefix_tokens": 1000,
        "message_tokens": 200,
        "output_tokens": 100,
        "reuse_block_tokens": 16,
        "prefill_s": prefill,
        "decode_s": decode,
        "is_hybrid": False,
        "has_hybrid_prefix_caching": True,
    }
    base.update(kw)
    return plan_agent_session(**base)


def test_each_turn_resends_the_history():
    s = session()
    # prompt_t = P + t u + (t - 1) o
    assert [t.prompt_tokens for t in s.turns] == [1200, 1500, 1800, 2100]
    # turn 2 finds turn 1's prompt and answer (1300 tokens) cached, in whole 16-token blocks
    assert s.turns[1].cached_tokens == 1296
    assert s.turns[0].cached_tokens == 0


def test_caching_removes_prefill_not_decode():
    s = session()
    assert s.total_ttft_cached_s < s.total_ttft_cold_s
    assert s.gpu_time_saved_s == pytest.approx(s.total_ttft_cold_s - s.total_ttft_cached_s)
    assert all(t.decode_s == pytest.approx(99 * 0.01) for t in s.turns)
    assert any("decode" in n for n in s.notes)
    # turn 4 cold: 2100 tokens; cached: turn 3's 1800 + 100 = 1900 -> 1888 in whole blocks,
    # so 212 tokens are prefilled after 1888 cached ones
    assert s.turns[3].ttft_cold_s == pytest.approx(prefill(2100, 0))
    assert s.turns[3].ttft_cached_s == pytest.approx(prefill(212, 1888))


def test_hybrid_without_hybrid_prefix_caching_reuses_nothing():
    s = session(is_hybrid=True, has_hybrid_prefix_caching=False)
    assert all(t.cached_tokens == 0 for t in s.turns)
    assert s.gpu_time_saved_s == pytest.approx(0)
    assert any("hybrid" in n for n in s.notes)


def test_prefix_caching_off_reuses_nothing():
    # reuse_block_tokens = 0 (caching off) once read as 1-token blocks: everything cached
    s = session(reuse_block_tokens=0)
    assert all(t.cached_tokens == 0 for t in s.turns)
    assert s.gpu_time_saved_s == pytest.approx(0)
    assert any("caching is off" in n for n in s.notes)


def test_hybrid_with_align_mode_reuses_whole_big_blocks():
    s = session(is_hybrid=True, reuse_block_tokens=1024)
    assert [t.cached_tokens for t in s.turns] == [0, 1024, 1024, 1024]


def test_cost_by_hand():
    c = CostInputs(
        usd_per_gpu_hour=2.0,
        num_gpus=2,
        request_throughput_per_s=1.0,
        prefill_s_per_request=0.25,
        input_tokens=1000,
        output_tokens=500,
        success_rate=0.5,
        requests_per_day=172_800,
    )
    api = ApiPrice(name="api", usd_per_million_input_tokens=1.0, usd_per_million_output_tokens=4.0)
    e = estimate_cost(c, api)
    # $4/hour for the replica; one request per second: $4 / 3600 per request
    assert e.usd_per_request == pytest.approx(4 / 3600)
    # prefill takes 0.25 of the 1 s of GPU time a request costs
    assert e.prefill_share == pytest.approx(0.25)
    assert e.usd_per_million_input_tokens == pytest.approx(4 / 3600 * 0.25 / 1000 * 1e6)
    assert e.usd_per_million_output_tokens == pytest.approx(4 / 3600 * 0.75 / 500 * 1e6)
    assert e.usd_per_successful_task == pytest.approx(2 * 4 / 3600)
    # 172,800 requests/day need 2 replicas of 2 GPUs, all day
    assert e.gpu_hours_per_day == pytest.approx(2 * 2 * 24)
    # the API costs 1000 x $1/M + 500 x $4/M = $0.003 per request; one replica $96/day
    assert e.break_even_requests_per_day == pytest.approx(96 / 0.003)
    three = e.scenarios[0]
    assert three.requests_per_day == 3
    assert three.self_hosted_usd_per_day == pytest.approx(96)
    assert three.api_usd_per_day == pytest.approx(0.009)


@pytest.mark.parametrize(
    ("kw", "flag"),
    [
        ({"usd_per_gpu_hour": 0}, "--usd-per-gpu-hour"),
        ({"utilization": 1.5}, "--utilization"),
        ({"success_rate": 0}, "--success-rate"),
    ],
)
def test_bad_cost_inputs_name_the_flag(kw, flag):
    base = {
        "usd_per_gpu_hour": 1.0,
        "num_gpus": 1,
        "request_throughput_per_s": 1.0,
        "prefill_s_per_request": 0.1,
        "input_tokens": 10,
        "output_tokens": 10,
    }
    base.update(kw)
    with pytest.raises(InvalidArgumentError, match=flag):
        CostInputs(**base)


def test_candidate_layouts_use_every_gpu():
    layouts = candidate_layouts(16, 8, is_moe=False)
    assert all(lay.num_gpus == 16 for lay in layouts)
    labels = {lay.label for lay in layouts}
    assert {"TP1 x PP1 x DP16", "TP8 x PP1 x DP2", "TP8 x PP2 x DP1"} <= labels
    assert not any(lay.pp > 1 and lay.tp < 8 for lay in layouts)  # PP only across full nodes
    moe = candidate_layouts(8, 8, is_moe=True)
    assert any(lay.ep for lay in moe)


def test_layout_commands():
    assert layout_commands("m", Layout(tp=4, pp=1, dp=2), 8) == (
        "vllm serve m --tensor-parallel-size 4 --data-parallel-size 2",
    )
    multi = layout_commands("m", Layout(tp=8, pp=2, dp=1), 8)
    assert "ray start --head --port 6379" in multi
    assert any("--pipeline-parallel-size 2" in c and "ray" in c for c in multi)


def test_replicas_share_the_load():
    w = Workload(input_len=LengthDist(mean=10), output_len=LengthDist(mean=10), concurrency=10)
    assert replica_workload(w, 4).concurrency == 3
    rate = Workload(
        input_len=LengthDist(mean=10),
        output_len=LengthDist(mean=10),
        concurrency=None,
        request_rate_per_s=8.0,
    )
    assert replica_workload(rate, 4).request_rate_per_s == 2.0
