"""Metrics as formulas over the raw request timestamps (see ``docs/metrics.md``), computed
with the simulator's own formulas (:mod:`servefit.core.metrics`).

Per request (successful requests with at least one token):

- ``ttft_s      = first_chunk - sent``            (time to first token, as vLLM bench)
- ``ttft_from_scheduled_s = first_chunk - scheduled`` (includes client lag)
- ``e2e_s       = done - sent``
- ``tpot_s      = (done - first_chunk) / (completion_tokens - 1)``  (first token excluded;
  vLLM bench "TPOT" = aiperf "inter_token_latency"); requests with one token have none
- ``decode_tok_per_s = (completion_tokens - 1) / (done - first_chunk)``
- ``client_lag_s = sent - scheduled``

Pooled over all chunks of all successful requests:

- ``itl_s`` = every gap between consecutive text chunks (vLLM bench "ITL" = aiperf
  "inter_chunk_latency"); with several tokens per chunk a gap covers several tokens.

Run level (``duration_s`` = first ``sent`` to last ``done`` of measured requests):

- ``request_throughput_per_s = successful / duration_s``
- ``output_throughput_tok_per_s = sum(completion_tokens) / duration_s``
- ``total_token_throughput_tok_per_s = sum(prompt_tokens + completion_tokens) / duration_s``
- ``goodput_per_s = successful requests meeting every SLO / duration_s`` (SLO limits in ms,
  as ``vllm bench serve --goodput``)
- ``achieved_concurrency = sum(e2e_s) / duration_s`` (Little's law)

Percentiles interpolate linearly between order statistics (numpy's default); each metric
names its aggregation: ``per_request`` (one value per request) or ``pooled``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from servefit.bench.records import Outcome, RequestRecord, TokenSource
from servefit.core import metrics
from servefit.core.metrics import Slo, Stat
from servefit.core.stats import percentile

__all__ = ["Distribution", "Slo", "Summary", "distribution", "percentile", "summarize"]


class Distribution(BaseModel):
    """A :class:`servefit.core.metrics.Stat` as the summary document writes it: how it was
    aggregated, and null statistics for an empty sample."""

    model_config = ConfigDict(extra="forbid")

    aggregation: str  # "per_request" or "pooled"
    count: int
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, stat: Stat, aggregation: str) -> Distribution:
        if not stat.count:
            return cls(aggregation=aggregation, count=0)
        return cls(
            aggregation=aggregation,
            count=stat.count,
            mean=stat.mean,
            min=stat.min,
            max=stat.max,
            p50=stat.p50,
            p90=stat.p90,
            p95=stat.p95,
            p99=stat.p99,
        )


class Summary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    successful: int
    errored: int
    incomplete: int
    warmup_excluded: int
    duration_s: float
    request_throughput_per_s: float
    output_throughput_tok_per_s: float
    total_token_throughput_tok_per_s: float
    goodput_per_s: float | None
    achieved_concurrency: float
    prompt_tokens_total: int
    completion_tokens_total: int
    cached_tokens_total: int | None
    token_count_source: str  # "usage", "chunks" or "mixed"
    ttft_s: Distribution
    ttft_from_scheduled_s: Distribution
    tpot_s: Distribution
    itl_s: Distribution
    e2e_s: Distribution
    decode_tok_per_s: Distribution
    client_lag_s: Distribution
    conventions: dict[str, str]
    errors: dict[str, int]


def distribution(values: Sequence[float], aggregation: str) -> Distribution:
    return Distribution.of(Stat.of(values), aggregation)


def latencies(r: RequestRecord) -> metrics.RequestLatencies:
    """TTFT, TPOT and E2E of one record, by the formulas the simulator uses."""
    return metrics.request_latencies(
        sent_s=r.sent_s,
        first_token_s=r.first_token_s,
        done_s=r.done_s,
        output_tokens=r.completion_tokens,
    )


CONVENTIONS = {
    "ttft_s": "vLLM bench 'TTFT' = aiperf 'time_to_first_token': first text chunk - request sent",
    "tpot_s": "vLLM bench 'TPOT' = aiperf 'inter_token_latency' = guidellm 'inter_token_latency': "
    "(done - first chunk) / (output tokens - 1); NOT guidellm's 'time_per_output_token', which "
    "includes TTFT",
    "itl_s": "vLLM bench 'ITL' = aiperf 'inter_chunk_latency': gaps between consecutive "
    "chunks, pooled",
    "decode_tok_per_s": "per request: (output tokens - 1) / (done - first chunk)",
    "goodput_per_s": "vLLM bench 'request goodput': requests meeting every SLO "
    "(ttft, tpot, e2el in ms) / duration; a one-token request meets any TPOT limit",
    "tokens": "output tokens from the server's usage.completion_tokens; when a server sends no "
    "usage, one token per text chunk (token_count_source says which)",
}


def _token_source(sources: set[TokenSource]) -> str:
    if len(sources) > 1:
        return "mixed"
    return next(iter(sources)).value if sources else TokenSource.USAGE.value


def _decode_rates(ok: Sequence[RequestRecord]) -> list[float]:
    rates = (
        metrics.decode_tok_per_s(
            first_token_s=r.first_token_s, done_s=r.done_s, output_tokens=r.completion_tokens
        )
        if r.first_token_s is not None and r.done_s is not None and r.completion_tokens
        else None
        for r in ok
    )
    return [v for v in rates if v is not None]


def _errors(measured: Sequence[RequestRecord]) -> dict[str, int]:
    errors: dict[str, int] = {}
    for r in measured:
        if r.outcome is not Outcome.OK:
            key = (r.error or "unknown").split(":")[0][:80]
            errors[key] = errors.get(key, 0) + 1
    return errors


def summarize(records: Sequence[RequestRecord], slo: Slo | None = None) -> Summary:
    measured = [r for r in records if not r.is_warmup]
    ok = [r for r in measured if r.outcome is Outcome.OK]
    duration = metrics.run_duration_s(
        (r.sent_s for r in measured if r.sent_s is not None),
        (r.done_s for r in measured if r.done_s is not None),
    )
    per_s = 1 / duration if duration > 0 else 0.0
    completion = sum(r.completion_tokens or 0 for r in ok)
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    lat = [latencies(r) for r in ok]
    e2es = [v.e2e_s for v in lat if v.e2e_s is not None]
    return Summary(
        successful=len(ok),
        errored=sum(r.outcome is Outcome.ERROR for r in measured),
        incomplete=sum(r.outcome is Outcome.INCOMPLETE for r in measured),
        warmup_excluded=len(records) - len(measured),
        duration_s=duration,
        request_throughput_per_s=len(ok) * per_s,
        output_throughput_tok_per_s=completion * per_s,
        total_token_throughput_tok_per_s=(completion + prompt) * per_s,
        goodput_per_s=metrics.goodput_per_s(slo, lat, duration) if slo else None,
        achieved_concurrency=sum(e2es) * per_s,
        prompt_tokens_total=prompt,
        completion_tokens_total=completion,
        cached_tokens_total=sum(cached) if cached else None,
        token_count_source=_token_source({r.token_source for r in ok}),
        ttft_s=distribution([v.ttft_s for v in lat if v.ttft_s is not None], "per_request"),
        ttft_from_scheduled_s=distribution(
            [r.first_token_s - r.scheduled_s for r in ok if r.first_token_s is not None],
            "per_request",
        ),
        tpot_s=distribution([v.tpot_s for v in lat if v.tpot_s is not None], "per_request"),
        itl_s=distribution([g for r in ok for g in metrics.itl_gaps_s(r.chunk_s)], "pooled"),
        e2e_s=distribution(e2es, "per_request"),
        decode_tok_per_s=distribution(_decode_rates(ok), "per_request"),
        client_lag_s=distribution(
            [r.sent_s - r.scheduled_s for r in measured if r.sent_s is not None], "per_request"
        ),
        conventions=CONVENTIONS,
        errors=_errors(measured),
    )
