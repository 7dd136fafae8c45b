"""The bootstrap behind bench --repeat and bench compare (core/bootstrap.py)."""

from __future__ import annotations

import random

import pytest

from servefit.core.bootstrap import Interval, bootstrap, mean, percentile_of, relative_change
from servefit.errors import InvalidArgumentError


def _noisy(center: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [center * (1 + rng.uniform(-0.05, 0.05)) for _ in range(n)]


def test_the_same_data_give_the_same_interval():
    values = [_noisy(10, 200, 1)]
    assert bootstrap(values, mean, seed=3) == bootstrap(values, mean, seed=3)
    assert bootstrap(values, mean, seed=3) != bootstrap(values, mean, seed=4)


def test_a_constant_sample_has_no_spread():
    interval = bootstrap([[2.0] * 50], percentile_of(99))
    assert interval.low == interval.high == interval.point == 2.0


def test_the_interval_of_a_mean_holds_the_point_and_narrows_with_more_data():
    small = bootstrap([_noisy(10, 20, 1)], mean)
    large = bootstrap([_noisy(10, 2000, 1)], mean)
    for interval in (small, large):
        assert interval.low <= interval.point <= interval.high
        assert 10 in interval  # uniform noise around 10: the true mean
    assert large.high - large.low < (small.high - small.low) / 3  # ~ 1 / sqrt(100) wider


def test_a_shift_of_20_percent_is_found_and_none_is_not():
    base = [_noisy(10, 300, 1)]
    slower = [_noisy(12, 300, 2)]
    same = [_noisy(10, 300, 3)]
    shifted = relative_change(base, slower, percentile_of(50))
    assert 0.17 < shifted.low <= shifted.point <= shifted.high < 0.23
    assert 0 in relative_change(base, same, percentile_of(50))


def test_runs_that_differ_widen_the_interval():
    """Two runs, one 10 % slower than the other: pooled as one sample the median looks sure;
    resampled run by run the interval spans both runs' medians."""
    runs = [_noisy(10, 100, 1), _noisy(11, 100, 2)]
    pooled = bootstrap([runs[0] + runs[1]], percentile_of(50))
    clustered = bootstrap(runs, percentile_of(50))
    assert clustered.high - clustered.low > 2 * (pooled.high - pooled.low)
    assert clustered.low < 10.3 and clustered.high > 10.7


def test_bad_input_is_refused_by_name():
    with pytest.raises(InvalidArgumentError, match="no measured values"):
        bootstrap([[]], mean)
    with pytest.raises(InvalidArgumentError, match="confidence"):
        bootstrap([[1.0]], mean, confidence=1.5)
    with pytest.raises(InvalidArgumentError, match="baseline's figure is 0"):
        relative_change([[0.0, 0.0]], [[1.0]], mean)


def _linear_percentile(ordered: list[float], q: float) -> float:
    """numpy's default ("linear") percentile, written out: rank q/100 x (n - 1)."""
    rank = q / 100 * (len(ordered) - 1)
    below = int(rank)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (rank - below)


def _replica(groups, statistic, *, confidence, resamples, seed):
    """Efron's percentile interval of the two-stage resampling, built independently of
    core/bootstrap.py: runs drawn with replacement (only when there are several), then
    values within each run drawn, ``resamples`` times from one seeded generator."""
    rng = random.Random(seed)
    draws = []
    for _ in range(resamples):
        runs = rng.choices(groups, k=len(groups)) if len(groups) > 1 else groups
        draws.append(statistic([v for run in runs for v in rng.choices(run, k=len(run))]))
    draws.sort()
    tail = (1 - confidence) / 2 * 100
    return _linear_percentile(draws, tail), _linear_percentile(draws, 100 - tail)


@pytest.mark.parametrize("num_runs", [1, 3])
@pytest.mark.parametrize("confidence", [0.8, 0.95])
def test_the_interval_is_the_percentile_interval_of_the_resampled_runs(num_runs, confidence):
    groups = [_noisy(10 + k, 40, k) for k in range(num_runs)]
    got = bootstrap(groups, mean, confidence=confidence, resamples=300, seed=7)
    low, high = _replica(groups, mean, confidence=confidence, resamples=300, seed=7)
    assert (got.low, got.high) == (pytest.approx(low), pytest.approx(high))
    assert got.point == pytest.approx(mean([v for g in groups for v in g]))
    assert got.confidence == confidence
    assert bootstrap(groups, mean) == bootstrap(groups, mean, seed=0)  # the default seed


def test_a_relative_change_is_seeded_and_reproducible():
    base, cand = [_noisy(10, 50, 1)], [_noisy(11, 50, 2)]
    one = relative_change(base, cand, mean, seed=5, confidence=0.9)
    assert one == relative_change(base, cand, mean, seed=5, confidence=0.9)
    assert one != relative_change(base, cand, mean, seed=6, confidence=0.9)
    assert one.confidence == 0.9
    assert relative_change(base, cand, mean) == relative_change(base, cand, mean, seed=0)


def test_a_baseline_draw_of_zero_is_an_infinite_change_not_a_crash():
    # 3 of 4 baseline values are 0: some draws of its mean are 0, and those changes unbounded
    change = relative_change([[0.0, 0.0, 0.0, 1.0]], [[1.0, 1.0]], mean, seed=1)
    assert change.point == pytest.approx(3.0) and change.high == float("inf")


def test_an_interval_holds_its_ends():
    interval = Interval(point=1.5, low=1.0, high=2.0, confidence=0.95)
    assert 1.0 in interval and 2.0 in interval and 1.5 in interval
    assert 0.999 not in interval and 2.001 not in interval


def test_each_refusal_says_what_is_wrong():
    cases = [
        (lambda: bootstrap([[]], mean), "no measured values to bootstrap (the sample)"),
        (
            lambda: relative_change([[]], [[1.0]], mean),
            "no measured values to bootstrap (baseline)",
        ),
        (
            lambda: relative_change([[1.0]], [[]], mean),
            "no measured values to bootstrap (candidate)",
        ),
        (lambda: bootstrap([[1.0]], mean, confidence=0.0), "confidence must be in (0, 1), got 0.0"),
        (lambda: bootstrap([[1.0]], mean, confidence=1.0), "confidence must be in (0, 1), got 1.0"),
        (
            lambda: bootstrap([[1.0]], mean, resamples=99),
            "at least 100 bootstrap resamples, got 99",
        ),
        (
            lambda: relative_change([[0.0]], [[1.0]], mean),
            "the baseline's figure is 0: no relative change exists",
        ),
    ]
    for call, message in cases:
        with pytest.raises(InvalidArgumentError) as err:
            call()
        assert str(err.value) == message
    assert bootstrap([[1.0, 2.0]], mean, resamples=100).point == 1.5  # 100 is enough
