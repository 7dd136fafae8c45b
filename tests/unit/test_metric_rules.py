"""The edges of the shared metric rules (core/metrics.py, core/stats.py): what a missing
timestamp makes of each latency, what a missing latency means for an SLO, the percentiles
of a sample whose answer is known by hand, an empty run. The mutation gate holds these
modules (benchmarks/mutation.py)."""

from __future__ import annotations

import pytest

from servefit.core import metrics
from servefit.core.metrics import RequestLatencies, Slo, Stat
from servefit.core.stats import percentile
from servefit.errors import InvalidArgumentError


def test_the_percentile_of_nothing_is_refused_by_name():
    with pytest.raises(ValueError) as err:
        percentile([], 50)
    assert str(err.value) == "percentile of an empty sequence"


def test_percentiles_of_zero_to_one_hundred_are_their_ranks():
    # 101 values 0..100: the q-th percentile (rank q/100 x 100) is q itself
    s = Stat.of(float(v) for v in range(100, -1, -1))  # any order
    assert (s.count, s.min, s.max, s.mean) == (101, 0.0, 100.0, 50.0)
    assert (s.p50, s.p90, s.p95, s.p99) == (50.0, 90.0, 95.0, 99.0)


@pytest.mark.parametrize("ms", [0.0, 0.5, 250.0])
def test_an_slo_of_zero_or_a_fraction_of_a_millisecond_is_a_limit(ms):
    slo = Slo(ttft_ms=ms, tpot_ms=ms, e2el_ms=ms)
    assert slo.ttft_s == slo.tpot_s == slo.e2e_s == ms / 1000


@pytest.mark.parametrize("ms", [-1.0, float("nan"), float("inf")])
def test_an_slo_that_is_not_a_duration_is_refused(ms):
    with pytest.raises(InvalidArgumentError, match="--slo-e2el-ms must be a non-negative"):
        Slo(e2el_ms=ms)


def test_a_missing_latency_meets_only_the_tpot_limit():
    """No first token: no TTFT and no E2E, which cannot meet their limits; one token: no
    TPOT, which does not fail a TPOT limit (vLLM bench's goodput rule)."""
    slo = Slo(ttft_ms=100, tpot_ms=10, e2el_ms=1000)
    assert slo.met_by(ttft_s=0.05, tpot_s=None, e2e_s=0.5) is True
    assert slo.met_by(ttft_s=None, tpot_s=0.005, e2e_s=0.5) is False
    assert slo.met_by(ttft_s=0.05, tpot_s=0.005, e2e_s=None) is False
    assert slo.met_by(ttft_s=0.05, tpot_s=0.005, e2e_s=2.0) is False  # the E2E limit counts


def test_goodput_counts_requests_meeting_every_limit_per_second():
    slo = Slo(ttft_ms=100, e2el_ms=1000)
    requests = [
        RequestLatencies(ttft_s=0.05, tpot_s=0.01, e2e_s=0.5),  # meets
        RequestLatencies(ttft_s=0.05, tpot_s=0.01, e2e_s=1.5),  # too slow end to end
        RequestLatencies(ttft_s=None, tpot_s=None, e2e_s=None),  # never answered
    ]
    assert metrics.num_meeting(slo, requests) == 1
    assert metrics.goodput_per_s(slo, requests, duration_s=4.0) == 0.25
    assert metrics.goodput_per_s(slo, requests, duration_s=0.0) == 0.0  # an empty run


@pytest.mark.parametrize(
    ("sent", "first", "done", "tokens", "expected"),
    [
        (1.0, 1.2, 2.2, 11, (0.2, 0.1, 1.2)),  # (2.2 - 1.2) / (11 - 1) = 0.1
        (None, 1.2, 2.2, 11, (None, 0.1, None)),  # not sent: no TTFT, no E2E
        (1.0, None, 2.2, 11, (None, None, 1.2)),  # no token: no TTFT, no TPOT
        (1.0, 1.2, None, 11, (0.2, None, None)),  # never done: no TPOT, no E2E
        (1.0, 1.2, 2.2, None, (0.2, None, 1.2)),  # no token count: no TPOT
    ],
)
def test_each_latency_needs_its_own_timestamps(sent, first, done, tokens, expected):
    got = metrics.request_latencies(
        sent_s=sent, first_token_s=first, done_s=done, output_tokens=tokens
    )
    assert (got.ttft_s, got.tpot_s, got.e2e_s) == pytest.approx(expected)


def test_a_run_is_first_sent_to_last_done_and_nothing_is_zero():
    assert metrics.run_duration_s([3.0, 1.0, 2.0], [4.0, 6.0]) == 5.0
    assert metrics.run_duration_s([], [1.0]) == 0.0  # nothing sent
    assert metrics.run_duration_s([1.0], []) == 0.0  # nothing done
