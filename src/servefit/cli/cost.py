"""``servefit cost``: what the deployment costs per hour, per token and per useful task."""

from __future__ import annotations

from typing import Any

import click

from servefit.cli.options import build_deployment, deployment_options, task_options
from servefit.cli.output import EXIT_DOES_NOT_FIT, EXIT_OK, console, emit_json, fail
from servefit.cli.types import FINITE_FLOAT
from servefit.errors import ServefitError


@click.command()
@click.argument("model")
@deployment_options
@click.option(
    "--usd-per-gpu-hour", type=FINITE_FLOAT, help="Price of one GPU-hour [catalog default]."
)
@click.option(
    "--utilization",
    type=FINITE_FLOAT,
    default=1.0,
    show_default=True,
    help="Fraction of the time replicas serve at the predicted throughput.",
)
@task_options
@click.option("--requests-per-day", type=FINITE_FLOAT, help="Your volume: GPU-hours and $ per day.")
@click.option("--api", "api_name", help="Compare with a per-token API from the price catalog.")
@click.option(
    "--api-usd-per-million-input", type=FINITE_FLOAT, help="Compare with this API input price."
)
@click.option("--api-usd-per-million-output", type=FINITE_FLOAT, help="... and this output price.")
@click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON document.")
def cost(
    model: str,
    usd_per_gpu_hour: float | None,
    utilization: float,
    requests_per_task: float | None,
    success_rate: float,
    success_from: str | None,
    requests_per_day: float | None,
    api_name: str | None,
    api_usd_per_million_input: float | None,
    api_usd_per_million_output: float | None,
    as_json: bool,
    **flags: Any,
) -> None:
    """$/hour, $/1M tokens and $/successful task for MODEL on GPU at the predicted
    throughput, and the break-even against a per-token API."""
    from servefit.adapters.perf_document import cost_outcome_document
    from servefit.app.cost import CostRequest, estimate_deployment_cost
    from servefit.app.evals import success_terms

    try:
        if flags.get("concurrency") is None and flags.get("request_rate") is None:
            flags["concurrency"] = 64  # a busy replica, the fleet the economics are about
        d = build_deployment(model, flags)
        outcome = estimate_deployment_cost(
            d,
            CostRequest(
                **success_terms(success_rate, success_from),
                usd_per_gpu_hour=usd_per_gpu_hour,
                utilization=utilization,
                requests_per_task=requests_per_task,
                requests_per_day=requests_per_day,
                api_name=api_name,
                api_usd_per_million_input=api_usd_per_million_input,
                api_usd_per_million_output=api_usd_per_million_output,
            ),
        )
    except ServefitError as error:
        fail(error)
    if outcome.estimate is None:  # nothing to price: the plan's verdict and recommendation
        if as_json:
            from servefit.adapters.plan_document import outcome_document

            emit_json(outcome_document(outcome.plan))
        else:
            from servefit.cli.render import render_verdict

            console().print("[bold]Nothing to price[/]: the deployment does not run as asked")
            render_verdict(outcome.plan, console())
        raise SystemExit(EXIT_DOES_NOT_FIT)
    doc = cost_outcome_document(outcome)
    if as_json:
        emit_json(doc)
    else:
        from servefit.cli.render_perf import render_cost

        render_cost(doc, console())
    raise SystemExit(EXIT_OK)
