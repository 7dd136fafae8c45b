"""``servefit history``: the recorded runs (``plan --save``, ``bench``, ``up``, ``report``),
filtered, as a table or JSON; ``servefit history show ID`` for one run's inputs and results.

Also the two options the recording commands share (``--db``, ``--no-history``) and
:func:`record_quietly`, how they record: a history that cannot be written is one warning
line on stderr, and the command keeps its exit code. Exit 0 (an empty history too),
2 a damaged, truncated or newer-schema database, or a bad flag.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servefit.cli.output import emit_json, fail
from servefit.errors import InvalidArgumentError, ServefitError

if TYPE_CHECKING:
    from rich.console import Console

    from servefit.app.history import RunRecord

WIDE_COLUMNS = 160
# as servefit.adapters.history.KINDS (imported lazily)
KINDS = ("plan", "bench", "up", "report", "eval")

DB_OPTION = click.option(
    "--db",
    type=click.Path(dir_okay=False),
    help="The run history database [$SERVEFIT_DB, else the user's data directory].",
)
NO_HISTORY_OPTION = click.option(
    "--no-history", is_flag=True, help="Do not record this run in the run history."
)


def history_options(command: Any) -> Any:
    """``--db`` and ``--no-history`` for a command that records its runs."""
    return DB_OPTION(NO_HISTORY_OPTION(command))


def record_quietly(db: str | None, record: Callable[[Path], int]) -> None:
    """Call ``record`` with the database path; a failure is one warning line on stderr."""
    from servefit.app.history import resolve_db_path
    from servefit.app.history_record import record_or_warn

    path = resolve_db_path(db)
    warning = record_or_warn(lambda: record(path))
    if warning:
        click.echo(warning, err=True)


@click.group(invoke_without_command=True)
@click.option("--kind", type=click.Choice(KINDS), help="Only runs of this kind.")
@click.option("--model", help="Only models whose id contains this (any case).")
@click.option("--gpu", help="Only GPUs whose name contains this (any case).")
@click.option("--since", help="Only runs from this date or time on (YYYY-MM-DD[THH:MM], UTC).")
@click.option(
    "--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Most runs shown."
)
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@DB_OPTION
@click.pass_context
def history(
    ctx: click.Context,
    kind: str | None,
    model: str | None,
    gpu: str | None,
    since: str | None,
    limit: int,
    as_json: bool,
    db: str | None,
) -> None:
    """The run history: every `plan --save`, `bench`, `up` and `report` run, newest first,
    predicted next to measured. `servefit history show ID` prints one run in full."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = db  # `history --db FILE show ID`: the group's --db holds for show
        return
    from servefit.app.history import list_runs, resolve_db_path

    path = resolve_db_path(db)
    try:
        runs = list_runs(path, kind=kind, model=model, gpu=gpu, since=since, limit=limit)
    except ServefitError as error:
        fail(error)
    if as_json:
        emit_json([record_dict(r) for r in runs])
    elif not runs:
        hint = "plan --save, bench, up and report record their runs"
        filtered = any((kind, model, gpu, since))
        click.echo(f"No runs match in {path}." if filtered else f"No runs yet in {path}: {hint}.")
    else:
        render_runs(runs, path)
    sys.exit(0)


@history.command()
@click.argument("run_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
@DB_OPTION
@click.pass_context
def show(ctx: click.Context, run_id: int, as_json: bool, db: str | None) -> None:
    """One recorded run: its deployment, headline numbers, inputs and results."""
    import json

    from servefit.app.history import get_run, resolve_db_path

    path = resolve_db_path(db if db is not None else ctx.obj)
    try:
        run = get_run(path, run_id)
        if run is None:
            raise InvalidArgumentError(f"no run {run_id} in the history {path}")
    except ServefitError as error:
        fail(error)
    doc = record_dict(run)
    if as_json:
        emit_json(doc)
        return
    for name in ("id", "kind", "created_utc", "servefit_version", "deployment_key", "run_dir"):
        click.echo(f"{name}: {doc[name]}")
    for side in ("predicted", "measured"):
        known = {k: v for k, v in doc[side].items() if v is not None}
        click.echo(f"{side}: {json.dumps(known) if known else '-'}")
    click.echo("inputs: " + json.dumps(doc["inputs"], indent=2, sort_keys=True))
    click.echo("results: " + json.dumps(doc["results"], indent=2, sort_keys=True))


@history.command("import")
@click.argument("result_file", type=click.Path(dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["vllm-bench"]),
    default="vllm-bench",
    show_default=True,
    help="The tool that wrote it: vllm bench serve --save-result.",
)
@DB_OPTION
@click.pass_context
def import_run(ctx: click.Context, result_file: str, fmt: str, db: str | None) -> None:
    """Record another load tool's result file as a measured bench run of its model, so it
    sits beside servefit's own runs (and its predictions) in the history."""
    from servefit.app.history import resolve_db_path
    from servefit.app.history_record import record_import

    path = resolve_db_path(db if db is not None else ctx.obj)
    try:
        run_id = record_import(path, Path(result_file), fmt)
    except ServefitError as error:
        fail(error)
    click.echo(f"recorded {result_file} as run {run_id} in {path}")


def record_dict(run: RunRecord) -> dict[str, Any]:
    from dataclasses import asdict

    doc = asdict(run)
    doc["output_tok_per_s_ratio"] = _ratio(
        run.measured.output_tok_per_s, run.predicted.output_tok_per_s
    )
    return doc


def _ratio(measured: float | None, predicted: float | None) -> float | None:
    """measured / predicted; None unless both are known and the prediction is not zero."""
    if measured is None or not predicted:
        return None
    return measured / predicted


def _eval_cell(run: RunRecord) -> str | None:
    """An eval run's accuracy, where a deployment's settings would be."""
    overall = run.results.get("overall") if run.kind == "eval" else None
    if not isinstance(overall, dict) or overall.get("accuracy") is None:
        return None
    return f"accuracy {overall['accuracy']:.1%} ({overall['correct']}/{overall['scored']})"


def _num(value: float | None, scale: float = 1.0, fmt: str = ",.0f") -> str:
    return "-" if value is None else format(value * scale, fmt)


def render_runs(runs: list[RunRecord], path: Path, console: Console | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Run history ({path})", title_justify="left")
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("when (UTC)", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    for name in ("model", "gpu", "settings"):
        table.add_column(name)
    for name in ("out tok/s pred / meas", "ratio", "TTFT ms pred / meas", "KV tokens"):
        table.add_column(name, justify="right")
    for r in runs:
        p, m = r.predicted, r.measured
        ratio = _ratio(m.output_tok_per_s, p.output_tok_per_s)
        # TTFT: p50 when known, else the mean (bench --plan-model predicts the mean only)
        ttft_p = p.ttft_mean_s if p.ttft_p50_s is None else p.ttft_p50_s
        ttft_m = m.ttft_mean_s if m.ttft_p50_s is None else m.ttft_p50_s
        kv = _num(p.kv_cache_tokens)
        if m.kv_cache_tokens is not None:
            kv += f" / {_num(m.kv_cache_tokens)}"
        table.add_row(
            str(r.id),
            r.created_utc[:16].replace("T", " "),
            r.kind,
            r.model or "-",
            r.gpu or "-",
            _eval_cell(r) or " ".join(r.deployment_key.split("|")[2:]) or "-",
            f"{_num(p.output_tok_per_s)} / {_num(m.output_tok_per_s)}",
            "-" if ratio is None else f"{ratio:.2f}",
            f"{_num(ttft_p, 1000, ',.1f')} / {_num(ttft_m, 1000, ',.1f')}",
            kv,
        )
    if console is None:  # a pipe gets the whole table, not 80 columns of wrapped cells
        console = Console() if sys.stdout.isatty() else Console(width=WIDE_COLUMNS)
    console.print(table)
