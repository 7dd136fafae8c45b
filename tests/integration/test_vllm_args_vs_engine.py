"""The offline reader of vLLM command lines against vLLM's own parser (``.venv-vllm``).

One subprocess imports vLLM 0.32 and parses every line below with the ``vllm serve``
parser (:func:`servefit.preflight.engine_args.parse_many_with_engine`); the offline reader
(:mod:`servefit.preflight.vllm_args`) must give the same model and settings field by field,
and refuse what vLLM refuses. The same call checks :func:`servefit.units.parse_human_int`
against vLLM's ``human_readable_int`` through ``--max-num-batched-tokens``.

Skipped only where ``.venv-vllm`` is absent (``scripts/vllm_cpu/install.sh`` makes it).
"""

from __future__ import annotations

import pytest
import vllm_server as helper

from servefit.errors import InvalidArgumentError
from servefit.preflight.engine_args import parse_many_with_engine
from servefit.preflight.vllm_args import VllmCommand, parse_vllm_command

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _engine() -> None:
    helper.require_vllm()  # fails without the engine (SERVEFIT_WITHOUT_VLLM=1: skips)


SERVE = ["vllm", "serve"]
ENGINE_TIMEOUT_S = 600.0  # one vLLM import: 15-45 s on a busy 2-core machine

AGREE = {
    "human ints": [*SERVE, "m", "--max-model-len", "32k", "--max-num-batched-tokens", "8K"],
    "flag=value": [*SERVE, "m", "--max-model-len=32K", "--kv-cache-memory-bytes=10G"],
    "decimal suffix": [*SERVE, "m", "--max-num-batched-tokens", "25.6k", "--max-model-len=1.001k"],
    "short flags": [*SERVE, "m", "-tp", "2", "-pp=2", "-q", "fp8"],
    "underscores": [*SERVE, "m", "--max_model_len", "4096", "--gpu_memory_utilization=0.85"],
    "alias": [*SERVE, "m", "--device-memory-utilization", "0.7", "--block-size", "32"],
    "abbreviation": [*SERVE, "m", "--kv-cache-memory", "4g"],
    "switches": [*SERVE, "m", "--no-enable-prefix-caching", "--enforce-eager"],
    "last switch wins": [*SERVE, "m", "--enable-prefix-caching", "--no-enable-prefix-caching"],
    "last value wins": [*SERVE, "m", "-tp", "2", "--tensor-parallel-size", "4"],
    "--model moves": [*SERVE, "-tp", "2", "--model", "m", "--max-num-seqs", "128"],
    "None is the default": [*SERVE, "m", "-q", "None", "--kv-cache-memory-bytes", ""],
    "auto length": [*SERVE, "m", "--max-model-len", "auto", "-tp", "2"],
    "-1 length": [*SERVE, "m", "--max-model-len=-1"],
    "unknown flags first": [*SERVE, "--host", "0.0.0.0", "--port", "8000", "m", "--dtype", "half"],
    "unknown switch first": [*SERVE, "--trust-remote-code", "m", "--kv-cache-dtype", "fp8"],
    "unknown flags with values": [
        *SERVE,
        "org/model",
        "--seed",
        "0",
        "--served-model-name",
        "a",
        "b",
        "--uvicorn-log-level",
        "warning",
        "--max-num-seqs",
        "64",
        "--disable-log-stats",
    ],
    "api server": [
        "python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "m/x",
        "--port",
        "8000",
        "--max-model-len",
        "2k",
    ],
    "cli module": ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "m", "-tp", "8"],
}

BOTH_REFUSE = {
    "int flag with a suffix": [*SERVE, "m", "--max-num-seqs", "1k"],
    "binary suffix with decimals": [*SERVE, "m", "--max-model-len", "1.5K"],
    "byte units": [*SERVE, "m", "--kv-cache-memory-bytes", "10GiB"],
    "boolean with a word": [*SERVE, "m", "--enable-prefix-caching", "false"],
    "boolean with =": [*SERVE, "m", "--enforce-eager=true"],
    "percentage": [*SERVE, "m", "--gpu-memory-utilization", "90%"],
    "word for an int": [*SERVE, "m", "-tp", "two"],
    "missing value": [*SERVE, "m", "--max-model-len"],
    "no model": [*SERVE, "--port", "8000"],
}

# Spellings for --max-num-batched-tokens (vLLM's human_readable_int).
SPELLINGS = [
    *["0", "1", "007", "+5", "32_768", " 8k ", "32k", "32K", "25.6k", "0.5k", "1.001k"],
    *["1m", "1M", "2g", "2G", "1t", "1T", "4.35k", "0.1m", "1.0k", "8388607T"],
    *["1.5K", "0.5G", "1.0", "1e3", "0x10", "auto", "nan", "inf", "", "1_000k", ".5k"],
    *["5.k", "-1k", "32 k", "32kk", "10GiB", "10 GB", "1__0", "k", "K"],
]
# Where servefit is stricter than vLLM on purpose: vLLM parses these, no setting can be one.
STRICTER = ["-5", "-1", "9223372036854775808"]


@pytest.fixture(scope="module")
def engine() -> dict[tuple[str, ...], VllmCommand | InvalidArgumentError]:
    lines = [
        *AGREE.values(),
        *BOTH_REFUSE.values(),
        *([*SERVE, "m", f"--max-num-batched-tokens={s}"] for s in [*SPELLINGS, *STRICTER]),
    ]
    answers = parse_many_with_engine(lines, str(helper.VLLM_PYTHON), timeout_s=ENGINE_TIMEOUT_S)
    assert answers is not None, f"vLLM's parser did not answer in {helper.VLLM_PYTHON}"
    return {tuple(line): answer for line, answer in zip(lines, answers, strict=True)}


def _offline(line: list[str]) -> VllmCommand | InvalidArgumentError:
    try:
        return parse_vllm_command(line)
    except InvalidArgumentError as error:
        return error


@pytest.mark.parametrize("line", AGREE.values(), ids=AGREE.keys())
def test_both_readers_agree_field_by_field(engine, line):
    by_engine, offline = engine[tuple(line)], _offline(line)
    assert isinstance(by_engine, VllmCommand), f"vLLM refused a line meant to be valid: {by_engine}"
    assert isinstance(offline, VllmCommand), f"the offline reader refused it: {offline}"
    assert offline.model == by_engine.model
    assert offline.is_max_model_len_auto == by_engine.is_max_model_len_auto
    assert offline.settings == by_engine.settings  # same keys, same values, same types
    for key, value in offline.settings.items():
        assert type(value) is type(by_engine.settings[key]), key


@pytest.mark.parametrize("line", BOTH_REFUSE.values(), ids=BOTH_REFUSE.keys())
def test_both_readers_refuse(engine, line):
    assert isinstance(engine[tuple(line)], InvalidArgumentError), engine[tuple(line)]
    assert isinstance(_offline(line), InvalidArgumentError), _offline(line)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_human_int_matches_vllm(engine, spelling):
    line = [*SERVE, "m", f"--max-num-batched-tokens={spelling}"]
    by_engine, offline = engine[tuple(line)], _offline(line)
    if isinstance(by_engine, InvalidArgumentError):
        assert isinstance(offline, InvalidArgumentError), f"vLLM refuses {spelling!r}"
    else:
        assert offline == by_engine


@pytest.mark.parametrize("spelling", STRICTER)
def test_human_int_is_stricter_only_where_no_setting_can_be(engine, spelling):
    line = [*SERVE, "m", f"--max-num-batched-tokens={spelling}"]
    assert isinstance(engine[tuple(line)], VllmCommand)  # vLLM's parser lets it through
    assert isinstance(_offline(line), InvalidArgumentError)
