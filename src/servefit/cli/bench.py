"""``servefit bench``: measure an OpenAI-compatible server (its flags are
:mod:`servefit.cli.bench_options`).

Parse, call :mod:`servefit.bench` (configuration, runs, sweeps) and
:mod:`servefit.app.bench` (the prediction), render, exit: 0 every level ran to the end with
at most ``--max-error-rate`` of its requests failed (default: none), 1 otherwise, 2 an input
error (flags, dataset, unreachable server, unwritable ``--output``), 130 / 143 stopped by
SIGINT / SIGTERM (the run so far written, marked interrupted).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click

from servefit.cli.bench_options import bench_options
from servefit.cli.history import history_options
from servefit.cli.output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    emit_json,
    fail,
    progress_bar,
)
from servefit.cli.types import RunByDefaultGroup
from servefit.errors import InvalidArgumentError, ServefitError

if TYPE_CHECKING:
    from pathlib import Path

    from servefit.bench.config import BenchConfig, LoadLevels
    from servefit.bench.interrupt import Interrupt
    from servefit.bench.search import SweepLevel


@click.group(cls=RunByDefaultGroup)
def bench() -> None:
    """Measure an OpenAI-compatible server at URL (http://host:port, with or without /v1):
    TTFT, TPOT, ITL, throughput, goodput, cached tokens. `bench compare A B` holds two runs
    side by side, each figure's change with its bootstrap interval."""


@bench.command("run")
@click.argument("url")
@bench_options
@history_options
def bench_run(url: str, **flags: Any) -> None:
    """Measure an OpenAI-compatible server at URL (http://host:port, with or without /v1):
    TTFT, TPOT, ITL, throughput, goodput, cached tokens (`servefit bench URL` runs this;
    `servefit bench compare BASELINE CANDIDATE` compares two runs' --output folders)."""
    import os
    from pathlib import Path

    from servefit.bench.config import bench_setup

    output_dir, monitor, as_json, otlp = (
        flags.pop("output_dir"),
        flags.pop("monitor"),
        flags.pop("as_json"),
        flags.pop("otlp"),
    )
    plan = flags.pop("plan_model"), flags.pop("plan_gpu"), flags.pop("plan_tp")
    history = flags.pop("db"), flags.pop("no_history")
    repeats = flags.pop("repeat")
    inputs = {"url": url, **flags, "output_dir": output_dir, "monitor": monitor}
    inputs.update(plan_model=plan[0], gpu=plan[1], plan_tp=plan[2])
    remember = functools.partial(_remember, history, inputs, out_dir=output_dir, plan=plan)
    try:
        cfg, levels = bench_setup(url=url, **flags)
    except ServefitError as error:
        fail(error)
    api_key = os.environ.get(cfg.api_key_env)
    out = Path(output_dir) if output_dir else None
    from servefit.bench.interrupt import Interrupt
    from servefit.bench.output import prepare_output

    with Interrupt() as interrupt:  # from here, SIGINT/SIGTERM end in a written, marked run
        try:
            if out is not None:
                prepare_output(out)  # an unwritable --output: exit 2 before anything is sent
            if levels.is_sweep:
                _sweep(cfg, levels, api_key, out, as_json, interrupt, remember)
            if repeats > 1:
                _repeat(cfg, repeats, api_key, out, as_json, interrupt, remember, flags, plan)
            if otlp:
                from servefit.bench.otlp import check_target

                check_target(otlp)  # no SDK, an unwritable file: exit 2, nothing sent
            records: list[Any] = []
            result = _measure(
                cfg, api_key, out, monitor, as_json, plan, flags, interrupt, records.append
            )
        except ServefitError as error:
            fail(error)
    if otlp:
        _export_spans(otlp, records, result, as_json)
    if as_json:
        emit_json(result)
    else:
        from rich.console import Console

        from servefit.cli.render import render_bench

        render_bench(result, Console())
    remember(result)
    sys.exit(_exit_code(interrupt, result.interrupted, result.is_passing(cfg.max_error_rate)))


def _measure(
    cfg: BenchConfig,
    api_key: str | None,
    out: Path | None,
    monitor: bool,
    as_json: bool,
    plan: tuple[str | None, str | None, int],
    flags: dict[str, Any],
    interrupt: Interrupt,
    keep: Any = None,
) -> Any:
    from servefit.bench.runner import measure

    model, gpu, tp = plan
    prediction = _predict(model, gpu, tp, cfg) if model else None
    w = cfg.workload
    total = w.num_requests * (w.turns if w.kind == "agent" else 1)
    with _monitor(monitor, out), progress_bar(as_json, total, "requests") as listener:

        def each(record: Any) -> None:
            if keep is not None:
                keep(record)
            if listener is not None:
                listener(record)

        return measure(
            cfg,
            api_key=api_key,
            out_dir=out,
            is_cache_comparison=flags["prefix_cache_compare"],
            listener=each,
            prediction=prediction,
            interrupt=interrupt,
        )


def _export_spans(target: str, records: list[Any], result: Any, as_json: bool) -> None:
    """The run's spans to ``target``; a collector that cannot be reached is a warning (the
    run and its records stand)."""
    from servefit import __version__
    from servefit.bench.otlp import export_spans

    try:
        sent = export_spans(
            records,
            started_unix_s=result.started_unix_s,
            model=result.server.get("model"),
            target=target,
            servefit_version=__version__,
        )
    except ServefitError as error:
        fail(error)
    if not as_json:
        click.echo(f"OTLP: {sent} request spans exported to {target}", err=True)


def _exit_code(interrupt: Interrupt, interrupted: bool, passing: bool) -> int:
    """130 / 143 when SIGINT / SIGTERM stopped the run, else 0 passing, 1 failed."""
    import signal

    if interrupt.signum == signal.SIGTERM:
        return EXIT_TERMINATED
    if interrupt.signum is not None or interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if passing else EXIT_FAILED


def _sweep(
    cfg: BenchConfig,
    levels: LoadLevels,
    api_key: str | None,
    out: Path | None,
    as_json: bool,
    interrupt: Interrupt,
    remember: Callable[[Any], None],
) -> NoReturn:
    from servefit.bench.search import run_sweep

    def show(level: SweepLevel) -> None:
        if not as_json:
            click.echo(_level_line(level), err=True)

    sweep = run_sweep(cfg, levels, api_key=api_key, out_dir=out, on_level=show, interrupt=interrupt)
    if as_json:
        emit_json(sweep)
    else:
        for warning in sweep.warnings:
            click.echo(f"warning: {warning}", err=True)
        if levels.is_search:
            best = sweep.best_concurrency
            click.echo(f"highest concurrency meeting the SLOs at p{levels.slo_percentile}: {best}")
    remember(sweep)
    sys.exit(_exit_code(interrupt, sweep.interrupted, sweep.is_passing(cfg.max_error_rate)))


def _repeat(
    cfg: BenchConfig,
    repeats: int,
    api_key: str | None,
    out: Path | None,
    as_json: bool,
    interrupt: Interrupt,
    remember: Callable[[Any], None],
    flags: dict[str, Any],
    plan: tuple[str | None, str | None, int],
) -> NoReturn:
    from servefit.bench.repeats import run_repeats

    if flags["prefix_cache_compare"] or plan[0]:
        raise InvalidArgumentError(
            "--repeat runs one configuration again and again: leave out "
            + ("--prefix-cache-compare" if flags["prefix_cache_compare"] else "--plan-model")
        )

    def show(index: int, run: Any) -> None:
        if not as_json:
            s = run.summary
            click.echo(
                f"repeat {index}/{repeats}: {s.output_throughput_tok_per_s:10.1f} tok/s, TTFT "
                f"p50 {(s.ttft_s.p50 or 0) * 1000:8.1f} ms, TPOT p50 "
                f"{(s.tpot_s.p50 or 0) * 1000:7.2f} ms, {s.successful} ok / {s.errored} err",
                err=True,
            )

    result = run_repeats(
        cfg, repeats, api_key=api_key, out_dir=out, interrupt=interrupt, on_repeat=show
    )
    if as_json:
        emit_json(result)
    else:
        _render_repeats(result)
    remember(result)
    sys.exit(_exit_code(interrupt, result.interrupted, result.is_passing(cfg.max_error_rate)))


def _render_repeats(result: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{len(result.runs)} runs: mean and its {result.confidence:.0%} bootstrap interval"
    )
    for column in ("figure", "mean", "interval", "runs"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for f in result.figures:
        scale, unit = (1.0, "") if "throughput" in f.name else (1000.0, " ms")
        interval = "-" if f.low is None else f"{f.low * scale:.4g} - {f.high * scale:.4g}{unit}"
        values = ", ".join(f"{v * scale:.4g}" for v in f.values)
        table.add_row(f.name, f"{f.mean * scale:.4g}{unit}", interval, values)
    Console().print(table)


def _remember(
    history: tuple[str | None, bool],
    inputs: dict[str, Any],
    run: Any,
    *,
    out_dir: str | None,
    plan: tuple[str | None, str | None, int],
) -> None:
    """The run (or sweep) in the run history, unless --no-history; a failure only warns."""
    db, no_history = history
    if no_history:
        return
    from servefit.app.history_record import record_bench
    from servefit.cli.history import record_quietly

    _, gpu, tp = plan
    from servefit.bench.repeats import RepeatResult, repeat_tag

    if isinstance(run, RepeatResult):  # every repeat is a measured run of its own
        for index, one in enumerate(run.runs, 1):
            folder = f"{out_dir}/{repeat_tag(index)}" if out_dir else None
            record_quietly(db, functools.partial(_record_one, one, inputs, folder, gpu, tp))
        return
    record_quietly(db, lambda path: record_bench(path, run, inputs, out_dir, gpu, tp))


def _record_one(
    run: Any, inputs: dict[str, Any], folder: str | None, gpu: str | None, tp: int, path: Any
) -> Any:
    from servefit.app.history_record import record_bench

    return record_bench(path, run, inputs, folder, gpu, tp)


def _predict(model: str, gpu: str | None, tp: int, cfg: BenchConfig) -> dict[str, Any]:
    from servefit.app.bench import predict_bench

    return predict_bench(model, gpu, tp, cfg)


def _monitor(enabled: bool, out: Path | None) -> Any:
    """The NVML sampler writing OUTPUT/gpu_samples.jsonl, or nothing."""
    if not enabled:
        return contextlib.nullcontext()
    if out is None:
        raise InvalidArgumentError("--monitor writes OUTPUT/gpu_samples.jsonl: add --output")
    from servefit.monitor.nvml import GpuMonitor

    out.mkdir(parents=True, exist_ok=True)
    return GpuMonitor(out / "gpu_samples.jsonl")


def _level_line(level: SweepLevel) -> str:
    load = f"concurrency {level.concurrency}" if level.concurrency else ""
    if level.request_rate:
        load += f" rate {level.request_rate:g}/s"
    s = level.result.summary
    verdict = {None: "", True: "  meets SLOs", False: "  misses SLOs"}[level.meets_slo]
    return (
        f"{load:>24s}: {s.request_throughput_per_s:8.2f} req/s, "
        f"{s.output_throughput_tok_per_s:10.1f} tok/s, TTFT p50 "
        f"{(s.ttft_s.p50 or 0) * 1000:8.1f} ms, {s.successful} ok / {s.errored} err{verdict}"
    )


@bench.command("compare")
@click.argument("baseline", type=click.Path(file_okay=False))
@click.argument("candidate", type=click.Path(file_okay=False))
@click.option(
    "--max-regression",
    multiple=True,
    help="FIGURE=PERCENT, comma-separated or repeated (tpot_p50=10%,throughput=5%): exit 1 "
    "when the candidate is worse by more than PERCENT even at the interval's best end. "
    "Figures: ttft/tpot/itl/e2e _p50/_p90/_p99, output_throughput (throughput), "
    "request_throughput.",
)
@click.option(
    "--confidence",
    type=click.FloatRange(0.5, 0.999),
    default=0.95,
    show_default=True,
    help="Of the bootstrap intervals.",
)
@click.option("--resamples", type=click.IntRange(100, 100_000), default=2000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Of the bootstrap draws.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison document.")
def bench_compare(
    baseline: str,
    candidate: str,
    max_regression: tuple[str, ...],
    confidence: float,
    resamples: int,
    seed: int,
    as_json: bool,
) -> None:
    """BASELINE and CANDIDATE are `bench --output` folders (a run, or the runs of --repeat):
    every figure's change with its bootstrap interval. Exit 0: no figure given a
    --max-regression regressed beyond the noise; 1: one did; 2: unreadable input."""
    from pathlib import Path

    from servefit.app.bench_compare import compare_folders, comparison_json

    try:
        result = compare_folders(
            Path(baseline),
            Path(candidate),
            max_regression,
            confidence=confidence,
            resamples=resamples,
            seed=seed,
        )
    except ServefitError as error:
        fail(error)
    if as_json:
        click.echo(comparison_json(result))
    else:
        _render_comparison(result)
    sys.exit(EXIT_FAILED if result.regressions else EXIT_OK)


def _render_comparison(result: Any) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    runs = f"{len(result.baseline.summaries)} vs {len(result.candidate.summaries)} runs"
    table = Table(title=f"candidate vs baseline ({runs}; {result.confidence:.0%} intervals)")
    for column in ("figure", "baseline", "candidate", "change", "interval", "gate", "verdict"):
        table.add_column(column, justify="left" if column in ("figure", "verdict") else "right")
    for f in result.figures:
        scale, unit = (1.0, "") if "throughput" in f.name else (1000.0, " ms")
        interval = "-" if f.change is None else f"{f.change.low:+.1%} .. {f.change.high:+.1%}"
        gate = "-" if f.threshold is None else f"{f.threshold:.0%}"
        table.add_row(
            f.name,
            f"{f.baseline * scale:.4g}{unit}",
            f"{f.candidate * scale:.4g}{unit}",
            f"{f.point_change:+.1%}",
            interval,
            gate,
            escape(f.verdict),
        )
    console = Console()
    console.print(table)
    if any(f.change is None for f in result.figures):
        console.print("throughput without an interval: one run a side (--repeat N gives one)")
    for f in result.regressions:
        console.print(
            f"REGRESSION: {f.name} worse by at least {f.worse_at_best:.1%} (gate {f.threshold:.0%})"
        )
