"""``servefit`` command line: parse -> call the library -> render -> exit code.

Exit codes: 0 fits, 1 does not fit, 2 usage error (bad flag, unknown model or GPU, a
config servefit cannot interpret).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import click

from servefit import __version__
from servefit.cli.performance import (
    cost_inputs,
    pop_calibration,
    pop_workload,
    predict,
    workload_options,
)
from servefit.errors import InvalidArgumentError, ServefitError

EXIT_FITS = 0
EXIT_DOES_NOT_FIT = 1
EXIT_USAGE = 2


def _fail(error: ServefitError) -> None:
    click.echo(f"{type(error).__name__}: {error}", err=True)
    sys.exit(EXIT_USAGE)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="servefit")
def cli() -> None:
    """Will this LLM workload fit this serving system, and where does the memory go?"""


_SERVE_OPTIONS = [
    click.option("--tensor-parallel-size", "-tp", type=int, default=1, show_default=True),
    click.option("--pipeline-parallel-size", "-pp", type=int, default=1, show_default=True),
    click.option(
        "--max-model-len", type=int, help="Longest request vLLM accepts [model's maximum]."
    ),
    click.option(
        "--max-num-seqs", type=int, help="Most running sequences [vLLM's default for the GPU]."
    ),
    click.option(
        "--max-num-batched-tokens", type=int, help="Tokens per scheduler step [vLLM's default]."
    ),
    click.option(
        "--gpu-memory-utilization",
        type=float,
        help="Fraction of GPU memory vLLM may use [0.92/0.9].",
    ),
    click.option(
        "--kv-cache-dtype",
        default="auto",
        show_default=True,
        help="auto, fp8, fp8_e4m3, fp8_e5m2, ...",
    ),
    click.option(
        "--kv-cache-memory-bytes",
        "--kv-cache-memory",
        "kv_cache_memory",
        help="KV-cache memory per GPU (bytes, or 41.89GiB); skips the budget, as vLLM's flag does.",
    ),
    click.option(
        "--block-size", type=int, help="Tokens per KV-cache block [16; raised for hybrids]."
    ),
    click.option(
        "--enable-prefix-caching/--no-enable-prefix-caching", default=True, show_default=True
    ),
    click.option("--enforce-eager", is_flag=True, help="No CUDA graphs."),
    click.option(
        "--dtype",
        default="auto",
        show_default=True,
        help="Weight dtype: auto, bfloat16, float16, float32.",
    ),
    click.option("--quantization", help="Online quantization of a 16-bit checkpoint (fp8)."),
    click.option(
        "--vllm-version", default=None, help="vLLM version whose accounting to mirror [0.33]."
    ),
    click.option("--concurrency", type=int, help="Your target: requests in flight at once."),
    click.option(
        "--context",
        "context_tokens",
        type=int,
        help="Your target: tokens per request [max-model-len].",
    ),
    click.option("--offline", is_flag=True, help="Never contact the Hugging Face Hub."),
]


def serve_options(command: Any) -> Any:
    """vLLM's flags (and the user's target), shared by plan and preflight."""
    for option in reversed(_SERVE_OPTIONS):
        command = option(command)
    return command


def serve_settings(flags: dict[str, Any]) -> Any:
    """Pop the serve flags out of ``flags`` into a ServeSettings."""
    from servefit.core.engine import DEFAULT_VLLM_VERSION
    from servefit.core.plan import ServeSettings
    from servefit.units import parse_bytes

    kv_memory = flags.pop("kv_cache_memory", None)
    version = flags.pop("vllm_version", None)
    names = (
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "gpu_memory_utilization",
        "kv_cache_dtype",
        "block_size",
        "enable_prefix_caching",
        "enforce_eager",
        "dtype",
        "quantization",
        "concurrency",
        "context_tokens",
    )
    return ServeSettings(
        kv_cache_memory_bytes=parse_bytes(kv_memory) if kv_memory else None,
        vllm_version=version or DEFAULT_VLLM_VERSION,
        **{name: flags.pop(name) for name in names if name in flags},
    )


@cli.command()
@click.argument("model")
@click.option("--gpu", help="GPU name or alias from the catalog (A40, a100, h100-sxm, ...).")
@click.option("--gpu-memory-gib", type=float, help="Describe a custom GPU: memory in GiB.")
@click.option("--gpu-bandwidth-gbps", type=float, help="Custom GPU: memory bandwidth in GB/s.")
@serve_options
@workload_options
@click.option(
    "--performance/--no-performance",
    default=True,
    show_default=True,
    help="Predict TTFT, decode rate and throughput for the workload.",
)
@click.option("--num-gpus", type=int, help="Scaling: find the best TP x PP x DP layout of N GPUs.")
@click.option(
    "--gpus-per-node", type=int, default=8, show_default=True, help="Scaling: GPUs per node."
)
@click.option(
    "--objective",
    type=click.Choice(["throughput", "latency"]),
    default="throughput",
    show_default=True,
    help="Scaling: what the best layout maximises (meeting the SLO flags first).",
)
@click.option("--revision", help="Hub revision when the config comes from the Hub.")
@click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON document.")
def plan(
    model: str,
    gpu: str | None,
    gpu_memory_gib: float | None,
    gpu_bandwidth_gbps: float | None,
    revision: str | None,
    offline: bool,
    as_json: bool,
    performance: bool,
    num_gpus: int | None,
    gpus_per_node: int,
    objective: str,
    **flags: Any,
) -> None:
    """Does MODEL fit GPU under vLLM? Where does the memory go, how fast will the workload
    run, and what would fit?

    MODEL is a Hugging Face id (bundled catalog first, then the Hub), a config.json, or a
    model directory.
    """
    try:
        settings = serve_settings(flags)
        calibration = pop_calibration(flags)
        workload, engine, slo = pop_workload(flags, settings.concurrency or 1)
        if gpu is None and gpu_memory_gib is None and calibration is not None:
            from servefit.calibrate.profile import calibrated_device

            gpu = calibrated_device(calibration[0]).name
        code = _plan(
            model,
            gpu,
            gpu_memory_gib,
            gpu_bandwidth_gbps,
            settings,
            revision,
            offline,
            as_json,
            perf_request=(workload, engine, slo) if performance else None,
            scaling_request=(num_gpus, gpus_per_node, objective) if num_gpus else None,
            calibration=calibration,
        )
    except ServefitError as error:
        _fail(error)
    sys.exit(code)


def _resolve_gpu(
    gpu_name: str | None, gpu_memory_gib: float | None, gpu_bandwidth_gbps: float | None
) -> Any:
    from servefit.adapters.catalog import gpu_catalog
    from servefit.core.hardware import custom_gpu
    from servefit.errors import InvalidArgumentError
    from servefit.units import GB_BYTES, GIB_BYTES

    if gpu_name is None and gpu_memory_gib is None:
        raise InvalidArgumentError(
            "name a GPU with --gpu (see `servefit gpus`) or describe one with --gpu-memory-gib"
        )
    base = gpu_catalog().get(gpu_name) if gpu_name else None
    if gpu_memory_gib is None and gpu_bandwidth_gbps is None:
        return base
    if base is None and (gpu_memory_gib is None or gpu_bandwidth_gbps is None):
        raise InvalidArgumentError(
            "a custom GPU needs both --gpu-memory-gib and --gpu-bandwidth-gbps"
        )
    memory = int(gpu_memory_gib * GIB_BYTES) if gpu_memory_gib else base.memory_bytes
    bandwidth = (
        gpu_bandwidth_gbps * GB_BYTES if gpu_bandwidth_gbps else base.memory_bandwidth_bytes_per_s
    )
    return custom_gpu(memory_bytes=memory, memory_bandwidth_bytes_per_s=bandwidth, base=base)


def _plan(
    model: str,
    gpu_name: str | None,
    gpu_memory_gib: float | None,
    gpu_bandwidth_gbps: float | None,
    settings: Any,
    revision: str | None,
    offline: bool,
    as_json: bool,
    perf_request: tuple[Any, str | None, Any] | None = None,
    scaling_request: tuple[int, int, str] | None = None,
    calibration: Any = None,
) -> int:
    from servefit.adapters.model_source import load_model
    from servefit.core.plan import plan_capacity
    from servefit.core.vllm_command import vllm_serve_command

    if calibration is not None and gpu_name and gpu_name.endswith("(measured)"):
        from servefit.calibrate.profile import calibrated_device

        gpu = calibrated_device(calibration[0])
    else:
        gpu = _resolve_gpu(gpu_name, gpu_memory_gib, gpu_bandwidth_gbps)
    loaded = load_model(model, revision=revision, allow_hub=not offline)
    result = plan_capacity(loaded.spec, gpu, settings, mamba_ssm_dtype=loaded.mamba_ssm_dtype)
    command = vllm_serve_command(loaded.spec.name, result, settings)
    perf = perf_doc = None
    if perf_request is not None and result.starts:
        from servefit.adapters.perf_document import performance_section

        perf = predict(result, *perf_request, calibration=calibration)
        perf_doc = performance_section(perf)
    scaling = None
    if scaling_request is not None:
        workload, engine, slo = perf_request or pop_workload(
            {"input_len": 1024, "output_len": 256}, settings.concurrency or 1
        )
        scaling = _scaling_section(loaded, gpu, settings, workload, engine, slo, *scaling_request)
    if as_json:
        from servefit.adapters.plan_document import plan_document

        doc = plan_document(
            result,
            model_id=loaded.spec.name,
            source=loaded.source,
            vllm_command=command,
            checkpoint_bytes=loaded.checkpoint_bytes,
            performance=perf_doc,
            scaling=scaling,
        )
        click.echo(doc.model_dump_json(indent=2))
    else:
        from rich.console import Console

        from servefit.cli.render import render_plan
        from servefit.cli.render_perf import render_performance, render_scaling

        console = Console()
        render_plan(
            result,
            model_id=loaded.spec.name,
            vllm_command=command,
            console=console,
            checkpoint_bytes=loaded.checkpoint_bytes,
        )
        if perf is not None:
            render_performance(perf, console)
        if scaling is not None:
            render_scaling(scaling, console)
    return EXIT_FITS if result.fits else EXIT_DOES_NOT_FIT


def _scaling_section(
    loaded: Any,
    gpu: Any,
    settings: Any,
    workload: Any,
    engine: str | None,
    slo: Any,
    num_gpus: int,
    gpus_per_node: int,
    objective: str,
    calibration: Any = None,
) -> Any:
    from servefit.adapters.perf_document import ScalingSection, layout_section
    from servefit.cli.performance import profile_for
    from servefit.core.ops import model_coeffs
    from servefit.core.perf import simulate_load
    from servefit.core.scaling import choose_layout, layout_commands, plan_scaling

    profile = profile_for(gpu, engine, calibration)

    def simulate(plan: Any, w: Any, ep: int) -> Any:
        r = plan.settings
        m = model_coeffs(
            plan.model,
            tp=r.tensor_parallel_size,
            pp=r.pipeline_parallel_size,
            ep=ep,
            kv_cache_dtype=r.kv_cache_dtype,
        )
        return simulate_load(plan, m, profile, w, slo)

    results = plan_scaling(
        loaded.spec,
        gpu,
        settings,
        workload,
        simulate,
        num_gpus=num_gpus,
        gpus_per_node=gpus_per_node,
        mamba_ssm_dtype=loaded.mamba_ssm_dtype,
    )
    best = choose_layout(results, objective, slo)
    return ScalingSection(
        num_gpus=num_gpus,
        gpus_per_node=gpus_per_node,
        objective=objective,
        layouts=[layout_section(r) for r in results],
        best=best.layout.label if best else None,
        commands=list(layout_commands(loaded.spec.name, best.layout, gpus_per_node))
        if best
        else [],
    )


@cli.command(context_settings={"ignore_unknown_options": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@serve_options
@click.option(
    "--from-vllm-args",
    is_flag=True,
    help="Read the model and flags from the vLLM command after `--`.",
)
@click.option("--strict", is_flag=True, help="Warnings fail the gate too.")
@click.option("--python", "python", help="Interpreter to probe PyTorch and the engine in.")
@click.option(
    "--record", "record", type=click.Path(dir_okay=False), help="Write the probed facts here."
)
@click.option(
    "--facts",
    "facts_file",
    type=click.Path(dir_okay=False, exists=True),
    help="Judge a recording instead of probing this machine.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
def preflight(
    args: tuple[str, ...],
    from_vllm_args: bool,
    strict: bool,
    python: str | None,
    record: str | None,
    facts_file: str | None,
    offline: bool,
    as_json: bool,
    **flags: Any,
) -> None:
    """Check driver -> CUDA -> PyTorch -> engine -> model -> plan; run COMMAND only if all pass.

    \b
    servefit preflight MODEL [flags] [-- COMMAND ...]
    servefit preflight --from-vllm-args -- vllm serve MODEL --tensor-parallel-size 2 ...

    Exit code 0 when every check passes, 1 otherwise (COMMAND is then never run).
    """
    try:
        code, command = _preflight(
            list(args), from_vllm_args, strict, python, record, facts_file, offline, as_json, flags
        )
    except ServefitError as error:
        _fail(error)
    if code == EXIT_FITS and command:
        from servefit.preflight.gate import exec_command

        exec_command(command)
    sys.exit(code)


def _preflight(
    args: list[str],
    from_vllm_args: bool,
    strict: bool,
    python: str | None,
    record: str | None,
    facts_file: str | None,
    offline: bool,
    as_json: bool,
    flags: dict[str, Any],
) -> tuple[int, list[str]]:
    from pathlib import Path

    from servefit.errors import InvalidArgumentError
    from servefit.preflight import gate
    from servefit.preflight.vllm_args import parse_vllm_command

    if from_vllm_args:
        parsed = parse_vllm_command(args)
        model, command = parsed.model, args
        flags = {**flags, **parsed.settings}
    else:
        if not args and not facts_file:
            raise InvalidArgumentError(
                "name a MODEL (or use --from-vllm-args -- vllm serve MODEL ...)"
            )
        model, command = (args[0] if args else None), args[1:]
    if facts_file and command:
        raise InvalidArgumentError("--facts judges a recording; it never runs a command")
    settings = serve_settings(flags)
    if facts_file:
        facts = gate.load_facts(Path(facts_file))
        if model and (facts.model is None or facts.model.model != model):
            from servefit.preflight.probes import probe_model

            facts = facts.model_copy(update={"model": probe_model(model, allow_hub=not offline)})
    else:
        facts = gate.collect_facts(
            model, python=python or gate.default_python(command), allow_hub=not offline
        )
    if record:
        gate.record_facts(facts, Path(record))
    result = gate.run_gate(facts, settings, strict=strict, allow_hub=not offline)
    if as_json:
        import json

        doc = {
            "schema_version": 1,
            "passed": result.passed,
            "strict": strict,
            "checks": [
                {"name": c.name, "status": c.status.value, "reason": c.reason, "remedy": c.remedy}
                for c in result.checks
            ],
            "command": command,
            "facts": json.loads(result.facts.model_dump_json()),
        }
        click.echo(json.dumps(doc, indent=2))
    else:
        from rich.console import Console

        from servefit.cli.render import render_checks

        render_checks(
            result.checks, passed=result.passed, command=command, console=Console(stderr=False)
        )
    return (EXIT_FITS if result.passed else EXIT_DOES_NOT_FIT), command


@cli.command("null-server")
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
        _fail(ServefitError("--ttft-ms and --itl-ms must be >= 0 and --output-len >= 1"))
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


@cli.command()
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
        _fail(error)
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
            _fail(error)
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
            _fail(error)
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
    """What servefit plan predicts for this workload on the named GPU: the KV-cache capacity
    (how many requests of this length fit at once) and what bounds it."""
    from servefit.adapters.model_source import load_model
    from servefit.core.plan import ServeSettings, plan_capacity
    from servefit.errors import InvalidArgumentError

    if gpu_name is None:
        raise InvalidArgumentError("--plan-model needs --gpu (the server's GPU)")
    gpu = _resolve_gpu(gpu_name, None, None)
    loaded = load_model(model, allow_hub=True)
    w = cfg.workload
    context = (
        w.system_prompt_len + w.turns * (w.message_len + w.output_len)
        if w.kind == "agent"
        else w.input_len + w.output_len
    )
    concurrency = cfg.schedule.concurrency or 1
    plan = plan_capacity(
        loaded.spec,
        gpu,
        ServeSettings(
            tensor_parallel_size=tp,
            context_tokens=context,
            concurrency=concurrency,
            max_model_len=context,  # the server's own limit is unknown; the workload needs this
        ),
        mamba_ssm_dtype=loaded.mamba_ssm_dtype,
        with_suggestions=False,
    )
    return {
        "model": loaded.spec.name,
        "gpu": gpu.name,
        "tensor_parallel_size": tp,
        "context_tokens": context,
        "kv_cache_memory_bytes": plan.memory.kv_cache_bytes,
        "kv_cache_tokens": plan.kv_cache_tokens,
        "max_concurrent_requests_at_context": plan.concurrency_at_context,
        "target_concurrency": concurrency,
        "fits_target": plan.fits,
        "note": "capacity only: servefit predicts speed once the performance model exists",
    }


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


@cli.command()
@click.argument("models", nargs=-1, required=True)
@click.option(
    "--gpus", "gpu_list", required=True, help="Comma-separated GPUs: A40,A100-80GB,H100,M4-Pro"
)
@serve_options
@workload_options
@click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON document.")
def compare(
    models: tuple[str, ...], gpu_list: str, offline: bool, as_json: bool, **flags: Any
) -> None:
    """The same workload for MODELS on several GPUs, side by side: capacity, bandwidth,
    compute, interconnect, and what bounds each machine."""
    try:
        from servefit.adapters.perf_document import compare_document
        from servefit.cli.performance import compare_rows

        settings = serve_settings(flags)
        calibration = pop_calibration(flags)
        workload, engine, slo = pop_workload(flags, settings.concurrency or 1)
        names = [g.strip() for g in gpu_list.split(",") if g.strip()]
        if not names:
            raise InvalidArgumentError("--gpus needs at least one GPU name")
        if calibration is not None and len(names) > 1:
            raise InvalidArgumentError(
                "--calibration describes one device: compare a single GPU with it"
            )
        rows, explanation = compare_rows(
            models, names, settings, workload, engine, slo, offline, calibration
        )
        doc = compare_document(rows, workload.describe(), explanation)
    except ServefitError as error:
        _fail(error)
    if as_json:
        click.echo(doc.model_dump_json(indent=2))
    else:
        from rich.console import Console

        from servefit.cli.render_perf import render_compare

        render_compare(doc, Console())
    sys.exit(EXIT_FITS if any(r.fits for r in doc.rows) else EXIT_DOES_NOT_FIT)


@cli.command()
@click.argument("model")
@click.option("--gpu", required=True, help="GPU name or alias from the catalog.")
@serve_options
@workload_options
@click.option("--usd-per-gpu-hour", type=float, help="Price of one GPU-hour [catalog default].")
@click.option(
    "--utilization",
    type=float,
    default=1.0,
    show_default=True,
    help="Fraction of the time replicas serve at the predicted throughput.",
)
@click.option("--requests-per-task", type=float, default=1.0, show_default=True)
@click.option("--success-rate", type=float, default=1.0, show_default=True)
@click.option("--requests-per-day", type=float, help="Your volume: GPU-hours and $ per day.")
@click.option("--api", "api_name", help="Compare with a per-token API from the price catalog.")
@click.option("--api-usd-per-million-input", type=float, help="Compare with this API input price.")
@click.option("--api-usd-per-million-output", type=float, help="... and this output price.")
@click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON document.")
def cost(
    model: str,
    gpu: str,
    offline: bool,
    as_json: bool,
    usd_per_gpu_hour: float | None,
    utilization: float,
    requests_per_task: float,
    success_rate: float,
    requests_per_day: float | None,
    api_name: str | None,
    api_usd_per_million_input: float | None,
    api_usd_per_million_output: float | None,
    **flags: Any,
) -> None:
    """$/hour, $/1M tokens and $/successful task for MODEL on GPU at the predicted
    throughput, and the break-even against a per-token API."""
    try:
        from servefit.adapters.catalog import api_price, gpu_catalog, gpu_price
        from servefit.adapters.model_source import load_model
        from servefit.adapters.perf_document import cost_document, cost_section, performance_section
        from servefit.core.cost import ApiPrice, estimate_cost
        from servefit.core.plan import plan_capacity

        settings = serve_settings(flags)
        calibration = pop_calibration(flags)
        workload, engine, slo = pop_workload(flags, settings.concurrency or 64)
        spec_gpu = gpu_catalog().get(gpu)
        loaded = load_model(model, allow_hub=not offline)
        plan = plan_capacity(
            loaded.spec, spec_gpu, settings, mamba_ssm_dtype=loaded.mamba_ssm_dtype
        )
        if not plan.starts:
            raise InvalidArgumentError(
                f"{loaded.spec.name} does not start on {plan.settings.num_gpus} x {spec_gpu.name}: "
                f"{plan.problems[0]}"
            )
        perf = predict(plan, workload, engine, slo, calibration=calibration)
        if usd_per_gpu_hour is None:
            price = gpu_price(spec_gpu.name)
            if price is None:
                raise InvalidArgumentError(
                    f"no catalog price for {spec_gpu.name}: pass --usd-per-gpu-hour"
                )
            usd_per_gpu_hour, price_source = price
        else:
            price_source = "--usd-per-gpu-hour"
        api = None
        if api_usd_per_million_input is not None or api_usd_per_million_output is not None:
            api = ApiPrice(
                name="the given API price",
                usd_per_million_input_tokens=api_usd_per_million_input or 0.0,
                usd_per_million_output_tokens=api_usd_per_million_output or 0.0,
            )
        elif api_name:
            api = api_price(api_name)
        inputs = cost_inputs(
            perf,
            plan,
            usd_per_gpu_hour,
            price_source,
            utilization=utilization,
            requests_per_task=requests_per_task,
            success_rate=success_rate,
            requests_per_day=requests_per_day,
        )
        estimate = estimate_cost(inputs, api)
        doc = cost_document(
            model=loaded.spec.name,
            gpu=spec_gpu.name,
            num_gpus=plan.settings.num_gpus,
            performance=performance_section(perf),
            cost=cost_section(
                estimate,
                usd_per_gpu_hour=usd_per_gpu_hour,
                price_source=price_source,
                api=api.name if api else None,
            ),
        )
    except ServefitError as error:
        _fail(error)
    if as_json:
        click.echo(doc.model_dump_json(indent=2))
    else:
        from rich.console import Console

        from servefit.cli.render_perf import render_cost

        render_cost(doc, Console())
    sys.exit(EXIT_FITS)


@cli.command()
@click.argument("model")
@click.option("--device", type=click.Choice(["cuda", "mps", "cpu"]), help="[the best available]")
@click.option("--gpu", "gpu_name", help="Catalog GPU whose datasheet to compare with [detected].")
@click.option(
    "--plan",
    "plan_name",
    type=click.Choice(["tiny", "quick", "full"]),
    default="quick",
    show_default=True,
    help="quick: about a minute on a GPU; full: decode to batch 256, prefill to 32k.",
)
@click.option("--quick", "is_quick", is_flag=True, help="Same as --plan quick.")
@click.option("--layers", type=int, help="Layers to build for the synthetic step [plan's].")
@click.option(
    "--engine",
    type=click.Choice(["vllm", "sglang", "trtllm", "llama.cpp", "mlx"]),
    help="Engine whose profile to start from [vllm; mlx on Apple].",
)
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write the profile JSON.")
@click.option("--offline", is_flag=True, help="Never contact the Hugging Face Hub.")
@click.option("--json", "as_json", is_flag=True, help="Print the profile JSON.")
def calibrate(
    model: str,
    device: str | None,
    gpu_name: str | None,
    plan_name: str,
    is_quick: bool,
    layers: int | None,
    engine: str | None,
    output: str | None,
    offline: bool,
    as_json: bool,
) -> None:
    """Measure this machine (bandwidth, matmul and attention FLOP/s, launch overhead, and
    a synthetic stack of MODEL's layers) and fit the performance model to it."""
    try:
        from pathlib import Path

        from servefit.adapters.model_source import load_model
        from servefit.calibrate.run import run_calibration

        loaded = load_model(model, allow_hub=not offline)
        command = " ".join(["servefit", *sys.argv[1:]])
        doc = run_calibration(
            loaded.spec,
            engine=engine,
            device_name=device,
            gpu_name=gpu_name,
            plan_name="quick" if is_quick else plan_name,
            layers=layers,
            command=command,
        )
        if output:
            Path(output).write_text(doc.model_dump_json(indent=2) + "\n", encoding="utf-8")
    except ServefitError as error:
        _fail(error)
    if as_json:
        click.echo(doc.model_dump_json(indent=2))
    else:
        from rich.console import Console

        from servefit.cli.render_perf import render_calibration

        render_calibration(doc, Console(), output)
    sys.exit(0)


@cli.command()
@click.argument("model", required=False)
@click.option("--gpu", help="GPU name or alias from the catalog.")
@serve_options
@workload_options
@click.option(
    "--bench",
    "bench_dir",
    type=click.Path(file_okay=False),
    help="A `servefit bench --output DIR` run of this deployment: measured side by side.",
)
@click.option(
    "--gpu-samples",
    type=click.Path(dir_okay=False),
    help="GPU samples (`bench --monitor`) [DIR/gpu_samples.jsonl when present].",
)
@click.option("--usd-per-gpu-hour", type=float, help="Economics: price [catalog default].")
@click.option(
    "--compare",
    "compare_files",
    nargs=2,
    type=click.Path(dir_okay=False),
    help="Two report JSON files (--format json) side by side.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["md", "html", "json"]),
    default="md",
    show_default=True,
)
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write to a file.")
def report(
    model: str | None,
    gpu: str | None,
    offline: bool,
    bench_dir: str | None,
    gpu_samples: str | None,
    usd_per_gpu_hour: float | None,
    compare_files: tuple[str, str] | None,
    fmt: str,
    output: str | None,
    **flags: Any,
) -> None:
    """The five-minute checklist for MODEL on GPU: model, memory, workload, performance
    (predicted and measured), scaling, economics, and the bottleneck diagnosis."""
    from pathlib import Path

    from servefit.adapters import report as rep

    try:
        if compare_files:
            a, b = (rep.load_report(Path(f)) for f in compare_files)
            text = {
                "md": rep.render_compare_markdown,
                "html": rep.render_compare_html,
            }.get(fmt, rep.render_compare_markdown)(a, b)
        else:
            if model is None or gpu is None:
                raise InvalidArgumentError("report needs MODEL and --gpu (or --compare A B)")
            doc = _report(model, gpu, offline, bench_dir, gpu_samples, usd_per_gpu_hour, flags)
            text = {"md": rep.render_markdown, "html": rep.render_html, "json": rep.dumps}[fmt](doc)
    except ServefitError as error:
        _fail(error)
    if output:
        Path(output).write_text(text, encoding="utf-8")
        click.echo(f"report written to {output}")
    else:
        click.echo(text)


def _report(
    model: str,
    gpu_name: str,
    offline: bool,
    bench_dir: str | None,
    gpu_samples: str | None,
    usd_per_gpu_hour: float | None,
    flags: dict[str, Any],
) -> Any:
    from pathlib import Path

    from servefit.adapters import report as rep
    from servefit.adapters.catalog import gpu_catalog, gpu_price
    from servefit.adapters.model_source import load_model
    from servefit.adapters.perf_document import cost_section, performance_section
    from servefit.adapters.plan_document import plan_document
    from servefit.core.cost import estimate_cost
    from servefit.core.diagnosis import diagnose
    from servefit.core.ops import decode_step, model_coeffs, prefill_step, step_ops, total
    from servefit.core.plan import plan_capacity
    from servefit.core.roofline import peak_flops_per_s
    from servefit.core.vllm_command import vllm_serve_command
    from servefit.monitor.nvml import read_samples

    settings = serve_settings(flags)
    calibration = pop_calibration(flags)
    workload, engine, slo = pop_workload(flags, settings.concurrency or 1)
    gpu = gpu_catalog().get(gpu_name)
    loaded = load_model(model, allow_hub=not offline)
    plan = plan_capacity(loaded.spec, gpu, settings, mamba_ssm_dtype=loaded.mamba_ssm_dtype)
    perf = predict(plan, workload, engine, slo, calibration=calibration) if plan.starts else None
    doc = plan_document(
        plan,
        model_id=loaded.spec.name,
        source=loaded.source,
        vllm_command=vllm_serve_command(loaded.spec.name, plan, settings),
        checkpoint_bytes=loaded.checkpoint_bytes,
        performance=performance_section(perf) if perf else None,
    )
    cost = None
    price = (usd_per_gpu_hour, "--usd-per-gpu-hour") if usd_per_gpu_hour else gpu_price(gpu.name)
    if perf is not None and price is not None:
        estimate = estimate_cost(cost_inputs(perf, plan, price[0], price[1]))
        cost = cost_section(estimate, usd_per_gpu_hour=price[0], price_source=price[1], api=None)
    measured = samples = None
    if bench_dir:
        result, records = rep.load_bench(Path(bench_dir))
        measured = rep.measured_section(result, records, source=str(bench_dir))
        default_samples = Path(bench_dir) / "gpu_samples.jsonl"
        if gpu_samples is None and default_samples.exists():
            gpu_samples = str(default_samples)
    if gpu_samples:
        samples = rep.gpu_section(read_samples(Path(gpu_samples)))
    m = model_coeffs(plan.model, tp=plan.settings.tensor_parallel_size)
    batch = max(1, round(measured.concurrency)) if measured and measured.concurrency else 1
    context = workload.input_len.mean + workload.output_len.mean // 2
    decode_bytes = total(step_ops(m, decode_step(batch, context))).memory_bytes
    prefill_flops = total(step_ops(m, prefill_step(workload.input_len.mean))).flops
    observed = rep.observations(
        measured,
        samples,
        decode_bytes_per_step=decode_bytes,
        prefill_flops=prefill_flops,
        bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
        peak_flops_per_s=peak_flops_per_s(gpu, "bf16"),
    )
    comm_share = perf.decode.comm_s / perf.decode.time_s if perf else 0.0
    findings = diagnose(observed, rep.expectations_from(doc, comm_share))
    return rep.build_report(
        doc, cost=cost, measured=measured, gpu=samples, findings=findings, workload=workload
    )


@cli.command()
def gpus() -> None:
    """List the hardware catalog."""
    from rich.console import Console

    from servefit.adapters.catalog import gpu_catalog
    from servefit.cli.render import render_gpus

    def tflops(value: float | None) -> str:
        return f"{value / 1e12:,.0f}" if value else "-"

    rows = [
        (
            g.name + (" ?" if g.is_provisional else ""),
            f"{g.memory_bytes / 2**30:,.0f} GiB",
            f"{g.memory_bandwidth_bytes_per_s / 1e9:,.0f} GB/s",
            tflops(g.bf16_flops_per_s),
            tflops(g.fp8_flops_per_s),
            g.compute_capability or "-",
            ", ".join(g.aliases[:3]),
        )
        for g in gpu_catalog().gpus
    ]
    render_gpus(rows, Console())


@cli.command()
def models() -> None:
    """List the bundled model catalog (usable offline)."""
    from servefit.adapters.catalog import model_ids

    for model_id in model_ids():
        click.echo(model_id)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
