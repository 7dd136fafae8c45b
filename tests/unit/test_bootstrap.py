"""The bootstrap behind bench --repeat and bench compare (core/bootstrap.py)."""

from __future__ import annotations

import random

import pytest

from servefit.core.bootstrap import bootstrap, mean, percentile_of, relative_change
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
