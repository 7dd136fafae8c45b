"""The preflight gate: rules on recorded environments, this GPU-less machine, exec safety."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servefit.adapters.catalog import gpu_catalog
from servefit.core.plan import ServeSettings
from servefit.errors import InvalidArgumentError
from servefit.preflight.facts import HostFacts, NvmlFacts, TorchFacts
from servefit.preflight.gate import load_facts, run_gate
from servefit.preflight.rules import Status, check_driver_supports_torch_cuda, judge
from servefit.preflight.vllm_args import parse_vllm_command

RECORDINGS = Path(__file__).parent.parent / "golden" / "preflight"
SERVEFIT = [sys.executable, "-m", "servefit.cli.main"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}


def statuses(name: str, **settings) -> dict[str, Status]:
    facts = load_facts(RECORDINGS / f"{name}.json")
    assert facts.provenance  # every recording says where its numbers come from
    result = run_gate(facts, ServeSettings(**settings), strict=False, allow_hub=False)
    return {c.name: c.status for c in result.checks}


def test_blog_case_driver_too_old_for_cu130():
    s = statuses("blog_driver_too_old_for_cu130")
    assert s["NVIDIA driver"] is Status.PASS
    assert s["driver supports PyTorch's CUDA"] is Status.FAIL
    assert s["PyTorch sees every GPU"] is Status.FAIL
    facts = load_facts(RECORDINGS / "blog_driver_too_old_for_cu130.json")
    check = check_driver_supports_torch_cuda(facts)
    assert "driver >= 580" in check.remedy and "cu12x" in check.remedy


def test_fp8_on_ampere_warns_weight_only_and_strict_fails():
    facts = load_facts(RECORDINGS / "fp8_model_on_ampere.json")
    settings = ServeSettings(max_model_len=32_768)
    relaxed = run_gate(facts, settings, strict=False, allow_hub=False)
    strict = run_gate(facts, settings, strict=True, allow_hub=False)
    precision = next(c for c in relaxed.checks if c.name.startswith("dtype"))
    assert precision.status is Status.WARN and "FP8 Marlin" in precision.reason
    assert relaxed.passed and not strict.passed


def test_plan_no_longer_fits_because_another_process_holds_memory():
    facts = load_facts(RECORDINGS / "other_process_holds_memory.json")
    result = run_gate(facts, ServeSettings(max_model_len=8192), strict=False, allow_hub=False)
    check = result.checks[-1]
    assert check.status is Status.FAIL and "pid 4242" in check.reason
    assert "--gpu-memory-utilization to 0.6" in check.remedy  # 49.1 GiB free of 79.6 GiB
    assert not result.passed


def test_healthy_h200_passes_every_link():
    s = statuses("healthy_h200", tensor_parallel_size=2, max_model_len=32_768)
    assert set(s.values()) <= {Status.PASS, Status.SKIP}
    assert s["plan fits the memory free now"] is Status.PASS


def test_more_gpus_than_present():
    s = statuses("healthy_h200", tensor_parallel_size=8, pipeline_parallel_size=2)
    assert s["parallel layout fits the GPUs"] is Status.FAIL


def test_minor_version_compatibility_is_a_warning():
    facts = HostFacts(
        nvml=NvmlFacts(driver_version="535.104.05", cuda_driver_version="12.2", gpus=[]),
        torch=TorchFacts(
            is_installed=True,
            version="2.7.1+cu126",
            cuda_version="12.6",
            is_cuda_available=True,
            device_count=1,
        ),
    )
    check = check_driver_supports_torch_cuda(facts)
    assert check.status is Status.WARN and "minor-version" in check.reason


def test_no_driver_skips_gpu_links():
    facts = HostFacts(nvml=NvmlFacts(error="no NVIDIA driver found"), torch=TorchFacts())
    checks = judge(facts, spec=None, settings=ServeSettings(), catalog=gpu_catalog())
    assert checks[0].status is Status.FAIL
    assert all(c.status is Status.SKIP for c in checks[1:4])


@pytest.mark.parametrize(
    ("command", "model", "expected"),
    [
        (
            [
                "vllm",
                "serve",
                "Qwen/Qwen3-8B",
                "--tensor-parallel-size",
                "2",
                "--max-model-len=16384",
            ],
            "Qwen/Qwen3-8B",
            {"tensor_parallel_size": 2, "max_model_len": 16384},
        ),
        (
            [
                "python",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                "m/x",
                "--enforce-eager",
                "--gpu-memory-utilization",
                "0.8",
                "--port",
                "8000",
                "--kv-cache-memory",
                "10G",  # vLLM's spelling of 10 GiB (it refuses "10GiB")
            ],
            "m/x",
            {
                "enforce_eager": True,
                "gpu_memory_utilization": 0.8,
                "kv_cache_memory_bytes": 10 * 2**30,
            },
        ),
    ],
)
def test_reads_model_and_flags_from_a_vllm_command(command, model, expected):
    parsed = parse_vllm_command(command)
    assert parsed.model == model and parsed.settings == expected


def test_vllm_command_errors():
    with pytest.raises(InvalidArgumentError, match="expects `vllm serve MODEL"):
        parse_vllm_command(["ls", "-l"])
    with pytest.raises(InvalidArgumentError, match="has no value"):
        parse_vllm_command(["vllm", "serve", "m", "--max-model-len"])


def test_this_machine_fails_at_the_first_link_and_never_runs_the_command(tmp_path):
    trace = tmp_path / "trace"
    command = [sys.executable, "-c", f"open({str(trace)!r}, 'w').write('ran')"]
    result = subprocess.run(
        [*SERVEFIT, "preflight", "meta-llama/Llama-3.1-8B", "--", *command],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert result.returncode == 1
    assert "no NVIDIA driver found" in result.stdout
    assert "-> run on a host with an NVIDIA GPU" in result.stdout
    assert "PREFLIGHT FAILED; not running the command" in result.stdout
    assert not trace.exists()


def test_from_vllm_args_json_keeps_the_command_verbatim():
    command = [
        "vllm",
        "serve",
        "Qwen/Qwen3-8B",
        "--max-model-len",
        "8192",
        "--served-model-name",
        "a b; rm -rf /tmp/x",
        "--chat-template",
        "$(whoami) 'quoted' \"double\"",
    ]
    result = subprocess.run(
        [*SERVEFIT, "preflight", "--from-vllm-args", "--json", "--", *command],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert result.returncode == 1
    doc = json.loads(result.stdout)
    assert doc["command"] == command
    assert doc["checks"][0]["status"] == "fail"
    assert doc["facts"]["model"]["model"] == "Qwen/Qwen3-8B"


def test_exec_passes_arguments_unchanged(tmp_path):
    """The gate's exec: no shell, so spaces, quotes and ';' reach the program as written."""
    out = tmp_path / "argv.json"
    tricky = ["a b", "'single'", '"double"', "x; touch pwned", "$(whoami)", "*"]
    child = f"import json, sys; json.dump(sys.argv[1:], open({str(out)!r}, 'w'))"
    script = (
        "import sys; from servefit.preflight.gate import exec_command; "
        f"exec_command([sys.executable, '-c', {child!r}, *{tricky!r}])"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=tmp_path, timeout=60)
    assert json.loads(out.read_text()) == tricky
    assert not (tmp_path / "pwned").exists()


def test_record_then_replay(tmp_path):
    recording = tmp_path / "facts.json"
    first = subprocess.run(
        [*SERVEFIT, "preflight", "Qwen/Qwen3-8B", "--record", str(recording)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert first.returncode == 1 and recording.exists()
    text = recording.read_text()
    assert "HF_HUB_OFFLINE" not in text and os.environ.get("HOME", "/nonexistent") not in text
    replay = subprocess.run(
        [*SERVEFIT, "preflight", "--facts", str(recording), "--json"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert replay.returncode == 1
    assert json.loads(replay.stdout)["checks"][0]["reason"].startswith("no NVIDIA driver found")


def test_facts_refuses_to_run_a_command():
    result = subprocess.run(
        [
            *SERVEFIT,
            "preflight",
            "--facts",
            str(RECORDINGS / "healthy_h200.json"),
            "Qwen/Qwen3-32B-FP8",
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )
    assert result.returncode == 2 and "never runs a command" in result.stderr
