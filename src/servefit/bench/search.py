"""Sweeps over load levels, and the search for the highest load that meets SLOs.

The search doubles the concurrency while every SLO holds, then bisects between the last
level that held and the first that did not (as guidellm's goodput profile and vLLM's
serve_sla sweep do, without their interpolation: every reported level was measured).

A sweep keeps every level it measured: a server that stops answering, or an interrupt,
ends the sweep with the levels so far (and a warning), never loses them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from servefit.bench.config import BenchConfig, LoadLevels
from servefit.bench.metrics import Distribution, Slo, Summary
from servefit.bench.runner import BenchResult, run
from servefit.bench.schedules import Schedule
from servefit.errors import ServerError

SWEEP_SCHEMA_VERSION = 1

MAX_SEARCH_CONCURRENCY = 4096


def slo_met(summary: Summary, slo: Slo, percentile: int) -> bool:
    """Every SLO holds at ``percentile`` (per-request aggregation), and nothing failed."""
    if summary.successful == 0 or summary.errored or summary.incomplete:
        return False
    pairs: tuple[tuple[float | None, Distribution], ...] = (
        (slo.ttft_s, summary.ttft_s),  # Slo's limits in seconds (given in ms)
        (slo.tpot_s, summary.tpot_s),
        (slo.e2e_s, summary.e2e_s),
    )
    for limit, dist in pairs:
        if limit is None:
            continue
        value = getattr(dist, f"p{percentile}")
        if value is None or value > limit:
            return False
    return True


@dataclass(frozen=True, slots=True)
class SearchStep:
    concurrency: int
    meets: bool


def search_max_concurrency(
    evaluate: Callable[[int], bool], *, start: int = 1, limit: int = MAX_SEARCH_CONCURRENCY
) -> tuple[int | None, list[SearchStep]]:
    """Highest concurrency for which ``evaluate`` holds (None if not even ``start``)."""
    steps: list[SearchStep] = []

    def check(level: int) -> bool:
        ok = evaluate(level)
        steps.append(SearchStep(level, ok))
        return ok

    good: int | None = None
    bad: int | None = None
    level = start
    while level <= limit:
        if check(level):
            good = level
            level *= 2
        else:
            bad = level
            break
    if good is None or bad is None:
        return good, steps
    while bad - good > 1:
        middle = (good + bad) // 2
        if check(middle):
            good = middle
        else:
            bad = middle
    return good, steps


class SweepLevel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    concurrency: int | None
    request_rate: float | None
    meets_slo: bool | None  # None: no SLO given
    result: BenchResult


class SweepResult(BaseModel):
    """``sweep.json``: every level measured, and for a search the highest that met the SLOs."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SWEEP_SCHEMA_VERSION
    mode: str  # "sweep" or "search"
    slo: dict[str, Any] | None  # ttft_ms, tpot_ms, e2el_ms
    slo_percentile: int
    best_concurrency: int | None
    levels: list[SweepLevel]
    warnings: list[str] = []

    @property
    def is_complete(self) -> bool:
        """Every planned level ran to the end and served requests."""
        return (
            bool(self.levels)
            and not self.warnings
            and all(
                lv.result.summary.successful and not lv.result.interrupted for lv in self.levels
            )
        )


class _InterruptedError(Exception):
    """A level was interrupted: measure no further level."""


def level_tag(schedule: Schedule) -> str:
    """A level's folder under ``--output``: ``c16``, ``r2.5``, ``c8r4``."""
    tag = f"c{schedule.concurrency}" if schedule.concurrency else ""
    return tag + (f"r{schedule.rate_per_s:g}" if schedule.rate_per_s else "")


def run_sweep(
    cfg: BenchConfig,
    levels: LoadLevels,
    *,
    api_key: str | None,
    out_dir: Path | None,
    on_level: Callable[[SweepLevel], None] | None = None,
) -> SweepResult:
    """Measure each level (or search, when ``levels.is_search``); writes ``sweep.json``."""
    measured: list[SweepLevel] = []
    warnings: list[str] = []

    def measure(schedule: Schedule) -> bool:
        folder = out_dir / level_tag(schedule) if out_dir else None
        result = run(replace(cfg, schedule=schedule), api_key=api_key, out_dir=folder)
        meets = slo_met(result.summary, cfg.slo, levels.slo_percentile) if cfg.slo else None
        level = SweepLevel(
            concurrency=schedule.concurrency,
            request_rate=schedule.rate_per_s,
            meets_slo=meets,
            result=result,
        )
        measured.append(level)
        if on_level is not None:
            on_level(level)
        if result.interrupted:
            raise _InterruptedError
        return bool(meets)

    best = None
    try:
        if levels.is_search:
            best, _ = search_max_concurrency(
                lambda c: measure(replace(cfg.schedule, concurrency=c))
            )
        elif len(levels.rates) > 1:
            for rate in levels.rates:
                measure(replace(cfg.schedule, rate_per_s=rate))
        else:
            for level in levels.concurrencies:
                measure(replace(cfg.schedule, concurrency=level))
    except _InterruptedError:
        warnings.append(f"interrupted: stopped after {len(measured)} level(s)")
    except ServerError as error:
        if not measured:
            raise
        warnings.append(f"stopped after {len(measured)} level(s): {error}")
    sweep = SweepResult(
        mode="search" if levels.is_search else "sweep",
        slo=dataclasses.asdict(cfg.slo) if cfg.slo else None,
        slo_percentile=levels.slo_percentile,
        best_concurrency=best,
        levels=measured,
        warnings=warnings,
    )
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "sweep.json").write_text(sweep.model_dump_json(indent=2), encoding="utf-8")
    return sweep
