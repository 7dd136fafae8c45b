"""Fit the efficiency factors of one (hardware class, engine) profile to measurements.

    python benchmarks/fit_efficiency.py nvidia-hbm vllm [--rounds 3]

Coordinate descent over a grid per factor, minimising the mean of
min(|ln(predicted / measured)|, 1) over the measurements that use the profile (robust to a
few outliers). Prints the fitted values, to be copied into ``servefit/data/efficiency.toml``
with this command as their source, and the per-measurement errors before and after.
Profiles with fewer than three measurements are not fitted (they inherit by hand).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

from servefit.adapters.measurements import Measurement, load_measurements, predict, profile_for
from servefit.core.roofline import EfficiencyProfile
from servefit.core.stats import percentile

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = ROOT / "tests" / "golden" / "perf_measurements.json"

GRIDS: dict[str, tuple[float, ...]] = {
    "gemm_efficiency": (0.45, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9),
    "attention_efficiency": (0.3, 0.4, 0.5, 0.6, 0.7),
    "memory_efficiency": (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9),
    "step_overhead_s": (0.0002, 0.0005, 0.0008, 0.0012, 0.0016, 0.002),
    "per_seq_overhead_s": (0.0, 5e-6, 10e-6, 20e-6),
    "moe_layer_overhead_s": (0.0, 20e-6, 40e-6, 60e-6, 80e-6, 100e-6, 130e-6),
    "request_overhead_s": (0.0, 0.003, 0.005, 0.01),
    "low_bit_memory_efficiency": (0.6, 0.7, 0.75, 0.8, 0.9, 1.0),
    "low_bit_compute_efficiency": (0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "unpublished_flops_per_byte": (25.0, 30.0, 35.0, 40.0, 45.0, 50.0),
}


def loss(errors: list[float]) -> float:
    return sum(min(abs(e), 1.0) for e in errors) / len(errors)


MAX_REQUESTS = 600  # fewer simulated requests while searching (steady state is reached)


def log_errors(
    ms: list[Measurement], profile: EfficiencyProfile, max_requests: int | None = MAX_REQUESTS
) -> list[float]:
    return [math.log(predict(m, profile, max_requests=max_requests) / m.value) for m in ms]


def _report(ms: list[Measurement], errors: list[float], title: str) -> None:
    rel = [math.exp(e) - 1 for e in errors]
    ordered = sorted(abs(r) for r in rel)
    print(f"{title}: median {percentile(ordered, 50):.1%}, p90 {percentile(ordered, 90):.1%}")
    for m, r in zip(ms, rel, strict=True):
        print(f"  {m.id[:56]:<56} {r:+7.1%}")


def fit(
    ms: list[Measurement], profile: EfficiencyProfile, factors: list[str], rounds: int
) -> EfficiencyProfile:
    best = loss(log_errors(ms, profile))
    for _ in range(rounds):
        improved = False
        for name in factors:
            for value in GRIDS[name]:
                trial = replace(profile, **{name: value})
                score = loss(log_errors(ms, trial))
                if score < best - 1e-6:
                    best, profile, improved = score, trial, True
        if not improved:
            break
    return profile


def holdout(ms: list[Measurement], factors: list[str], rounds: int) -> int:
    """Fit on every other measurement, score the rest, and swap: out-of-sample errors."""
    ordered = sorted(ms, key=lambda m: m.id)
    folds = (ordered[0::2], ordered[1::2])
    start = profile_for(ordered[0])
    scored: list[Measurement] = []
    errors: list[float] = []
    for train, test in (folds, folds[::-1]):
        fitted = fit(train, start, factors, rounds)
        scored += test
        errors += log_errors(test, fitted, None)
    _report(scored, errors, "out of sample (each half scored by a fit on the other half)")
    _report(ordered, log_errors(ordered, start, None), "in sample (efficiency.toml as is)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hardware_class")
    parser.add_argument("engine")
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--holdout",
        action="store_true",
        help="two-fold cross-validation: fit on half the measurements, score the other half",
    )
    parser.add_argument(
        "--factors",
        default="gemm_efficiency,attention_efficiency,memory_efficiency,step_overhead_s,"
        "moe_layer_overhead_s",
        help="comma-separated factors to fit (others stay as in efficiency.toml)",
    )
    args = parser.parse_args(argv)
    ms = [
        m
        for m in load_measurements(args.file)
        if (profile_for(m).hardware_class, profile_for(m).engine)
        == (args.hardware_class, args.engine)
    ]
    if len(ms) < 3:
        print(f"only {len(ms)} measurements use {args.hardware_class}/{args.engine}: not fitted")
        return 1
    factors = [f.strip() for f in args.factors.split(",") if f.strip()]
    if args.holdout:
        return holdout(ms, factors, args.rounds)
    profile = fit(ms, profile_for(ms[0]), factors, args.rounds)
    _report(ms, log_errors(ms, profile_for(ms[0]), None), "before (all requests)")
    _report(ms, log_errors(ms, profile, None), "after (all requests)")
    print("\nfitted:")
    for name in factors:
        print(f"  {name} = {getattr(profile, name)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
