"""Sweeps over load levels, and the search for the highest load that meets SLOs.

The search doubles the concurrency while every SLO holds, then bisects between the last
level that held and the first that did not (as guidellm's goodput profile and vLLM's
serve_sla sweep do, without their interpolation: every reported level was measured).

A sweep keeps every level it measured: a server that stops answering, or SIGINT/SIGTERM
(during a level or between two), ends the sweep with the levels so far (and a warning),
never loses them, and measures no further level.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from servefit.bench.config import BenchConfig, LoadLevels
from servefit.bench.interrupt import Interrupt
from servefit.bench.metrics import Distribution, Slo, Summary
from servefit.bench.output import write_document
from servefit.bench.runner import HANDED_ON, BenchResult, run
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
    interrupted: bool = False  # a signal stopped the sweep (during a level or between two)
    interrupt_signal: str | None = None  # "SIGINT" or "SIGTERM"

    @property
    def is_complete(self) -> bool:
        """Every planned level ran to the end and served requests."""
        return (
            bool(self.levels)
            and not self.warnings
            and not self.interrupted
            and all(
                lv.result.summary.successful and not lv.result.interrupted for lv in self.levels
            )
        )

    def is_passing(self, max_error_rate: float = 0.0) -> bool:
        """Complete, and no level of a sweep failed more than ``max_error_rate`` of its
        requests (a search's levels are judged by their SLOs: one that failed requests
        missed them, and is where the search turned)."""
        return self.is_complete and (
            self.mode == "search"
            or all(lv.result.failed_fraction <= max_error_rate for lv in self.levels)
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
    interrupt: Interrupt | None = None,
) -> SweepResult:
    """Measure each level (or search, when ``levels.is_search``); writes ``sweep.json``.
    SIGINT/SIGTERM stop the sweep (``interrupt``: one spanning more than the sweep)."""
    with contextlib.ExitStack() as stack:
        stop = interrupt or stack.enter_context(Interrupt(hand_on=HANDED_ON))
        return _sweep(cfg, levels, api_key, out_dir, on_level, stop)


def _sweep(
    cfg: BenchConfig,
    levels: LoadLevels,
    api_key: str | None,
    out_dir: Path | None,
    on_level: Callable[[SweepLevel], None] | None,
    interrupt: Interrupt,
) -> SweepResult:
    measured: list[SweepLevel] = []
    warnings: list[str] = []

    def measure(schedule: Schedule) -> bool:
        if interrupt.signum is not None:
            raise _InterruptedError  # between two levels: the next one is not started
        folder = out_dir / level_tag(schedule) if out_dir else None
        result = run(
            replace(cfg, schedule=schedule), api_key=api_key, out_dir=folder, interrupt=interrupt
        )
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
        if result.interrupted or interrupt.signum is not None:
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
        interrupted=interrupt.signum is not None or any(lv.result.interrupted for lv in measured),
        interrupt_signal=interrupt.signal_name,
    )
    if out_dir is not None:
        write_document(out_dir, "sweep.json", sweep)
    return sweep
