"""Prediction and measurement share one metrics module: one Slo, one statistic, one set of
formulas (servefit.core.metrics, docs/metrics.md)."""

from __future__ import annotations

import pytest

import servefit.bench.metrics as bench_metrics
import servefit.core.workload as workload
from servefit.bench.records import Outcome, RequestRecord
from servefit.core import metrics
from servefit.core.metrics import Slo, Stat
from servefit.core.ops import StepShape
from servefit.core.roofline import StepTime
from servefit.core.serving import RequestTiming, ServingLimits, simulate
from servefit.core.workload import LengthDist, Workload
from servefit.errors import InvalidArgumentError

# One request, by hand: sent at 1.0 s, first token at 1.2 s, 5 tokens, done at 1.6 s.
#   TTFT = 1.2 - 1.0 = 0.2 s; TPOT = (1.6 - 1.2) / (5 - 1) = 0.1 s; E2E = 0.6 s
SENT, FIRST, DONE, TOKENS = 1.0, 1.2, 1.6, 5


def simulated() -> RequestTiming:
    return RequestTiming(
        sent_s=SENT,
        first_token_s=FIRST,
        finish_s=DONE,
        input_len=10,
        output_len=TOKENS,
        cached_tokens=0,
        num_preemptions=0,
    )


def measured() -> RequestRecord:
    chunks = [FIRST, 1.3, 1.4, 1.5, DONE]  # one token per chunk
    return RequestRecord(
        request_id=0,
        outcome=Outcome.OK,
        scheduled_s=SENT,
        sent_s=SENT,
        chunk_s=chunks,
        done_s=DONE,
        completion_tokens=TOKENS,
        prompt_tokens=10,
    )


def test_one_slo_class_everywhere():
    assert workload.Slo is metrics.Slo is bench_metrics.Slo


def test_formulas_by_hand():
    assert metrics.ttft_s(sent_s=SENT, first_token_s=FIRST) == pytest.approx(0.2)
    assert metrics.tpot_s(first_token_s=FIRST, done_s=DONE, output_tokens=TOKENS) == (
        pytest.approx(0.1)
    )
    assert metrics.e2e_s(sent_s=SENT, done_s=DONE) == pytest.approx(0.6)
    assert metrics.decode_tok_per_s(
        first_token_s=FIRST, done_s=DONE, output_tokens=TOKENS
    ) == pytest.approx(10.0)
    assert metrics.itl_gaps_s([1.2, 1.3, 1.5]) == pytest.approx([0.1, 0.2])
    # one token: no TPOT (the first token is excluded), no decode rate
    assert metrics.tpot_s(first_token_s=FIRST, done_s=DONE, output_tokens=1) is None
    assert metrics.decode_tok_per_s(first_token_s=FIRST, done_s=DONE, output_tokens=1) is None


def test_simulator_and_bench_give_the_same_numbers_for_the_same_request():
    sim = simulated()
    summary = bench_metrics.summarize([measured()])
    assert (sim.ttft_s, sim.tpot_s, sim.e2e_s) == pytest.approx((0.2, 0.1, 0.6))
    assert summary.ttft_s.mean == pytest.approx(sim.ttft_s)
    assert summary.tpot_s.mean == pytest.approx(sim.tpot_s)
    assert summary.e2e_s.mean == pytest.approx(sim.e2e_s)
    # ITL gaps of the measured chunks: 0.1 each; their mean is the TPOT here
    assert summary.itl_s.count == 4 and summary.itl_s.mean == pytest.approx(0.1)


def test_simulator_and_bench_compute_tpot_through_the_same_function(monkeypatch):
    calls = []

    def marked(**kwargs):
        calls.append(kwargs)
        return 0.25

    monkeypatch.setattr(metrics, "tpot_s", marked)
    assert simulated().tpot_s == 0.25
    summary = bench_metrics.summarize([measured()])
    assert summary.tpot_s.mean == 0.25
    assert summary.decode_tok_per_s.mean == 4.0  # the decode rate: the same TPOT, inverted
    # the simulator once; the bench for TPOT and for the decode rate
    assert calls == [{"first_token_s": FIRST, "done_s": DONE, "output_tokens": TOKENS}] * 3


def _step_10ms(shape: StepShape) -> StepTime:
    return StepTime(time_s=0.010, compute_s=0.0, memory_s=0.010, comm_s=0.0, overhead_s=0.0)


def _simulate(slo: Slo):
    limits = ServingLimits(
        max_num_seqs=8, max_num_batched_tokens=8192, num_kv_blocks=10_000, block_size=16
    )
    w = Workload(
        input_len=LengthDist(mean=100),
        output_len=LengthDist(mean=5),
        concurrency=1,
        num_requests=2,
    )
    return simulate(w, limits, _step_10ms, lambda n: -(-n // 16), slo=slo)


def test_simulator_and_bench_compute_goodput_through_the_same_function(monkeypatch):
    callers = []
    real = metrics.goodput_per_s

    def marked(slo, requests, duration_s):
        requests = list(requests)
        callers.append(type(requests[0]).__name__)
        return real(slo, requests, duration_s)

    monkeypatch.setattr(metrics, "goodput_per_s", marked)
    slo = Slo(ttft_ms=250, tpot_ms=100.5)
    # measured, by hand: the one request meets both limits; duration 1.6 - 1.0 s
    assert bench_metrics.summarize([measured()], slo).goodput_per_s == pytest.approx(1 / 0.6)
    # simulated, by hand: each request is a 10 ms prefill step then 4 decode steps of 10 ms
    # (TTFT 10 ms, TPOT 10 ms); two back to back take 0.1 s
    met = _simulate(Slo(ttft_ms=10.5, tpot_ms=10.5))
    assert met.goodput_per_s == pytest.approx(2 / 0.1)
    missed = _simulate(Slo(tpot_ms=9.5))
    assert missed.goodput_per_s == 0.0
    assert callers == ["RequestLatencies", "RequestTiming", "RequestTiming"]


def test_slo_is_milliseconds_and_met_by_takes_seconds():
    slo = Slo(ttft_ms=200, tpot_ms=100, e2el_ms=600)
    assert (slo.ttft_s, slo.tpot_s, slo.e2e_s) == pytest.approx((0.2, 0.1, 0.6))
    assert slo.met_by(ttft_s=0.2, tpot_s=0.1, e2e_s=0.6)  # at the limit: met (as vLLM's <=)
    assert not slo.met_by(ttft_s=0.2001, tpot_s=0.1, e2e_s=0.6)
    assert not slo.met_by(ttft_s=0.2, tpot_s=0.1001, e2e_s=0.6)
    assert not slo.met_by(ttft_s=0.2, tpot_s=0.1, e2e_s=0.6001)
    # one output token: no TPOT, meets any TPOT limit (vLLM counts it as 0); no token: misses
    assert slo.met_by(ttft_s=0.1, tpot_s=None, e2e_s=0.1)
    assert not slo.met_by(ttft_s=None, tpot_s=None, e2e_s=0.1)
    assert Slo().met_by(ttft_s=None, tpot_s=None, e2e_s=None)


@pytest.mark.parametrize("field", ["ttft_ms", "tpot_ms", "e2el_ms"])
def test_slo_refuses_negative_limits_naming_the_flag(field):
    flag = "--slo-" + field.replace("_ms", "") + "-ms"
    with pytest.raises(InvalidArgumentError, match=flag):
        Slo(**{field: -1.0})


def test_one_statistic_for_both_sides():
    values = [0.4, 0.1, 0.3, 0.2]
    stat = Stat.of(values)
    assert (stat.count, stat.mean, stat.min, stat.max) == pytest.approx((4, 0.25, 0.1, 0.4))
    assert stat.p50 == pytest.approx(0.25) and stat.p90 == pytest.approx(0.37)
    doc = bench_metrics.distribution(values, "per_request")
    assert (doc.mean, doc.p50, doc.p90, doc.p95, doc.p99) == (
        stat.mean,
        stat.p50,
        stat.p90,
        stat.p95,
        stat.p99,
    )
    # an empty sample: zeros with count 0 in the core, nulls in the summary document
    assert Stat.of([]) == Stat()
    empty = bench_metrics.distribution([], "pooled")
    assert empty.count == 0 and empty.mean is None and empty.p99 is None
