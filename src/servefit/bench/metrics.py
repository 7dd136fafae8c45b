"""Metrics as formulas over the raw request timestamps (see ``docs/metrics.md``).

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
- ``goodput_per_s = successful requests meeting every SLO / duration_s``
- ``achieved_concurrency = sum(e2e_s) / duration_s`` (Little's law)

Percentiles interpolate linearly between order statistics (numpy's default); each metric
names its aggregation: ``per_request`` (one value per request) or ``pooled``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from servefit.bench.records import Outcome, RequestRecord, TokenSource
from servefit.core.stats import percentile

PERCENTILES = (50, 90, 95, 99)


class Distribution(BaseModel):
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


class Slo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None


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
    if not values:
        return Distribution(aggregation=aggregation, count=0)
    ordered = sorted(values)
    return Distribution(
        aggregation=aggregation,
        count=len(ordered),
        mean=sum(ordered) / len(ordered),
        min=ordered[0],
        max=ordered[-1],
        **{f"p{q}": percentile(ordered, q) for q in PERCENTILES},
    )


def ttft_s(r: RequestRecord) -> float | None:
    if r.sent_s is None or r.first_token_s is None:
        return None
    return r.first_token_s - r.sent_s


def tpot_s(r: RequestRecord) -> float | None:
    if (
        r.first_token_s is None
        or r.done_s is None
        or not r.completion_tokens
        or r.completion_tokens < 2
    ):
        return None
    return (r.done_s - r.first_token_s) / (r.completion_tokens - 1)


def e2e_s(r: RequestRecord) -> float | None:
    if r.sent_s is None or r.done_s is None:
        return None
    return r.done_s - r.sent_s


def meets(r: RequestRecord, slo: Slo) -> bool:
    checks = ((slo.ttft_s, ttft_s(r)), (slo.tpot_s, tpot_s(r)), (slo.e2e_s, e2e_s(r)))
    return all(limit is None or (value is not None and value <= limit) for limit, value in checks)


CONVENTIONS = {
    "ttft_s": "vLLM bench 'TTFT' = aiperf 'time_to_first_token': first text chunk - request sent",
    "tpot_s": "vLLM bench 'TPOT' = aiperf 'inter_token_latency' = guidellm 'inter_token_latency': "
    "(done - first chunk) / (output tokens - 1); NOT guidellm's 'time_per_output_token', which "
    "includes TTFT",
    "itl_s": "vLLM bench 'ITL' = aiperf 'inter_chunk_latency': gaps between consecutive "
    "chunks, pooled",
    "decode_tok_per_s": "per request: (output tokens - 1) / (done - first chunk)",
    "tokens": "output tokens from the server's usage.completion_tokens; when a server sends no "
    "usage, one token per text chunk (token_count_source says which)",
}


def _token_source(sources: set[TokenSource]) -> str:
    if len(sources) > 1:
        return "mixed"
    return next(iter(sources)).value if sources else TokenSource.USAGE.value


def summarize(records: Sequence[RequestRecord], slo: Slo | None = None) -> Summary:
    measured = [r for r in records if not r.is_warmup]
    ok = [r for r in measured if r.outcome is Outcome.OK]
    starts = [r.sent_s for r in measured if r.sent_s is not None]
    ends = [r.done_s for r in measured if r.done_s is not None]
    duration = (max(ends) - min(starts)) if starts and ends else 0.0
    per_s = 1 / duration if duration > 0 else 0.0
    completion = sum(r.completion_tokens or 0 for r in ok)
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    sources = {r.token_source for r in ok}
    e2es = [v for r in ok if (v := e2e_s(r)) is not None]
    gaps = [b - a for r in ok for a, b in zip(r.chunk_s, r.chunk_s[1:], strict=False)]
    decode = [
        (r.completion_tokens - 1) / (r.done_s - r.first_token_s)
        for r in ok
        if r.completion_tokens
        and r.completion_tokens > 1
        and r.done_s
        and r.first_token_s
        and r.done_s > r.first_token_s
    ]
    errors: dict[str, int] = {}
    for r in measured:
        if r.outcome is not Outcome.OK:
            key = (r.error or "unknown").split(":")[0][:80]
            errors[key] = errors.get(key, 0) + 1
    return Summary(
        successful=len(ok),
        errored=sum(r.outcome is Outcome.ERROR for r in measured),
        incomplete=sum(r.outcome is Outcome.INCOMPLETE for r in measured),
        warmup_excluded=len(records) - len(measured),
        duration_s=duration,
        request_throughput_per_s=len(ok) * per_s,
        output_throughput_tok_per_s=completion * per_s,
        total_token_throughput_tok_per_s=(completion + prompt) * per_s,
        goodput_per_s=(sum(meets(r, slo) for r in ok) * per_s) if slo else None,
        achieved_concurrency=sum(e2es) * per_s,
        prompt_tokens_total=prompt,
        completion_tokens_total=completion,
        cached_tokens_total=sum(cached) if cached else None,
        token_count_source="mixed"
        if len(sources) > 1
        else (sources.pop().value if sources else TokenSource.USAGE.value),
        ttft_s=distribution([v for r in ok if (v := ttft_s(r)) is not None], "per_request"),
        ttft_from_scheduled_s=distribution(
            [r.first_token_s - r.scheduled_s for r in ok if r.first_token_s is not None],
            "per_request",
        ),
        tpot_s=distribution([v for r in ok if (v := tpot_s(r)) is not None], "per_request"),
        itl_s=distribution(gaps, "pooled"),
        e2e_s=distribution(e2es, "per_request"),
        decode_tok_per_s=distribution(decode, "per_request"),
        client_lag_s=distribution(
            [r.sent_s - r.scheduled_s for r in measured if r.sent_s is not None], "per_request"
        ),
        conventions=CONVENTIONS,
        errors=errors,
    )
