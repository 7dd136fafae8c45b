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


# -- linear ramps ---------------------------------------------------------------------------


def _cumulative_rate(t: float, r0: float, r1: float, d: float) -> float:
    """L(t) of a ramp from r0 to r1 over d seconds, then steady at r1, written out:
    r0 t + (r1 - r0) t^2 / 2d while ramping, (r0 + r1) d / 2 + r1 (t - d) after."""
    if t <= d:
        return r0 * t + (r1 - r0) * t * t / (2 * d)
    return (r0 + r1) * d / 2 + r1 * (t - d)


@pytest.mark.parametrize(("r0", "r1"), [(1.0, 9.0), (8.0, 2.0), (4.0, 4.0)])
def test_a_ramp_maps_the_unit_rate_arrivals_through_its_cumulative_rate(r0, r1):
    # the arrivals of a unit-rate process, drawn as the schedule draws them (gamma gaps of
    # mean 1 from the seeded generator), are each ramp arrival's L(t)
    import random

    schedule = Schedule(rate_per_s=r0, ramp_to_per_s=r1, ramp_s=10.0, seed=4)
    offsets = schedule.arrival_offsets_s(200)
    rng, unit = random.Random(4), 0.0
    for t in offsets:
        assert _cumulative_rate(t, r0, r1, 10.0) == pytest.approx(unit, rel=1e-9, abs=1e-9)
        unit += rng.gammavariate(1.0, 1.0)
    assert offsets == sorted(offsets)


def test_a_flat_ramp_is_the_steady_schedule():
    steady = Schedule(rate_per_s=4.0, seed=3).arrival_offsets_s(50)
    flat = Schedule(rate_per_s=4.0, ramp_to_per_s=4.0, ramp_s=10.0, seed=3).arrival_offsets_s(50)
    assert flat == pytest.approx(steady, rel=1e-12)


def test_a_ramp_sends_most_of_its_requests_late():
    # 1/s rising to 9/s over 100 s: L(50) = 50 + 8 x 2500 / 200 = 150 of L(100) = 500 expected;
    # seeded, so the counts are fixed; a Poisson count of 150 has a spread of about 12
    offsets = Schedule(rate_per_s=1.0, ramp_to_per_s=9.0, ramp_s=100.0, seed=1).arrival_offsets_s(
        600
    )
    first_half = sum(1 for t in offsets if t < 50)
    by_end = sum(1 for t in offsets if t < 100)
    assert abs(first_half - 150) < 4 * 150**0.5 and abs(by_end - 500) < 4 * 500**0.5


def test_a_ramp_needs_a_start_rate_and_both_flags():
    with pytest.raises(InvalidArgumentError, match="both --ramp-to and --ramp-duration-s"):
        Schedule(rate_per_s=1.0, ramp_to_per_s=4.0)
    with pytest.raises(InvalidArgumentError, match="ramps from --request-rate"):
        Schedule(concurrency=4, ramp_to_per_s=4.0, ramp_s=10.0)
    described = Schedule(rate_per_s=1.0, ramp_to_per_s=8.0, ramp_s=30.0).describe()
    assert described == "open loop, Poisson arrivals ramping 1/s to 8/s over 30 s, then steady"
