"""The run history: every ``plan --save``, ``bench``, ``up`` and ``report`` run kept in a
local SQLite file, to list, filter and follow one deployment's predicted-vs-measured numbers
over time. This is the API the CLI (``servefit history``) and the local page call::

    from servefit.app.history import list_runs, deployment_series, resolve_db_path

    db = resolve_db_path(None)                  # SERVEFIT_DB, else the user's data directory
    for run in list_runs(db, kind="bench", model="qwen", limit=20):
        run.id, run.created_utc, run.deployment_key, run.predicted, run.measured
    series = deployment_series(db, run.deployment_key)   # oldest first

Functions raise :class:`servefit.errors.HistoryError` for a file that cannot be used
(damaged, truncated, from a newer servefit, unwritable); the file is never changed then.
Reading a history that does not exist yet returns nothing and creates no file.

=============================  ==========================================================
``resolve_db_path(value)``     the database: ``--db``, else ``SERVEFIT_DB``, else the
                               user's data directory (XDG on Linux, Application Support
                               on macOS, LOCALAPPDATA on Windows)
``record_run(db, ...)``        one run in one transaction; returns its id
``list_runs(db, ...)``         runs by kind / model / GPU / date, newest first
``get_run(db, id)``            one run with its full inputs and results, or None
``deployment_series(db, key)`` one deployment's runs, oldest first (predicted vs measured)
``deployment_keys(db)``        every deployment recorded, most recently run first
``registered_run_dirs(db)``    the run folders recorded (a page opens these, no others)
=============================  ==========================================================
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from servefit import __version__
from servefit.adapters.history import (
    KINDS,
    Headline,
    NewRun,
    RunQuery,
    RunRecord,
    insert_run,
    select_deployment_keys,
    select_run,
    select_run_dirs,
    select_runs,
)
from servefit.errors import InvalidArgumentError

__all__ = [
    "KINDS",
    "DeploymentKey",
    "Headline",
    "RunRecord",
    "deployment_keys",
    "deployment_series",
    "get_run",
    "list_runs",
    "parse_since",
    "record_run",
    "registered_run_dirs",
    "resolve_db_path",
]

DB_ENV = "SERVEFIT_DB"
DB_FILENAME = "history.sqlite"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentKey:
    """What makes two runs "the same deployment": the model, the GPU and the vLLM settings
    that decide capacity and speed. A setting a run does not know (a ``bench`` of a server
    whose flags servefit did not see) is None and left out of the key."""

    model: str
    gpu: str | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    kv_cache_dtype: str | None = None
    gpu_memory_utilization: float | None = None

    @property
    def text(self) -> str:
        """The key as stored and compared: ``model|gpu|tp=1|pp=1|len=32768|...``."""
        settings = (
            ("tp", self.tensor_parallel_size),
            ("pp", self.pipeline_parallel_size),
            ("len", self.max_model_len),
            ("seqs", self.max_num_seqs),
            ("kv", self.kv_cache_dtype),
            ("gmu", self.gpu_memory_utilization),
        )
        parts = [self.model, self.gpu or "gpu?"]
        parts += [f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}"
                  for name, value in settings if value is not None]  # fmt: skip
        return "|".join(parts)


# ---------------------------------------------------------------------------------------
# where


def default_db_path(
    *,
    platform: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> Path:
    """``history.sqlite`` in the user's data directory: ``$XDG_DATA_HOME/servefit`` (else
    ``~/.local/share/servefit``) on Linux and other Unix, ``~/Library/Application
    Support/servefit`` on macOS, ``%LOCALAPPDATA%\\servefit`` on Windows."""
    platform = sys.platform if platform is None else platform
    environ = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    if platform == "darwin":
        base = home / "Library" / "Application Support"
    elif platform.startswith("win"):
        local = environ.get("LOCALAPPDATA")
        base = Path(local) if local else home / "AppData" / "Local"
    else:
        xdg = environ.get("XDG_DATA_HOME")
        # the XDG spec: a relative path is invalid and is ignored
        base = Path(xdg) if xdg and Path(xdg).is_absolute() else home / ".local" / "share"
    return base / "servefit" / DB_FILENAME


def resolve_db_path(
    cli_value: str | Path | None, *, environ: Mapping[str, str] | None = None
) -> Path:
    """The history database: ``--db`` when given, else ``$SERVEFIT_DB``, else the default."""
    environ = os.environ if environ is None else environ
    if cli_value:
        return Path(cli_value).expanduser()
    if environ.get(DB_ENV):
        return Path(environ[DB_ENV]).expanduser()
    return default_db_path(environ=environ)


def parse_since(text: str) -> str:
    """``2026-11-01`` or ``2026-11-01T08:00`` (UTC unless an offset is given) as the stored
    form of a time, for ``created_utc >= since``."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidArgumentError(
            f"--since {text!r} is not a date: write YYYY-MM-DD or YYYY-MM-DDTHH:MM (UTC)"
        ) from None
    return utc_text(moment if moment.tzinfo else moment.replace(tzinfo=UTC))


def utc_text(moment: datetime) -> str:
    """The stored form of a time: ISO 8601 in UTC with microseconds, so text order is time
    order."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


# ---------------------------------------------------------------------------------------
# the use cases


def record_run(
    db_path: Path,
    kind: str,
    deployment_key: DeploymentKey,
    inputs: Mapping[str, Any],
    results: Mapping[str, Any],
    predicted: Headline | None = None,
    measured: Headline | None = None,
    run_dir: Path | str | None = None,
    *,
    created: datetime | None = None,
) -> int:
    """Record one run in one transaction; its id. ``inputs`` (flags as given) and
    ``results`` (the document the command wrote) are redacted of secrets as the store
    writes them (:mod:`servefit.adapters.history`). ``created`` defaults to now (tests pass
    a clock)."""
    if kind not in KINDS:
        raise InvalidArgumentError(f"run kind {kind!r}: one of {', '.join(KINDS)}")
    run = NewRun(
        kind=kind,
        created_utc=utc_text(created or datetime.now(UTC)),
        servefit_version=__version__,
        deployment_key=deployment_key.text,
        model=deployment_key.model,
        gpu=deployment_key.gpu,
        inputs=dict(inputs),
        results=dict(results),
        predicted=predicted or Headline(),
        measured=measured or Headline(),
        run_dir=str(Path(run_dir).absolute()) if run_dir is not None else None,
    )
    return insert_run(db_path, run)


def list_runs(
    db_path: Path,
    kind: str | None = None,
    model: str | None = None,
    gpu: str | None = None,
    since: str | None = None,
    limit: int | None = 50,
) -> list[RunRecord]:
    """Runs, newest first. ``model`` and ``gpu`` match a case-insensitive part of the name;
    ``since`` is a date or time (:func:`parse_since`); ``limit`` None for all."""
    if kind is not None and kind not in KINDS:
        raise InvalidArgumentError(f"--kind {kind!r}: one of {', '.join(KINDS)}")
    if limit is not None and limit < 1:
        raise InvalidArgumentError(f"--limit {limit}: at least 1")
    query = RunQuery(
        kind=kind,
        model=model,
        gpu=gpu,
        since_utc=parse_since(since) if since else None,
        limit=limit,
    )
    return select_runs(db_path, query)


MAX_RUN_ID = 2**63 - 1  # SQLite's largest rowid


def get_run(db_path: Path, run_id: int) -> RunRecord | None:
    """One run with its full inputs and results; None when there is no such id (an id
    past SQLite's 64-bit rowids, or below 1, names none)."""
    if not 1 <= run_id <= MAX_RUN_ID:
        return None
    return select_run(db_path, run_id)


def deployment_series(db_path: Path, deployment_key: str) -> list[RunRecord]:
    """Every run of one deployment (its key's text), oldest first: predicted vs measured
    over time."""
    return select_runs(
        db_path, RunQuery(deployment_key=deployment_key, limit=None, oldest_first=True)
    )


def deployment_keys(db_path: Path) -> list[str]:
    """Every deployment key recorded, the most recently run first."""
    return select_deployment_keys(db_path)


def registered_run_dirs(db_path: Path) -> set[Path]:
    """The run folders the history knows (absolute): a page that opens run folders opens
    these and no other path."""
    return {Path(d) for d in select_run_dirs(db_path)}
