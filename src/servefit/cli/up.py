"""``servefit up``: detect the hardware, plan, gate, launch vLLM with the plan's flags, hold
its startup log to the plan, smoke-bench, write the run folder, then serve."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from servefit.adapters.redact import argv_secret_values, redact_text
from servefit.cli.history import history_options, record_quietly
from servefit.cli.options import build_deployment, deployment_options
from servefit.cli.output import fail
from servefit.cli.types import POSITIVE_FLOAT
from servefit.errors import ServefitError


@click.command()
@click.argument("model")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
@deployment_options
@click.option("--python", help="The engine's interpreter [the one behind `vllm` on PATH].")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address vLLM listens on.")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--smoke", type=int, default=0, help="Run N requests of the planned workload.")
@click.option(
    "--eval",
    "eval_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="After the smoke bench, score this eval task file's items (repeatable).",
)
@click.option(
    "--eval-items",
    type=click.IntRange(1),
    default=20,
    show_default=True,
    help="A fixed, seeded subset of this many --eval items.",
)
@click.option("--check-only", is_flag=True, help="Stop the engine after the checks (CI).")
@click.option("--run-dir", type=click.Path(file_okay=False), help="[servefit-runs/up-<time>]")
@click.option(
    "--startup-timeout-s",
    type=POSITIVE_FLOAT,
    default=1200.0,
    show_default=True,
    help="Wait for ready.",
)
@click.option("--quiet-log", is_flag=True, help="Do not stream vLLM's log (it is still saved).")
@history_options
def up(
    model: str,
    extra: tuple[str, ...],
    python: str | None,
    host: str,
    port: int,
    smoke: int,
    eval_files: tuple[str, ...],
    eval_items: int,
    check_only: bool,
    run_dir: str | None,
    startup_timeout_s: float,
    quiet_log: bool,
    db: str | None,
    no_history: bool,
    **flags: Any,
) -> None:
    """Plan MODEL on this machine's hardware, gate, and launch vLLM with the plan's flags.

    \b
    servefit up MODEL [--gpu auto|cpu|NAME] [workload, targets, vLLM flags] [-- vllm args]

    NVIDIA GPUs are found through NVML, otherwise vLLM's CPU backend is planned. When the
    flags do not fit, the recommendation is launched instead (and said). Each startup line
    vLLM prints is held against the plan; then /health and /v1/models, --smoke N, the run
    folder, and serving in the foreground (Ctrl-C stops vLLM and waits for it) or, with
    --check-only, a stop. Exit 0 ready (and the smoke bench clean), 1 not launched / refused
    / failed, 2 bad input.
    """
    from servefit.app.up import UpRequest, run_up

    inputs = {"model": model, "extra": list(extra), "host": host, "port": port, **flags}
    inputs.update(smoke=smoke, check_only=check_only, run_dir=run_dir)
    inputs.update(eval_files=list(eval_files), eval_items=eval_items)
    try:
        is_version_given = flags.get("vllm_version") is not None
        gpu = flags.get("gpu")
        if gpu is not None and gpu.strip().lower() in ("auto", "cpu"):
            flags["gpu"] = None  # detected, not looked up in the catalog
        d = build_deployment(model, flags, extra_args=tuple(extra))
        items = _eval_items(eval_files, eval_items)  # a malformed file: exit 2 before launch
        request = UpRequest(
            deployment=d,
            gpu=gpu,
            python=python,
            host=host,
            port=port,
            smoke_requests=smoke,
            eval_items=items,
            is_check_only=check_only,
            run_dir=Path(run_dir) if run_dir else None,
            startup_timeout_s=startup_timeout_s,
            is_version_given=is_version_given,
        )
        # secrets never echoed: the launch line, and vLLM's own log ("non-default args:
        # {'api_key': ...}") as it is streamed
        secrets = argv_secret_values(extra)
        result = run_up(
            request,
            say=lambda text: click.echo(redact_text(text, secrets=secrets)),
            echo=None
            if quiet_log
            else lambda line: click.echo(f"  | {redact_text(line, secrets=secrets)}", err=True),
        )
    except ServefitError as error:
        fail(error)
    if result.run_dir is not None and not no_history:  # launched: its run folder is recorded
        from servefit.app.history_record import record_up

        folder = result.run_dir
        record_quietly(
            db,
            lambda path: record_up(
                path,
                folder,
                inputs,
                exit_code=result.exit_code,
                smoke=result.smoke,
                evaluation=result.eval,
            ),
        )
    sys.exit(result.exit_code)


def _eval_items(files: tuple[str, ...], count: int) -> tuple[Any, ...]:
    """``--eval`` FILEs read and checked now, a seeded subset of ``count`` kept."""
    if not files:
        return ()
    from servefit.app.evals import EvalRequest, eval_items
    from servefit.bench.evals import EvalConfig

    request = EvalRequest(
        config=EvalConfig(base_url="http://unused"),
        task_files=tuple(Path(f) for f in files),
        sample=count,
    )
    return tuple(eval_items(request))
