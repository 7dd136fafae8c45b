"""The command line through its real entry point: exit codes, JSON contract, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SERVEFIT = [sys.executable, "-m", "servefit.cli.main"]
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "120"}


def run(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SERVEFIT, *args], capture_output=True, text=True, env=env or OFFLINE, timeout=60
    )


def test_version():
    from servefit import __version__

    result = run("--version")
    assert result.returncode == 0 and __version__ in result.stdout


def test_plan_fits_exit_0_and_json_contract():
    result = run(
        "plan", "meta-llama/Llama-3.1-8B", "--gpu", "h100", "--max-model-len", "8192", "--json"
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1
    assert doc["model"]["params_total"] == 8_030_261_248
    assert doc["model"]["params_active"] == 8_030_261_248
    assert doc["memory"]["weights_bytes_per_gpu"] > 0
    for key in ("kv_cache_memory_bytes", "kv_cache_tokens", "max_concurrency"):
        assert doc["memory"][key] > 0
    assert doc["fits"] is True
    assert doc["vllm_command"].startswith("vllm serve meta-llama/Llama-3.1-8B --max-model-len 8192")


def test_plan_json_reads_back_in_a_fresh_process():
    """The plan document names its performance and scaling sections' types only lazily (a
    capacity-only plan does not import them); a document with a performance section still
    reads back, types checked, in a process that never planned."""
    result = run(
        "plan", "meta-llama/Llama-3.1-8B", "--gpu", "h100", "--max-model-len", "8192", "--json"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["performance"] is not None
    read_back = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from servefit.adapters.plan_document import PlanDocument; "
            "d = PlanDocument.model_validate_json(sys.stdin.read()); "
            "print(type(d.performance).__name__, d.performance.decode_tok_per_s)",
        ],
        input=result.stdout,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert read_back.returncode == 0, read_back.stderr
    name, decode = read_back.stdout.split()
    assert name == "PerformanceSection"
    assert float(decode) == json.loads(result.stdout)["performance"]["decode_tok_per_s"]


def test_plan_does_not_fit_exit_1_and_says_why():
    result = run(
        "plan", "meta-llama/Llama-3.1-70B", "--gpu", "A100-80GB", "--max-model-len", "8192"
    )
    assert result.returncode == 1
    assert "DOES NOT FIT" in result.stdout
    assert "--tensor-parallel-size 2" in result.stdout


def test_seed_example_human_output():
    result = run(
        "plan",
        "Qwen/Qwen3.6-27B-FP8",
        "--gpu",
        "A40",
        "--max-model-len",
        "32768",
        "--max-num-seqs",
        "128",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "48 linear_attention, 16 full_attention" in result.stdout
    assert "Maximum concurrency for 32,768 tokens per request" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "meta-llama/Llama-3.1-8B", "--gpu", "H10O"], "Did you mean"),
        (["plan", "meta-llama/Llama-3.1-8B"], "--gpu"),
        (["plan", "nobody/no-such-model-xyz", "--gpu", "A40"], "could not be reached"),
        (["plan", "not-a-path-or-id", "--gpu", "A40"], "neither an existing path"),
        (
            ["plan", "meta-llama/Llama-3.1-8B", "--gpu", "A40", "--gpu-memory-utilization", "90"],
            "fraction",
        ),
        (
            ["plan", "meta-llama/Llama-3.1-8B", "--gpu", "A40", "--kv-cache-memory-bytes", "lots"],
            "not a size",
        ),
    ],
)
def test_usage_errors_exit_2_without_traceback(args, message):
    result = run(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_local_config_path_and_malformed_file(tmp_path):
    from servefit.adapters.catalog import find_catalog_model

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(find_catalog_model("Qwen/Qwen3-8B").config))
    ok = run("plan", str(folder), "--gpu", "L40S", "--max-model-len", "8192", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["model"]["params_total"] == 8_190_735_360

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = run("plan", str(bad), "--gpu", "L40S")
    assert result.returncode == 2 and "not valid JSON" in result.stderr

    weird = tmp_path / "weird.json"
    weird.write_text(json.dumps({"model_type": "mystery", "num_experts": 4}))
    result = run("plan", str(weird), "--gpu", "L40S")
    assert result.returncode == 2 and "num_experts" in result.stderr


def test_kv_cache_memory_reproduces_a_log():
    # vLLM 0.19, Llama-3.1-8B-Instruct on an H100 (llm-d-planner logs): "Available KV cache
    # memory: 58.11 GiB", "GPU KV cache size: 476,016 tokens", "Maximum concurrency ... 58.11x"
    result = run(
        "plan",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "H100",
        "--max-model-len",
        "8192",
        "--kv-cache-memory-bytes",
        "58.11GiB",
        "--vllm-version",
        "0.19",
        "--json",
    )
    doc = json.loads(result.stdout)
    assert doc["memory"]["kv_cache_tokens"] == pytest.approx(476_016, rel=0.001)
    assert doc["memory"]["max_concurrency"] == pytest.approx(58.11, rel=0.001)


def test_gpus_and_models_lists():
    gpus = run("gpus")
    assert gpus.returncode == 0 and "H100-SXM" in gpus.stdout
    models = run("models")
    assert models.returncode == 0 and "Qwen/Qwen3.6-27B-FP8" in models.stdout.splitlines()


def test_hub_id_answered_from_the_huggingface_cache(tmp_path):
    """A Hub id outside the catalog, read through huggingface_hub's real cache (offline)."""
    from servefit.adapters.catalog import find_catalog_model

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--someorg--tiny-qwen3"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    config = find_catalog_model("Qwen/Qwen3-8B").config
    (snapshot / "config.json").write_text(json.dumps(config))
    # 8,190,735,360 bf16 parameters = 16,381,470,720 bytes in the checkpoint
    index = {"metadata": {"total_size": 16_381_470_720}, "weight_map": {}}
    (snapshot / "model.safetensors.index.json").write_text(json.dumps(index))
    env = {**OFFLINE, "HF_HUB_CACHE": str(tmp_path / "hub")}
    result = run(
        "plan", "someorg/tiny-qwen3", "--gpu", "H100", "--max-model-len", "4096", "--json", env=env
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["model"]["source"].startswith("huggingface.co/someorg/tiny-qwen3")
    assert doc["model"]["checkpoint_bytes"] == 16_381_470_720
    # what servefit loads equals the checkpoint for a dense bf16 model without MTP
    assert doc["memory"]["weights_parameter_bytes_total"] == 16_381_470_720
    # ... and the layout holds those parameters plus each GPU's buffers (the RoPE table):
    # at TP1 that is exactly the one GPU's weights
    assert doc["memory"]["weights_bytes_total"] == doc["memory"]["weights_bytes_per_gpu"]


def test_custom_gpu_by_flags():
    result = run(
        "plan",
        "meta-llama/Llama-3.1-8B",
        "--gpu-memory-gib",
        "32",
        "--gpu-bandwidth-gbps",
        "1000",
        "--max-model-len",
        "8192",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["gpu"]["memory_bytes"] == 32 * 2**30
    assert doc["gpu"]["name"] == "custom"
    partial = run("plan", "meta-llama/Llama-3.1-8B", "--gpu-memory-gib", "32")
    assert partial.returncode == 2 and "--gpu-bandwidth-gbps" in partial.stderr
