"""One set of metric formulas for what is predicted and what is measured.

The simulator (:mod:`servefit.core.serving`), the benchmark (:mod:`servefit.bench.metrics`)
and the report compute every request metric through these functions, so "predicted next to
measured" compares the same quantity. Over a request's timestamps in seconds
(``docs/metrics.md``, as ``vllm bench serve`` defines them):

- ``ttft_s = first_token - sent``
- ``tpot_s = (done - first_token) / (output_tokens - 1)``: the first token excluded; a request
  of fewer than two tokens has none
- ``e2e_s = done - sent``
- ``itl_gaps_s``: every gap between consecutive token (chunk) times
- ``decode_tok_per_s = (output_tokens - 1) / (done - first_token)``
- ``goodput_per_s = requests meeting every SLO / duration_s``

SLO limits are milliseconds, named as ``vllm bench serve --goodput ttft:MS tpot:MS e2el:MS``
names them; :meth:`Slo.met_by` takes seconds and converts. As in vLLM, a request of one
output token has no TPOT and meets any TPOT limit (vLLM counts its TPOT as 0 for goodput).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol

from servefit.core.stats import percentile
from servefit.errors import InvalidArgumentError

MS_PER_S = 1000  # SLO limits are given in ms (vLLM's --goodput), metrics are seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class Slo:
    """Service-level objectives in milliseconds: a request meeting them counts as goodput."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def __post_init__(self) -> None:
        for name, value in (
            ("ttft", self.ttft_ms),
            ("tpot", self.tpot_ms),
            ("e2el", self.e2el_ms),
        ):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise InvalidArgumentError(
                    f"--slo-{name}-ms must be a non-negative number of milliseconds, got {value}"
                )

    @property
    def ttft_s(self) -> float | None:
        return _seconds(self.ttft_ms)

    @property
    def tpot_s(self) -> float | None:
        return _seconds(self.tpot_ms)

    @property
    def e2e_s(self) -> float | None:
        return _seconds(self.e2el_ms)

    def met_by(self, *, ttft_s: float | None, tpot_s: float | None, e2e_s: float | None) -> bool:
        """Every given limit holds. A missing TTFT or E2E (no token came) misses its limit;
        a missing TPOT (fewer than two tokens) meets it, as in vLLM."""
        return (
            _within(ttft_s, self.ttft_s, missing_meets=False)
            and _within(tpot_s, self.tpot_s, missing_meets=True)
            and _within(e2e_s, self.e2e_s, missing_meets=False)
        )


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / MS_PER_S


def _within(value: float | None, limit: float | None, *, missing_meets: bool) -> bool:
    if limit is None:
        return True
    if value is None:
        return missing_meets
    return value <= limit


@dataclass(frozen=True, slots=True, kw_only=True)
class Stat:
    """One metric over a sample: its mean and percentiles (linear interpolation, numpy's
    default). An empty sample is all zeros with ``count`` 0."""

    count: int = 0
    mean: float = 0.0
    min: float = 0.0
    max: float = 0.0
    p50: float = 0.0
    p90: float = 0.0
    p95: float = 0.0
    p99: float = 0.0

    @classmethod
    def of(cls, values: Iterable[float]) -> Stat:
        ordered = sorted(values)
        if not ordered:
            return cls()
        return cls(
            count=len(ordered),
            mean=sum(ordered) / len(ordered),
            min=ordered[0],
            max=ordered[-1],
            p50=percentile(ordered, 50),
            p90=percentile(ordered, 90),
            p95=percentile(ordered, 95),
            p99=percentile(ordered, 99),
        )


# ----------------------------------------------------------------------- per request


def ttft_s(*, sent_s: float, first_token_s: float) -> float:
    """Time to first token: first token - sent."""
    return first_token_s - sent_s


def tpot_s(*, first_token_s: float, done_s: float, output_tokens: int) -> float | None:
    """Time per output token, the first excluded: (done - first) / (tokens - 1); None below
    two tokens."""
    if output_tokens < 2:
        return None
    return (done_s - first_token_s) / (output_tokens - 1)


def e2e_s(*, sent_s: float, done_s: float) -> float:
    """End-to-end latency: done - sent."""
    return done_s - sent_s


def decode_tok_per_s(*, first_token_s: float, done_s: float, output_tokens: int) -> float | None:
    """The decode rate one request saw: (tokens - 1) / (done - first), the inverse of TPOT;
    None below two tokens or in no time."""
    tpot = tpot_s(first_token_s=first_token_s, done_s=done_s, output_tokens=output_tokens)
    return 1 / tpot if tpot else None


def itl_gaps_s(token_times_s: Sequence[float]) -> list[float]:
    """Every gap between consecutive token (or chunk) times of one request."""
    return [b - a for a, b in pairwise(token_times_s)]


# ----------------------------------------------------------------------- run level


class Latencies(Protocol):
    """A request's three SLO quantities (a simulated timing, a measured request)."""

    @property
    def ttft_s(self) -> float | None: ...
    @property
    def tpot_s(self) -> float | None: ...
    @property
    def e2e_s(self) -> float | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestLatencies:
    """One request's timestamps as latencies: TTFT, inter-token gaps and end to end."""

    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None


def request_latencies(
    *,
    sent_s: float | None,
    first_token_s: float | None,
    done_s: float | None,
    output_tokens: int | None,
) -> RequestLatencies:
    """TTFT, TPOT and E2E of one request from its timestamps; each None where a timestamp
    it needs is missing (no token came, the stream never ended)."""
    return RequestLatencies(
        ttft_s=ttft_s(sent_s=sent_s, first_token_s=first_token_s)
        if sent_s is not None and first_token_s is not None
        else None,
        tpot_s=tpot_s(first_token_s=first_token_s, done_s=done_s, output_tokens=output_tokens)
        if first_token_s is not None and done_s is not None and output_tokens is not None
        else None,
        e2e_s=e2e_s(sent_s=sent_s, done_s=done_s)
        if sent_s is not None and done_s is not None
        else None,
    )


def run_duration_s(sent_s: Iterable[float], done_s: Iterable[float]) -> float:
    """First request sent to last request done (0 when nothing ran)."""
    starts, ends = list(sent_s), list(done_s)
    return max(ends) - min(starts) if starts and ends else 0.0


def num_meeting(slo: Slo, requests: Iterable[Latencies]) -> int:
    return sum(slo.met_by(ttft_s=r.ttft_s, tpot_s=r.tpot_s, e2e_s=r.e2e_s) for r in requests)


def goodput_per_s(slo: Slo, requests: Iterable[Latencies], duration_s: float) -> float:
    """Requests meeting every SLO per second of the run (0 for an empty run)."""
    return num_meeting(slo, requests) / duration_s if duration_s > 0 else 0.0
