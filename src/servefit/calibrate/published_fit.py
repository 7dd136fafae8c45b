"""Fit the efficiency factors of a (hardware class, engine) profile to published measurements,
and score the fit on measurements it never saw.

The fit is coordinate descent over a grid per factor, minimising the mean of
min(|ln(predicted / measured)|, 1) over the measurements that use the profile (robust to a
few outliers); ``benchmarks/fit_efficiency.py`` runs it and prints the values to copy into
``servefit/data/efficiency.toml``. The same fit, on the training side of :func:`is_held_out`,
is the hold-out gate of ``tests/golden/test_perf_holdout.py``.

Two things keep it affordable without changing what it minimises: every measurement is
planned once (:func:`~servefit.adapters.measurements.prepare`) and every prediction is
remembered per profile, and a trial is abandoned as soon as the losses already summed
(cheapest measurements first; each loss is >= 0) cannot beat the best so far.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from servefit.adapters.measurements import (
    Measurement,
    PreparedMeasurement,
    predict_prepared,
    prepare,
    profile_for,
)
from servefit.core.roofline import EfficiencyProfile
from servefit.core.stats import percentile

GRIDS: dict[str, tuple[float, ...]] = {
    # the low ends reach what ROCm vLLM on MI300X attains (its fit sat at the old floors)
    "gemm_efficiency": (0.3, 0.35, 0.4, 0.45, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9),
    "attention_efficiency": (0.2, 0.3, 0.4, 0.5, 0.6, 0.7),
    "memory_efficiency": (0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9),
    "kv_memory_efficiency": (0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95),
    "step_overhead_s": (0.0002, 0.0005, 0.0008, 0.0012, 0.0016, 0.002),
    "per_seq_overhead_s": (0.0, 5e-6, 10e-6, 20e-6),
    "moe_layer_overhead_s": (0.0, 20e-6, 40e-6, 60e-6, 80e-6, 100e-6, 130e-6),
    "request_overhead_s": (0.0, 0.003, 0.005, 0.01),
    "low_bit_memory_efficiency": (0.6, 0.7, 0.75, 0.8, 0.9, 1.0),
    "low_bit_compute_efficiency": (0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "unpublished_flops_per_byte": (25.0, 30.0, 35.0, 40.0, 45.0, 50.0),
    # one tensor-parallel all-reduce's fixed cost: NVLink's custom all-reduce is ~10-20 us;
    # RCCL and NCCL over PCIe take longer at the small messages of decode
    "collective_latency_s": (5e-6, 10e-6, 15e-6, 20e-6, 30e-6, 40e-6, 60e-6, 80e-6),
    "interconnect_efficiency": (0.4, 0.5, 0.6, 0.7, 0.8),
}
DEFAULT_FACTORS = (
    "gemm_efficiency",
    "attention_efficiency",
    "memory_efficiency",
    "step_overhead_s",
    "moe_layer_overhead_s",
)
FIT_MAX_REQUESTS = 600  # fewer simulated requests while searching (steady state is reached)
LOSS_CAP = 1.0  # one measurement adds at most this to the loss: |ln| = 1 is 2.7x off
MIN_TRAINING = 3  # profiles with fewer measurements are not fitted (they inherit by hand)
IMPROVEMENT = 1e-6  # a trial replaces the best only when its mean loss is lower by this
HELD_OUT_BUCKETS = 3  # one measurement in three is held out


def is_held_out(measurement_id: str) -> bool:
    """The hold-out split: a measurement is held out when the SHA-256 of its id, read as a
    number, is divisible by 3. The id alone decides, so a measurement added to the file
    lands on a fixed side and never moves the others."""
    digest = hashlib.sha256(measurement_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % HELD_OUT_BUCKETS == 0


ProfileKey = tuple[str, str]  # (hardware class, engine)


def profile_key(m: Measurement) -> ProfileKey:
    profile = profile_for(m)
    return profile.hardware_class, profile.engine


def by_profile(ms: Iterable[Measurement]) -> dict[ProfileKey, list[Measurement]]:
    groups: dict[ProfileKey, list[Measurement]] = {}
    for m in sorted(ms, key=lambda m: m.id):
        groups.setdefault(profile_key(m), []).append(m)
    return groups


def _cost_rank(m: Measurement, max_requests: int | None) -> tuple[int, str]:
    """A static guess at how long simulating ``m`` takes, to sum cheap losses first."""
    w = m.workload
    if m.metric == "prefill_tok_per_s":
        return 0, m.id
    requests = w.num_requests or w.concurrency or 1
    if max_requests:
        requests = min(requests, max_requests)
    return requests * (w.input_len + w.output_len), m.id


class Predictor:
    """Predictions of prepared measurements, remembered per (measurement, profile, cap)."""

    def __init__(self) -> None:
        self._prepared: dict[str, PreparedMeasurement] = {}
        self._seen: dict[tuple[str, EfficiencyProfile, int | None], float] = {}
        self.num_simulated = 0

    def log_error(
        self, m: Measurement, profile: EfficiencyProfile, max_requests: int | None
    ) -> float:
        """ln(predicted / measured)."""
        key = (m.id, profile, max_requests)
        if key not in self._seen:
            if m.id not in self._prepared:
                self._prepared[m.id] = prepare(m)
            predicted = predict_prepared(self._prepared[m.id], profile, max_requests=max_requests)
            self._seen[key] = math.log(predicted / m.value)
            self.num_simulated += 1
        return self._seen[key]


def loss(log_errors: Iterable[float]) -> float:
    values = [min(abs(e), LOSS_CAP) for e in log_errors]
    return sum(values) / len(values)


def _score_below(
    ms: Sequence[Measurement],
    profile: EfficiencyProfile,
    predictor: Predictor,
    max_requests: int | None,
    bound: float,
) -> float | None:
    """The mean loss of ``profile`` when it is below ``bound``, else None (as soon as the
    partial sum shows it cannot be: every term is >= 0). ``ms`` is in cost order."""
    budget = bound * len(ms)
    total = 0.0
    for m in ms:
        total += min(abs(predictor.log_error(m, profile, max_requests)), LOSS_CAP)
        if total >= budget:
            return None
    return total / len(ms)


def fit(
    ms: Sequence[Measurement],
    start: EfficiencyProfile,
    factors: Sequence[str] = DEFAULT_FACTORS,
    *,
    rounds: int = 3,
    grids: Mapping[str, Sequence[float]] = GRIDS,
    max_requests: int | None = FIT_MAX_REQUESTS,
    predictor: Predictor | None = None,
    prune: bool = True,
) -> EfficiencyProfile:
    """Coordinate descent from ``start``: each factor in turn takes the grid value that
    lowers the loss most, for up to ``rounds`` passes (fewer when a pass changes nothing).
    ``prune=False`` scores every trial in full (the same result, slower: for the test that
    says so)."""
    predictor = predictor or Predictor()
    ordered = sorted(ms, key=lambda m: _cost_rank(m, max_requests))
    profile = start
    best = loss(predictor.log_error(m, profile, max_requests) for m in ordered)
    for _ in range(rounds):
        improved = False
        for name in factors:
            for value in grids[name]:
                factor: dict[str, Any] = {name: value}
                trial = replace(profile, **factor)
                bound = best - IMPROVEMENT if prune else math.inf
                score = _score_below(ordered, trial, predictor, max_requests, bound)
                if score is not None and score < best - IMPROVEMENT:
                    best, profile, improved = score, trial, True
        if not improved:
            break
    return profile


def neutral_start(
    profile: EfficiencyProfile,
    factors: Sequence[str],
    grids: Mapping[str, Sequence[float]] = GRIDS,
) -> EfficiencyProfile:
    """``profile`` with each fitted factor at the middle of its grid: a start that owes
    nothing to efficiency.toml (fitted on every measurement, held-out ones included)."""
    middle: dict[str, Any] = {name: grids[name][len(grids[name]) // 2] for name in factors}
    return replace(profile, **middle)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldOutError:
    """One held-out measurement scored by the profile fitted without it."""

    measurement_id: str
    profile: ProfileKey
    relative_error: float  # predicted / measured - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldoutResult:
    fitted: dict[ProfileKey, EfficiencyProfile]
    num_training: dict[ProfileKey, int]
    errors: tuple[HeldOutError, ...]


def run_holdout(
    ms: Iterable[Measurement],
    *,
    profiles: Iterable[ProfileKey] | None = None,
    factors: Sequence[str] = DEFAULT_FACTORS,
    rounds: int = 3,
    grids: Mapping[str, Sequence[float]] = GRIDS,
    max_requests: int | None = FIT_MAX_REQUESTS,
    score_max_requests: int | None = None,
    held_out: Callable[[str], bool] = is_held_out,
) -> HoldoutResult:
    """Per profile: fit ``factors`` from :func:`neutral_start` on the measurements that are
    not held out, then score the held-out ones with the fitted profile (all their requests
    simulated unless ``score_max_requests``). Profiles with fewer than MIN_TRAINING training
    measurements are skipped, as the fit skips them."""
    groups = by_profile(ms)
    wanted = set(groups) if profiles is None else set(profiles)
    predictor = Predictor()
    fitted: dict[ProfileKey, EfficiencyProfile] = {}
    num_training: dict[ProfileKey, int] = {}
    errors: list[HeldOutError] = []
    for key in sorted(wanted & set(groups)):
        train = [m for m in groups[key] if not held_out(m.id)]
        test = [m for m in groups[key] if held_out(m.id)]
        if len(train) < MIN_TRAINING or not test:
            continue
        start = neutral_start(profile_for(train[0]), factors, grids)
        fitted[key] = fit(
            train,
            start,
            factors,
            rounds=rounds,
            grids=grids,
            max_requests=max_requests,
            predictor=predictor,
        )
        num_training[key] = len(train)
        for m in test:
            error = predictor.log_error(m, fitted[key], score_max_requests)
            errors.append(
                HeldOutError(measurement_id=m.id, profile=key, relative_error=math.exp(error) - 1)
            )
    return HoldoutResult(fitted=fitted, num_training=num_training, errors=tuple(errors))


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorSummary:
    num: int
    median: float  # of |relative error|
    p90: float


def summarise(relative_errors: Iterable[float]) -> ErrorSummary:
    ordered = sorted(abs(e) for e in relative_errors)
    return ErrorSummary(
        num=len(ordered), median=percentile(ordered, 50), p90=percentile(ordered, 90)
    )


def summary_by_profile(errors: Iterable[HeldOutError]) -> dict[str, ErrorSummary]:
    """Median and p90 per profile ("hardware class/engine") and over all ("all")."""
    groups: dict[str, list[float]] = {}
    for e in errors:
        groups.setdefault("all", []).append(e.relative_error)
        groups.setdefault("/".join(e.profile), []).append(e.relative_error)
    return {name: summarise(values) for name, values in sorted(groups.items())}
