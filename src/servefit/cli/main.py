"""``servefit`` command line: parse -> call the library -> render -> exit code.

Exit codes: 0 fits, 1 does not fit, 2 usage error (bad flag, unknown model or GPU, a
config servefit cannot interpret).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from servefit import __version__
from servefit.errors import ServefitError

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
    **flags: Any,
) -> None:
    """Does MODEL fit GPU under vLLM? Where does the memory go, and what would fit?

    MODEL is a Hugging Face id (bundled catalog first, then the Hub), a config.json, or a
    model directory.
    """
    try:
        settings = serve_settings(flags)
        code = _plan(
            model, gpu, gpu_memory_gib, gpu_bandwidth_gbps, settings, revision, offline, as_json
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
) -> int:
    from servefit.adapters.model_source import load_model
    from servefit.core.plan import plan_capacity
    from servefit.core.vllm_command import vllm_serve_command

    gpu = _resolve_gpu(gpu_name, gpu_memory_gib, gpu_bandwidth_gbps)
    loaded = load_model(model, revision=revision, allow_hub=not offline)
    result = plan_capacity(loaded.spec, gpu, settings, mamba_ssm_dtype=loaded.mamba_ssm_dtype)
    command = vllm_serve_command(loaded.spec.name, result, settings)
    if as_json:
        from servefit.adapters.plan_document import plan_document

        doc = plan_document(
            result,
            model_id=loaded.spec.name,
            source=loaded.source,
            vllm_command=command,
            checkpoint_bytes=loaded.checkpoint_bytes,
        )
        click.echo(doc.model_dump_json(indent=2))
    else:
        from rich.console import Console

        from servefit.cli.render import render_plan

        render_plan(
            result,
            model_id=loaded.spec.name,
            vllm_command=command,
            console=Console(),
            checkpoint_bytes=loaded.checkpoint_bytes,
        )
    return EXIT_FITS if result.fits else EXIT_DOES_NOT_FIT


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
