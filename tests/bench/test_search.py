"""Search decision logic (a fake server capacity stands in for real runs)."""

from servefit.bench.metrics import Distribution, summarize
from servefit.bench.records import RequestRecord
from servefit.bench.search import search_max_concurrency, slo_met
from servefit.core.metrics import Slo


def test_doubles_then_bisects_to_the_boundary():
    capacity = 37
    best, steps = search_max_concurrency(lambda c: c <= capacity)
    assert best == capacity
    tried = [s.concurrency for s in steps]
    assert tried[:7] == [1, 2, 4, 8, 16, 32, 64]  # doubling until 64 fails
    assert len(tried) <= 7 + 5  # then a bisection of [32, 64]


def test_nothing_meets_and_everything_meets():
    assert search_max_concurrency(lambda c: False)[0] is None
    best, steps = search_max_concurrency(lambda c: True, limit=64)
    assert best == 64 and [s.concurrency for s in steps] == [1, 2, 4, 8, 16, 32, 64]


def test_slo_met_uses_the_percentile_and_failures():
    records = [
        RequestRecord(
            request_id=i,
            scheduled_s=0,
            sent_s=0.0,
            chunk_s=[t, t + 0.01],
            done_s=t + 0.01,
            completion_tokens=2,
            outcome="ok",
        )
        for i, t in enumerate([0.1] * 9 + [1.0])
    ]
    s = summarize(records)
    assert slo_met(s, Slo(ttft_ms=200), 50)
    assert not slo_met(s, Slo(ttft_ms=200), 99)
    assert isinstance(s.ttft_s, Distribution)
