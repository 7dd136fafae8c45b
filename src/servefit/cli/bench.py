"""``servefit bench`` (measure an OpenAI-compatible server) and ``servefit null-server``
(a server with known timings: the client's own ceiling)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import click

from servefit.cli.output import fail
from servefit.errors import InvalidArgumentError, ServefitError


@click.command("null-server")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option(
    "--ttft-ms", type=float, default=0.0, show_default=True, help="Delay before the first token."
)
@click.option("--itl-ms", type=float, default=0.0, show_default=True, help="Delay between tokens.")
@click.option(
    "--output-len", type=int, default=16, show_default=True, help="Tokens when max_tokens is unset."
)
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
        fail(ServefitError("--ttft-ms and --itl-ms must be >= 0 and --output-len >= 1"))
    click.echo(
        f"servefit null-server on http://{host}:{port} (TTFT {ttft_ms} ms, ITL {itl_ms} ms)",
        err=True,
    )
    serve(
        host,
        port,
        NullServerConfig(
            ttft_s=ttft_ms / 1000,
            itl_s=itl_ms / 1000,
            output_len=output_len,
            max_concurrency=max_concurrency,
        ),
    )


@click.command()
@click.argument("url")
@click.option(
    "--replica", "replicas", multiple=True, help="Another base URL of the same model (repeatable)."
)
@click.option(
    "--session-affinity", is_flag=True, help="Send an agent session's turns to one replica."
)
@click.option("--model", "model_name", help="Model name to request [the first of /v1/models].")
@click.option(
    "--endpoint",
    type=click.Choice(["completions", "chat"]),
    default="completions",
    show_default=True,
)
@click.option(
    "--api-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    help="Environment variable holding the API key (the key itself is never written).",
)
@click.option(
    "--workload",
    type=click.Choice(["random", "chat", "summarize", "shared-prefix", "agent", "jsonl"]),
    default="random",
    show_default=True,
)
@click.option(
    "--input-len", type=int, default=256, show_default=True, help="Prompt tokens (mean for chat)."
)
@click.option(
    "--output-len", type=int, default=128, show_default=True, help="Output tokens (mean for chat)."
)
@click.option(
    "--num-requests", type=int, default=100, show_default=True, help="Requests (agent: sessions)."
)
@click.option(
    "--concurrency",
    help="Closed loop: requests in flight (with a rate: the cap). A list (1,4,16) sweeps.",
)
@click.option("--request-rate", help="Open loop: mean arrivals per second. A list sweeps.")
@click.option(
    "--search-slo",
    is_flag=True,
    help="Find the highest concurrency meeting the --slo-* limits (double, then bisect).",
)
@click.option(
    "--slo-percentile",
    type=click.IntRange(1, 99),
    default=90,
    show_default=True,
    help="Percentile the SLO limits apply to (--search-slo).",
)
@click.option(
    "--burstiness", type=float, default=1.0, show_default=True, help="Gamma shape; 1 = Poisson."
)
@click.option("--prefix-len", type=int, default=0, help="shared-prefix: tokens shared in a group.")
@click.option("--num-groups", type=int, default=1, help="shared-prefix: number of groups.")
@click.option("--turns", type=int, default=4, show_default=True, help="agent: turns per session.")
@click.option(
    "--system-prompt-len",
    type=int,
    default=512,
    show_default=True,
    help="agent: system prompt tokens.",
)
@click.option(
    "--message-len", type=int, default=64, show_default=True, help="agent: tokens per new message."
)
@click.option("--think-time-s", type=float, default=0.0, help="agent: pause between turns.")
@click.option(
    "--prefix-cache-compare",
    is_flag=True,
    help="agent: run the sessions cache-busted (cold), then as they are (warm); "
    "report the TTFT saved per turn.",
)
@click.option("--dataset", help="jsonl: prompts or conversations, one JSON object per line.")
@click.option(
    "--replay", is_flag=True, help="jsonl: send each line at its timestamp_s (trace replay)."
)
@click.option(
    "--time-scale", type=float, default=1.0, show_default=True, help="Replay: 0.5 = 2x faster."
)
@click.option(
    "--ignore-eos/--no-ignore-eos",
    default=True,
    show_default=True,
    help="Ask for exactly --output-len tokens (vLLM/SGLang extension).",
)
@click.option(
    "--plan-model",
    help="Also plan this model (HF id or config path) and print predicted vs measured.",
)
@click.option("--gpu", "plan_gpu", help="With --plan-model: the server's GPU (catalog name).")
@click.option(
    "--plan-tp", type=int, default=1, show_default=True, help="With --plan-model: TP size."
)
@click.option(
    "--tokenizer",
    "tokenizer_path",
    help="A local tokenizer.json (or its folder) to size prompts with.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Client processes, each with its own event loop (for rates one core cannot drive).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--warmup", type=int, default=0, help="Warm-up requests, excluded from the metrics.")
@click.option("--duration-s", type=float, help="Stop sending after this long.")
@click.option(
    "--timeout-s", type=float, default=600.0, show_default=True, help="Per-request read timeout."
)
@click.option("--slo-ttft-s", type=float, help="Goodput: TTFT limit.")
@click.option("--slo-tpot-s", type=float, help="Goodput: TPOT limit.")
@click.option("--slo-e2e-s", type=float, help="Goodput: end-to-end limit.")
@click.option(
    "--output",
    "output_dir",
    type=click.Path(file_okay=False),
    help="Write requests.jsonl and summary.json here.",
)
@click.option(
    "--monitor",
    is_flag=True,
    help="Sample the local NVIDIA GPUs (NVML, 10 Hz) into OUTPUT/gpu_samples.jsonl.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary document.")
def bench(
    url: str,
    replicas: tuple[str, ...],
    session_affinity: bool,
    model_name: str | None,
    endpoint: str,
    api_key_env: str,
    workload: str,
    input_len: int,
    output_len: int,
    num_requests: int,
    concurrency: str | None,
    request_rate: str | None,
    search_slo: bool,
    slo_percentile: int,
    burstiness: float,
    prefix_len: int,
    num_groups: int,
    turns: int,
    system_prompt_len: int,
    message_len: int,
    think_time_s: float,
    prefix_cache_compare: bool,
    dataset: str | None,
    replay: bool,
    time_scale: float,
    ignore_eos: bool,
    plan_model: str | None,
    plan_gpu: str | None,
    plan_tp: int,
    tokenizer_path: str | None,
    workers: int,
    seed: int,
    warmup: int,
    duration_s: float | None,
    timeout_s: float,
    slo_ttft_s: float | None,
    slo_tpot_s: float | None,
    slo_e2e_s: float | None,
    output_dir: str | None,
    monitor: bool,
    as_json: bool,
) -> None:
    """Measure an OpenAI-compatible server: TTFT, TPOT, ITL, throughput, goodput, cached tokens."""
    import os
    from dataclasses import replace
    from pathlib import Path

    from servefit.bench.metrics import Slo
    from servefit.bench.runner import BenchConfig, run, run_cache_comparison
    from servefit.bench.schedules import Schedule
    from servefit.bench.workloads import WorkloadConfig

    try:
        for name, value in (("--warmup", warmup), ("--timeout-s", timeout_s)):
            if value < 0:
                raise ServefitError(f"{name} must not be negative")
        concurrencies = _levels("--concurrency", concurrency, int)
        rates = _levels("--request-rate", request_rate, float)
        slo = (
            Slo(ttft_s=slo_ttft_s, tpot_s=slo_tpot_s, e2e_s=slo_e2e_s)
            if any(v is not None for v in (slo_ttft_s, slo_tpot_s, slo_e2e_s))
            else None
        )
        if search_slo and slo is None:
            raise ServefitError(
                "--search-slo needs at least one of --slo-ttft-s, --slo-tpot-s, --slo-e2e-s"
            )
        if prefix_cache_compare and workload != "agent":
            raise ServefitError("--prefix-cache-compare needs --workload agent")
        if replay and workload != "jsonl":
            raise ServefitError("--replay needs --workload jsonl with timestamp_s on every line")
        cfg = BenchConfig(
            base_urls=(url, *replicas),
            workload=WorkloadConfig(
                kind=workload,
                num_requests=num_requests,
                input_len=input_len,
                output_len=output_len,
                endpoint="chat" if workload == "agent" else endpoint,
                ignore_eos=ignore_eos,
                seed=seed,
                prefix_len=prefix_len,
                num_groups=num_groups,
                turns=turns,
                system_prompt_len=system_prompt_len,
                message_len=message_len,
                think_time_s=think_time_s,
                path=dataset,
            ),
            schedule=Schedule(
                concurrency=concurrencies[0] if concurrencies else (1 if search_slo else None),
                is_replay=replay,
                time_scale=time_scale,
                rate_per_s=rates[0] if rates and not search_slo else None,
                burstiness=burstiness,
                seed=seed,
            ),
            model=model_name,
            api_key_env=api_key_env,
            timeout_s=timeout_s,
            warmup_requests=warmup,
            duration_s=duration_s,
            slo=slo,
            session_affinity=session_affinity,
            tokenizer_path=tokenizer_path,
            workers=workers,
        )
        if workers > 1 and workload == "agent":
            raise ServefitError(
                "--workers applies to flat workloads; agent sessions run in one process"
            )
        if tokenizer_path:
            from servefit.bench.runner import local_token_counter

            local_token_counter(tokenizer_path)  # fail now, not mid-run
    except ServefitError as error:
        fail(error)
    api_key = os.environ.get(api_key_env)
    out = Path(output_dir) if output_dir else None
    if search_slo or len(concurrencies) > 1 or len(rates) > 1:
        from servefit.bench.search import search_max_concurrency, slo_met

        levels: list[dict[str, Any]] = []

        def measure(schedule: Any) -> Any:
            tag = f"c{schedule.concurrency}" if schedule.concurrency else ""
            tag += f"r{schedule.rate_per_s:g}" if schedule.rate_per_s else ""
            result = run(
                replace(cfg, schedule=schedule), api_key=api_key, out_dir=out / tag if out else None
            )
            meets = slo_met(result.summary, slo, slo_percentile) if slo else None
            levels.append(
                {
                    "concurrency": schedule.concurrency,
                    "request_rate": schedule.rate_per_s,
                    "meets_slo": meets,
                    "result": json.loads(result.model_dump_json()),
                }
            )
            if not as_json:
                click.echo(_level_line(schedule, result.summary, meets), err=True)
            return result, meets

        best = None
        if search_slo:
            best, _ = search_max_concurrency(
                lambda c: bool(measure(replace(cfg.schedule, concurrency=c))[1])
            )
        elif len(rates) > 1:
            for rate in rates:
                measure(replace(cfg.schedule, rate_per_s=rate))
        else:
            for level in concurrencies:
                measure(replace(cfg.schedule, concurrency=level))
        doc = {
            "schema_version": 1,
            "mode": "search" if search_slo else "sweep",
            "slo": slo.model_dump() if slo else None,
            "slo_percentile": slo_percentile,
            "best_concurrency": best,
            "levels": levels,
        }
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / "sweep.json").write_text(json.dumps(doc, indent=2))
        if as_json:
            click.echo(json.dumps(doc, indent=2))
        elif search_slo:
            click.echo(f"highest concurrency meeting the SLOs at p{slo_percentile}: {best}")
        sys.exit(0 if levels and all(lv["result"]["summary"]["successful"] for lv in levels) else 1)
    prediction = None
    if plan_model:
        try:
            prediction = _bench_prediction(plan_model, plan_gpu, plan_tp, cfg)
        except ServefitError as error:
            fail(error)
    sampler: Any = contextlib.nullcontext()
    if monitor:
        from servefit.monitor.nvml import GpuMonitor

        try:
            if out is None:
                raise InvalidArgumentError(
                    "--monitor writes OUTPUT/gpu_samples.jsonl: add --output"
                )
            out.mkdir(parents=True, exist_ok=True)
            sampler = GpuMonitor(out / "gpu_samples.jsonl")
        except ServefitError as error:
            fail(error)
    with sampler:
        if prefix_cache_compare:
            result = run_cache_comparison(cfg, api_key=api_key, out_dir=out)
        else:
            total = num_requests * (turns if workload == "agent" else 1)
            with _progress(as_json, total) as listener:
                result = run(cfg, api_key=api_key, out_dir=out, listener=listener)
    if prediction is not None:
        result = result.model_copy(update={"prediction": prediction})
        if out is not None:
            (out / "summary.json").write_text(result.model_dump_json(indent=2), encoding="utf-8")
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        from rich.console import Console

        from servefit.cli.render import render_bench

        render_bench(result, Console())
    sys.exit(0 if result.summary.successful and not result.interrupted else 1)


def _bench_prediction(model: str, gpu_name: str | None, tp: int, cfg: Any) -> dict[str, Any]:
    """What `servefit plan` predicts for the benchmark's workload on the named GPU."""
    from servefit.app.bench import predict_bench

    if gpu_name is None:
        raise InvalidArgumentError("--plan-model needs --gpu (the server's GPU)")
    return predict_bench(model, gpu_name, tp, cfg)


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


def _levels(flag: str, text: str | None, kind: Any) -> list[Any]:
    """ "4" -> [4]; "1,4,16" -> [1, 4, 16] (a sweep)."""
    if text is None:
        return []
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ServefitError(
            f"{flag} takes a number or a comma-separated list, got {text!r}"
        ) from None
    if not values:
        raise ServefitError(f"{flag} is empty")
    return values


def _level_line(schedule: Any, summary: Any, meets: bool | None) -> str:
    level = f"concurrency {schedule.concurrency}" if schedule.concurrency else ""
    if schedule.rate_per_s:
        level += f" rate {schedule.rate_per_s:g}/s"
    ttft = summary.ttft_s.p50
    verdict = "" if meets is None else ("  meets SLOs" if meets else "  misses SLOs")
    return (
        f"{level:>24s}: {summary.request_throughput_per_s:8.2f} req/s, "
        f"{summary.output_throughput_tok_per_s:10.1f} tok/s, TTFT p50 "
        f"{(ttft or 0) * 1000:8.1f} ms, {summary.successful} ok / {summary.errored} err{verdict}"
    )
