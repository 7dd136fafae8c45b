"""SGLang's request-to-token table (issue 32): an int32 row of ``context_len + 4`` slots for
each of ``max_num_reqs + 1`` requests, allocated after the pool is sized, out of what
``--mem-fraction-static`` leaves (model_runner.py ``init_memory_pool``; ReqToTokenPool in
mem_cache/memory_pool.py). The golden figure is SGLang's own OOM message."""

from __future__ import annotations

import json

from click.testing import CliRunner

from servefit.cli.main import cli
from servefit.core.engines.sglang import request_table_bytes
from servefit.units import GIB_BYTES

SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def _plan(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["plan", SCOUT, "--offline", "--json", *args])
    return result.exit_code, json.loads(result.output) if result.output.startswith("{") else {}


def test_the_table_is_the_allocation_sglang_reported():
    # sgl-project/sglang#5755, Llama 4 Scout at its default 10,485,760-token context on
    # 8 x H100: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 80.04 GiB".
    # By hand: (2,048 + 1) x (10,485,760 + 4) x 4 bytes = 85,941,321,744 bytes = 80.04 GiB
    table = request_table_bytes(2048, 10_485_760)
    assert table == 2049 * 10_485_764 * 4 == 85_941_321_744
    assert round(table / GIB_BYTES, 2) == 80.04


def test_a_table_larger_than_the_reserve_stops_the_start_by_name():
    code, plan = _plan("--gpu", "H100", "--tp", "8", "--engine", "sglang")
    assert code == 1
    named = [p for p in plan["problems"] if "request-to-token table" in p]
    assert len(named) == 1
    assert "2,049 requests x 10,485,764 int32 slots = 80.04 GiB" in named[0]
    assert "--context-length" in named[0]


def test_the_table_shrinks_with_the_context_and_the_requests():
    # 1M context at the 2,048 floor: 2,049 x 1,000,004 x 4 = 7.63 GiB, inside the 27 GiB an
    # H200 keeps out at --mem-fraction-static 0.8: the start is not stopped by it
    code, plan = _plan(
        "--gpu", "H200", "--tp", "8", "--context-length", "1000000",
        "--mem-fraction-static", "0.8",
    )  # fmt: skip
    assert code == 0, plan["problems"]
    assert not any("request-to-token table" in p for p in plan["problems"])
    assert any("2,049 rows of 1,000,004 int32 slots = 7.63 GiB" in a for a in plan["assumptions"])
    # --max-running-requests 64: 65 rows
    _, small = _plan(
        "--gpu", "H200", "--tp", "8", "--context-length", "1000000",
        "--max-running-requests", "64",
    )  # fmt: skip
    assert any("65 rows of 1,000,004" in a for a in small["assumptions"])


def test_vllm_keeps_no_such_table():
    # -tp is vLLM's spelling (--tp is SGLang's, and implies --engine sglang)
    _, plan = _plan("--gpu", "H200", "-tp", "8", "--max-model-len", "1000000")
    assert plan["vllm_command"].startswith("vllm serve ")
    assert not any("request-to-token" in a for a in plan["assumptions"])
