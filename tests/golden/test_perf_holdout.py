"""Out-of-sample accuracy of the performance model (issue 14): the efficiency factors are
fitted on one part of benchmarks/fidelity/speed.json and judged on the rest.

The split (``servefit.calibrate.published_fit.is_held_out``): a measurement is held out when
the SHA-256 of its id is divisible by 3, so a new measurement lands on a fixed side and moves
no other. Per profile, the five factors of ``benchmarks/fit_efficiency.py`` (GEMM, attention
and memory efficiency, step and MoE-layer overheads) are fitted from the middle of their grids
(a start that owes nothing to efficiency.toml, whose values saw every measurement) on the
training side; each held-out measurement is then predicted in full by the fitted profile.
``python benchmarks/fit_efficiency.py --holdout`` prints the same table for every profile.

What CI runs, and why it is cheaper than the benchmark:

* nvidia-hbm/vllm is fitted on a three-point grid per factor (lowest, middle, highest of the
  benchmark's grid) in one pass; its training side holds prefill-bound 32k-token runs and a
  1024-way saturated run whose simulations take 0.1-0.4 s each on an idle core (a new
  profile times every step afresh), so the benchmark's full grid (34 trials a pass, three
  passes) takes minutes. On the split as it is, the coarse fit scores the held-out side
  within a point of the full one (median 19.7 % against 20.2 %, p90 73.4 % against 74.3 %).
* nvidia-hbm/trtllm is not fitted here: its training side is the 1000/1000-token offline runs
  of 3,000 requests (up to 2.5 s per simulation even at the fit's 600-request cap), too slow
  for any fit in CI. Its measurements are held in-sample by test_perf_measurements.py, and
  ``fit_efficiency.py --holdout`` reports it out of sample.
* profiles with fewer than three training measurements are not fitted (nvidia-gddr/trtllm).
"""

from __future__ import annotations

from functools import cache

import pytest
from tests.corpus import SPEED

from servefit.adapters.measurements import load_measurements, profile_for
from servefit.calibrate.published_fit import (
    GRIDS,
    MIN_TRAINING,
    ErrorSummary,
    HeldOutError,
    Predictor,
    by_profile,
    fit,
    is_held_out,
    neutral_start,
    run_holdout,
    summary_by_profile,
)

FILE = SPEED
# the measurements data/efficiency.toml was fitted with in sight; the fresh ones (fitted: false)
# judge the model out of sample in benchmarks/fidelity.py and tests/unit/test_error_bands.py
MEASUREMENTS = [m for m in load_measurements(FILE) if m.fitted]

FULL_GRID_PROFILES = [("apple", "llama.cpp"), ("apple", "mlx"), ("nvidia-gddr", "llama.cpp")]
COARSE_GRID_PROFILES = [("nvidia-hbm", "vllm")]
COARSE_GRIDS = {name: (g[0], g[len(g) // 2], g[-1]) for name, g in GRIDS.items()}

# Thresholds on |predicted / measured - 1| of the held-out side: (median, p90). Measured on
# 2026-11-30 by this file's fits (`pytest tests/golden/test_perf_holdout.py`, the numbers in
# the comments), plus headroom: x 1.2 (at least + 2 points), rounded up to the next percent.
# The fit starts from the middle of its grids, so a refit of efficiency.toml moves these only
# through the factors it does not fit (per-sequence and request overheads, the low-bit and
# unpublished-compute factors). A model change that a refit cannot absorb moves them further:
# apple/llama.cpp's low_bit_memory_efficiency x 1.3 takes "all" to a 25.5 % median.
THRESHOLDS: dict[str, tuple[float, float]] = {
    "all": (0.24, 0.69),  # n=17: median 19.7 %, p90 57.4 %
    "apple/llama.cpp": (0.35, 0.53),  # n=5: 28.4 %, 43.9 % (no prefill on the training side)
    "apple/mlx": (0.32, 0.36),  # n=3: 25.9 %, 29.5 %
    "nvidia-gddr/llama.cpp": (0.10, 0.26),  # n=4: 7.0 %, 21.4 %
    "nvidia-hbm/vllm": (0.24, 0.89),  # n=5: 19.7 %, 73.4 % (the c1 TTFT outlier, -78 %)
}


@cache
def held_out_errors() -> tuple[HeldOutError, ...]:
    full = run_holdout(MEASUREMENTS, profiles=FULL_GRID_PROFILES)
    coarse = run_holdout(MEASUREMENTS, profiles=COARSE_GRID_PROFILES, grids=COARSE_GRIDS, rounds=1)
    return full.errors + coarse.errors


@cache
def summaries() -> dict[str, ErrorSummary]:
    return summary_by_profile(held_out_errors())


def test_the_split_is_fixed_by_the_id_alone():
    # golden sides: a change of the rule (or of its hash) would reshuffle every fit
    assert is_held_out("gpustack-qwen3-8b-h100-c8-tpot")
    assert is_held_out("xd-rtx4090-llama3-8b-f16-pp512")
    assert not is_held_out("gpustack-qwen3-8b-h100-c1-tpot")
    assert not is_held_out("vllm-llama31-8b-bf16-h100-c1-itl-intercept")
    held = [m for m in MEASUREMENTS if is_held_out(m.id)]
    assert 0.2 < len(held) / len(MEASUREMENTS) < 0.5


@pytest.mark.parametrize("key", FULL_GRID_PROFILES + COARSE_GRID_PROFILES, ids="/".join)
def test_every_gated_profile_has_both_sides(key):
    group = by_profile(MEASUREMENTS)[key]
    assert sum(not is_held_out(m.id) for m in group) >= MIN_TRAINING
    assert sum(is_held_out(m.id) for m in group) >= 2


@pytest.mark.parametrize("name", sorted(THRESHOLDS))
def test_held_out_error_is_within_its_threshold(name):
    summary = summaries()[name]
    median_max, p90_max = THRESHOLDS[name]
    worst = sorted(
        (e for e in held_out_errors() if name in ("all", "/".join(e.profile))),
        key=lambda e: -abs(e.relative_error),
    )[:3]
    detail = ", ".join(f"{e.measurement_id} {e.relative_error:+.0%}" for e in worst)
    assert summary.median <= median_max, (
        f"{name}: held-out median |error| {summary.median:.1%} > {median_max:.0%} "
        f"(n={summary.num}; worst: {detail})"
    )
    assert summary.p90 <= p90_max, (
        f"{name}: held-out p90 |error| {summary.p90:.1%} > {p90_max:.0%} "
        f"(n={summary.num}; worst: {detail})"
    )


def test_pruning_does_not_change_the_fit():
    # the fit abandons a trial once its partial loss cannot win; scoring every trial in
    # full must pick the same profile (on a cheap profile: llama.cpp on GeForce cards)
    train = by_profile(MEASUREMENTS)[("nvidia-gddr", "llama.cpp")]
    factors = ("gemm_efficiency", "memory_efficiency")
    start = neutral_start(profile_for(train[0]), factors)
    pruned = fit(train, start, factors, rounds=1, predictor=Predictor())
    unpruned = fit(train, start, factors, rounds=1, predictor=Predictor(), prune=False)
    assert pruned == unpruned
    assert pruned != start  # the fit moved: the comparison says something
