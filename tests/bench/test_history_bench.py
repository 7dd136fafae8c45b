"""A bench run against the null server lands in the run history: its summary document, the
measured numbers next to ``--plan-model``'s prediction, its run folder; ``--no-history``
records nothing, and a failed run is recorded with its exit code kept."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from servefit.app.history import list_runs

from .test_bench_null_server import SERVEFIT


def bench(url: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SERVEFIT, "bench", url, "--concurrency", "2", "--num-requests", "6", *flags],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def test_a_bench_run_is_recorded_with_predicted_and_measured(null_server, tmp_path):
    db, out = tmp_path / "h.sqlite", tmp_path / "run"
    done = bench(
        null_server.url,
        *("--output-len", "8", "--output", str(out), "--json", "--db", str(db)),
        *("--plan-model", "Qwen/Qwen3-8B", "--gpu", "H100"),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == json.loads((out / "summary.json").read_text())
    [run] = list_runs(db)
    assert run.kind == "bench" and run.results == result
    assert run.run_dir == str(out.absolute())
    p, s = result["prediction"], result["summary"]
    assert run.deployment_key == f"{p['model']}|{p['gpu']}|tp=1"
    assert (run.predicted.output_tok_per_s, run.predicted.kv_cache_tokens) == (
        p["output_throughput_tok_per_s"],
        p["kv_cache_tokens"],
    )
    assert (run.predicted.ttft_mean_s, run.predicted.tpot_mean_s) == (p["ttft_s"], p["tpot_s"])
    m = run.measured
    assert m.output_tok_per_s == s["output_throughput_tok_per_s"] > 0
    assert (m.ttft_mean_s, m.ttft_p50_s, m.ttft_p90_s) == (
        s["ttft_s"]["mean"],
        s["ttft_s"]["p50"],
        s["ttft_s"]["p90"],
    )
    assert m.tpot_mean_s == s["tpot_s"]["mean"] and m.kv_cache_tokens is None
    assert run.inputs["url"] == null_server.url and run.inputs["plan_model"] == "Qwen/Qwen3-8B"


def test_no_history_records_nothing(instant_server, tmp_path):
    db = tmp_path / "h.sqlite"
    done = bench(instant_server.url, "--output-len", "2", "--db", str(db), "--no-history")
    assert done.returncode == 0, done.stderr
    assert not db.exists()


def test_a_failed_run_is_recorded_and_keeps_exit_1(instant_server, tmp_path, history_db):
    dataset = tmp_path / "d.jsonl"
    dataset.write_text('{"prompt": "x __HTTP_500__"}\n' * 4)
    done = bench(instant_server.url, "--workload", "jsonl", "--dataset", str(dataset))
    assert done.returncode == 1  # every request failed
    [run] = list_runs(history_db)  # SERVEFIT_DB, set for every test, inherited
    s = run.results["summary"]
    assert (s["successful"], s["errored"]) == (0, 4)  # the dataset's 4 lines, all failed
    assert run.measured.output_tok_per_s == 0


def test_a_report_of_a_bench_run_is_recorded_with_its_measurements(null_server, tmp_path):
    db, out = tmp_path / "h.sqlite", tmp_path / "run"
    assert bench(null_server.url, "--output-len", "8", "--output", str(out)).returncode == 0
    s = json.loads((out / "summary.json").read_text())["summary"]
    report = ["report", "Qwen/Qwen3-8B", "--gpu", "H100", "--format", "json", "--offline"]
    done = subprocess.run(
        [*SERVEFIT, *report, "--bench", str(out), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    [run] = list_runs(db, kind="report")
    assert run.results == doc and run.run_dir == str(out.absolute())
    assert run.predicted.kv_cache_tokens == doc["plan"]["memory"]["kv_cache_tokens"]
    # the report's percentiles, from its per-request TTFTs, are the bench summary's
    m = run.measured
    assert (m.ttft_p50_s, m.ttft_p90_s) == pytest.approx((s["ttft_s"]["p50"], s["ttft_s"]["p90"]))
    assert m.output_tok_per_s == s["output_throughput_tok_per_s"]
