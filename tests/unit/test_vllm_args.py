"""The offline reader of vLLM command lines (no vLLM needed).

Every expectation is what vLLM 0.32's own parser makes of the line;
tests/integration/test_vllm_args_vs_engine.py asks vLLM the same questions.
"""

from __future__ import annotations

import pytest

from servefit.errors import InvalidArgumentError
from servefit.preflight.vllm_args import VllmCommand, parse_vllm_command, split_vllm_command

SERVE = ["vllm", "serve"]
API_SERVER = ["python", "-m", "vllm.entrypoints.openai.api_server"]


@pytest.mark.parametrize(
    ("args", "model", "settings"),
    [
        pytest.param(
            [*SERVE, "m", "--max-model-len", "32k", "--max-num-batched-tokens", "8K"],
            "m",
            {"max_model_len": 32_000, "max_num_batched_tokens": 8_192},
            id="human-ints",
        ),
        pytest.param(
            [*SERVE, "m", "--max-model-len=32K", "--kv-cache-memory-bytes=10G"],
            "m",
            {"max_model_len": 32_768, "kv_cache_memory_bytes": 10 * 2**30},
            id="flag=value",
        ),
        pytest.param(
            [*SERVE, "m", "-tp", "2", "-pp=2", "-q", "fp8"],
            "m",
            {"tensor_parallel_size": 2, "pipeline_parallel_size": 2, "quantization": "fp8"},
            id="short-flags",
        ),
        pytest.param(
            [*SERVE, "m", "--max_model_len", "4096", "--gpu_memory_utilization=0.85"],
            "m",
            {"max_model_len": 4096, "gpu_memory_utilization": 0.85},
            id="underscores",
        ),
        pytest.param(
            [*SERVE, "m", "--device-memory-utilization", "0.7"],
            "m",
            {"gpu_memory_utilization": 0.7},
            id="alias",
        ),
        pytest.param(
            [*SERVE, "m", "--no-enable-prefix-caching", "--enforce-eager"],
            "m",
            {"enable_prefix_caching": False, "enforce_eager": True},
            id="switches",
        ),
        pytest.param(
            [*SERVE, "m", "--enable-prefix-caching", "--no-enable-prefix-caching"],
            "m",
            {"enable_prefix_caching": False},
            id="last-switch-wins",
        ),
        pytest.param(
            [*SERVE, "m", "-tp", "2", "--tensor-parallel-size", "4"],
            "m",
            {"tensor_parallel_size": 4},
            id="last-value-wins",
        ),
        pytest.param(
            [*SERVE, "--model", "m", "--max-num-seqs", "128"],
            "m",
            {"max_num_seqs": 128},
            id="--model",
        ),
        pytest.param(
            [*SERVE, "m", "-q", "None", "--kv-cache-memory-bytes", ""],
            "m",
            {},
            id="None-is-the-default",
        ),
        pytest.param(
            [*SERVE, "--host", "0.0.0.0", "--port", "8000", "m", "--dtype", "half"],
            "m",
            {"dtype": "half"},
            id="unknown-flags-before-the-model",
        ),
        pytest.param(
            [*SERVE, "--trust-remote-code", "m", "--block-size", "32"],
            "m",
            {"block_size": 32},
            id="unknown-switch-before-the-model",
        ),
        pytest.param(
            [*SERVE, "m", "--served-model-name", "a", "b", "--kv-cache-dtype", "fp8"],
            "m",
            {"kv_cache_dtype": "fp8"},
            id="unknown-flag-with-two-values",
        ),
        pytest.param(
            [*API_SERVER, "--model", "m/x", "--port", "8000", "--max-model-len", "2k"],
            "m/x",
            {"max_model_len": 2000},
            id="api-server",
        ),
        pytest.param(
            ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "m", "-tp", "8"],
            "m",
            {"tensor_parallel_size": 8},
            id="cli-module",
        ),
    ],
)
def test_reads_what_vllm_reads(args, model, settings):
    assert parse_vllm_command(args) == VllmCommand(model=model, settings=settings)


@pytest.mark.parametrize("spelling", ["auto", "AUTO", "-1", " auto "])
def test_max_model_len_auto_is_kept_apart_from_a_length(spelling):
    parsed = parse_vllm_command([*SERVE, "m", "--max-model-len", spelling, "-tp", "2"])
    assert parsed.is_max_model_len_auto
    assert parsed.settings == {"tensor_parallel_size": 2}  # no length: vLLM fits one


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ls", "-l"], "expects `vllm serve MODEL"),
        (["python", "-m", "vllm.entrypoints.cli.main", "chat"], "expects `vllm serve MODEL"),
        ([*SERVE, "m", "--max-model-len"], "--max-model-len has no value"),
        ([*SERVE, "m", "--max-num-seqs", "1k"], "--max-num-seqs takes an integer, got '1k'"),
        ([*SERVE, "m", "-tp", "two"], "-tp takes an integer"),
        ([*SERVE, "m", "--max-model-len", "1.5K"], "decimals only with a decimal suffix"),
        ([*SERVE, "m", "--max-model-len", "-2"], "--max-model-len must not be negative"),
        ([*SERVE, "m", "--kv-cache-memory-bytes", "10GiB"], "write 10G for 10 GiB"),
        ([*SERVE, "m", "--gpu-memory-utilization", "90%"], "takes a number"),
        (
            [*SERVE, "m", "--enable-prefix-caching", "false"],
            "takes no value .*write --enable-prefix-caching or --no-enable-prefix-caching",
        ),
        ([*SERVE, "m", "--enforce-eager=true"], "--enforce-eager takes no value"),
        ([*SERVE, "--port", "8000"], "names no model"),
        ([*SERVE], "names no model"),
        ([*API_SERVER, "m"], r"names no model \(use --model MODEL\)"),
        ([*SERVE, "--host", "h", "--trust-remote-code", "m"], "cannot tell which of 'h', 'm'"),
    ],
)
def test_refuses_what_vllm_refuses(args, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse_vllm_command(args)


def test_a_switch_before_the_model_leaves_the_next_word_to_be_the_model():
    # vLLM reads `vllm serve --enforce-eager true` as serving a model named "true".
    assert parse_vllm_command([*SERVE, "--enforce-eager", "true"]).model == "true"


def test_split_names_the_entry_point():
    assert split_vllm_command(["/opt/venv/bin/vllm", "serve", "m", "-tp", "2"]) == (
        "serve",
        ["m", "-tp", "2"],
    )
    assert split_vllm_command([*API_SERVER, "--model", "m"]) == ("api_server", ["--model", "m"])
