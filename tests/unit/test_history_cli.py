"""``plan --save`` and ``servefit history`` through the real entry point: what is recorded
is what ``--json`` writes; an empty, damaged or unwritable history and the exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SERVEFIT = [sys.executable, "-m", "servefit.cli.main"]
PLAN = ["plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--max-model-len", "8192", "--offline"]


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([*SERVEFIT, *args], capture_output=True, text=True, env=env, timeout=120)


def test_plan_save_records_the_json_document_and_its_predictions(tmp_path):
    db = tmp_path / "h.sqlite"
    done = run(*PLAN, "--concurrency", "8", "--json", "--save", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    doc = json.loads(done.stdout)
    listed = run("history", "--json", "--db", str(db))
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["kind"] == "plan" and row["results"] == doc
    assert (row["model"], row["gpu"]) == ("Qwen/Qwen3-8B", doc["gpu"]["name"])
    s = doc["settings"]
    assert row["deployment_key"] == (
        f"Qwen/Qwen3-8B|{doc['gpu']['name']}|tp=1|pp=1|len=8192|seqs={s['max_num_seqs']}"
        f"|kv={s['kv_cache_dtype']}|gmu={s['gpu_memory_utilization']:g}"
    )
    perf = doc["performance"]
    assert row["predicted"] == {
        "output_tok_per_s": perf["output_throughput_tok_per_s"],
        "ttft_mean_s": perf["ttft_s"],
        "ttft_p50_s": perf["load"]["ttft_s"]["p50"],
        "ttft_p90_s": perf["load"]["ttft_s"]["p90"],
        "tpot_mean_s": perf["tpot_s"],
        "kv_cache_tokens": doc["memory"]["kv_cache_tokens"],
    }
    assert all(v is None for v in row["measured"].values())
    assert row["inputs"]["concurrency"] == 8 and row["inputs"]["max_model_len"] == 8192
    shown = run("history", "show", str(row["id"]), "--json", "--db", str(db))
    assert shown.returncode == 0 and json.loads(shown.stdout) == row
    table = run("history", "--db", str(db))
    assert table.returncode == 0 and "Qwen/Qwen3-8B" in table.stdout and "len=8192" in table.stdout


def test_a_plan_that_does_not_fit_is_recorded_and_still_exits_1(tmp_path):
    db = tmp_path / "h.sqlite"
    done = run(*PLAN, "--gpu", "A10", "--max-model-len", "32768", "--save", "--db", str(db))
    assert done.returncode == 1, done.stderr
    [row] = json.loads(run("history", "--json", "--db", str(db)).stdout)
    assert row["results"]["fits"] is False and row["gpu"] == "A10"


def test_plan_without_save_does_not_import_the_history():
    probe = (
        "import sys, atexit; atexit.register(lambda: print(sorted(m for m in sys.modules "
        "if 'history' in m), file=sys.stderr)); from servefit.cli.main import main; "
        f"main({[*PLAN, '--json']!r})"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]"


def test_an_unwritable_history_warns_and_keeps_the_exit_code(tmp_path):
    (tmp_path / "a-file").write_text("")
    db = tmp_path / "a-file" / "h.sqlite"
    done = run(*PLAN, "--json", "--save", "--db", str(db))
    assert done.returncode == 0
    assert json.loads(done.stdout)["fits"] is True  # the answer is whole
    [line] = done.stderr.splitlines()
    assert line.startswith("warning: this run was not recorded in the history:")
    assert str(db) in line


def test_saving_goes_to_servefit_db_without_db(tmp_path, history_db):
    assert run(*PLAN, "--save").returncode == 0
    assert [r["kind"] for r in json.loads(run("history", "--json").stdout)] == ["plan"]
    assert history_db.exists()


def test_an_empty_history_is_one_line_and_creates_nothing(tmp_path):
    db = tmp_path / "h.sqlite"
    done = run("history", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1 and "No runs yet" in done.stdout
    assert json.loads(run("history", "--json", "--db", str(db)).stdout) == []
    assert not db.exists()


def test_a_damaged_history_exits_2_with_the_path_and_is_not_changed(tmp_path):
    db = tmp_path / "h.sqlite"
    db.write_bytes(b"SQLite format 3\x00" + b"\x00" * 84)  # a header and nothing else
    before = db.read_bytes()
    for args in (["history"], ["history", "show", "1"]):
        done = run(*args, "--db", str(db))
        assert done.returncode == 2
        assert done.stderr.startswith(f"error (history database): {db} is damaged or truncated")
        assert "Traceback" not in done.stderr
    assert db.read_bytes() == before


def test_history_flags_are_checked(tmp_path):
    db = str(tmp_path / "h.sqlite")
    bad_since = run("history", "--since", "last tuesday", "--db", db)
    assert bad_since.returncode == 2 and "--since 'last tuesday' is not a date" in bad_since.stderr
    missing = run("history", "show", "7", "--db", db)
    assert missing.returncode == 2 and "no run 7" in missing.stderr
    assert run("history", "--kind", "deploy", "--db", db).returncode == 2


def test_the_cli_knows_the_stores_run_kinds():
    from servefit.adapters.history import KINDS
    from servefit.cli import history

    assert history.KINDS == KINDS  # spelled twice so the CLI imports no SQLite to parse flags


def test_up_records_its_run_folder_and_keeps_its_exit_code(tmp_path, monkeypatch):
    """``up`` needs vLLM; here its use case is replaced by one that leaves a run folder as a
    launched run does, so what the command records is checked without an engine."""
    from click.testing import CliRunner

    from servefit.app import up as up_app
    from servefit.app.history import list_runs
    from servefit.app.up_report import UpResult
    from servefit.cli.up import up

    plan_json = run(*PLAN, "--json").stdout
    run_dir = tmp_path / "up-run"

    def fake_run_up(request, say, echo=None):
        run_dir.mkdir()
        (run_dir / "plan.json").write_text(plan_json)
        smoke = {"measured": {"ttft_s": 0.5, "tpot_s": 0.02, "output_throughput_tok_per_s": 9.0}}
        return UpResult(exit_code=1, run_dir=run_dir, smoke=smoke)

    monkeypatch.setattr(up_app, "run_up", fake_run_up)
    db = tmp_path / "h.sqlite"
    args = ["Qwen/Qwen3-8B", "--gpu", "H100", "--offline", "--db", str(db)]
    done = CliRunner().invoke(up, [*args, "--", "--api-key", "sk-abcdefghijklmnopqrstuvwx"])
    assert done.exit_code == 1, done.output
    [row] = list_runs(db)
    assert row.kind == "up" and row.run_dir == str(run_dir.absolute())
    assert row.results["exit_code"] == 1 and row.results["plan"] == json.loads(plan_json)
    assert row.measured.output_tok_per_s == 9.0 and row.measured.kv_cache_tokens is None
    assert row.inputs["extra"] == ["--api-key", "***"] and row.inputs["gpu"] == "H100"


def test_environments_copied_at_import_point_at_a_temporary_history():
    """Modules (and other conftests) copy os.environ into their subprocesses' env when they
    are imported: the suite's history is set before that, never the user's own."""
    import tempfile

    from tests.unit.test_cli import OFFLINE

    assert OFFLINE["SERVEFIT_DB"].startswith(tempfile.gettempdir())
