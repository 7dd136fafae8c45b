"""``servefit report``: the five-minute checklist (Markdown, HTML or JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from servefit.adapters.redact import write_text
from servefit.cli.history import history_options, record_quietly
from servefit.cli.options import build_deployment, deployment_options, task_options
from servefit.cli.output import fail
from servefit.cli.types import POSITIVE_FLOAT
from servefit.errors import InvalidArgumentError, ServefitError


@click.command()
@click.argument("model", required=False)
@deployment_options
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
@click.option(
    "--served-model-name",
    help="The alias the benchmarked server serves the model as (vLLM's "
    "--served-model-name): the bench must have served it, or the model's id or name.",
)
@click.option("--usd-per-gpu-hour", type=POSITIVE_FLOAT, help="Economics: price [catalog default].")
@task_options
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
@history_options
def report(
    model: str | None,
    bench_dir: str | None,
    gpu_samples: str | None,
    served_model_name: str | None,
    usd_per_gpu_hour: float | None,
    requests_per_task: float | None,
    success_rate: float,
    success_from: str | None,
    compare_files: tuple[str, str] | None,
    fmt: str,
    output: str | None,
    db: str | None,
    no_history: bool,
    **flags: Any,
) -> None:
    """The five-minute checklist for MODEL on GPU: model, memory, workload, performance
    (predicted and measured), scaling, economics, and the bottleneck diagnosis. A bench
    whose server named another model, or whose figures exceed this GPU's rooflines, is
    reported as not this deployment instead of diagnosed; otherwise the economics use its
    measured throughput."""
    from servefit.adapters import report as rep

    inputs = {"model": model, "bench_dir": bench_dir, "gpu_samples": gpu_samples, **flags}
    inputs.update(usd_per_gpu_hour=usd_per_gpu_hour, format=fmt, output=output)
    inputs.update(
        served_model_name=served_model_name,
        requests_per_task=requests_per_task,
        success_rate=success_rate,
        success_from=success_from,
    )
    doc = None
    try:
        if compare_files:
            a, b = (rep.load_report(Path(f)) for f in compare_files)
            text = {
                "md": rep.render_compare_markdown,
                "html": rep.render_compare_html,
            }.get(fmt, rep.render_compare_markdown)(a, b)
        else:
            if model is None or not flags.get("gpu"):
                raise InvalidArgumentError("report needs MODEL and --gpu (or --compare A B)")
            from servefit.app.evals import success_terms
            from servefit.app.report import ReportRequest, report_deployment

            doc = report_deployment(
                build_deployment(model, flags),
                ReportRequest(
                    bench_dir=bench_dir,
                    gpu_samples=gpu_samples,
                    usd_per_gpu_hour=usd_per_gpu_hour,
                    requests_per_task=requests_per_task,
                    **success_terms(success_rate, success_from),
                    served_model_name=served_model_name,
                ),
            )
            text = {"md": rep.render_markdown, "html": rep.render_html, "json": rep.dumps}[fmt](doc)
        if output:
            try:
                write_text(Path(output), text)
            except OSError as error:
                raise InvalidArgumentError(
                    f"cannot write the report to {output}: {error.strerror}"
                ) from None
    except ServefitError as error:
        fail(error)
    if output:
        click.echo(f"report written to {output}")
    else:
        click.echo(text)
    if doc is not None and not no_history:  # a --compare of two reports is not a new run
        from servefit.app.history_record import record_report

        report_doc = doc
        record_quietly(db, lambda path: record_report(path, report_doc, inputs, bench_dir))
