"""The performance model against published measurements (benchmarks/fidelity/speed.json).

Each measurement carries its source, a quote and the full workload; servefit predicts the
same metric for the same setup with one efficiency profile per hardware class and engine
(servefit/data/efficiency.toml). Targets (issue #4): median |error| <= 15 %, p90 <= 35 %.
``python benchmarks/perf_validation.py`` prints the table.
"""

from __future__ import annotations

import math
from functools import cache

import pytest
from tests.corpus import SPEED

from servefit.adapters.measurements import Measurement, load_measurements, predict, profile_for
from servefit.core.stats import percentile
from servefit.errors import ConfigError

FILE = SPEED
# the measurements data/efficiency.toml was fitted with in sight; the fresh ones (fitted: false)
# judge the model out of sample in benchmarks/fidelity.py and tests/unit/test_error_bands.py
MEASUREMENTS = [m for m in load_measurements(FILE) if m.fitted]
MEDIAN_TARGET = 0.15
P90_TARGET = 0.35
# The factors as shipped, per (hardware class, engine) profile with three measurements or
# more and over all: (median, p90) of |error| that no change may exceed (issue 14; the
# targets above are issue 4's and sit far above what the model does now). Measured on
# 2026-11-30 (`python benchmarks/perf_validation.py`, the larger of the committed model's and
# the saturated-throughput work in progress', in the comments) plus headroom for refits: x 1.2
# (at least + 2 points), rounded up to the next percent. Out-of-sample accuracy is gated by
# test_perf_holdout.py.
IN_SAMPLE_LIMITS: dict[str, tuple[float, float]] = {
    "all": (0.09, 0.30),  # n=55: 6.5 %, 24.6 %
    "apple/llama.cpp": (0.10, 0.23),  # n=8: 7.9 %, 18.6 %
    "apple/mlx": (0.05, 0.15),  # n=6: 3.0 %, 12.5 %
    "nvidia-gddr/llama.cpp": (0.07, 0.13),  # n=9: 4.6 %, 10.1 %
    "nvidia-hbm/trtllm": (0.19, 0.34),  # n=11: 15.4 %, 28.0 %
    "nvidia-hbm/vllm": (0.10, 0.44),  # n=20: 7.4 %, 36.4 %
}


@cache
def errors() -> dict[str, float]:
    return {m.id: (predict(m) - m.value) / m.value for m in MEASUREMENTS}


def test_the_set_spans_what_the_issue_asks_for():
    assert len(MEASUREMENTS) >= 25
    assert len({m.id for m in MEASUREMENTS}) == len(MEASUREMENTS)
    gpus = " ".join(m.gpu for m in MEASUREMENTS)
    for family in ("H100", "H200", "B200", "A100", "RTX", "M1", "M2", "M3", "M4"):
        assert family in gpus, family
    regimes = " ".join(m.regime for m in MEASUREMENTS)
    for regime in ("batch-1", "saturated", "prefill", "MoE", "hybrid"):
        assert regime in regimes, regime
    formats = {m.settings.weights or m.settings.quantization or "checkpoint" for m in MEASUREMENTS}
    assert {"fp8", "q4_k_m", "mlx-4bit", "nvfp4"} <= formats
    engines = {m.engine for m in MEASUREMENTS}
    assert {"vllm", "trtllm", "llama.cpp", "mlx"} <= engines


@pytest.mark.parametrize("m", MEASUREMENTS, ids=lambda m: m.id)
def test_each_measurement_is_sourced_and_predictable(m: Measurement):
    assert m.source_url.startswith("https://")
    assert len(m.quote) > 20
    error = errors()[m.id]
    if m.outlier_reason:  # explained in the file, and still counted in the statistics below
        assert abs(error) > 0.35, f"{m.id} is no longer an outlier ({error:+.0%}): drop the flag"
        return
    # no single prediction is off by more than a factor of ~2.5 either way
    assert -0.6 < error < 1.5, f"{m.id}: predicted {error:+.0%} off"


# Per-case bands (issue 34): each case may be off by no more than its own group's measured
# band allows, so that one rule made 2x wrong fails the cases it touches, by name, where the
# aggregate tests above only move a median. The band is the group's in-sample p90 limit in
# IN_SAMPLE_LIMITS (the "all" row for a group too small to have one), taken as a ratio
# either way and widened by CASE_BAND_WIDENING for the tail beyond the p90: the
# nvidia-hbm/vllm group allows a ratio of 1.44 ** 1.5 = 1.73, under the 2x of a doubled rule.
CASE_BAND_WIDENING = 1.5


def group_of(m: Measurement) -> str:
    """The IN_SAMPLE_LIMITS key of the profile ``m`` is predicted with."""
    profile = profile_for(m)
    return f"{profile.hardware_class}/{profile.engine}"


def case_band(m: Measurement) -> float:
    """The largest |ln(predicted / measured)| case ``m`` may show."""
    _, p90 = IN_SAMPLE_LIMITS.get(group_of(m), IN_SAMPLE_LIMITS["all"])
    return CASE_BAND_WIDENING * math.log1p(p90)


def test_no_group_band_allows_a_doubled_rule():
    for m in MEASUREMENTS:
        assert case_band(m) < math.log(2.0), m.id


@pytest.mark.parametrize("m", [m for m in MEASUREMENTS if not m.outlier_reason], ids=lambda m: m.id)
def test_each_case_is_within_its_own_band(m: Measurement):
    ratio = 1.0 + errors()[m.id]
    band = case_band(m)
    assert abs(math.log(ratio)) <= band, (
        f"{m.id} ({m.metric}): predicted {ratio:.2f}x the measurement, its band allows "
        f"{math.exp(-band):.2f}x to {math.exp(band):.2f}x"
    )


def test_median_and_p90_error_meet_the_targets():
    ordered = sorted(abs(e) for e in errors().values())
    median, p90 = percentile(ordered, 50), percentile(ordered, 90)
    assert median <= MEDIAN_TARGET, f"median |error| {median:.1%}"
    assert p90 <= P90_TARGET, f"p90 |error| {p90:.1%}"


def test_every_hardware_class_is_within_the_median_target():
    by_class: dict[str, list[float]] = {}
    for m in MEASUREMENTS:
        by_class.setdefault(profile_for(m).hardware_class, []).append(abs(errors()[m.id]))
    for cls, values in by_class.items():
        assert percentile(sorted(values), 50) <= MEDIAN_TARGET, cls


@pytest.mark.parametrize("name", sorted(IN_SAMPLE_LIMITS))
def test_in_sample_error_has_not_regressed(name):
    values = sorted(abs(errors()[m.id]) for m in MEASUREMENTS if name in ("all", group_of(m)))
    assert len(values) >= 3, f"{name}: {len(values)} measurements"
    median, p90 = percentile(values, 50), percentile(values, 90)
    median_max, p90_max = IN_SAMPLE_LIMITS[name]
    assert median <= median_max, f"{name}: in-sample median |error| {median:.1%} > {median_max:.0%}"
    assert p90 <= p90_max, f"{name}: in-sample p90 |error| {p90:.1%} > {p90_max:.0%}"


def test_a_bad_measurement_file_is_a_config_error(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read"):
        load_measurements(bad)
