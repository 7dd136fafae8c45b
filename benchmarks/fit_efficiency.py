"""Fit the efficiency factors of one (hardware class, engine) profile to measurements.

    python benchmarks/fit_efficiency.py nvidia-hbm vllm [--rounds 3]
    python benchmarks/fit_efficiency.py --holdout [nvidia-hbm vllm]

Coordinate descent over a grid per factor, minimising the mean of
min(|ln(predicted / measured)|, 1) over the measurements that use the profile (robust to a
few outliers); the fit is ``servefit.calibrate.published_fit``. Prints the fitted values, to
be copied into ``servefit/data/efficiency.toml`` with this command as their source, and the
per-measurement errors before and after. Profiles with fewer than three measurements are not
fitted (they inherit by hand).

``--holdout`` fits every profile (or the one named) from the middle of its grids on the
measurements that ``is_held_out`` leaves in training (SHA-256 of the id not divisible by 3)
and prints the error of each held-out measurement and the median / p90 per profile: what
``tests/golden/test_perf_holdout.py`` gates (CI fits nvidia-hbm/vllm on a coarser grid and
leaves nvidia-hbm/trtllm to this command; see that test).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from servefit.adapters.measurements import Measurement, load_measurements, profile_for
from servefit.calibrate.published_fit import (
    DEFAULT_FACTORS,
    FIT_MAX_REQUESTS,
    MIN_TRAINING,
    Predictor,
    by_profile,
    fit,
    run_holdout,
    summary_by_profile,
)
from servefit.core.roofline import EfficiencyProfile
from servefit.core.stats import percentile

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = ROOT / "benchmarks" / "fidelity" / "speed.json"


def _report(
    ms: list[Measurement], profile: EfficiencyProfile, predictor: Predictor, title: str
) -> None:
    rel = [math.exp(predictor.log_error(m, profile, None)) - 1 for m in ms]
    ordered = sorted(abs(r) for r in rel)
    print(f"{title}: median {percentile(ordered, 50):.1%}, p90 {percentile(ordered, 90):.1%}")
    for m, r in zip(ms, rel, strict=True):
        print(f"  {m.id[:56]:<56} {r:+7.1%}")


def holdout(ms: list[Measurement], factors: list[str], rounds: int, key: tuple[str, str] | None):
    result = run_holdout(
        ms, profiles=None if key is None else [key], factors=factors, rounds=rounds
    )
    print(f"{'held-out measurement':<58} {'profile':<22} {'error':>7}")
    for e in result.errors:
        print(f"{e.measurement_id[:58]:<58} {'/'.join(e.profile):<22} {e.relative_error:>+7.1%}")
    print(f"\n{'set':<24} {'train':>5} {'held out':>8} {'median |error|':>15} {'p90 |error|':>12}")
    trained = {"/".join(k): n for k, n in result.num_training.items()}
    trained["all"] = sum(result.num_training.values())
    for name, s in summary_by_profile(result.errors).items():
        print(f"{name:<24} {trained[name]:>5} {s.num:>8} {s.median:>15.1%} {s.p90:>12.1%}")
    print("\nfitted on the training side:")
    for k, profile in result.fitted.items():
        values = ", ".join(f"{n} = {getattr(profile, n)!r}" for n in factors)
        print(f"  {'/'.join(k)}: {values}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hardware_class", nargs="?")
    parser.add_argument("engine", nargs="?")
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--holdout",
        action="store_true",
        help="fit on the training side of the fixed split, print the held-out errors",
    )
    parser.add_argument(
        "--factors",
        default=",".join(DEFAULT_FACTORS),
        help="comma-separated factors to fit (others stay as in efficiency.toml)",
    )
    args = parser.parse_args(argv)
    if (args.hardware_class is None) != (args.engine is None):
        parser.error("name both the hardware class and the engine, or neither")
    factors = [f.strip() for f in args.factors.split(",") if f.strip()]
    measurements = load_measurements(args.file)
    key = None if args.hardware_class is None else (args.hardware_class, args.engine)
    if args.holdout:
        return holdout(measurements, factors, args.rounds, key)
    if key is None:
        parser.error("name the profile to fit: HARDWARE_CLASS ENGINE")
    ms = by_profile(measurements).get(key, [])
    if len(ms) < MIN_TRAINING:
        print(f"only {len(ms)} measurements use {key[0]}/{key[1]}: not fitted")
        return 1
    predictor = Predictor()
    start = profile_for(ms[0])
    profile = fit(ms, start, factors, rounds=args.rounds, predictor=predictor)
    _report(ms, start, predictor, "before (all requests)")
    _report(ms, profile, predictor, "after (all requests)")
    print(f"\nfitted (up to {FIT_MAX_REQUESTS} requests simulated per trial):")
    for name in factors:
        print(f"  {name} = {getattr(profile, name)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
