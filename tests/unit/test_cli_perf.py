"""plan's performance section, compare and cost through the real entry point."""

from __future__ import annotations

import json

import pytest
from tests.unit.test_cli import run


def test_plan_json_has_the_performance_contract():
    result = run(
        "plan",
        "meta-llama/Llama-3.1-8B",
        "--gpu",
        "h100",
        "--max-model-len",
        "8192",
        "--input-len",
        "2000",
        "--output-len",
        "200",
        "--concurrency",
        "8",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    perf = json.loads(result.stdout)["performance"]
    for key in ("ttft_s", "tpot_s", "decode_tok_per_s", "output_throughput_tok_per_s"):
        assert perf[key] > 0, key
    assert perf["bound"] in ("compute", "memory bandwidth", "KV capacity", "overhead")
    assert perf["decode_tok_per_s"] == pytest.approx(1 / perf["tpot_s"])
    # 8 users each decoding at decode_tok_per_s cannot exceed 8 x that in total
    assert perf["output_throughput_tok_per_s"] <= 8 * perf["decode_tok_per_s"] * 1.01
    # the curve starts at one request and batching raises the throughput
    curve = perf["curve"]
    assert curve[0]["concurrency"] == 1
    assert curve[-1]["output_throughput_tok_per_s"] > curve[0]["output_throughput_tok_per_s"]
    assert perf["decode_bound"] == "memory bandwidth"
    assert perf["prefill_bound"] == "compute"


def test_plan_agent_turns_and_cached_prefix():
    result = run(
        "plan",
        "Qwen/Qwen3-8B",
        "--gpu",
        "H100",
        "--max-model-len",
        "32768",
        "--input-len",
        "3000",
        "--prefix-len",
        "2000",
        "--output-len",
        "300",
        "--turns",
        "5",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    perf = json.loads(result.stdout)["performance"]
    assert perf["ttft_cached_prefix_s"] < perf["ttft_cold_s"]
    agent = perf["agent"]
    assert len(agent["turns"]) == 5
    assert agent["turns"][-1]["ttft_cached_s"] < agent["turns"][-1]["ttft_cold_s"]
    assert agent["gpu_time_saved_s"] > 0


def test_plan_scaling_picks_a_layout_and_emits_ray_commands():
    result = run(
        "plan",
        "meta-llama/Llama-3.1-70B",
        "--gpu",
        "H100",
        "--max-model-len",
        "8192",
        "--concurrency",
        "64",
        "--num-gpus",
        "16",
        "--json",
    )
    doc = json.loads(result.stdout)
    scaling = doc["scaling"]
    assert scaling["best"] is not None
    fits = [row for row in scaling["layouts"] if row["fits"]]
    assert not any(r["layout"] == "TP1 x PP1 x DP16" for r in fits)  # 140 GB on one GPU
    assert any("TP8 x PP2" in r["layout"] for r in scaling["layouts"])
    assert scaling["commands"][0].startswith(("vllm serve", "#"))


def test_compare_reproduces_the_seed_observation():
    """A 4-bit MoE on an M4 Pro decodes faster than a dense 27B FP8 model on an A40."""
    result = run(
        "compare",
        "mlx-community/Qwen3-30B-A3B-4bit",
        "Qwen/Qwen3.6-27B-FP8",
        "--gpus",
        "M4-Pro,A40",
        "--max-model-len",
        "32768",
        "--max-num-seqs",
        "128",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    rows = {(r["model"], r["gpu"]): r for r in doc["rows"]}
    moe = rows[("mlx-community/Qwen3-30B-A3B-4bit", "M4-Pro")]["performance"]
    dense = rows[("Qwen/Qwen3.6-27B-FP8", "A40")]["performance"]
    assert 1 / moe["tpot_batch1_s"] > 1 / dense["tpot_batch1_s"]
    assert moe["engine"] == "mlx" and dense["engine"] == "vllm"
    # why: active bytes per token (3.3 B active x 4.5 bits vs 27 B x 8 bits)
    assert dense["weight_bytes_per_token"] > 10 * moe["weight_bytes_per_token"]
    assert any("although A40 has" in line and "fewer bytes" in line for line in doc["explanation"])
    for r in doc["rows"]:
        assert r["memory_bandwidth_bytes_per_s"] > 0


def test_cost_json_and_break_even():
    result = run(
        "cost",
        "meta-llama/Llama-3.1-8B",
        "--gpu",
        "H100",
        "--max-model-len",
        "8192",
        "--api",
        "Llama-3.1-8B-Instruct",
        "--requests-per-day",
        "100000",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    cost = doc["cost"]
    assert cost["usd_per_million_output_tokens"] > 0
    assert cost["usd_per_gpu_hour"] == 3.49  # the catalog's H100 SXM default
    assert "RunPod" in cost["price_source"]
    assert cost["break_even_requests_per_day"] > 0
    labels = [s["label"] for s in cost["scenarios"]]
    assert labels[0] == "three requests a day"
    three, busy = cost["scenarios"][0], cost["scenarios"][-1]
    # per request, three a day cost far more than a saturated replica
    assert three["self_hosted_usd_per_day"] / 3 > 100 * busy["self_hosted_usd_per_day"] / max(
        busy["requests_per_day"], 1
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("plan", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--prefix-len", "5000"),
            "--prefix-len",
        ),
        (("compare", "meta-llama/Llama-3.1-8B", "--gpus", "H100,Z9000"), "Z9000"),
        (("cost", "meta-llama/Llama-3.1-8B", "--gpu", "M4-Max"), "--usd-per-gpu-hour"),
        (("cost", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--api", "nope"), "no API price"),
    ],
)
def test_bad_input_is_a_clear_error_with_exit_2(args, message):
    result = run(*args, "--max-model-len", "8192")
    assert result.returncode == 2, result.stdout
    assert message in result.stderr
    assert "Traceback" not in result.stderr
