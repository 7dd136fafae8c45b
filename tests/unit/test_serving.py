"""The continuous-batching simulation, with a step timer simple enough to check by hand."""

from __future__ import annotations

import pytest

from servefit.core.ops import StepShape
from servefit.core.roofline import Bound, StepTime
from servefit.core.serving import ServingLimits, simulate
from servefit.core.workload import LengthDist, Slo, Workload, sample_requests
from servefit.errors import InvalidArgumentError

DECODE_STEP_S = 0.010  # every step costs 10 ms, plus 1 ms per 1000 prefill tokens
PREFILL_S_PER_TOKEN = 1e-6


def timer(shape: StepShape) -> StepTime:
    prefill = sum(n for n, _ in shape.prefill_chunks)
    t = DECODE_STEP_S + PREFILL_S_PER_TOKEN * prefill
    return StepTime(time_s=t, compute_s=0.0, memory_s=t, comm_s=0.0, overhead_s=0.0)


def blocks(length: int) -> int:
    return -(-length // 16)  # one full-attention group, 16-token blocks


def limits(num_blocks: int = 100_000, **kw) -> ServingLimits:
    base = {
        "max_num_seqs": 256,
        "max_num_batched_tokens": 8192,
        "num_kv_blocks": num_blocks,
        "block_size": 16,
    }
    base.update(kw)
    return ServingLimits(**base)


def workload(concurrency: int | None = 1, **kw) -> Workload:
    base = {
        "input_len": LengthDist(mean=1000),
        "output_len": LengthDist(mean=101),
        "concurrency": concurrency,
        "num_requests": 4 * (concurrency or 1),
    }
    base.update(kw)
    return Workload(**base)


def test_single_request_timings_by_hand():
    r = simulate(workload(1), limits(), timer, blocks, request_overhead_s=0.005)
    # TTFT: one prefill step of 1000 tokens (10 + 1 ms) + 5 ms request overhead
    assert r.ttft_s.mean == pytest.approx(0.016)
    # 100 more tokens, one 10 ms decode step each
    assert r.tpot_s.mean == pytest.approx(0.010)
    assert r.decode_tok_per_s == pytest.approx(100.0)
    # 4 requests back to back, each 0.011 + 100 x 0.010 s of GPU time; the request overhead
    # (HTTP, tokenizing) is latency the client sees, overlapping the server's work
    assert r.duration_s == pytest.approx(4 * 1.011 + 0.005, rel=1e-6)
    assert r.output_throughput_tok_per_s == pytest.approx(404 / (4 * 1.011 + 0.005), rel=1e-6)


def test_batching_raises_throughput_at_the_same_step_time():
    one = simulate(workload(1), limits(), timer, blocks)
    eight = simulate(workload(8), limits(), timer, blocks)
    assert eight.output_throughput_tok_per_s == pytest.approx(
        8 * one.output_throughput_tok_per_s, rel=0.05
    )
    assert eight.mean_batch == pytest.approx(8, rel=0.05)


def test_requests_beyond_the_kv_cache_queue_and_ttft_grows():
    # 1101 tokens need 69 blocks: 345 blocks hold 5 requests at a time
    fits = simulate(workload(4), limits(num_blocks=345), timer, blocks)
    queued = simulate(workload(16), limits(num_blocks=345), timer, blocks)
    assert queued.max_batch <= 5
    assert queued.ttft_s.mean > 2 * fits.ttft_s.mean
    assert queued.bound is Bound.CAPACITY
    assert fits.bound is Bound.MEMORY


def test_max_num_seqs_caps_the_batch():
    r = simulate(workload(32), limits(max_num_seqs=8), timer, blocks)
    assert r.max_batch == 8


def test_growth_past_the_cache_preempts_and_still_finishes_everything():
    # prompts of 100 fit 10 at a time (7 blocks), but grown to 1100 tokens they need 69
    w = workload(10, input_len=LengthDist(mean=100), output_len=LengthDist(mean=1000))
    r = simulate(w, limits(num_blocks=150), timer, blocks)
    assert r.num_preemptions > 0
    assert r.num_requests == 40


def test_a_request_longer_than_the_cache_is_refused():
    with pytest.raises(InvalidArgumentError, match="KV blocks"):
        simulate(workload(1), limits(num_blocks=10), timer, blocks)


def test_prefix_caching_shortens_ttft():
    cold = simulate(workload(1), limits(), timer, blocks)
    warm = simulate(workload(1, prefix_len=800), limits(), timer, blocks)
    # 800 of 1000 tokens come from the cache after the first request: 0.8 ms less prefill
    assert warm.ttft_s.mean < cold.ttft_s.mean
    assert warm.ttft_s.p50 == pytest.approx(0.010 + 200 * PREFILL_S_PER_TOKEN)


def test_poisson_arrivals_are_seeded_and_open_loop():
    w = workload(None, request_rate_per_s=5.0, num_requests=50)
    a, b = sample_requests(w), sample_requests(w)
    assert a == b
    assert all(x.arrival_s is not None for x in a)
    r = simulate(w, limits(), timer, blocks)
    assert r.request_throughput_per_s == pytest.approx(5.0, rel=0.35)


def test_goodput_counts_requests_meeting_the_slo():
    r = simulate(workload(4), limits(), timer, blocks, slo=Slo(tpot_ms=1.0))
    assert r.goodput_per_s == 0
    r = simulate(workload(4), limits(), timer, blocks, slo=Slo(tpot_ms=1000.0))
    assert r.goodput_per_s == pytest.approx(r.request_throughput_per_s)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"concurrency": 0}, "--concurrency"),
        ({"prefix_len": 2000}, "--prefix-len"),
        ({"output_len": LengthDist(mean=0)}, "--output-len"),
        ({"concurrency": None}, "--concurrency or --request-rate"),
    ],
)
def test_bad_workloads_name_the_flag(kw, message):
    kw = {"concurrency": 1, **kw}
    with pytest.raises(InvalidArgumentError, match=message):
        workload(kw.pop("concurrency"), **kw)
