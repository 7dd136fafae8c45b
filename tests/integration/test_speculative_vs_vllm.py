"""Speculative decoding on the real vLLM (CPU) server: an n-gram proposer on the tiny model.
`servefit bench` reports the acceptance the server's own counters give, `check-log` reads the
speculative config from the start-up log and holds its KV lines to the plan, and the plan's
launch command carries the flag as vLLM takes it."""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from servefit.bench import server_metrics
from servefit.bench.runner import BenchConfig, run
from servefit.bench.schedules import Schedule
from servefit.bench.workloads import WorkloadConfig
from servefit.cli.main import cli
from servefit.cli.render import render_bench

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_server as helper

pytestmark = pytest.mark.integration
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}


@pytest.fixture(scope="module")
def ngram_server(tmp_path_factory: pytest.TempPathFactory):
    python = helper.require_vllm()
    work_dir = tmp_path_factory.mktemp("vllm-ngram")
    server = helper.start(
        helper.free_port(),
        work_dir,
        python=python,
        # greedy by default: the random-weight model then repeats itself, and the n-gram
        # proposer finds its drafts in what it already wrote
        extra_args=[
            "--speculative-config",
            json.dumps(NGRAM),
            "--override-generation-config",
            '{"temperature": 0.0}',
        ],
    )
    try:
        yield server
    finally:
        helper.stop_server(server.process)


def _counters(base_url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    parsed = list(server_metrics.samples(text))
    raw = server_metrics.sums(parsed)
    out = {
        "drafts": raw.get("vllm:spec_decode_num_drafts_total", 0.0),
        "drafted": raw.get("vllm:spec_decode_num_draft_tokens_total", 0.0),
        "accepted": raw.get("vllm:spec_decode_num_accepted_tokens_total", 0.0),
    }
    for name, labels, value in parsed:
        if name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
            key = f"pos_{labels['position']}"
            out[key] = out.get(key, 0.0) + value
    return out


def test_bench_acceptance_is_the_servers_own(ngram_server, tmp_path):
    before = _counters(ngram_server.base_url)
    cfg = BenchConfig(
        base_urls=(ngram_server.base_url,),
        workload=WorkloadConfig(num_requests=6, input_len=64, output_len=48),
        schedule=Schedule(concurrency=2),
    )
    result = run(cfg, api_key=None, out_dir=tmp_path)
    after = _counters(ngram_server.base_url)
    assert result.summary.successful == 6
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    assert delta["drafts"] > 0 and delta["accepted"] > 0
    m = result.server_metrics
    assert m["spec_decode_drafts"] == delta["drafts"]
    assert m["spec_decode_acceptance_rate"] == pytest.approx(delta["accepted"] / delta["drafted"])
    assert m["spec_decode_mean_acceptance_length"] == pytest.approx(
        1 + delta["accepted"] / delta["drafts"]
    )
    for position in range(NGRAM["num_speculative_tokens"]):
        share = delta.get(f"pos_{position}", 0.0) / delta["drafts"]
        assert m.get(f"spec_decode_acceptance_pos_{position}", 0.0) == pytest.approx(share)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["server_metrics"]["spec_decode_drafts"] == delta["drafts"]
    # the run's acceptance, planned with: the plan states it and times its steps with it
    deployment = [
        str(ngram_server.model_dir),
        *("--gpu", "cpu", "--max-model-len", "4096", "--speculative-config", json.dumps(NGRAM)),
        *("--input-len", "64", "--output-len", "48"),
    ]
    planned = CliRunner().invoke(
        cli,
        ["plan", *deployment, "--acceptance-from", str(tmp_path), "--concurrency", "1", "--json"],
    )
    assert planned.exit_code in (0, 1), planned.output
    performance = json.loads(planned.output)["performance"]
    kept = 1 + sum(delta.get(f"pos_{i}", 0.0) for i in range(3)) / delta["drafts"]
    assert performance["speculation"]["expected_tokens_per_step"] == pytest.approx(kept)
    assert any("measured by the bench run" in a for a in performance["assumptions"])
    # the report holds the run's acceptance beside the plan's, planned at the measured one
    reported = CliRunner().invoke(
        cli,
        [
            "report",
            *deployment,
            *("--bench", str(tmp_path), "--served-model-name", ngram_server.served_model_name),
            *("--concurrency", "2", "--format", "json", "--no-history"),
        ],
    )
    assert reported.exit_code in (0, 1), reported.output
    report = json.loads(reported.output)
    assert report["measured"]["spec_mean_acceptance_length"] == pytest.approx(
        1 + delta["accepted"] / delta["drafts"]
    )
    assert report["plan"]["performance"]["speculation"]["expected_tokens_per_step"] == (
        pytest.approx(kept)
    )
    console = Console(record=True, width=200)
    render_bench(result, console)
    assert f"speculative decoding: {delta['drafts']:,.0f} drafts" in console.export_text()


def test_check_log_reads_the_speculative_config_and_holds_the_kv_lines(ngram_server):
    log = ngram_server.log_path
    result = CliRunner().invoke(
        cli, ["check-log", str(log), str(ngram_server.model_dir), "--gpu", "cpu"]
    )
    assert result.exit_code == 0, result.output
    deployment = next(line for line in result.output.splitlines() if "the deployment:" in line)
    assert "--speculative-config" in deployment and '"method":"ngram"' in deployment
    tokens = re.search(r"= kv_cache_tokens: logged ([\d,]*\d), planned ([\d,]*\d)", result.output)
    assert tokens is not None and tokens.group(1) == tokens.group(2), result.output
    assert "Findings: none" in result.output
