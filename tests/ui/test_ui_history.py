"""The run history on the page: the runs ``servefit history`` lists, one deployment's
predicted vs measured over time, and a recorded run folder opened as ``servefit report``
opens it; a request names runs by id, never by path."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime

from tests.ui.conftest import CLI
from tests.ui.test_ui_api import call
from tests.unit.test_cli import OFFLINE

from servefit.adapters.history import Headline
from servefit.app.history import DeploymentKey, record_run

REPORT = ["meta-llama/Llama-3.1-8B", "--gpu", "H100-SXM", "--max-model-len", "8192"]
REPORT += ["--format", "html", "--no-history"]
KEY = DeploymentKey(
    model="meta-llama/Llama-3.1-8B", gpu="H100-SXM", tensor_parallel_size=1, max_model_len=8192
)


def _history(tmp_path, bench_run):
    db = tmp_path / "history.sqlite"
    when = [datetime(2026, 11, day, 9, tzinfo=UTC) for day in (1, 2)]
    plan_id = record_run(
        db, "plan", KEY, {}, {}, predicted=Headline(output_tok_per_s=100.0), created=when[0]
    )
    bench_id = record_run(
        db,
        "bench",
        KEY,
        {},
        {},
        predicted=Headline(output_tok_per_s=110.0),
        measured=Headline(output_tok_per_s=90.0, ttft_mean_s=0.2),
        run_dir=bench_run,
        created=when[1],
    )
    return db, plan_id, bench_id


def test_the_history_lists_runs_by_id_and_key_without_paths(tmp_path, bench_run):
    db, plan_id, bench_id = _history(tmp_path, bench_run)
    (status, _, body), (s_status, _, series) = call(
        [
            ("GET", "/api/history", {}),
            ("GET", "/api/history/series", {"params": {"key": KEY.text}}),
        ],
        history_db=db,
    )
    runs = json.loads(body)["runs"]
    assert status == 200 and [r["id"] for r in runs] == [f"h{bench_id}", f"h{plan_id}"]
    assert runs[0]["fields"] == {
        "model": "meta-llama/Llama-3.1-8B",
        "gpu": "H100-SXM",
        "tensor-parallel-size": "1",
        "max-model-len": "8192",
    }
    assert runs[0]["can_open"] and not runs[1]["can_open"]
    assert runs[0]["name"] == bench_run.name and str(bench_run.parent) not in body.decode()
    view = json.loads(series)
    assert s_status == 200
    assert [r["kind"] for r in view["runs"]] == ["plan", "bench"]  # oldest first
    assert 'id="chart-history"' in view["chart"] and view["chart"].count("<polyline") == 1
    assert ">predicted<" in view["chart"] and ">measured<" in view["chart"]


def test_a_recorded_run_folder_opens_as_servefit_report(tmp_path, bench_run):
    db, plan_id, bench_id = _history(tmp_path, bench_run)
    params = {"model": "meta-llama/Llama-3.1-8B", "gpu": "H100-SXM", "max-model-len": "8192"}
    results = call(
        [
            ("GET", "/api/report.html", {"params": {**params, "run": f"h{bench_id}"}}),
            ("GET", "/api/report.html", {"params": {**params, "run": f"h{plan_id}"}}),
            ("GET", "/api/report.html", {"params": {**params, "run": "h999"}}),
            ("GET", "/api/history/series", {"params": {"key": "nothing|here"}}),
        ],
        history_db=db,
    )
    (status, _, html), *refused = results
    cli = subprocess.run(
        [*CLI, "report", *REPORT, "--bench", str(bench_run)],
        capture_output=True,
        text=True,
        env=OFFLINE,
        timeout=120,
    )
    assert status == 200 and cli.returncode == 0, cli.stderr
    assert html.decode() == cli.stdout.removesuffix("\n")
    for r_status, _, body in refused:
        answer = json.loads(body)
        assert r_status == 400 and answer["field"] in ("run", "key"), answer


def test_without_a_history_the_page_lists_none():
    (status, _, body), (s_status, _, series) = call(
        [("GET", "/api/history", {}), ("GET", "/api/history/series", {"params": {"key": "a"}})]
    )
    assert status == 200 and json.loads(body) == {"runs": [], "enabled": False}
    assert s_status == 400 and json.loads(series)["field"] == "key"
