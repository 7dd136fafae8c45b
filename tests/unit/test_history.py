"""The run history database: a round trip, migrations from an older file, two processes
writing at once, and the files it must refuse without changing them (a newer schema, a
truncated database, something that is not SQLite)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from servefit.adapters import history as store
from servefit.app.history import (
    DeploymentKey,
    Headline,
    default_db_path,
    deployment_keys,
    deployment_series,
    get_run,
    list_runs,
    record_run,
    registered_run_dirs,
    resolve_db_path,
)
from servefit.app.history_record import record_or_warn, record_up
from servefit.errors import HistoryError

KEY = DeploymentKey(model="org/model-a", gpu="H100-SXM", tensor_parallel_size=2)
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fill(db: Path, n: int) -> None:
    for i in range(n):
        record_run(db, "bench", KEY, {"i": i, "pad": "x" * 3000}, {"r": i}, created=T0)


def test_round_trip(tmp_path):
    db = tmp_path / "h.sqlite"
    predicted = Headline(output_tok_per_s=1000.0, ttft_p50_s=0.05, kv_cache_tokens=40_000)
    measured = Headline(output_tok_per_s=900.0, ttft_p50_s=0.07, ttft_p90_s=0.12)
    run_id = record_run(
        db,
        "bench",
        KEY,
        {"url": "http://h:8000", "api_key": "sk-abcdefghijklmnopqrstuvwx"},
        {"summary": {"successful": 10}},
        predicted,
        measured,
        tmp_path / "run",
        created=T0,
    )
    run = get_run(db, run_id)
    assert run is not None
    assert (run.kind, run.model, run.gpu) == ("bench", "org/model-a", "H100-SXM")
    assert run.deployment_key == "org/model-a|H100-SXM|tp=2"
    assert run.created_utc == "2026-03-01T12:00:00.000000+00:00"
    assert run.inputs == {"url": "http://h:8000", "api_key": "***"}  # secrets never stored
    assert run.results == {"summary": {"successful": 10}}
    assert (run.predicted, run.measured) == (predicted, measured)
    assert run.run_dir == str((tmp_path / "run").absolute())
    assert registered_run_dirs(db) == {(tmp_path / "run").absolute()}
    assert get_run(db, run_id + 1) is None


def test_filters_order_and_series(tmp_path):
    db = tmp_path / "h.sqlite"
    other = DeploymentKey(model="org/model-b", gpu="A10")
    ids = [
        record_run(db, "plan", KEY, {}, {}, created=T0),
        record_run(db, "bench", other, {}, {}, created=T0 + timedelta(days=1)),
        record_run(db, "bench", KEY, {}, {}, created=T0 + timedelta(days=2)),
    ]
    assert [r.id for r in list_runs(db)] == ids[::-1]  # newest first
    assert [r.id for r in list_runs(db, kind="bench")] == [ids[2], ids[1]]
    assert [r.id for r in list_runs(db, model="MODEL-B")] == [ids[1]]  # a part, any case
    assert [r.id for r in list_runs(db, gpu="h100")] == [ids[2], ids[0]]
    assert [r.id for r in list_runs(db, since="2026-03-02")] == [ids[2], ids[1]]
    assert [r.id for r in list_runs(db, limit=1)] == [ids[2]]
    assert [r.id for r in deployment_series(db, KEY.text)] == [ids[0], ids[2]]  # oldest first
    assert deployment_keys(db) == [KEY.text, other.text]


def test_reading_a_history_that_does_not_exist_creates_nothing(tmp_path):
    db = tmp_path / "none" / "h.sqlite"
    assert list_runs(db) == [] and deployment_keys(db) == [] and get_run(db, 1) is None
    assert not db.parent.exists()


def test_default_location_and_overrides(tmp_path):
    home = tmp_path / "home"
    linux = default_db_path(platform="linux", environ={}, home=home)
    assert linux == home / ".local" / "share" / "servefit" / "history.sqlite"
    xdg = default_db_path(platform="linux", environ={"XDG_DATA_HOME": "/data"}, home=home)
    assert xdg == Path("/data/servefit/history.sqlite")
    # the XDG spec: a relative XDG_DATA_HOME is invalid and ignored
    assert default_db_path(platform="linux", environ={"XDG_DATA_HOME": "rel"}, home=home) == linux
    mac = default_db_path(platform="darwin", environ={}, home=home)
    assert mac == home / "Library" / "Application Support" / "servefit" / "history.sqlite"
    env = {"SERVEFIT_DB": str(tmp_path / "env.sqlite")}
    assert resolve_db_path(None, environ=env) == tmp_path / "env.sqlite"
    assert resolve_db_path(tmp_path / "flag.sqlite", environ=env) == tmp_path / "flag.sqlite"


# v1 as it shipped, written out here independently of the code's migration list
V1_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, created_utc TEXT NOT NULL,
    servefit_version TEXT NOT NULL, deployment_key TEXT NOT NULL, model TEXT, gpu TEXT,
    inputs_json TEXT NOT NULL, results_json TEXT NOT NULL, run_dir TEXT);
CREATE INDEX runs_by_time ON runs (created_utc);
PRAGMA user_version = 1;
"""


def test_a_v1_database_is_migrated_with_its_data_kept(tmp_path):
    db = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript(V1_SCHEMA)
    conn.execute(
        "INSERT INTO runs (kind, created_utc, servefit_version, deployment_key, model, gpu,"
        " inputs_json, results_json, run_dir) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        ("plan", "2025-01-01T00:00:00.000000+00:00", "0.0.1", "m|g", "m", "g", '{"a": 1}',
         '{"fits": true}', None),
    )  # fmt: skip
    conn.commit()
    conn.close()
    [old] = list_runs(db)
    assert (old.kind, old.inputs, old.results, old.servefit_version) == (
        "plan",
        {"a": 1},
        {"fits": True},
        "0.0.1",
    )
    assert old.predicted == Headline() and old.measured == Headline()
    new_id = record_run(db, "bench", KEY, {}, {}, measured=Headline(output_tok_per_s=5.0))
    assert new_id == old.id + 1
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
    assert get_run(db, new_id).measured.output_tok_per_s == 5.0


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from servefit.app.history import DeploymentKey, Headline, record_run
    db, writer, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    key = DeploymentKey(model="org/m", gpu="g")
    for i in range(n):
        record_run(db, "bench", key, {"writer": writer, "i": i}, {"pad": "x" * 2000},
                   measured=Headline(output_tok_per_s=float(i)))
    """
)


def test_two_processes_writing_at_once_both_succeed(tmp_path):
    db = tmp_path / "new" / "h.sqlite"  # not there yet: both also race to create it
    n = 40
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), name, str(n)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    for w in writers:
        _, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
    runs = list_runs(db, limit=None)
    assert len(runs) == 2 * n
    assert len({r.id for r in runs}) == 2 * n
    for name in ("a", "b"):
        assert sorted(r.inputs["i"] for r in runs if r.inputs["writer"] == name) == list(range(n))


def _locked_fresh_file(path: Path) -> sqlite3.Connection:
    """A new (rollback-journal) database another connection holds an exclusive lock on:
    what a process creating the history meets while a second one is converting it."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    return holder


def test_wal_mode_is_retried_while_another_process_holds_the_new_file(tmp_path):
    # SQLite can answer "database is locked" at once, without its busy wait, to a process
    # racing another's first write (timeout=0 makes every lock answer that way here)
    db = tmp_path / "h.sqlite"
    holder = _locked_fresh_file(db)
    waiter = sqlite3.connect(db, timeout=0, isolation_level=None)
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 3:
            holder.execute("COMMIT")  # the other process finishes

    store.use_wal(waiter, db, sleep=sleep)
    assert waiter.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert pauses == [0.01, 0.02, 0.04]  # three refusals, each wait twice the last
    holder.close()
    waiter.close()


def test_a_lock_held_past_the_busy_timeout_is_an_error_naming_the_file(tmp_path):
    db = tmp_path / "h.sqlite"
    holder = _locked_fresh_file(db)
    waiter = sqlite3.connect(db, timeout=0, isolation_level=None)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(HistoryError) as error:
        store.use_wal(waiter, db, wait_s=5.0, sleep=sleep, clock=lambda: now[0])
    message = str(error.value)
    assert str(db) in message and "locked for 5 s" in message and "retry" in message
    assert 5.0 <= now[0] < 5.5  # it waited the whole timeout, then at most one more pause
    holder.execute("COMMIT")
    assert holder.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # left as it was
    holder.close()
    waiter.close()


def test_a_database_from_a_newer_schema_is_refused_and_unchanged(tmp_path):
    db = tmp_path / "h.sqlite"
    fill(db, 3)
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    conn.close()
    before = digest(db)
    for call in (lambda: list_runs(db), lambda: record_run(db, "plan", KEY, {}, {})):
        with pytest.raises(HistoryError) as error:
            call()
        message = str(error.value)
        assert str(db) in message and f"schema v{store.SCHEMA_VERSION + 1}" in message
        assert "newer servefit" in message and "left untouched" in message
    assert digest(db) == before


@pytest.mark.parametrize("keep", [0.5, 0.05], ids=["half", "first-pages"])
def test_a_truncated_database_is_reported_and_unchanged(tmp_path, keep):
    db = tmp_path / "h.sqlite"
    fill(db, 60)  # ~60 pages of 4 KiB: the rows reach past the cut
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    data = db.read_bytes()
    db.write_bytes(data[: int(len(data) * keep)])
    before = digest(db)
    for call in (lambda: list_runs(db), lambda: record_run(db, "plan", KEY, {}, {})):
        with pytest.raises(HistoryError) as error:
            call()
        message = str(error.value)
        assert message.startswith(f"{db} is damaged or truncated")
        assert "left untouched" in message and "SERVEFIT_DB" in message
    assert digest(db) == before


def test_a_file_that_is_not_sqlite_is_reported_and_unchanged(tmp_path):
    db = tmp_path / "notes.txt"
    db.write_text("my notes, not a database\n" * 10)
    before = digest(db)
    for call in (lambda: list_runs(db), lambda: record_run(db, "plan", KEY, {}, {})):
        with pytest.raises(HistoryError, match="is not a SQLite database"):
            call()
    assert digest(db) == before


def test_a_history_that_cannot_be_written_is_a_warning(tmp_path):
    (tmp_path / "a-file").write_text("")
    db = tmp_path / "a-file" / "h.sqlite"  # a file where the folder should be (root too)
    warning = record_or_warn(lambda: record_run(db, "plan", KEY, {}, {}))
    assert warning is not None and warning.startswith("warning: this run was not recorded")
    assert str(db) in warning
    assert record_or_warn(lambda: record_run(tmp_path / "ok.sqlite", "plan", KEY, {}, {})) is None


def test_up_is_recorded_from_its_run_folder(tmp_path, catalog_model):
    from servefit.adapters.plan_document import outcome_document
    from servefit.app import Deployment, Hardware, default_workload, plan_deployment
    from servefit.app.history_record import plan_key
    from servefit.core.plan import ServeSettings

    d = Deployment(
        model="Qwen/Qwen3-8B",
        hardware=Hardware(gpu="H100"),
        settings=ServeSettings(max_model_len=8192),
        workload=default_workload(
            input_len=512, output_len=64, concurrency=4, request_rate_per_s=None
        ),
        is_workload_given=True,
    )
    doc = outcome_document(plan_deployment(d))
    run_dir = tmp_path / "up-run"
    run_dir.mkdir()
    (run_dir / "plan.json").write_text(doc.model_dump_json())
    startup = {"comparisons": [{"quantity": "kv_cache_tokens", "logged": 123_456}]}
    (run_dir / "startup.json").write_text(json.dumps(startup))
    smoke = {"measured": {"ttft_s": 0.2, "tpot_s": 0.01, "output_throughput_tok_per_s": 77.0}}
    db = tmp_path / "h.sqlite"
    extra = ["--", "--api-key", "sk-abcdefghijklmnopqrstuvwx"]
    run_id = record_up(db, run_dir, {"extra": extra}, exit_code=0, smoke=smoke)
    run = get_run(db, run_id)
    assert run.kind == "up" and run.run_dir == str(run_dir.absolute())
    assert run.deployment_key == plan_key(doc).text
    assert run.predicted.kv_cache_tokens == doc.memory.kv_cache_tokens
    assert run.predicted.output_tok_per_s == doc.performance.output_throughput_tok_per_s
    assert run.measured == Headline(
        output_tok_per_s=77.0, ttft_mean_s=0.2, tpot_mean_s=0.01, kv_cache_tokens=123_456
    )
    assert "sk-abcdefghijklmnopqrstuvwx" not in json.dumps(run.inputs)
    assert run.results["plan"] == json.loads(doc.model_dump_json())


def test_another_programs_sqlite_database_is_not_written(tmp_path):
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.close()
    before = digest(db)
    with pytest.raises(HistoryError, match="not a servefit run history"):
        record_run(db, "plan", KEY, {}, {})
    assert digest(db) == before
