"""Issue "One deployment, one verdict": each reproducer of the issue, through the application
layer (the public API) and through the real CLI entry point where the symptom was in the CLI.

Every expected number is derived in the test from the plan's own capacity figures or from the
model's config, never typed in from a run."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from servefit.app.deployment import CapacityTarget, Deployment, Hardware, default_workload
from servefit.app.plan import plan_deployment
from servefit.core.plan import ServeSettings

SERVEFIT = [sys.executable, "-m", "servefit.cli.main"]
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "200"}
QWEN = "Qwen/Qwen3.6-27B-FP8"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SERVEFIT, *args], capture_output=True, text=True, env=OFFLINE, timeout=120
    )


def deployment(**kw) -> Deployment:
    base = {
        "model": QWEN,
        "hardware": Hardware(gpu="A40"),
        "settings": ServeSettings(max_model_len=32768, max_num_seqs=128),
        "allow_hub": False,
    }
    base.update(kw)
    return Deployment(**base)


# 1. Printed commands carry the user's flags -------------------------------------------------


def test_scaling_commands_keep_every_flag_of_the_deployment():
    flags = [
        "--max-model-len",
        "65536",
        "--max-num-seqs",
        "32",
        "--kv-cache-dtype",
        "fp8",
    ]
    result = run("plan", QWEN, "--gpu", "A40", *flags, "--num-gpus", "2", "--json")
    assert result.returncode in (0, 1), result.stderr
    doc = json.loads(result.stdout)
    serve_lines = [c for c in doc["scaling"]["commands"] if c.startswith("vllm serve")]
    assert serve_lines, doc["scaling"]
    for line in [doc["vllm_command"], *serve_lines]:
        for flag, value in zip(flags[::2], flags[1::2], strict=True):
            assert f"{flag} {value}" in line, line


# 2. One verdict: plan, compare and report agree --------------------------------------------


def test_plan_compare_and_report_give_the_same_verdict_for_one_workload():
    # 1024 in / 64 out x 8 on an A40 at 32k: the workload needs 8 x 1,088 tokens of a cache of
    # ~149k tokens; max-model-len capacity (4.5 requests of 32k) is reported, not judged.
    common = ["--max-model-len", "32768", "--max-num-seqs", "128", "--input-len", "1024"]
    common += ["--output-len", "64", "--concurrency", "8"]
    plan = run("plan", QWEN, "--gpu", "A40", *common, "--json")
    compare = run("compare", QWEN, "--gpus", "A40", *common, "--json")
    report = run("report", QWEN, "--gpu", "A40", *common, "--format", "json")
    assert plan.returncode == 0, plan.stdout[-2000:]
    assert compare.returncode == 0, compare.stderr
    assert report.returncode == 0, report.stderr
    plan_doc = json.loads(plan.stdout)
    held = plan_doc["verdict"]["workload_requests_held"]
    assert held >= 8  # the cache holds the 8 in flight, as the verdict says
    assert plan_doc["fits"] is True
    assert json.loads(compare.stdout)["rows"][0]["fits"] is True
    assert json.loads(report.stdout)["plan"]["fits"] is True


def test_capacity_target_is_judged_only_when_asked_for():
    without = plan_deployment(deployment(), with_performance=False)
    assert without.verdict.meets_target is None and without.fits
    # the KV cache holds plan.max_concurrency requests of max-model-len: ask for one more
    held = without.capacity.max_concurrency
    asked = int(held) + 1
    target = CapacityTarget(context_tokens=32768, concurrency=asked)
    missed = plan_deployment(deployment(target=target), with_performance=False)
    assert missed.verdict.meets_target is False and not missed.fits
    assert any("--target-concurrency" in r for r in missed.verdict.reasons)
    ok = plan_deployment(
        deployment(target=CapacityTarget(context_tokens=32768, concurrency=int(held))),
        with_performance=False,
    )
    assert ok.fits


def test_workload_longer_than_max_model_len_does_not_fit_and_is_fixed_by_the_recommendation():
    w = default_workload(input_len=30000, output_len=4000, concurrency=1, request_rate_per_s=None)
    out = plan_deployment(deployment(workload=w, is_workload_given=True), with_performance=False)
    assert out.verdict.starts and out.verdict.workload_runs is False
    rec = out.recommendation
    assert rec is not None and rec.verdict.fits
    assert rec.capacity.settings.max_model_len >= 34000


# 3. Open loop has no client cap ---------------------------------------------------------


def test_request_rate_without_concurrency_has_no_client_cap():
    # 0.5 req/s of 1024 in / 256 out: each request decodes for ~256 x TPOT (about 12 s on an
    # A40), so several are in flight at once; capped at one, they would queue for minutes.
    w = default_workload(concurrency=None, request_rate_per_s=0.5, num_requests=40)
    out = plan_deployment(deployment(workload=w, is_workload_given=True))
    load = out.performance.load
    assert load.concurrency is None
    assert load.max_batch > 1
    one_request_s = out.performance.ttft_cold_s + 255 * out.performance.tpot_batch1_s
    assert load.ttft_s.mean < one_request_s  # nobody waits for a whole request to finish


# 4. One recommendation, verified ----------------------------------------------------------


def test_recommendation_applies_every_change_together_and_fits():
    out = plan_deployment(
        deployment(settings=ServeSettings(max_model_len=262144)), with_performance=False
    )
    assert not out.fits and not out.verdict.starts
    rec = out.recommendation
    assert rec is not None
    flags = {c.flag for c in rec.changes}
    # one request of 262,144 tokens does not fit in a 16-bit KV cache, and the hybrid's state
    # blocks cap the sequences: both changes come together (following only the first gave a
    # new refusal). fp8 KV comes before a shorter context (the user's own context is kept
    # where a cheaper change makes it fit): 262,144 tokens still served.
    assert {"--kv-cache-dtype", "--max-num-seqs"} <= flags
    assert rec.capacity.settings.max_model_len == 262144
    assert rec.capacity.settings.max_num_seqs <= rec.capacity.mamba_block_limit
    # the printed command re-plans to a fit through the CLI
    args = shlex.split(out.recommended_command)
    assert args[:3] == ["vllm", "serve", QWEN]
    again = run("plan", QWEN, "--gpu", "A40", *args[3:], "--no-performance", "--json")
    assert again.returncode == 0, again.stdout[-1500:]
    doc = json.loads(again.stdout)
    assert doc["fits"] is True and doc["recommendation"] is None
    # the JSON keeps problems and the recommendation apart
    first = json.loads(
        run("plan", QWEN, "--gpu", "A40", "--max-model-len", "262144", "--json").stdout
    )
    assert not any(p.startswith("would fit") for p in first["problems"])
    assert first["recommendation"]["vllm_command"] == out.recommended_command


def test_max_model_len_beyond_the_model_is_a_startup_refusal_with_the_models_limit():
    out = plan_deployment(
        deployment(settings=ServeSettings(max_model_len=500_000)), with_performance=False
    )
    model_max = out.capacity.model.max_position_embeddings
    assert not out.verdict.starts
    assert any("max_position_embeddings" in r for r in out.verdict.reasons)
    rec = out.recommendation
    assert rec is not None and rec.capacity.settings.max_model_len <= model_max
    assert rec.capacity.settings.tensor_parallel_size == 1  # no GPUs added for a refused length


# 7. vLLM's integer spellings -----------------------------------------------------------


def test_human_readable_integers_mean_what_vllm_means():
    result = run(
        "plan", QWEN, "--gpu", "A40", "--max-model-len", "32K", "--max-num-batched-tokens",
        "8k", "--max-num-seqs", "128", "--no-performance", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    settings = json.loads(result.stdout)["settings"]
    assert settings["max_model_len"] == 32 * 1024  # uppercase K: binary
    assert settings["max_num_batched_tokens"] == 8 * 1000  # lowercase k: decimal


# 8. Engines where they run ----------------------------------------------------------------


def test_apple_plans_do_not_speak_cuda_and_mlx_weights_are_refused_on_an_a40():
    apple = run(
        "plan", "mlx-community/Qwen3-30B-A3B-4bit", "--gpu", "M4-Pro", "--max-model-len",
        "32768",
    )  # fmt: skip
    assert apple.returncode == 0, apple.stdout[-1500:]
    assert "CUDA" not in apple.stdout
    assert "mlx_lm.server --model mlx-community/Qwen3-30B-A3B-4bit" in apple.stdout
    assert "vllm serve" not in apple.stdout
    cells = json.loads(
        run(
            "compare", "mlx-community/Qwen3-30B-A3B-4bit", "--gpus", "A40,M4-Pro",
            "--max-model-len", "32768", "--json",
        ).stdout
    )["rows"]  # fmt: skip
    a40, m4 = cells
    assert a40["gpu"] == "A40" and a40["fits"] is False and "MLX" in a40["problem"]
    assert m4["fits"] is True


# 9. Errors: labels not class names; config errors apart; internal errors exit 3 -----------


def test_errors_name_what_to_fix_without_python_class_names(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    result = run("plan", str(tmp_path), "--gpu", "A40")
    assert result.returncode == 2
    assert result.stderr.startswith("error (model config): ")
    assert "ConfigError" not in result.stderr and "Hub" not in result.stderr
    unknown = run("plan", QWEN, "--gpu", "H10O")
    assert unknown.returncode == 2 and unknown.stderr.startswith("error (unknown GPU): ")


def test_an_internal_error_exits_3_not_1(monkeypatch, capsys):
    import click

    from servefit.cli import main as cli_main

    @click.command()
    def boom() -> None:
        raise RuntimeError("a servefit bug")

    monkeypatch.setattr(cli_main.LazyGroup, "get_command", lambda self, ctx, name: boom)
    with pytest.raises(SystemExit) as exit_info:
        cli_main.main(["boom"])
    assert exit_info.value.code == 3
    assert "servefit bug" in capsys.readouterr().err


# 5 and 6. Cost by phase; agent turns under load and in cost -------------------------------


def _cost(*extra: str) -> dict:
    result = run(
        "cost", QWEN, "--gpu", "A40", "--max-model-len", "32768", "--max-num-seqs", "16",
        "--concurrency", "4", "--input-len", "2504", "--prefix-len", "2000", "--output-len",
        "64", *extra, "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_cost_charges_both_phases_and_adds_back_up_to_the_request():
    doc = _cost()
    cost, load = doc["cost"], doc["performance"]["load"]
    assert cost["usd_per_million_output_tokens"] > 0  # was $0.000: "prefill is 100%"
    assert cost["usd_per_million_input_tokens"] > 0
    assert 0 < cost["prefill_share"] < 1
    # input and output prices are the two shares of one request's cost (mean tokens)
    n = max(load["num_requests"], 1)
    per_request = (
        cost["usd_per_million_input_tokens"] * load["num_input_tokens"] / n
        + cost["usd_per_million_output_tokens"] * load["num_output_tokens"] / n
    ) / 1e6
    assert per_request == pytest.approx(cost["usd_per_request"], rel=1e-6)


def test_turns_change_the_cost_of_a_session():
    sessions = {t: _cost("--turns", str(t))["cost"] for t in (1, 6, 20)}
    per_session = [sessions[t]["usd_per_session"] for t in (1, 6, 20)]
    # each turn re-sends a longer history and generates its own output: more GPU time
    assert per_session[0] < per_session[1] < per_session[2]
    # a task is a session by default
    assert sessions[20]["usd_per_successful_task"] == pytest.approx(per_session[2])


def test_preflight_reads_a_vllm_line_offline_where_the_engine_is_not_importable():
    """Where vLLM is importable the engine's own parser reads the line (held to the offline
    reader by tests/integration/test_vllm_args_vs_engine.py); servefit's own interpreter
    has no vLLM, so the offline reader answers, with vLLM's spellings."""
    from servefit.cli.preflight import read_vllm_command

    line = ["vllm", "serve", QWEN, "--max-model-len", "32k", "--max-num-batched-tokens", "8K"]
    parsed = read_vllm_command(line, sys.executable)
    assert parsed.model == QWEN
    assert parsed.settings["max_model_len"] == 32_000
    assert parsed.settings["max_num_batched_tokens"] == 8 * 1024


def test_a_deployment_from_a_vllm_line_relaunches_with_every_flag():
    from servefit.app.deployment import deployment_from_vllm_command

    line = [
        "vllm", "serve", QWEN, "--max-model-len", "32k", "--max-num-seqs", "128",
        "--trust-remote-code", "--served-model-name", "qwen", "--port", "8001",
    ]  # fmt: skip
    d = deployment_from_vllm_command(line, hardware=Hardware(gpu="A40"), allow_hub=False)
    assert d.settings.max_model_len == 32_000 and d.settings.max_num_seqs == 128
    out = plan_deployment(d, with_performance=False)
    printed = shlex.split(out.vllm_command)
    # servefit's flags, then the ones it does not model, verbatim and in order
    assert printed[-5:] == ["--trust-remote-code", "--served-model-name", "qwen", "--port", "8001"]
    assert "--max-model-len" in printed and printed[printed.index("--max-model-len") + 1] == "32000"


def test_cost_of_a_deployment_that_does_not_start_exits_1_with_the_recommendation():
    result = run("cost", QWEN, "--gpu", "A40", "--max-model-len", "262144", "--json")
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["fits"] is False and doc["recommendation"]["vllm_command"].startswith("vllm serve")


@pytest.mark.parametrize("block", ['"fp8"', "[1, 2]", "4"])
def test_a_malformed_quantization_block_is_a_config_error_not_an_unquantized_model(tmp_path, block):
    from servefit.adapters.catalog import find_catalog_model

    config = json.dumps(find_catalog_model("Qwen/Qwen3-8B").config)[:-1]
    (tmp_path / "config.json").write_text(config + f', "quantization_config": {block}}}')
    result = run("plan", str(tmp_path), "--gpu", "A40", "--max-model-len", "8192")
    assert result.returncode == 2, result.stdout[-500:] + result.stderr
    assert result.stderr.startswith("error (model config): ")
    assert "quantization_config" in result.stderr


def test_plan_on_this_machines_cpu_uses_vllms_cpu_backend():
    # Llama-3.2-1B: 16 layers x 2 (K, V) x 8 KV heads x 64 dims x 2 bytes = 32 KiB per token;
    # the CPU backend's block is 128 tokens (vllm/platforms/cpu.py), so a block is 4 MiB and
    # a given 1 GiB holds 256 blocks; a 4,096-token request needs 32: 8 at once, and vLLM
    # >= 0.32 prints int(8 x 4096) = 32,768 tokens, calling the device "CPU".
    result = run(
        "plan", "meta-llama/Llama-3.2-1B-Instruct", "--gpu", "cpu", "--max-model-len", "4096",
        "--kv-cache-memory-bytes", "1G", "--no-performance", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    memory = json.loads(result.stdout)["memory"]
    assert memory["num_blocks"] == 256
    assert memory["max_concurrency"] == pytest.approx(8.0)
    assert memory["kv_cache_tokens"] == 32_768
    text = run(
        "plan", "meta-llama/Llama-3.2-1B-Instruct", "--gpu", "cpu", "--max-model-len", "4096",
        "--kv-cache-memory-bytes", "1G", "--no-performance",
    ).stdout  # fmt: skip
    assert "CPU KV cache size: 32,768 tokens" in text and "visible to CUDA" not in text
