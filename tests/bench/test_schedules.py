import statistics
from itertools import pairwise

import pytest

from servefit.bench.schedules import Schedule
from servefit.errors import InvalidArgumentError


def test_poisson_mean_rate_and_seed():
    times = Schedule(rate_per_s=50, seed=3).arrival_offsets_s(5000)
    assert times == Schedule(rate_per_s=50, seed=3).arrival_offsets_s(5000)
    gaps = [b - a for a, b in pairwise(times)]
    assert statistics.mean(gaps) == pytest.approx(1 / 50, rel=0.05)
    # exponential gaps: coefficient of variation ~ 1
    assert statistics.stdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, rel=0.1)


def test_bursty_gamma_has_more_variance_same_mean():
    def gaps(burstiness):
        times = Schedule(rate_per_s=20, burstiness=burstiness).arrival_offsets_s(4000)
        return [b - a for a, b in pairwise(times)]

    bursty, smooth = gaps(0.25), gaps(4.0)
    assert statistics.mean(bursty) == pytest.approx(0.05, rel=0.1)
    assert statistics.stdev(bursty) > 3 * statistics.stdev(smooth)


@pytest.mark.parametrize(
    "kwargs", [{}, {"concurrency": 0}, {"rate_per_s": -1}, {"rate_per_s": 1, "burstiness": 0}]
)
def test_bad_schedules(kwargs):
    with pytest.raises(InvalidArgumentError):
        Schedule(**kwargs)
