"""The metric formulas on hand-made records (docs/metrics.md)."""

import pytest

from servefit.bench.metrics import percentile, summarize
from servefit.bench.records import Outcome, RequestRecord, TokenSource
from servefit.core.metrics import Slo


def record(
    i, sent, chunks, done, tokens, prompt=10, scheduled=None, outcome=Outcome.OK, cached=None
):
    return RequestRecord(
        request_id=i,
        outcome=outcome,
        scheduled_s=sent if scheduled is None else scheduled,
        sent_s=sent,
        chunk_s=chunks,
        done_s=done,
        completion_tokens=tokens,
        prompt_tokens=prompt,
        cached_tokens=cached,
    )


def test_formulas_hand_derived():
    a = record(0, sent=0.0, chunks=[0.10, 0.12, 0.14, 0.16], done=0.16, tokens=4, scheduled=0.0)
    b = record(1, sent=0.5, chunks=[0.70, 0.80], done=0.80, tokens=2, scheduled=0.45)
    s = summarize([a, b])
    assert s.successful == 2 and s.errored == 0
    assert s.duration_s == pytest.approx(0.80)  # first sent 0.0 -> last done 0.80
    assert s.ttft_s.mean == pytest.approx((0.10 + 0.20) / 2)
    # TPOT excludes the first token: a (0.16-0.10)/3 = 0.02, b (0.80-0.70)/1 = 0.10
    assert s.tpot_s.min == pytest.approx(0.02) and s.tpot_s.max == pytest.approx(0.10)
    # ITL pools every chunk gap: 0.02, 0.02, 0.02 (a) and 0.10 (b)
    assert s.itl_s.count == 4 and s.itl_s.aggregation == "pooled"
    assert s.itl_s.p50 == pytest.approx(0.02)
    assert s.output_throughput_tok_per_s == pytest.approx(6 / 0.80)
    assert s.total_token_throughput_tok_per_s == pytest.approx(26 / 0.80)
    assert s.request_throughput_per_s == pytest.approx(2 / 0.80)
    assert s.achieved_concurrency == pytest.approx((0.16 + 0.30) / 0.80)
    assert s.client_lag_s.max == pytest.approx(0.05)
    assert s.ttft_from_scheduled_s.max == pytest.approx(0.25)
    assert s.decode_tok_per_s.min == pytest.approx(10.0)  # b: 1 token in 0.10 s


def test_goodput_counts_requests_meeting_every_slo():
    fast = record(0, 0.0, [0.05, 0.06], 0.06, 2)
    slow = record(1, 0.0, [0.50, 0.51], 0.51, 2)
    s = summarize([fast, slow], Slo(ttft_ms=100))
    assert s.goodput_per_s == pytest.approx(1 / 0.51)


def test_outcomes_counted_apart_and_warmup_excluded():
    ok = record(0, 0.0, [0.1], 0.1, 1)
    bad = RequestRecord(
        request_id=1, scheduled_s=0, sent_s=0.0, outcome=Outcome.ERROR, error="HTTP 429: slow down"
    )
    cut = record(2, 0.0, [0.1, 0.2], 0.2, 2, outcome=Outcome.INCOMPLETE)
    warm = record(-1, 0.0, [0.1], 0.1, 1)
    warm.is_warmup = True
    s = summarize([ok, bad, cut, warm])
    assert (s.successful, s.errored, s.incomplete, s.warmup_excluded) == (1, 1, 1, 1)
    assert s.errors == {"HTTP 429": 1, "unknown": 1}


def test_chunk_fallback_is_reported():
    r = record(0, 0.0, [0.1, 0.2], 0.2, 2)
    r.token_source = TokenSource.CHUNKS
    assert summarize([r]).token_count_source == "chunks"


def test_percentile_matches_numpy_linear():
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile([5.0], 99) == 5.0


def test_empty_run_is_still_a_summary():
    s = summarize([])
    assert s.successful == 0 and s.duration_s == 0 and s.ttft_s.count == 0


def test_client_bound_warnings():
    from servefit.bench.runner import client_bound_warnings
    from servefit.bench.schedules import Schedule

    lagging = [
        record(
            i,
            sent=i * 0.01 + 0.02,
            chunks=[i * 0.01 + 0.03],
            done=i * 0.01 + 0.03,
            tokens=1,
            scheduled=i * 0.01,
        )
        for i in range(50)
    ]
    assert client_bound_warnings(summarize(lagging), Schedule(rate_per_s=100))
    # closed loop: 50 back-to-back requests keep one slot busy: fine at concurrency 1 ...
    assert not client_bound_warnings(summarize(lagging), Schedule(concurrency=1))
    # ... but at concurrency 4 three slots sat idle
    assert (
        "achieved concurrency 1.0 of 4"
        in client_bound_warnings(summarize(lagging), Schedule(concurrency=4))[0]
    )


def test_histogram_quantile_matches_prometheus():
    from servefit.bench.server_metrics import (
        histogram_quantile,
        latency_percentiles,
        parse_histograms,
    )

    # 10 observations: 2 <= 0.1 s, 8 in (0.1, 0.2]: the median sits 3/8 into (0.1, 0.2]
    buckets = {0.1: 2.0, 0.2: 10.0, float("inf"): 10.0}
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1 + 0.1 * 3 / 8)
    text = "\n".join(
        [
            'vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.1"} 2',
            'vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.2"} 10',
            'vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 10',
        ]
    )
    before = parse_histograms(text.replace(" 2", " 0").replace(" 10", " 0"))
    after = parse_histograms(text)
    assert latency_percentiles(before, after)["server_ttft_s"]["p50"] == pytest.approx(0.1375)
