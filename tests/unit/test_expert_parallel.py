"""--enable-expert-parallel as vLLM takes it: on plan's command line and in its reader, the
layout rules with experts placed whole, the speed model's expert-parallel step, and the start-up
logs that ran with it (benchmarks/fidelity/startup_logs.json: Qwen3-235B-A22B-FP8, 8 x H100)."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner
from tests.corpus import STARTUP_LOGS

from servefit.cli.main import cli
from servefit.preflight.vllm_args import parse_vllm_command

MOE = "Qwen/Qwen3-30B-A3B"


def _plan(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["plan", *args, "--offline", "--json"])
    return result.exit_code, json.loads(result.output) if result.output.startswith("{") else {}


def test_the_flag_reaches_the_command_and_the_speed_model():
    base = [MOE, "--gpu", "H100", "-tp", "2", "--max-model-len", "8192", "--concurrency", "8"]
    code, with_ep = _plan(*base, "--enable-expert-parallel")
    assert code == 0
    assert "--enable-expert-parallel" in with_ep["vllm_command"]
    code, without = _plan(*base)
    assert code == 0 and "--enable-expert-parallel" not in without["vllm_command"]
    # experts placed whole: each step's tokens are sent to the ranks holding their experts
    assert with_ep["performance"]["tpot_s"] != without["performance"]["tpot_s"]


def test_a_dense_model_is_refused_naming_the_flag():
    result = CliRunner().invoke(
        cli, ["plan", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "-ep", "--offline"]
    )
    assert result.exit_code == 2
    assert "--enable-expert-parallel" in result.output and "no experts" in result.output


def test_the_vllm_reader_takes_both_spellings():
    for flag in ("--enable-expert-parallel", "-ep", "--enable_expert_parallel"):
        read = parse_vllm_command(["vllm", "serve", MOE, "-tp", "2", flag])
        assert read.settings["enable_expert_parallel"] is True, flag


def test_check_log_plans_the_logged_expert_parallel_run(tmp_path):
    case = next(c for c in json.loads(STARTUP_LOGS.read_text())["cases"] if "tp8(EP)" in c["name"])
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(case["log_lines"]) + "\n")
    result = CliRunner().invoke(
        cli, ["check-log", str(log), case["catalog_model"], "--gpu", "H100", "--offline"]
    )
    assert result.exit_code == 0, result.output
    deployment = next(line for line in result.output.splitlines() if "the deployment:" in line)
    assert "--enable-expert-parallel" in deployment
    # weights with the experts placed whole: the log's 27.67 GiB ("Model loading took")
    assert "= weights_bytes: logged 27.67 GiB, planned 27.66 GiB" in result.output
    # given the logged KV memory (35.74 GiB, printed to 0.005 GiB) the token count holds
    given = re.search(r"kv_cache_tokens: .*given the logged KV memory ([\d,]*\d)", result.output)
    assert given is not None
    tokens = int(given.group(1).replace(",", ""))
    assert abs(tokens - case["logged"]["gpu_kv_cache_tokens"]) / tokens < 0.005 / 35.74
