"""``servefit deploy`` through its real entry point: what it writes, and its exit codes
(0 written, 1 does not fit, 2 input error or a non-empty directory)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import yaml

SERVEFIT = [sys.executable, "-m", "servefit.cli.main"]
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "120"}
MODEL = ["meta-llama/Llama-3.1-8B", "--gpu", "A40", "--max-model-len", "32k"]


def run(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SERVEFIT, *args], capture_output=True, text=True, env=env or OFFLINE, timeout=60
    )


def test_deploy_writes_the_plans_command_into_every_file(tmp_path):
    out = tmp_path / "deploy"
    extra = ["--served-model-name", "llama", "--seed", "7"]
    result = run("deploy", *MODEL, "-tp", "2", "--replicas", "3", "--emit", str(out), "--", *extra)
    assert result.returncode == 0, result.stderr
    plan = run("plan", *MODEL, "-tp", "2", "--json", "--no-performance")
    planned = shlex.split(json.loads(plan.stdout)["vllm_command"])
    expected = [*planned, *extra]
    script = (out / "vllm-serve.sh").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert shlex.split(script.removeprefix("exec ")) == expected
    deployment = yaml.safe_load((out / "k8s" / "deployment.yaml").read_text(encoding="utf-8"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert [*container["command"], *container["args"]] == expected
    assert deployment["spec"]["replicas"] == 3
    assert deployment["metadata"]["name"] == "vllm-llama"  # from --served-model-name
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2}
    names = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert names == {
        "vllm-serve.sh",
        "compose.yaml",
        "k8s/deployment.yaml",
        "k8s/service.yaml",
        "k8s/model-cache.yaml",
        "README.txt",
    }
    assert "wrote k8s/deployment.yaml" in result.stdout


def test_a_plan_that_does_not_fit_writes_nothing_and_exits_1(tmp_path):
    out = tmp_path / "deploy"
    result = run("deploy", "meta-llama/Llama-3.1-70B", "--gpu", "A40", "--emit", str(out))
    assert result.returncode == 1, result.stderr
    assert "does not fit" in result.stderr and "--force" in result.stderr
    assert not out.exists()
    recommended = run(
        "deploy",
        "meta-llama/Llama-3.1-70B",
        "--gpu",
        "A40",
        "--use-recommendation",
        "--emit",
        str(out),
    )
    assert recommended.returncode == 0, recommended.stderr
    plan = run("plan", "meta-llama/Llama-3.1-70B", "--gpu", "A40", "--json", "--no-performance")
    expected = shlex.split(json.loads(plan.stdout)["recommendation"]["vllm_command"])
    script = (out / "vllm-serve.sh").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert shlex.split(script.removeprefix("exec ")) == expected
    assert "--tensor-parallel-size" in expected  # the recommendation spreads the weights


def test_a_non_empty_directory_exits_2_unless_forced(tmp_path):
    (tmp_path / "keep.txt").write_text("x", encoding="utf-8")
    refused = run("deploy", *MODEL, "--emit", str(tmp_path))
    assert refused.returncode == 2
    assert "not empty" in refused.stderr and "--force" in refused.stderr
    forced = run("deploy", *MODEL, "--emit", str(tmp_path), "--force")
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "compose.yaml").is_file() and (tmp_path / "keep.txt").is_file()


def test_disaggregated_and_secrets(tmp_path):
    out = tmp_path / "pd"
    result = run("deploy", *MODEL, "--disaggregated", "1:2", "--emit", str(out))
    assert result.returncode == 0, result.stderr
    prefill, _ = yaml.safe_load_all((out / "k8s" / "prefill.yaml").read_text(encoding="utf-8"))
    decode, _ = yaml.safe_load_all((out / "k8s" / "decode.yaml").read_text(encoding="utf-8"))
    assert (prefill["spec"]["replicas"], decode["spec"]["replicas"]) == (1, 2)
    args = prefill["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--kv-transfer-config") + 1] == (
        '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    )
    key = "sk-" + "q" * 30
    refused = run("deploy", *MODEL, "--emit", str(tmp_path / "s"), "--", "--api-key", key)
    assert refused.returncode == 2 and "--api-key" in refused.stderr
    assert key not in refused.stderr + refused.stdout
    assert not (tmp_path / "s").exists()


def test_num_gpus_deploys_the_best_layout_as_replicas(tmp_path):
    """DeepSeek-V3 on 32 H100s: a replica needs two nodes of 8 (TP 8 x PP 2, the only
    layout whose weights fit), so the best layout is two such replicas."""
    out = tmp_path / "ds"
    result = run(
        "deploy", "deepseek-ai/DeepSeek-V3", "--gpu", "h100", "--num-gpus", "32", "--emit", str(out)
    )
    assert result.returncode == 0, result.stderr
    lws, service = yaml.safe_load_all(
        (out / "k8s" / "leaderworkerset.yaml").read_text(encoding="utf-8")
    )
    assert lws["spec"]["replicas"] == 2
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert service["spec"]["selector"]["role"] == "leader"
    head = (out / "ray" / "head.sh").read_text(encoding="utf-8").strip().splitlines()[-1]
    argv = shlex.split(head.removeprefix("exec "))
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert argv[-2:] == ["--distributed-executor-backend", "ray"]
    assert not (out / "compose.yaml").exists()  # compose is one host
