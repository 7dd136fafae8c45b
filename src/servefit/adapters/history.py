"""The run history: one SQLite file (the standard library's ``sqlite3``) holding every
recorded plan, bench, ``up`` and report run.

- **Versioned schema.** ``PRAGMA user_version`` is the schema version; :data:`MIGRATIONS`
  is the ordered list of steps from an empty file to :data:`SCHEMA_VERSION`. Opening an
  older file applies the missing steps in one transaction (the data kept). A file whose
  version is newer than this code knows is refused, never migrated or written.
- **Atomic, concurrent writes.** Each record is one ``BEGIN IMMEDIATE`` ... ``COMMIT``; the
  file is in WAL mode with a busy timeout, so two processes recording at once both succeed
  (one waits for the other's short transaction).
- **Damage reported, never repaired.** A file that is not SQLite, or that SQLite finds
  damaged (a truncated file is the usual case), is a :class:`HistoryError` naming the path
  and what to do; the file is left as it was.

The store knows rows, not commands: :mod:`servefit.app.history` builds the records.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from servefit.adapters.redact import redact_data, redact_text
from servefit.errors import HistoryError

SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database file
BUSY_TIMEOUT_MS = 30_000  # how long a writer waits for another's transaction before failing
KINDS = ("plan", "bench", "up", "report", "eval")

# The headline numbers kept as columns (predicted_<name>, measured_<name>) so a deployment's
# runs can be queried over time without parsing JSON.
HEADLINE_COLUMNS = (
    "output_tok_per_s",
    "ttft_mean_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "tpot_mean_s",
    "kv_cache_tokens",
)

# Schema version N is reached by applying MIGRATIONS[:N] in order. Never edit a step that
# has shipped: append a new one (an older file then migrates through every step).
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # v1: the runs with their inputs and results as JSON
    (
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            kind TEXT NOT NULL,
            created_utc TEXT NOT NULL,
            servefit_version TEXT NOT NULL,
            deployment_key TEXT NOT NULL,
            model TEXT,
            gpu TEXT,
            inputs_json TEXT NOT NULL,
            results_json TEXT NOT NULL,
            run_dir TEXT
        )""",
        "CREATE INDEX runs_by_time ON runs (created_utc)",
    ),
    # v2: predicted and measured headline numbers as columns, and the per-deployment index
    (
        *(
            f"ALTER TABLE runs ADD COLUMN {side}_{name} REAL"
            for side in ("predicted", "measured")
            for name in HEADLINE_COLUMNS
        ),
        "CREATE INDEX runs_by_deployment ON runs (deployment_key, created_utc)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Headline:
    """The numbers a run is judged by, on one side (predicted or measured); None: unknown."""

    output_tok_per_s: float | None = None
    ttft_mean_s: float | None = None
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    tpot_mean_s: float | None = None
    kv_cache_tokens: float | None = None

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))


@dataclass(frozen=True, slots=True, kw_only=True)
class NewRun:
    """A run to record; the store gives it its id."""

    kind: str  # one of KINDS
    created_utc: str  # ISO 8601, UTC, microseconds: sorts as text
    servefit_version: str
    deployment_key: str
    model: str | None
    gpu: str | None
    inputs: dict[str, Any]
    results: dict[str, Any]
    predicted: Headline = Headline()
    measured: Headline = Headline()
    run_dir: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord(NewRun):
    """A recorded run."""

    id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RunQuery:
    """Which runs to read, newest first (``oldest_first`` for a series over time)."""

    kind: str | None = None
    model: str | None = None  # a case-insensitive part of the model id
    gpu: str | None = None  # a case-insensitive part of the GPU name
    deployment_key: str | None = None  # exact
    since_utc: str | None = None  # ISO 8601 UTC, as created_utc is written
    limit: int | None = 50
    oldest_first: bool = False


# ---------------------------------------------------------------------------------------
# opening: checked, migrated


def _damaged(path: Path, what: str) -> HistoryError:
    return HistoryError(
        f"{path} {what}. It was left untouched: move it aside (or point --db or SERVEFIT_DB "
        "at another file) and servefit starts a new history there."
    )


def _check_header(path: Path) -> None:
    """A non-empty file that does not start as SQLite files do is refused before SQLite
    opens it (an empty file is a new database, as SQLite treats it)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
    except OSError as error:
        raise HistoryError(f"cannot read the history database {path}: {error.strerror}") from None
    if head and head != SQLITE_MAGIC:
        raise _damaged(path, "is not a SQLite database (servefit's run history is one)")


def _sqlite_error(path: Path, error: sqlite3.Error) -> HistoryError:
    name = getattr(error, "sqlite_errorname", "")
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or "malformed" in str(error):
        return _damaged(path, f"is damaged or truncated (SQLite: {error})")
    return HistoryError(f"cannot use the history database {path}: {error}")


def _quick_check(conn: sqlite3.Connection, path: Path) -> None:
    problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)")]
    if problems != ["ok"]:
        raise _damaged(path, f"is damaged or truncated (SQLite: {'; '.join(problems)})")


def _refuse_foreign(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version; a file from a newer servefit, or another program's
    database, refused before anything is written to it."""
    # one statement, one snapshot: read apart, another process's first commit could land
    # between the two (version 0, then its tables)
    version, tables = conn.execute(
        "SELECT user_version, (SELECT count(*) FROM sqlite_master) FROM pragma_user_version"
    ).fetchone()
    if version > SCHEMA_VERSION:
        raise HistoryError(
            f"{path} has history schema v{version}, newer than this servefit knows "
            f"(v{SCHEMA_VERSION}): it was written by a newer servefit and was left untouched. "
            "Upgrade servefit, or point --db or SERVEFIT_DB at another file."
        )
    if version == 0 and tables:
        raise HistoryError(
            f"{path} is a SQLite database but not a servefit run history (it has tables "
            "and no history schema version); it was left untouched. Point --db or "
            "SERVEFIT_DB at another file."
        )
    return int(version)


def use_wal(
    conn: sqlite3.Connection,
    path: Path,
    *,
    wait_s: float = BUSY_TIMEOUT_MS / 1000,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Put the file in WAL mode (it stays so: done once, by whichever process is first).
    Changing the journal mode needs the file to itself, and where two processes create a
    new history at once SQLite can answer "database is locked" at once, without running the
    busy handler (one holds a read lock while the other waits to write: SQLite breaks that
    deadlock by failing the reader). So a lock is retried here, for as long as the busy
    timeout would have waited, before it is an error."""
    deadline = clock() + wait_s
    pause_s = 0.01
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
            if clock() >= deadline:
                raise HistoryError(
                    f"cannot use the history database {path}: another process kept it "
                    f"locked for {wait_s:g} s ({error}); retry when it has finished"
                ) from None
        sleep(pause_s)
        pause_s = min(pause_s * 2, 0.5)


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the file to SCHEMA_VERSION in one transaction (another process may be doing
    the same: the transaction waits for it, then reads the version again)."""
    if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")  # another process may be migrating: wait, then re-read
    try:
        version = _refuse_foreign(conn, path)
        for step in MIGRATIONS[version:]:
            for statement in step:
                conn.execute(statement)
        if version < SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def connect(path: Path, *, create: bool) -> Iterator[sqlite3.Connection | None]:
    """A connection to a checked, current history database; None when the file does not
    exist and ``create`` is false (nothing recorded yet: the file is not created)."""
    exists = path.exists()
    if not exists and not create:
        yield None
        return
    if exists:
        if path.is_dir():
            raise HistoryError(f"the history database {path} is a directory: name a file")
        _check_header(path)
    else:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise HistoryError(
                f"cannot create the history database {path}: {error.strerror or error}"
            ) from None
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except sqlite3.Error as error:
        raise _sqlite_error(path, error) from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if exists:
            _quick_check(conn, path)  # before anything is written to it
        _refuse_foreign(conn, path)
        use_wal(conn, path)  # concurrent readers and one writer
        _migrate(conn, path)
        yield conn
    except sqlite3.Error as error:
        raise _sqlite_error(path, error) from None
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------
# rows

_BASE_COLUMNS = (
    "kind",
    "created_utc",
    "servefit_version",
    "deployment_key",
    "model",
    "gpu",
    "inputs_json",
    "results_json",
    "run_dir",
)
_HEADLINE_SQL = tuple(f"{s}_{n}" for s in ("predicted", "measured") for n in HEADLINE_COLUMNS)
_COLUMNS = ("id", *_BASE_COLUMNS, *_HEADLINE_SQL)


def _stored_json(value: Any) -> str:
    """A run's inputs or results as stored: plain JSON (a tuple or path as text), every
    secret redacted (an argv list as a command, secret-named keys, URL credentials)."""
    plain = json.loads(json.dumps(value, default=str))
    return json.dumps(redact_data(plain), sort_keys=True)


def _stored_text(value: str | None) -> str | None:
    return None if value is None else redact_text(value)


def _values(run: NewRun) -> tuple[Any, ...]:
    """The row as written: nothing reaches the file that the redaction has not seen."""
    return (
        run.kind,
        run.created_utc,
        run.servefit_version,
        _stored_text(run.deployment_key),
        _stored_text(run.model),
        _stored_text(run.gpu),
        _stored_json(run.inputs),
        _stored_json(run.results),
        _stored_text(run.run_dir),
        *(getattr(run.predicted, n) for n in HEADLINE_COLUMNS),
        *(getattr(run.measured, n) for n in HEADLINE_COLUMNS),
    )


def _record(row: sqlite3.Row) -> RunRecord:
    return RunRecord(
        id=row["id"],
        kind=row["kind"],
        created_utc=row["created_utc"],
        servefit_version=row["servefit_version"],
        deployment_key=row["deployment_key"],
        model=row["model"],
        gpu=row["gpu"],
        inputs=json.loads(row["inputs_json"]),
        results=json.loads(row["results_json"]),
        run_dir=row["run_dir"],
        predicted=Headline(**{n: row[f"predicted_{n}"] for n in HEADLINE_COLUMNS}),
        measured=Headline(**{n: row[f"measured_{n}"] for n in HEADLINE_COLUMNS}),
    )


def insert_run(path: Path, run: NewRun) -> int:
    """Record one run in one transaction (the file created and migrated as needed); its id."""
    if run.kind not in KINDS:
        raise ValueError(f"unknown run kind {run.kind!r}")  # a caller's bug, not user input
    columns = (*_BASE_COLUMNS, *_HEADLINE_SQL)
    sql = f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    with connect(path, create=True) as conn:
        if conn is None:  # create=True always connects
            raise HistoryError(f"cannot open the history database {path}")
        try:
            conn.execute("BEGIN IMMEDIATE")
            row_id = conn.execute(sql, _values(run)).lastrowid
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return int(row_id or 0)


def select_runs(path: Path, query: RunQuery) -> list[RunRecord]:
    """The runs matching ``query``; none when the file does not exist (it is not created)."""
    where: list[str] = []
    params: list[Any] = []
    if query.kind is not None:
        where.append("kind = ?")
        params.append(query.kind)
    for column, part in (("model", query.model), ("gpu", query.gpu)):
        if part:
            where.append(f"instr(lower(coalesce({column}, '')), lower(?)) > 0")
            params.append(part)
    if query.deployment_key is not None:
        where.append("deployment_key = ?")
        params.append(query.deployment_key)
    if query.since_utc is not None:
        where.append("created_utc >= ?")
        params.append(query.since_utc)
    order = "ASC" if query.oldest_first else "DESC"
    sql = f"SELECT {', '.join(_COLUMNS)} FROM runs"
    sql += f" WHERE {' AND '.join(where)}" if where else ""
    sql += f" ORDER BY created_utc {order}, id {order}"
    if query.limit is not None:
        sql += " LIMIT ?"
        params.append(query.limit)
    return _read(path, sql, params)


def select_run(path: Path, run_id: int) -> RunRecord | None:
    rows = _read(path, f"SELECT {', '.join(_COLUMNS)} FROM runs WHERE id = ?", [run_id])
    return rows[0] if rows else None


def select_deployment_keys(path: Path) -> list[str]:
    """Every deployment key recorded, the most recently run first."""
    with connect(path, create=False) as conn:
        if conn is None:
            return []
        sql = "SELECT deployment_key FROM runs GROUP BY deployment_key ORDER BY max(id) DESC"
        return [row[0] for row in conn.execute(sql)]


def select_run_dirs(path: Path) -> list[str]:
    """Every run folder recorded (bench, up, a report's bench run), as stored (absolute)."""
    with connect(path, create=False) as conn:
        if conn is None:
            return []
        sql = "SELECT DISTINCT run_dir FROM runs WHERE run_dir IS NOT NULL ORDER BY run_dir"
        return [row[0] for row in conn.execute(sql)]


def _read(path: Path, sql: str, params: list[Any]) -> list[RunRecord]:
    with connect(path, create=False) as conn:
        if conn is None:
            return []
        conn.row_factory = sqlite3.Row
        try:
            return [_record(row) for row in conn.execute(sql, params)]
        except (ValueError, TypeError) as error:  # a row whose JSON was edited by hand
            raise _damaged(path, f"holds a row servefit cannot read ({error})") from None
