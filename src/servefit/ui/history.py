"""The run history on the page: the runs ``servefit history`` lists (read through
:mod:`servefit.app.history`), one deployment's predicted-vs-measured numbers over time, and
the run folders the history recorded, opened as ``servefit report`` opens them.

The database is the one the CLI uses (``--db``, else ``SERVEFIT_DB``, else the user's data
directory), chosen when the server starts; a request names a run by its id and a deployment
by its key, never a file. A run folder recorded there was written by the user's own
``servefit bench`` or ``up``: that is the registration."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from servefit.ui.query import FieldError

if TYPE_CHECKING:
    from servefit.adapters.history import Headline, RunRecord

MAX_SHOWN_ID_CHARS = 40  # of a run id quoted in an error
HISTORY_PREFIX = "h"  # a history run's id on the page: h<id> (registered folders: 1, 2, ...)
MAX_LISTED = 100
# the deployment key's settings (app.history.DeploymentKey.text) -> the page's fields
KEY_FIELDS = {
    "tp": "tensor-parallel-size",
    "pp": "pipeline-parallel-size",
    "len": "max-model-len",
    "seqs": "max-num-seqs",
    "kv": "kv-cache-dtype",
    "gmu": "gpu-memory-utilization",
}


def key_fields(key: str) -> dict[str, str]:
    """The page fields a deployment key fixes: its model, GPU and recorded vLLM settings."""
    model, _, rest = key.partition("|")
    gpu, _, settings = rest.partition("|")
    fields = {"model": model}
    if gpu and gpu != "gpu?":
        fields["gpu"] = gpu
    for part in filter(None, settings.split("|")):
        name, _, value = part.partition("=")
        if name in KEY_FIELDS and value:
            fields[KEY_FIELDS[name]] = value
    return fields


def _headline(h: Headline) -> dict[str, float | None]:
    return {
        "output_tok_per_s": h.output_tok_per_s,
        "ttft_mean_s": h.ttft_mean_s,
        "tpot_mean_s": h.tpot_mean_s,
        "kv_cache_tokens": h.kv_cache_tokens,
    }


def _has_folder(run: RunRecord) -> bool:
    return bool(run.run_dir) and run.kind in ("bench", "up", "report")


def describe(run: RunRecord) -> dict[str, Any]:
    """A history run for the page: what it was, its numbers, whether it can be opened (the
    folder's name only: no path leaves the server)."""
    return {
        "id": f"{HISTORY_PREFIX}{run.id}",
        "kind": run.kind,
        "created_utc": run.created_utc,
        "deployment_key": run.deployment_key,
        "fields": key_fields(run.deployment_key),
        "predicted": _headline(run.predicted),
        "measured": _headline(run.measured),
        "name": Path(run.run_dir).name if run.run_dir else "",
        "can_open": _has_folder(run),
    }


def history_runs(db: Path | None) -> list[dict[str, Any]]:
    if db is None:
        return []
    from servefit.app.history import list_runs

    return [describe(run) for run in list_runs(db, limit=MAX_LISTED)]


def series_view(db: Path | None, key: str) -> dict[str, Any]:
    """One deployment's runs, oldest first, and the chart of predicted vs measured output
    throughput over them (run 1, 2, ... on the x axis)."""
    from servefit.adapters import svg
    from servefit.app.history import deployment_series

    if db is None:
        raise FieldError("key", "the page was started without a run history (--no-history)")
    if not key or len(key) > 1000:
        raise FieldError("key", "name a deployment (its key, as servefit history shows it)")
    runs = deployment_series(db, key)
    if not runs:
        raise FieldError("key", f"no run of {key!r} in the history")
    lines = []
    for name, side in (("predicted", "predicted"), ("measured", "measured")):
        points = [
            (float(n), getattr(run, side).output_tok_per_s)
            for n, run in enumerate(runs, 1)
            if getattr(run, side).output_tok_per_s is not None
        ]
        if points:
            lines.append((name, points))
    chart = svg.line_chart(
        "chart-history",
        "Output throughput over this deployment's runs",
        lines,
        x_label="run (oldest first)",
        y_label="output tokens/s",
        markers_only=(False, False),
    )
    return {"key": key, "runs": [describe(run) for run in runs], "chart": chart}


def history_run_folder(db: Path | None, run_id: str) -> Path:
    """The folder a history run recorded (``h<id>``), to report it."""
    from servefit.app.history import get_run

    number = run_id.removeprefix(HISTORY_PREFIX)
    shown = run_id if len(run_id) <= MAX_SHOWN_ID_CHARS else f"{run_id[:MAX_SHOWN_ID_CHARS]}..."
    # ASCII digits only ("²".isdigit() is true, int("²") fails), at most a 64-bit rowid
    if db is None or not (number.isascii() and number.isdigit() and len(number) <= 19):
        raise FieldError("run", f"no run {shown!r} (registered: servefit ui --run DIR)")
    run = get_run(db, int(number))
    if run is None or not _has_folder(run) or run.run_dir is None:
        raise FieldError("run", f"history run {shown!r} has no run folder to open")
    return Path(run.run_dir)
