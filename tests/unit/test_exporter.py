"""``servefit exporter``: the plan as Prometheus metrics, read back with prometheus_client's
own parser and held to ``servefit plan --json`` of the same flags; the Grafana dashboard
names only series the exporter serves (vLLM's are checked against the real server in
tests/integration/test_dashboard_vs_vllm.py)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.null_server_cli import CLI
from tests.unit.test_cli import OFFLINE, run

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "servefit-vllm.json"
FLAGS = ("Qwen/Qwen3-8B", "--gpu", "H100", "--concurrency", "16")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found, name: str, **labels: str) -> float:
    want = {"model": "Qwen/Qwen3-8B", "gpu": "H100-SXM", **labels}
    return found[(name, tuple(sorted(want.items())))]


@pytest.fixture(scope="module")
def plan() -> dict:
    done = run("plan", *FLAGS, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_metrics_are_the_plans_numbers(plan):
    done = run("exporter", *FLAGS, "--once")
    assert done.returncode == 0, done.stderr
    found = samples(done.stdout)
    load = plan["performance"]["load"]
    assert value(found, "servefit_plan_fits") == 1.0
    assert value(found, "servefit_predicted_kv_cache_tokens") == plan["memory"]["kv_cache_tokens"]
    assert value(found, "servefit_predicted_max_concurrency") == plan["memory"]["max_concurrency"]
    for stat in ("mean", "p50", "p90", "p99"):
        assert value(found, "servefit_predicted_ttft_seconds", stat=stat) == load["ttft_s"][stat]
        assert value(found, "servefit_predicted_tpot_seconds", stat=stat) == load["tpot_s"][stat]
        assert value(found, "servefit_predicted_e2e_seconds", stat=stat) == load["e2e_s"][stat]
    throughput = plan["performance"]["output_throughput_tok_per_s"]
    assert value(found, "servefit_predicted_output_throughput_tokens_per_second") == throughput
    assert value(found, "servefit_predicted_mean_batch") == load["mean_batch"]
    info = [k for k in found if k[0] == "servefit_plan_info"]
    assert len(info) == 1 and ("vllm_version", plan["settings"]["vllm_version"]) in info[0][1]


def test_a_plan_that_does_not_fit_is_served_as_not_fitting():
    done = run("exporter", "Qwen/Qwen3-8B", "--gpu", "L4", "--max-model-len", "1000000", "--once")
    assert done.returncode == 0, done.stderr
    assert value(samples(done.stdout), "servefit_plan_fits", gpu="L4") == 0.0


def test_the_server_serves_the_same_metrics_and_stops_on_sigint():
    once = run("exporter", *FLAGS, "--once").stdout
    proc = subprocess.Popen(
        [*CLI, "exporter", *FLAGS, "--port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=OFFLINE,
    )
    try:
        line = proc.stderr.readline()  # the URL, once the socket is bound
        url = re.search(r"http://\S+/metrics", line)
        assert url, line
        with urllib.request.urlopen(url.group(0), timeout=60) as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            served = response.read().decode()
        assert samples(served) == samples(once)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        proc.kill()


def test_a_bad_flag_is_exit_2():
    done = run("exporter", "Qwen/Qwen3-8B", "--gpu", "H100", "--max-num-seqs", "-4", "--once")
    assert done.returncode == 2 and "error (" in done.stderr


def _exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p["targets"]]


def test_the_dashboard_draws_only_series_the_exporter_serves():
    served = {name for name, _ in samples(run("exporter", *FLAGS, "--once").stdout)}
    named = {n for e in _exprs() for n in re.findall(r"\bservefit_[a-z0-9_]+", e)}
    assert named and named <= served, named - served
    doc = json.loads(DASHBOARD.read_text())
    assert {v["name"] for v in doc["templating"]["list"]} == {"datasource", "model", "plan_model"}
    for panel in doc["panels"]:  # each panel puts a prediction next to a measurement
        exprs = " ".join(t["expr"] for t in panel["targets"])
        assert "servefit_" in exprs and "vllm:" in exprs, panel["title"]
