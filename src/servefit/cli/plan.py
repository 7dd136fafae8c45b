"""``servefit plan``: does the deployment fit, where does the memory go, how fast will the
workload run, and (when it does not fit) the one recommendation."""

from __future__ import annotations

from typing import Any

import click

from servefit.cli.options import build_deployment, deployment_options, scaling_options
from servefit.cli.output import console, emit_json, fail, verdict_exit
from servefit.errors import ServefitError


@click.command()
@click.argument("model")
@deployment_options
@click.option(
    "--performance/--no-performance",
    default=True,
    show_default=True,
    help="Predict TTFT, decode rate and throughput for the workload.",
)
@scaling_options("Scaling: find the best TP x PP x DP layout of N GPUs.")
@click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON document.")
@click.option("--save", is_flag=True, help="Record this plan in the run history.")
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    help="With --save: the run history database [$SERVEFIT_DB, else the user's data directory].",
)
def plan(
    model: str,
    performance: bool,
    num_gpus: int | None,
    gpus_per_node: int,
    objective: str,
    as_json: bool,
    save: bool,
    db: str | None,
    **flags: Any,
) -> None:
    """Does MODEL fit the GPU under vLLM with this workload? Where does the memory go, how
    fast will it run, and what would fit?

    MODEL is a Hugging Face id (bundled catalog first, then the Hub), a config.json, or a
    model directory. Exit 0 fits, 1 does not fit, 2 input error.
    """
    from servefit.app.plan import plan_deployment

    inputs = {"model": model, "performance": performance, "num_gpus": num_gpus, **flags}
    scaling_doc = None
    try:
        d = build_deployment(model, flags)
        if num_gpus is None:
            outcome = plan_deployment(d, with_performance=performance)
        else:  # one verdict: the chosen layout's (one replica of it), not the flags' TP
            from servefit.adapters.perf_document import scaling_section
            from servefit.app.scaling import ScalingRequest, plan_on_gpus

            request = ScalingRequest(
                num_gpus=num_gpus, gpus_per_node=gpus_per_node, objective=objective
            )
            chosen = plan_on_gpus(d, request, with_performance=performance)
            outcome = chosen.outcome
            scaling_doc = scaling_section(chosen.scaling)
    except ServefitError as error:
        fail(error)
    if as_json:
        from servefit.adapters.plan_document import outcome_document

        emit_json(outcome_document(outcome, scaling=scaling_doc))
    else:
        from servefit.cli.render import render_capacity, render_verdict
        from servefit.cli.render_perf import render_performance, render_scaling

        out = console()
        render_capacity(
            outcome.capacity,
            model_id=outcome.resolved.model_id,
            console=out,
            checkpoint_bytes=outcome.resolved.loaded.checkpoint_bytes,
            loaded=outcome.resolved.loaded,
        )
        if outcome.performance is not None:
            render_performance(outcome.performance, out)
        elif performance:
            out.print(f"\n[dim]No performance section: {outcome.performance_note}[/]")
        if scaling_doc is not None:
            render_scaling(scaling_doc, out)
        render_verdict(outcome, out)
    if save:  # the history modules are imported only here: plan's cold start does not pay
        from servefit.adapters.plan_document import outcome_document
        from servefit.app.history_record import record_plan
        from servefit.cli.history import record_quietly

        doc = outcome_document(outcome, scaling=scaling_doc)
        record_quietly(db, lambda path: record_plan(path, doc, inputs))
    verdict_exit(outcome.fits)
