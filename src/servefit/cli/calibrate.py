"""``servefit calibrate``: measure this machine and fit the performance model to it."""

from __future__ import annotations

import sys

import click

from servefit.adapters.redact import write_text
from servefit.cli.output import fail
from servefit.errors import ServefitError


@click.command()
@click.argument("model", required=False)
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
@click.option(
    "--microbenchmarks-only",
    "is_device_only",
    is_flag=True,
    help="Measure the device only (bandwidth, matmul per dtype, attention, launch): no model "
    "is built; MODEL, if given, only sets the shapes. plan --calibration uses the ceilings.",
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
    is_device_only: bool,
    output: str | None,
    offline: bool,
    as_json: bool,
) -> None:
    """Measure this machine (bandwidth, matmul and attention FLOP/s, launch overhead, and
    a synthetic stack of MODEL's layers) and fit the performance model to it.

    Every layer kind servefit plans is built: attention (full, sliding window, MLA), Gated
    DeltaNet linear attention and Mamba, dense or MoE. With --microbenchmarks-only only the
    device is measured (MODEL optional)."""
    try:
        from pathlib import Path

        from servefit.adapters.model_source import load_model
        from servefit.errors import InvalidArgumentError

        if model is None and not is_device_only:
            raise InvalidArgumentError(
                "MODEL is required (or pass --microbenchmarks-only to measure the device alone)"
            )
        if is_device_only and layers is not None:
            raise InvalidArgumentError(
                "--layers sizes the synthetic step, which --microbenchmarks-only does not build"
            )
        spec = load_model(model, allow_hub=not offline).spec if model else None
        command = " ".join(["servefit", *sys.argv[1:]])
        plan = "quick" if is_quick else plan_name
        if is_device_only:
            from servefit.calibrate.device_only import run_microbenchmarks

            doc = run_microbenchmarks(
                spec,
                engine=engine,
                device_name=device,
                gpu_name=gpu_name,
                plan_name=plan,
                command=command,
            )
        else:
            from servefit.calibrate.run import run_calibration

            assert spec is not None
            doc = run_calibration(
                spec,
                engine=engine,
                device_name=device,
                gpu_name=gpu_name,
                plan_name=plan,
                layers=layers,
                command=command,
            )
        if output:
            write_text(Path(output), doc.model_dump_json(indent=2) + "\n")
    except ServefitError as error:
        fail(error)
    if as_json:
        click.echo(doc.model_dump_json(indent=2))
    else:
        from rich.console import Console

        from servefit.cli.render_perf import render_calibration

        render_calibration(doc, Console(), output)
    sys.exit(0)
