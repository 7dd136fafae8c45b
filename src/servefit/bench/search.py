"""Sweeps over load levels, and the search for the highest load that meets SLOs.

The search doubles the concurrency while every SLO holds, then bisects between the last
level that held and the first that did not (as guidellm's goodput profile and vLLM's
serve_sla sweep do, without their interpolation: every reported level was measured).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servefit.bench.metrics import Distribution, Slo, Summary

MAX_SEARCH_CONCURRENCY = 4096


def slo_met(summary: Summary, slo: Slo, percentile: int) -> bool:
    """Every SLO holds at ``percentile`` (per-request aggregation), and nothing failed."""
    if summary.successful == 0 or summary.errored or summary.incomplete:
        return False
    pairs: tuple[tuple[float | None, Distribution], ...] = (
        (slo.ttft_s, summary.ttft_s),
        (slo.tpot_s, summary.tpot_s),
        (slo.e2e_s, summary.e2e_s),
    )
    for limit, dist in pairs:
        if limit is None:
            continue
        value = getattr(dist, f"p{percentile}")
        if value is None or value > limit:
            return False
    return True


@dataclass(frozen=True, slots=True)
class SearchStep:
    concurrency: int
    meets: bool


def search_max_concurrency(
    evaluate: Callable[[int], bool], *, start: int = 1, limit: int = MAX_SEARCH_CONCURRENCY
) -> tuple[int | None, list[SearchStep]]:
    """Highest concurrency for which ``evaluate`` holds (None if not even ``start``)."""
    steps: list[SearchStep] = []

    def check(level: int) -> bool:
        ok = evaluate(level)
        steps.append(SearchStep(level, ok))
        return ok

    good: int | None = None
    bad: int | None = None
    level = start
    while level <= limit:
        if check(level):
            good = level
            level *= 2
        else:
            bad = level
            break
    if good is None or bad is None:
        return good, steps
    while bad - good > 1:
        middle = (good + bad) // 2
        if check(middle):
            good = middle
        else:
            bad = middle
    return good, steps
