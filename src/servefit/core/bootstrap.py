"""How sure a measured figure is: percentile-bootstrap intervals (Efron's method).

A figure (a latency percentile over the requests, a throughput over the runs) is recomputed
on samples drawn with replacement from what was measured; the middle ``confidence`` of those
recomputations is the interval. What was measured comes in groups, one per run: a draw takes
runs with replacement, then values with replacement within each run drawn (a two-stage
cluster bootstrap), so the spread from one run to the next (a hiccup that slows a few
requests of one run) widens the interval as it should; with one run it is the plain
bootstrap over its values. A change between two sides is bootstrapped the same way, each side
resampled on its own, as the relative change ``candidate / baseline - 1``. The draws come from
a seeded generator: the same data give the same interval every time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from random import Random

from servefit.core.stats import percentile
from servefit.errors import InvalidArgumentError

DEFAULT_RESAMPLES = 2000
DEFAULT_CONFIDENCE = 0.95

Statistic = Callable[[Sequence[float]], float]
Groups = Sequence[Sequence[float]]  # the values of each run


@dataclass(frozen=True, slots=True, kw_only=True)
class Interval:
    """A point estimate and its bootstrap interval (``low <= high``)."""

    point: float
    low: float
    high: float
    confidence: float

    def __contains__(self, value: float) -> bool:
        return self.low <= value <= self.high


def percentile_of(q: float) -> Statistic:
    """The q-th percentile of a sample (numpy's linear interpolation)."""
    return lambda values: percentile(sorted(values), q)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _check(confidence: float, resamples: int) -> None:
    if not 0 < confidence < 1:
        raise InvalidArgumentError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 100:
        raise InvalidArgumentError(f"at least 100 bootstrap resamples, got {resamples}")


def _bounds(draws: list[float], confidence: float) -> tuple[float, float]:
    draws.sort()
    tail = (1 - confidence) / 2 * 100
    return percentile(draws, tail), percentile(draws, 100 - tail)


def _pooled(groups: Groups) -> list[float]:
    return [v for group in groups for v in group]


def _resample(rng: Random, groups: Groups) -> list[float]:
    """Runs with replacement, then values with replacement within each."""
    chosen = rng.choices(groups, k=len(groups)) if len(groups) > 1 else groups
    return [v for group in chosen for v in rng.choices(group, k=len(group))]


def _groups(groups: Groups, what: str) -> list[Sequence[float]]:
    kept = [g for g in groups if len(g)]
    if not kept:
        raise InvalidArgumentError(f"no measured values to bootstrap ({what})")
    return kept


def bootstrap(
    groups: Groups,
    statistic: Statistic,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """``statistic`` of the pooled values with its bootstrap interval."""
    _check(confidence, resamples)
    kept = _groups(groups, "the sample")
    rng = Random(seed)
    draws = [statistic(_resample(rng, kept)) for _ in range(resamples)]
    low, high = _bounds(draws, confidence)
    return Interval(point=statistic(_pooled(kept)), low=low, high=high, confidence=confidence)


def relative_change(
    baseline: Groups,
    candidate: Groups,
    statistic: Statistic,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """``statistic(candidate) / statistic(baseline) - 1`` with its interval, the two sides
    resampled independently (a baseline statistic of 0 is refused: no relative change)."""
    _check(confidence, resamples)
    base_groups, cand_groups = _groups(baseline, "baseline"), _groups(candidate, "candidate")
    base = statistic(_pooled(base_groups))
    if base == 0:
        raise InvalidArgumentError("the baseline's figure is 0: no relative change exists")
    rng = Random(seed)
    draws = []
    for _ in range(resamples):
        b = statistic(_resample(rng, base_groups))
        c = statistic(_resample(rng, cand_groups))
        draws.append(c / b - 1 if b else float("inf"))
    low, high = _bounds(draws, confidence)
    point = statistic(_pooled(cand_groups)) / base - 1
    return Interval(point=point, low=low, high=high, confidence=confidence)
