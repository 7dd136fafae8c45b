"""``servefit exporter``: the plan of a deployment as Prometheus metrics, served beside the
running vLLM, so a dashboard puts ``servefit_predicted_tpot_seconds`` next to vLLM's own
histograms (``deploy/grafana/servefit-vllm.json`` is one). The series are
:mod:`servefit.adapters.prometheus`'s. Exit 0 on SIGINT/SIGTERM, 2 on an input error (a bad
flag, a port that cannot be bound); a plan that does not fit is served with
``servefit_plan_fits 0`` (it is what is deployed that the dashboard describes).
"""

from __future__ import annotations

from typing import Any

import click

from servefit.cli.options import build_deployment, deployment_options
from servefit.cli.output import fail
from servefit.errors import ServefitError


@click.command()
@click.argument("model")
@deployment_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=9466, show_default=True)
@click.option("--once", is_flag=True, help="Print the metrics once and exit (no server).")
def exporter(model: str, host: str, port: int, once: bool, **flags: Any) -> None:
    """Serve MODEL's plan on GPU as Prometheus metrics at http://HOST:PORT/metrics (the
    predicted TTFT, TPOT, E2E, throughput, batch, KV-cache size; the plan's verdict)."""
    from servefit.adapters.plan_document import outcome_document
    from servefit.adapters.prometheus import plan_exposition
    from servefit.app.plan import plan_deployment

    try:
        outcome = plan_deployment(build_deployment(model, flags))
        body = plan_exposition(outcome_document(outcome).model_dump())
    except ServefitError as error:
        fail(error)
    if once:
        click.echo(body.decode(), nl=False)
        return
    from aiohttp import web
    from prometheus_client import CONTENT_TYPE_LATEST

    from servefit.ui.server import serve

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.add_routes([web.get("/metrics", metrics)])
    try:
        serve(
            app,
            host,
            port,
            lambda url: click.echo(f"servefit exporter: {url}metrics", err=True),
        )
    except ServefitError as error:
        fail(error)
