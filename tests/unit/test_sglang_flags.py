"""SGLang's own spellings (issue 32): a ``sglang.launch_server`` line's flags plan the same
deployment as vLLM's names with ``--engine sglang``, imply SGLang, and are refused beside a
different value of the same setting or another engine (exit 2)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from servefit.cli.main import cli
from servefit.core.engines.sglang import DEFAULT_SGLANG_VERSION


def _plan(*args):
    result = CliRunner().invoke(
        cli, ["plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--offline", "--json", *args]
    )
    return result.exit_code, result.output


def test_sglangs_spellings_plan_what_vllms_names_plan_under_sglang():
    code, ours = _plan(
        "--tp",
        "2",
        "--mem-fraction-static",
        "0.8",
        "--context-length",
        "32768",
        "--max-running-requests",
        "64",
        "--chunked-prefill-size",
        "4096",
    )
    assert code == 0
    code, theirs = _plan(
        "--engine",
        "sglang",
        "-tp",
        "2",
        "--gpu-memory-utilization",
        "0.8",
        "--max-model-len",
        "32768",
        "--max-num-seqs",
        "64",
        "--max-num-batched-tokens",
        "4096",
    )
    assert code == 0
    a, b = json.loads(ours), json.loads(theirs)
    assert a["memory"] == b["memory"] and a["settings"] == b["settings"]
    assert a["vllm_command"] == (
        "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp-size 2 "
        "--context-length 32768 --mem-fraction-static 0.8 --max-running-requests 64 "
        "--chunked-prefill-size 4096"
    )


def test_the_same_setting_twice_or_another_engine_is_a_usage_error():
    code, out = _plan("--tp-size", "2", "-tp", "4")
    assert code == 2 and "--tp-size 2 and --tensor-parallel-size 4" in out
    code, out = _plan("--context-length", "8192", "--engine", "vllm")
    assert code == 2 and "--context-length: SGLang's flags" in out
    # the same value in both spellings is one setting, not a conflict
    code, _ = _plan("--tp", "2", "-tp", "2")
    assert code == 0


def test_an_sglang_plan_names_its_sglang_release_not_vllms():
    args = ["plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--offline", "--context-length", "8k"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0
    first = result.output.splitlines()[0]
    assert first.endswith(f"under SGLang {DEFAULT_SGLANG_VERSION}"), first
    older = CliRunner().invoke(cli, [*args, "--sglang-version", "0.5.5"])
    assert older.output.splitlines()[0].endswith("under SGLang 0.5.5")
    # 0.5.5 was not read: its default is 0.5.2's rule (9.5 + 1/2 GiB kept on an 80 GB card)
    assert "taken as 0.4.9's" in older.output.replace("\n", " ")
    bad = CliRunner().invoke(cli, [*args, "--sglang-version", "0.2"])
    assert bad.exit_code == 2 and "from 0.3.6 on" in bad.output
    assert "budget (x mem_fraction_static)" in result.output


def _plan_dsv3(*args):
    result = CliRunner().invoke(
        cli,
        ["plan", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--offline", "--json", *args],
    )
    return result.exit_code, result.output


def test_dp_attention_splits_the_tp_gpus_into_attention_ranks():
    code, out = _plan_dsv3("--tp", "8", "--dp-size", "8", "--enable-dp-attention")
    assert code == 0, out
    doc = json.loads(out)
    s = doc["settings"]
    # 8 GPUs: 8 attention ranks of one GPU each, the experts over all 8
    assert (s["tensor_parallel_size"], s["data_parallel_size"]) == (1, 8)
    assert doc["vllm_command"].startswith(
        "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp-size 8 "
        "--dp-size 8 --enable-dp-attention"
    )
    # 0.5.9's reserve on an H200 (chunk 8192, graph batch 512 at tp 8): 512 + 1.5 x 8192 +
    # 2 x 512 + 8 / 8 x 1024 = 14,848 MB, plus DP attention's 512 x 8 x (3 + 1.5) = 18,432
    total = doc["memory"]["total_bytes_per_gpu"]
    mib = 1024 * 1024
    assert s["gpu_memory_utilization"] == round((total - (14_848 + 18_432) * mib) / total, 3)
    code, out = _plan_dsv3("--tp", "8")
    assert json.loads(out)["settings"]["gpu_memory_utilization"] == round(
        (total - 14_848 * mib) / total, 3
    )


def test_dp_size_without_dp_attention_is_replicas_and_bad_splits_are_refused():
    code, out = _plan_dsv3("--tp", "8", "--dp-size", "2")
    assert code == 0, out
    s = json.loads(out)["settings"]
    assert (s["tensor_parallel_size"], s["data_parallel_size"]) == (8, 2)  # 16 GPUs
    for args, says in (
        (("--tp", "8", "--dp-size", "3", "--enable-dp-attention"), "dividing --tp-size 8"),
        (("--tp", "8", "--enable-dp-attention"), "needs --dp-size"),
    ):
        code, out = _plan_dsv3(*args)
        assert code == 2 and says in out.replace("\n", " "), out
    code, out = _plan("--tp", "2", "--dp-size", "2", "--enable-dp-attention")
    assert code == 2 and "for MoE models" in out.replace("\n", " ")


def test_deploy_refuses_an_sglang_deployment_by_name(tmp_path):
    args = ["Qwen/Qwen3-8B", "--gpu", "H100", "--offline", "--tp", "2"]
    result = CliRunner().invoke(cli, ["deploy", *args, "--emit", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "writes vLLM's manifests; a SGLang deployment" in result.output.replace("\n", " ")
    assert not (tmp_path / "out").exists()
