"""``bench --repeat N``: the same run N times, and how far each headline figure moves.

Every repeat sends the same request list (the same seed) to the same server, one after the
other, into ``OUTPUT/repeat-K/`` (``requests.jsonl`` and ``summary.json``, as a single run
writes them). ``repeats.json`` holds every repeat's summary and, per headline figure, the
mean over the repeats with its percentile-bootstrap interval over them
(:mod:`servefit.core.bootstrap`): the spread a second run of the same deployment would show.
A signal ends the repeats with those done so far, never loses one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from servefit.bench.config import BenchConfig
from servefit.bench.interrupt import Interrupt
from servefit.bench.metrics import Summary
from servefit.bench.output import write_document
from servefit.bench.records import RequestRecord
from servefit.bench.runner import BenchResult, run
from servefit.core.bootstrap import DEFAULT_CONFIDENCE, bootstrap, mean
from servefit.errors import InvalidArgumentError

REPEAT_SCHEMA_VERSION = 1
MAX_REPEATS = 100

# the headline figures: name -> the summary's value (None when the run has none)
HEADLINES: dict[str, Callable[[Summary], float | None]] = {
    "output_throughput_tok_per_s": lambda s: s.output_throughput_tok_per_s,
    "request_throughput_per_s": lambda s: s.request_throughput_per_s,
    "ttft_p50_s": lambda s: s.ttft_s.p50,
    "ttft_p99_s": lambda s: s.ttft_s.p99,
    "tpot_p50_s": lambda s: s.tpot_s.p50,
    "tpot_p99_s": lambda s: s.tpot_s.p99,
    "itl_p50_s": lambda s: s.itl_s.p50,
    "e2e_p50_s": lambda s: s.e2e_s.p50,
    "e2e_p99_s": lambda s: s.e2e_s.p99,
}


def repeat_tag(index: int) -> str:
    return f"repeat-{index}"


class RepeatFigure(BaseModel):
    """One headline figure over the repeats: each repeat's value, their mean and its
    bootstrap interval (None with fewer than two repeats)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    values: list[float]
    mean: float
    low: float | None
    high: float | None


class RepeatResult(BaseModel):
    """``repeats.json``."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = REPEAT_SCHEMA_VERSION
    mode: str = "repeat"
    repeats_asked: int
    confidence: float
    figures: list[RepeatFigure]
    runs: list[BenchResult]
    interrupted: bool = False
    interrupt_signal: str | None = None

    def is_passing(self, max_error_rate: float = 0.0) -> bool:
        """Every repeat asked for ran and passed."""
        return (
            not self.interrupted
            and len(self.runs) == self.repeats_asked
            and all(r.is_passing(max_error_rate) for r in self.runs)
        )


def summarize_repeats(
    runs: list[BenchResult], *, asked: int, confidence: float = DEFAULT_CONFIDENCE, seed: int = 0
) -> RepeatResult:
    figures = []
    for name, read in HEADLINES.items():
        values = [v for r in runs if (v := read(r.summary)) is not None]
        if not values:
            continue
        low = high = None
        if len(values) >= 2:
            interval = bootstrap([[v] for v in values], mean, confidence=confidence, seed=seed)
            low, high = interval.low, interval.high
        figures.append(
            RepeatFigure(name=name, values=values, mean=mean(values), low=low, high=high)
        )
    last = runs[-1] if runs else None
    return RepeatResult(
        repeats_asked=asked,
        confidence=confidence,
        figures=figures,
        runs=runs,
        interrupted=bool(last and last.interrupted) or len(runs) < asked,
        interrupt_signal=last.interrupt_signal if last else None,
    )


def run_repeats(
    cfg: BenchConfig,
    repeats: int,
    *,
    api_key: str | None,
    out_dir: Path | None,
    interrupt: Interrupt,
    listener: Callable[[RequestRecord], None] | None = None,
    on_repeat: Callable[[int, BenchResult], None] | None = None,
) -> RepeatResult:
    """``repeats`` runs of ``cfg``, one after the other; a signal stops after the run it
    arrived in (that run is kept, marked interrupted)."""
    if not 2 <= repeats <= MAX_REPEATS:
        raise InvalidArgumentError(
            f"--repeat takes 2 to {MAX_REPEATS} runs, got {repeats} (1 is a plain run)"
        )
    runs: list[BenchResult] = []
    for index in range(1, repeats + 1):
        folder = out_dir / repeat_tag(index) if out_dir else None
        result = run(cfg, api_key=api_key, out_dir=folder, listener=listener, interrupt=interrupt)
        runs.append(result)
        if on_repeat is not None:
            on_repeat(index, result)
        if result.interrupted or interrupt.signum is not None:
            break
    summary = summarize_repeats(runs, asked=repeats)
    if out_dir is not None:
        write_document(out_dir, "repeats.json", summary)
    return summary
