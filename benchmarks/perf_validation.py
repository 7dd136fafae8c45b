"""Predicted vs measured: servefit's performance model on published measurements.

    python benchmarks/perf_validation.py [--file benchmarks/fidelity/speed.json]

Prints one row per measurement (what was measured, where, servefit's prediction, the
relative error and what bounds the prediction), then the median and p90 of the absolute
relative error overall and per hardware class. Target (issue #4): median <= 15 %,
p90 <= 35 %, with one efficiency profile per hardware class and engine (no per-GPU fit).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from servefit.adapters.measurements import load_measurements, predict, profile_for
from servefit.core.stats import percentile

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = ROOT / "benchmarks" / "fidelity" / "speed.json"


def _fmt(value: float, metric: str) -> str:
    if metric in ("ttft_s", "tpot_s", "itl_s"):
        return f"{value * 1e3:.2f} ms"
    return f"{value:,.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    args = parser.parse_args(argv)
    measurements = load_measurements(args.file)
    errors: list[float] = []
    by_class: dict[str, list[float]] = {}
    header = (
        f"{'measurement':<46} {'gpu':<14} {'engine':<9} {'metric':<28} "
        f"{'measured':>12} {'predicted':>12} {'error':>7}"
    )
    print(header)
    print("-" * len(header))
    started = time.perf_counter()
    for m in measurements:
        predicted = predict(m)
        error = (predicted - m.value) / m.value
        errors.append(abs(error))
        cls = profile_for(m).hardware_class
        by_class.setdefault(cls, []).append(abs(error))
        print(
            f"{m.id[:46]:<46} {m.gpu[:14]:<14} {m.engine[:9]:<9} {m.metric[:28]:<28} "
            f"{_fmt(m.value, m.metric):>12} {_fmt(predicted, m.metric):>12} {error:>+7.1%}"
        )
    elapsed = time.perf_counter() - started
    ordered = sorted(errors)
    print()
    print(f"{'set':<16} {'n':>4} {'median |error|':>15} {'p90 |error|':>12}")
    for name, values in [("all", ordered), *sorted(by_class.items())]:
        values = sorted(values)
        print(
            f"{name:<16} {len(values):>4} {percentile(values, 50):>15.1%} "
            f"{percentile(values, 90):>12.1%}"
        )
    print(f"\n{len(measurements)} predictions in {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
