"""``servefit bench compare BASELINE CANDIDATE``: is the candidate slower beyond the noise?

Each side is a ``bench --output`` folder: one run (``summary.json`` and ``requests.jsonl``) or
the runs of ``--repeat N`` (``repeats.json`` and ``repeat-K/``). For every figure the change
is ``candidate / baseline - 1`` with a percentile-bootstrap interval
(:func:`servefit.core.bootstrap.relative_change`):

* a **latency percentile** (TTFT, TPOT, ITL, E2E) over the requests each run completed: runs
  resampled, then requests within them (ITL: the gaps of a run), so the spread between runs
  is in the interval;
* a **throughput** is resampled over the runs of a side: with one run a side there is no
  interval, and the point change is all there is (``--repeat`` gives one).

A threshold (``--max-regression tpot_p50=10%``) makes a figure a gate: it is a **regression**
when even the interval's most favourable end is worse than the threshold (latency up,
throughput down), so a change the noise could explain never fails the gate. No threshold:
the figures are reported, and the command exits 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from servefit.adapters.report_bench import load_bench
from servefit.bench.metrics import Summary, latencies
from servefit.bench.records import Outcome, RequestRecord
from servefit.bench.repeats import RepeatResult, repeat_tag
from servefit.core import metrics
from servefit.core.bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    Interval,
    mean,
    percentile_of,
    relative_change,
)
from servefit.errors import DatasetError, InvalidArgumentError

PER_REQUEST: dict[str, Callable[[RequestRecord], list[float]]] = {
    "ttft": lambda r: [v] if (v := latencies(r).ttft_s) is not None else [],
    "tpot": lambda r: [v] if (v := latencies(r).tpot_s) is not None else [],
    "e2e": lambda r: [v] if (v := latencies(r).e2e_s) is not None else [],
    "itl": lambda r: metrics.itl_gaps_s(r.chunk_s),
}
PERCENTILES = (50, 90, 99)
PER_RUN: dict[str, Callable[[Summary], float]] = {
    "output_throughput": lambda s: s.output_throughput_tok_per_s,
    "request_throughput": lambda s: s.request_throughput_per_s,
}
ALIASES = {"throughput": "output_throughput"}
FIGURES = (
    *(f"{name}_p{q}" for name in PER_REQUEST for q in PERCENTILES),
    *PER_RUN,
)


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a comparison: its runs' summaries and each run's completed requests."""

    folder: Path
    summaries: tuple[Summary, ...]
    runs: tuple[tuple[RequestRecord, ...], ...]

    @property
    def num_requests(self) -> int:
        return sum(len(run) for run in self.runs)


def load_side(folder: Path) -> Side:
    """A ``bench --output`` folder: a run, or the runs of ``--repeat`` (a sweep is refused:
    compare one of its levels)."""
    if (folder / "sweep.json").exists():
        raise DatasetError(
            f"{folder} holds a sweep: compare one load level, its folder under {folder}"
        )
    repeats = folder / "repeats.json"
    if repeats.exists():
        try:
            doc = RepeatResult.model_validate_json(repeats.read_bytes())
        except (OSError, ValueError) as error:
            raise DatasetError(f"{repeats} is not a servefit bench repeats.json: {error}") from None
        runs = [
            load_bench(folder / repeat_tag(i), "bench compare") for i in range(1, len(doc.runs) + 1)
        ]
    else:
        runs = [load_bench(folder, "bench compare")]
    completed = tuple(
        tuple(r for r in rs if r.outcome is Outcome.OK and not r.is_warmup) for _, rs in runs
    )
    if not any(completed):
        raise DatasetError(f"{folder}: no completed request to compare")
    return Side(folder=folder, summaries=tuple(s.summary for s, _ in runs), runs=completed)


@dataclass(frozen=True, slots=True, kw_only=True)
class FigureChange:
    name: str
    baseline: float
    candidate: float
    change: Interval | None  # None: one run a side for a throughput (the point only)
    point_change: float
    is_higher_worse: bool
    threshold: float | None

    @property
    def worse_at_best(self) -> float:
        """The smallest worsening the data allow (the point's without an interval)."""
        if self.change is None:
            return self.point_change if self.is_higher_worse else -self.point_change
        return self.change.low if self.is_higher_worse else -self.change.high

    @property
    def is_regression(self) -> bool:
        return self.threshold is not None and self.worse_at_best > self.threshold

    @property
    def verdict(self) -> str:
        if self.is_regression:
            return "REGRESSION"
        if self.change is not None and 0 in self.change:
            return "within noise"
        worse = self.point_change > 0 if self.is_higher_worse else self.point_change < 0
        return "worse" if worse else "better"


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchComparison:
    baseline: Side
    candidate: Side
    figures: tuple[FigureChange, ...]
    confidence: float

    @property
    def regressions(self) -> tuple[FigureChange, ...]:
        return tuple(f for f in self.figures if f.is_regression)

    def as_dict(self) -> dict[str, object]:
        return {
            "baseline": str(self.baseline.folder),
            "candidate": str(self.candidate.folder),
            "confidence": self.confidence,
            "runs": [len(self.baseline.summaries), len(self.candidate.summaries)],
            "requests": [self.baseline.num_requests, self.candidate.num_requests],
            "figures": [
                {
                    "name": f.name,
                    "baseline": f.baseline,
                    "candidate": f.candidate,
                    "change": f.point_change,
                    "change_low": f.change.low if f.change else None,
                    "change_high": f.change.high if f.change else None,
                    "threshold": f.threshold,
                    "verdict": f.verdict,
                }
                for f in self.figures
            ],
            "is_regression": bool(self.regressions),
        }


def parse_thresholds(specs: Sequence[str]) -> dict[str, float]:
    """``"ttft_p99=10%,throughput=5%"`` (or repeated) -> {figure: 0.10, ...}."""
    out: dict[str, float] = {}
    for spec in specs:
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            name, eq, value = part.partition("=")
            name = ALIASES.get(name.strip(), name.strip())
            if not eq or name not in FIGURES:
                raise InvalidArgumentError(
                    f"--max-regression {part!r}: write FIGURE=PERCENT, FIGURE one of "
                    f"{', '.join(FIGURES)} (throughput = output_throughput)"
                )
            text = value.strip()
            try:
                fraction = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
            except ValueError:
                raise InvalidArgumentError(
                    f"--max-regression {part!r}: {text!r} is not a percentage like 10%"
                ) from None
            if not 0 <= fraction < 10:
                raise InvalidArgumentError(f"--max-regression {part!r}: a share from 0% up")
            out[name] = fraction
    return out


def _per_run(side: Side, name: str) -> list[list[float]]:
    """The figure's values, run by run (a run's requests are resampled together)."""
    read = PER_REQUEST[name]
    return [[v for r in run for v in read(r)] for run in side.runs]


def _all(groups: list[list[float]]) -> list[float]:
    return [v for g in groups for v in g]


def compare_sides(
    baseline: Side,
    candidate: Side,
    thresholds: Mapping[str, float],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> BenchComparison:
    figures = []

    def change_of(
        base: list[list[float]], cand: list[list[float]], stat: Callable[..., float]
    ) -> Interval:
        return relative_change(
            base, cand, stat, confidence=confidence, resamples=resamples, seed=seed
        )

    for name in PER_REQUEST:
        base, cand = _per_run(baseline, name), _per_run(candidate, name)
        if not _all(base) or not _all(cand):
            continue
        for q in PERCENTILES:
            stat = percentile_of(q)
            change = change_of(base, cand, stat)
            figure = f"{name}_p{q}"
            figures.append(
                FigureChange(
                    name=figure,
                    baseline=stat(_all(base)),
                    candidate=stat(_all(cand)),
                    change=change,
                    point_change=change.point,
                    is_higher_worse=True,
                    threshold=thresholds.get(figure),
                )
            )
    for name, read in PER_RUN.items():
        base_runs = [read(s) for s in baseline.summaries]
        cand_runs = [read(s) for s in candidate.summaries]
        if mean(base_runs) == 0:
            continue
        point = mean(cand_runs) / mean(base_runs) - 1
        interval = None
        if len(base_runs) >= 2 and len(cand_runs) >= 2:
            interval = change_of([[v] for v in base_runs], [[v] for v in cand_runs], mean)
        figures.append(
            FigureChange(
                name=name,
                baseline=mean(base_runs),
                candidate=mean(cand_runs),
                change=interval,
                point_change=point,
                is_higher_worse=False,
                threshold=thresholds.get(name),
            )
        )
    missing = set(thresholds) - {f.name for f in figures}
    if missing:
        raise DatasetError(
            f"--max-regression names {', '.join(sorted(missing))}, which the runs do not "
            "measure (no request with that figure on one side)"
        )
    return BenchComparison(
        baseline=baseline, candidate=candidate, figures=tuple(figures), confidence=confidence
    )


def compare_folders(
    baseline: Path,
    candidate: Path,
    max_regression: Sequence[str] = (),
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> BenchComparison:
    thresholds = parse_thresholds(max_regression)
    return compare_sides(
        load_side(baseline),
        load_side(candidate),
        thresholds,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
    )


def comparison_json(comparison: BenchComparison) -> str:
    return json.dumps(comparison.as_dict(), indent=2)
