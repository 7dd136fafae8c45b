"""``servefit compare``: the same workload for several models on several GPUs."""

from __future__ import annotations

from typing import Any

import click

from servefit.cli.options import build_deployment, deployment_options
from servefit.cli.output import console, emit_json, fail, verdict_exit
from servefit.errors import ServefitError


@click.command()
@click.argument("models", nargs=-1, required=True)
@click.option(
    "--gpus", "gpu_list", required=True, help="Comma-separated GPUs: A40,A100-80GB,H100,M4-Pro"
)
@deployment_options
@click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON document.")
def compare(models: tuple[str, ...], gpu_list: str, as_json: bool, **flags: Any) -> None:
    """The same workload for MODELS on several GPUs, side by side: capacity, bandwidth,
    compute, interconnect, and what bounds each machine. Each cell is judged as `plan`
    judges it; exit 0 when at least one fits."""
    from servefit.adapters.perf_document import comparison_document
    from servefit.app.compare import compare_deployments

    try:
        if flags.get("gpu"):
            raise ServefitError("compare takes --gpus A,B,... (not --gpu)")
        d = build_deployment(models[0], flags)
        names = [g.strip() for g in gpu_list.split(",") if g.strip()]
        comparison = compare_deployments(d, models, names)
        doc = comparison_document(comparison, d.describe_workload())
    except ServefitError as error:
        fail(error)
    if as_json:
        emit_json(doc)
    else:
        from servefit.cli.render_perf import render_compare

        render_compare(doc, console())
    verdict_exit(any(r.fits for r in doc.rows))
