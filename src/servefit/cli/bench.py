"""``servefit bench`` (measure an OpenAI-compatible server) and ``servefit null-server``
(a server with known timings: the client's own ceiling).

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
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import click

from servefit.cli.history import history_options
from servefit.cli.output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    emit_json,
    fail,
)
from servefit.cli.types import FINITE_FLOAT, NON_NEGATIVE_FLOAT, POSITIVE_FLOAT
from servefit.errors import InvalidArgumentError, ServefitError

if TYPE_CHECKING:
    from pathlib import Path

    from servefit.bench.config import BenchConfig, LoadLevels
    from servefit.bench.interrupt import Interrupt
    from servefit.bench.search import SweepLevel


@click.command("null-server")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option(
    "--ttft-ms", type=NON_NEGATIVE_FLOAT, default=0.0, show_default=True, help="Delay to 1st token."
)
@click.option(
    "--itl-ms",
    type=NON_NEGATIVE_FLOAT,
    default=0.0,
    show_default=True,
    help="Delay between tokens.",
)
@click.option("--output-len", type=int, default=16, show_default=True, help="Default max_tokens.")
@click.option("--max-concurrency", type=int, help="Requests served at once; the rest queue.")
def null_server(
    host: str,
    port: int,
    ttft_ms: float,
    itl_ms: float,
    output_len: int,
    max_concurrency: int | None,
) -> None:
    """An OpenAI-compatible server with known timings: the client's own ceiling."""
    from servefit.bench.null_server import NullServerConfig, serve

    if ttft_ms < 0 or itl_ms < 0 or output_len < 1:
        fail(InvalidArgumentError("--ttft-ms and --itl-ms must be >= 0 and --output-len >= 1"))
    click.echo(
        f"servefit null-server on http://{host}:{port} (TTFT {ttft_ms} ms, ITL {itl_ms} ms)",
        err=True,
    )
    config = NullServerConfig(
        ttft_s=ttft_ms / 1000,  # the flags are ms, as vLLM's; the server works in seconds
        itl_s=itl_ms / 1000,
        output_len=output_len,
        max_concurrency=max_concurrency,
    )
    serve(host, port, config)


WORKLOADS = ["random", "chat", "summarize", "shared-prefix", "agent", "jsonl"]
_opt = click.option
BENCH_OPTIONS = [
    _opt("--replica", "replicas", multiple=True, help="Another base URL of the same model."),
    _opt("--session-affinity", is_flag=True, help="Send a session's turns to one replica."),
    _opt("--model", "model_name", help="Model name to request [the first of /v1/models]."),
    _opt(
        "--endpoint",
        type=click.Choice(["completions", "chat"]),
        default="completions",
        show_default=True,
    ),
    _opt(
        "--api-key-env",
        default="OPENAI_API_KEY",
        show_default=True,
        help="Environment variable holding the API key (the key itself is never written).",
    ),
    _opt("--workload", type=click.Choice(WORKLOADS), default="random", show_default=True),
    _opt(
        "--input-len", type=int, default=256, show_default=True, help="Prompt tokens (chat: mean)."
    ),
    _opt(
        "--output-len", type=int, default=128, show_default=True, help="Output tokens (chat: mean)."
    ),
    _opt(
        "--num-requests",
        type=int,
        default=100,
        show_default=True,
        help="Requests (agent: sessions).",
    ),
    _opt(
        "--concurrency",
        help="Closed loop: requests in flight (with a rate: the cap). 1,4,16 sweeps.",
    ),
    _opt("--request-rate", help="Open loop: mean arrivals per second. A list sweeps."),
    _opt("--search-slo", is_flag=True, help="Find the highest concurrency meeting the SLOs."),
    _opt(
        "--slo-percentile",
        type=click.IntRange(1, 99),
        default=90,
        show_default=True,
        help="Percentile the SLO limits apply to (--search-slo).",
    ),
    _opt(
        "--burstiness",
        type=POSITIVE_FLOAT,
        default=1.0,
        show_default=True,
        help="1: Poisson; <1 burstier.",
    ),
    _opt("--prefix-len", type=int, default=0, help="shared-prefix: tokens shared in a group."),
    _opt("--num-groups", type=int, default=1, help="shared-prefix: number of groups."),
    _opt("--turns", type=int, default=4, show_default=True, help="agent: turns per session."),
    _opt("--system-prompt-len", type=int, default=512, show_default=True, help="agent: tokens."),
    _opt("--message-len", type=int, default=64, show_default=True, help="agent: new tokens/turn."),
    _opt(
        "--think-time-s", type=NON_NEGATIVE_FLOAT, default=0.0, help="agent: pause between turns."
    ),
    _opt(
        "--prefix-cache-compare",
        is_flag=True,
        help="agent: cache-busted (cold), then warm; the TTFT saved per turn.",
    ),
    _opt("--dataset", help="jsonl: prompts or conversations, one JSON object per line."),
    _opt("--replay", is_flag=True, help="jsonl: send each line at its timestamp_s."),
    _opt(
        "--time-scale",
        type=POSITIVE_FLOAT,
        default=1.0,
        show_default=True,
        help="Replay: 0.5 = 2x.",
    ),
    _opt(
        "--ignore-eos/--no-ignore-eos",
        default=True,
        show_default=True,
        help="Ask for exactly --output-len tokens (vLLM/SGLang extension).",
    ),
    _opt("--plan-model", help="Also plan this model and print predicted vs measured."),
    _opt("--gpu", "plan_gpu", help="With --plan-model: the server's GPU (catalog name)."),
    _opt("--plan-tp", type=int, default=1, show_default=True, help="With --plan-model: TP."),
    _opt("--tokenizer", "tokenizer_path", help="A local tokenizer.json to size prompts with."),
    _opt(
        "--workers",
        type=click.IntRange(1, 256),
        default=1,
        show_default=True,
        help="Client processes (for rates one core cannot drive).",
    ),
    _opt("--seed", type=int, default=0, show_default=True),
    _opt("--warmup", type=int, default=0, help="Warm-up requests, excluded from the metrics."),
    _opt("--duration-s", type=FINITE_FLOAT, help="Stop sending after this long."),
    _opt(
        "--timeout-s",
        type=FINITE_FLOAT,
        default=600.0,
        show_default=True,
        help="Read timeout: seconds without data before a request fails (> 0).",
    ),
    _opt(
        "--max-error-rate",
        type=FINITE_FLOAT,
        default=0.0,
        show_default=True,
        help="Fraction of requests (0-1) that may fail (errored or cut) before the run exits 1.",
    ),
    _opt("--slo-ttft-ms", type=FINITE_FLOAT, help="Goodput: TTFT limit in ms."),
    _opt("--slo-tpot-ms", type=FINITE_FLOAT, help="Goodput: time-per-output-token limit in ms."),
    _opt("--slo-e2el-ms", type=FINITE_FLOAT, help="Goodput: end-to-end latency limit in ms."),
    _opt(
        "--goodput",
        multiple=True,
        help='vLLM\'s spelling: "ttft:500 tpot:50 e2el:9000" (ms; quote it, or repeat).',
    ),
    _opt(
        "--output",
        "output_dir",
        type=click.Path(file_okay=False),
        help="Write requests.jsonl and summary.json (sweep.json) here.",
    ),
    _opt("--monitor", is_flag=True, help="Sample local NVIDIA GPUs into OUTPUT/gpu_samples.jsonl."),
    _opt("--json", "as_json", is_flag=True, help="Print the summary document."),
]


def _bench_options(command: Any) -> Any:
    for option in reversed(BENCH_OPTIONS):
        command = option(command)
    return command


@click.command()
@click.argument("url")
@_bench_options
@history_options
def bench(url: str, **flags: Any) -> None:
    """Measure an OpenAI-compatible server at URL (http://host:port, with or without /v1):
    TTFT, TPOT, ITL, throughput, goodput, cached tokens."""
    import os
    from pathlib import Path

    from servefit.bench.config import bench_setup

    output_dir, monitor, as_json = (
        flags.pop("output_dir"),
        flags.pop("monitor"),
        flags.pop("as_json"),
    )
    plan = flags.pop("plan_model"), flags.pop("plan_gpu"), flags.pop("plan_tp")
    history = flags.pop("db"), flags.pop("no_history")
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
            result = _measure(cfg, api_key, out, monitor, as_json, plan, flags, interrupt)
        except ServefitError as error:
            fail(error)
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
) -> Any:
    from servefit.bench.runner import measure

    model, gpu, tp = plan
    prediction = _predict(model, gpu, tp, cfg) if model else None
    w = cfg.workload
    total = w.num_requests * (w.turns if w.kind == "agent" else 1)
    with _monitor(monitor, out), _progress(as_json, total) as listener:
        return measure(
            cfg,
            api_key=api_key,
            out_dir=out,
            is_cache_comparison=flags["prefix_cache_compare"],
            listener=listener,
            prediction=prediction,
            interrupt=interrupt,
        )


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
    record_quietly(db, lambda path: record_bench(path, run, inputs, out_dir, gpu, tp))


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


@contextlib.contextmanager
def _progress(quiet: bool, total: int) -> Iterator[Any]:
    """A live progress bar on an interactive stderr; nothing otherwise."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("requests", total=total)
        yield lambda record: bar.advance(task)


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
