"""Agent sessions under load: each turn re-sends the growing history, is sent when the
previous turn finishes, and reuses the previous turn from the prefix cache (issue 11)."""

from __future__ import annotations

import pytest
from tests.unit.test_cost_by_phase import a40_perf, a40_plan
from tests.unit.test_serving import DECODE_STEP_S, PREFILL_S_PER_TOKEN, blocks, limits, timer

from servefit.core.cost import cost_inputs_for, estimate_cost
from servefit.core.serving import simulate
from servefit.core.workload import LengthDist, Workload, sample_requests, sample_sessions


def session_workload(turns: int = 3, **kw) -> Workload:
    # a 100-token system prefix, u = 200 new tokens and o = 50 output tokens per turn
    base = {
        "input_len": LengthDist(mean=300),
        "output_len": LengthDist(mean=50),
        "prefix_len": 100,
        "turns": turns,
        "concurrency": 1,
        "num_requests": turns,  # one session
    }
    base.update(kw)
    return Workload(**base)


def test_prompts_grow_by_the_history_and_reuse_it_in_whole_blocks():
    r = simulate(session_workload(), limits(), timer, blocks)
    assert (r.turns, r.num_sessions, r.num_requests) == (3, 1, 3)
    # prompt_t = P + t u + (t - 1) o = 300, 550, 800
    assert [t.mean_input_len for t in r.by_turn] == [300, 550, 800]
    # turn 1 is cold; turn 2 finds 300 + 50 = 350 tokens cached -> 336 in 16-token blocks;
    # turn 3 finds 550 + 50 = 600 -> 592
    assert [t.mean_cached_tokens for t in r.by_turn] == [0, 336, 592]
    assert r.num_cached_tokens == 336 + 592
    # TTFT: one prefill step of the uncached tokens
    ttfts = [t.ttft_s.mean for t in r.by_turn]
    new_tokens = [300, 550 - 336, 800 - 592]
    assert ttfts == pytest.approx([DECODE_STEP_S + n * PREFILL_S_PER_TOKEN for n in new_tokens])
    # each turn is sent when the previous one finishes: the session lasts all its turns
    one_turn = [DECODE_STEP_S + n * PREFILL_S_PER_TOKEN + 49 * DECODE_STEP_S for n in new_tokens]
    assert r.session_e2e_s.mean == pytest.approx(sum(one_turn))
    assert r.duration_s == pytest.approx(sum(one_turn))
    assert r.session_throughput_per_s == pytest.approx(1 / sum(one_turn))
    assert r.request_throughput_per_s == pytest.approx(3 / sum(one_turn))
    assert r.prefill_gpu_s == pytest.approx(sum(ttfts))


def test_without_prefix_caching_every_turn_prefills_its_history():
    r = simulate(session_workload(), limits(enable_prefix_caching=False), timer, blocks)
    assert [t.mean_cached_tokens for t in r.by_turn] == [0, 0, 0]
    assert r.prefill_gpu_s == pytest.approx(3 * DECODE_STEP_S + (300 + 550 + 800) * 1e-6)


def test_no_history_reuse_leaves_only_the_shared_prefix():
    # a hybrid model on a vLLM without hybrid prefix caching: history_block_tokens = 0
    r = simulate(session_workload(), limits(history_block_tokens=0), timer, blocks)
    # the 100-token shared prefix is still cached in whole blocks (96), as for turn 1
    assert [t.mean_cached_tokens for t in r.by_turn] == [0, 96, 96]
    hybrid = simulate(session_workload(), limits(history_block_tokens=256), timer, blocks)
    # align-mode blocks of 256: 350 -> 256, 600 -> 512
    assert [t.mean_cached_tokens for t in hybrid.by_turn] == [0, 256, 512]


def test_turn_one_is_the_single_turn_request():
    w = session_workload(turns=4, num_requests=None, concurrency=2)
    sessions = sample_sessions(w)
    assert len(sessions) == w.resolved_num_sessions() == 6  # 24 requests / 4 turns
    assert all(s.turns[0].input_len == 300 for s in sessions)
    # one turn: every request is a session of its own, with the very same draws
    plain = session_workload(
        turns=1, num_requests=None, input_len=LengthDist(mean=300, range_ratio=0.5)
    )
    single = sample_sessions(plain)
    assert [s.turns for s in single] == [(r,) for r in sample_requests(plain)]
    assert len({s.turns[0].input_len for s in single}) > 1
    # with length ranges each turn adds its own sampled message and answer
    ranged = session_workload(
        turns=3,
        input_len=LengthDist(mean=300, range_ratio=0.5),
        output_len=LengthDist(mean=50, range_ratio=0.5),
    )
    (s,) = sample_sessions(ranged)
    for before, after in zip(s.turns, s.turns[1:], strict=False):
        message = after.input_len - before.input_len - before.output_len
        assert 150 - 100 <= message <= 450 - 100  # a drawn input length less the prefix


def test_closed_loop_keeps_concurrency_sessions_in_flight():
    r = simulate(session_workload(turns=3, concurrency=4, num_requests=24), limits(), timer, blocks)
    assert (r.num_sessions, r.num_requests) == (8, 24)
    assert r.max_batch == 4
    assert r.request_throughput_per_s == pytest.approx(3 * r.session_throughput_per_s)
    assert r.prefill_gpu_s + r.decode_gpu_s == pytest.approx(r.busy_s)


def test_open_loop_sessions_arrive_at_the_rate():
    w = session_workload(turns=3, concurrency=None, request_rate_per_s=2.0, num_requests=150)
    r = simulate(w, limits(), timer, blocks)
    assert r.num_sessions == 50
    assert r.session_throughput_per_s == pytest.approx(2.0, rel=0.35)
    assert r.request_throughput_per_s == pytest.approx(3 * r.session_throughput_per_s)
    # an open loop idles between arrivals: busy time is below the duration
    assert r.busy_s < r.duration_s
    assert r.prefill_gpu_s + r.decode_gpu_s == pytest.approx(r.busy_s)


# --------------------------------------------------------------------------------------
# 1, 6 and 20 turns of the workload on the A40 (Qwen3.6-27B-FP8, a hybrid)


def test_more_turns_cost_more_per_session():
    plan, _ = a40_plan()
    costs, gpu_s, prefill_s = [], [], []
    for turns in (1, 6, 20):
        perf = a40_perf(turns)
        load = perf.load
        assert load.turns == turns
        assert load.num_requests == turns * load.num_sessions
        c = cost_inputs_for(perf, num_gpus=plan.settings.num_gpus, usd_per_gpu_hour=1.0)
        assert c.requests_per_task == turns  # a task is one session
        e = estimate_cost(c)
        assert e.usd_per_session == pytest.approx(turns * e.usd_per_request)
        assert e.usd_per_successful_task == pytest.approx(e.usd_per_session)
        costs.append(e.usd_per_session)
        gpu_s.append(load.busy_s / load.num_sessions)
        prefill_s.append(load.prefill_gpu_s / load.num_sessions)
        # mean prompt over the turns: P + u (t + 1) / 2 + o (t - 1) / 2 for u = 504, o = 64
        assert c.input_tokens == pytest.approx(2000 + 504 * (turns + 1) / 2 + 64 * (turns - 1) / 2)
    # longer histories: more GPU time per session, more than in proportion to the turns
    assert costs[0] < costs[1] < costs[2]
    assert gpu_s[0] < gpu_s[1] < gpu_s[2]
    assert gpu_s[2] / gpu_s[1] > 20 / 6
    assert prefill_s[0] < prefill_s[1] < prefill_s[2]


def a40_sessions(turns: int, *, enable_prefix_caching: bool = True):
    from servefit.core.ops import model_coeffs
    from servefit.core.perf import fixed_workload, simulate_load

    plan, profile = a40_plan(enable_prefix_caching)
    r = plan.settings
    m = model_coeffs(
        plan.model,
        tp=r.tensor_parallel_size,
        pp=r.pipeline_parallel_size,
        kv_cache_dtype=r.kv_cache_dtype,
    )
    w = fixed_workload(2504, 64, concurrency=4, prefix_len=2000, turns=turns)
    return simulate_load(plan, m, profile, w)


def test_with_caching_the_extra_prefill_is_mostly_the_new_tokens():
    cached = a40_sessions(20)
    cold = a40_sessions(20, enable_prefix_caching=False)
    assert cold.num_cached_tokens == 0
    # most of a 20-turn session's prompt tokens are found in the cache
    assert cached.num_cached_tokens > 0.8 * cached.num_input_tokens
    per_session_cached = cached.prefill_gpu_s / cached.num_sessions
    per_session_cold = cold.prefill_gpu_s / cold.num_sessions
    assert per_session_cached < 0.3 * per_session_cold
    # turn 20's prompt is ~5x turn 1's, but its TTFT is not: only the new message and a
    # partial block are computed; without the cache TTFT grows with the whole history
    first, last = cached.by_turn[0], cached.by_turn[-1]
    assert last.mean_input_len > 4 * first.mean_input_len
    assert last.ttft_s.mean < 2 * first.ttft_s.mean
    assert cold.by_turn[-1].ttft_s.mean > 3 * cold.by_turn[0].ttft_s.mean
    # decode is untouched by caching: the same work, timed alike
    assert cached.decode_gpu_s == pytest.approx(cold.decode_gpu_s, rel=0.15)
    # without the cache, longer prompts mean fewer requests per second
    assert (
        cold.request_throughput_per_s
        < a40_sessions(6, enable_prefix_caching=False).request_throughput_per_s
    )
