"""``servefit history import``: another tool's result file as a measured bench run. The file
here has the keys vLLM 0.32's ``vllm/benchmarks/serve.py`` writes with ``--save-result
--save-detailed`` (a real one is imported in tests/integration/test_bench_vs_vllm_bench.py)."""

from __future__ import annotations

import json
import statistics

import pytest
from tests.unit.test_cli import OFFLINE, run


def result_file(tmp_path, **changes):
    doc = {
        "date": "20261202-101500",
        "backend": "vllm",
        "model_id": "Qwen/Qwen3-8B",
        "tokenizer_id": "Qwen/Qwen3-8B",
        "num_prompts": 4,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 4,
        "duration": 2.5,
        "completed": 4,
        "failed": 0,
        "total_input_tokens": 400,
        "total_output_tokens": 128,
        "request_throughput": 1.6,
        "output_throughput": 51.2,
        "total_token_throughput": 211.2,
        "mean_ttft_ms": 120.0,
        "median_ttft_ms": 110.0,
        "p99_ttft_ms": 190.0,
        "mean_tpot_ms": 20.0,
        "median_tpot_ms": 19.0,
        "ttfts": [0.08, 0.1, 0.12, 0.18],
        "generated_texts": ["a long answer"] * 4,
    }
    doc.update(changes)
    path = tmp_path / "vllm-result.json"
    path.write_text(json.dumps(doc))
    return path


def imported(tmp_path, path):
    env = {**OFFLINE, "SERVEFIT_DB": str(tmp_path / "h.sqlite")}
    done = run("history", "import", str(path), env=env)
    assert done.returncode == 0, done.stderr
    shown = run("history", "show", "1", "--json", env=env)
    return json.loads(shown.stdout)


def test_the_figures_become_the_measured_headline(tmp_path):
    record = imported(tmp_path, result_file(tmp_path))
    m = record["measured"]
    assert (record["kind"], record["model"]) == ("bench", "Qwen/Qwen3-8B")
    assert m["output_tok_per_s"] == 51.2
    assert (m["ttft_mean_s"], m["ttft_p50_s"], m["tpot_mean_s"]) == (0.12, 0.11, 0.02)
    # no p90_ttft_ms in the file: the inclusive 90th percentile of its TTFTs (numpy's linear):
    # rank 0.9 x 3 = 2.7 between 0.12 and 0.18 -> 0.12 + 0.7 x 0.06 = 0.162
    assert m["ttft_p90_s"] == pytest.approx(0.162)
    assert statistics.quantiles([0.08, 0.1, 0.12, 0.18], n=10, method="inclusive")[8] == (
        pytest.approx(0.162)
    )
    summary = record["results"]["summary"]
    assert "generated_texts" not in summary and "ttfts" not in summary
    assert summary["p99_ttft_ms"] == 190.0 and record["inputs"]["tool"] == "vllm bench serve"


def test_a_p90_the_file_gives_is_taken_as_it_is(tmp_path):
    record = imported(tmp_path, result_file(tmp_path, p90_ttft_ms=175.0))
    assert record["measured"]["ttft_p90_s"] == 0.175


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"model_id": None}, "no 'model_id'"),
        ({"output_throughput": "fast"}, "'output_throughput' is 'fast', not a number"),
        ({"mean_ttft_ms": float("nan")}, "'mean_ttft_ms' is nan, not a finite non-negative"),
        ({"mean_ttft_ms": -3}, "'mean_ttft_ms' is -3"),
        ({"completed": 0}, "'completed' is 0: the run served no request"),
        ({"ttfts": [0.1, "x"]}, "'ttfts[]' is 'x'"),
    ],
)
def test_a_file_that_is_not_a_result_is_exit_2_naming_file_and_key(tmp_path, changes, words):
    path = result_file(tmp_path, **changes)
    done = run("history", "import", str(path), env={**OFFLINE, "SERVEFIT_DB": str(tmp_path / "h")})
    assert done.returncode == 2 and str(path) in done.stderr and words in done.stderr


def test_not_json_is_exit_2(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("{not json")
    done = run("history", "import", str(path), env={**OFFLINE, "SERVEFIT_DB": str(tmp_path / "h")})
    assert done.returncode == 2 and "not a JSON result file" in done.stderr
