"""``servefit calibrate``: measure this machine and fit the performance model to it."""

from __future__ import annotations

import sys

import click

from servefit.cli.output import fail
from servefit.errors import ServefitError


@click.command()
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
        fail(error)
    if as_json:
        click.echo(doc.model_dump_json(indent=2))
    else:
        from rich.console import Console

        from servefit.cli.render_perf import render_calibration

        render_calibration(doc, Console(), output)
    sys.exit(0)
