"""servefit's capacity planner against a real vLLM 0.32 engine (CPU build) on a pure Mamba-2
model: ``make_tiny_model.py --arch mamba2`` (2 layers, 4 heads of 64 dims, 1 group, state
64, conv kernel 4, bf16), served with 1 GiB of KV space (``VLLM_CPU_KVCACHE_SPACE``).

By hand (``MambaStateShapeCalculator.mamba2_state_shape``): one layer's state is
(4 - 1) x (256 + 2 x 1 x 64) conv x 2 bytes + 4 x 64 x 64 temporal x 2 bytes = 35,072
bytes; both layers share a block id, so 1 GiB holds 2**30 // 35,072 // 2 = 15,307 blocks.
An attention-free model runs without prefix caching (``is_prefix_caching_supported``), so
a request holds one block whatever its length: 15,307 / 1 = 15307.00x, printed as
int(15,307 x 4,096) tokens. Observed with vLLM 0.32.0 CPU::

    CPU KV cache size: 62,697,472 tokens, Maximum concurrency for 4,096 tokens per
        request: 15307.00x

The server runs with ``--no-enable-prefix-caching`` (vLLM's default for this model; the
test helper turns it on for the others): with it on, vLLM 0.32 keeps 3 blocks a request
(align mode, one a prefill checkpoint: 5102.33x) and its CPU Mamba-2 path then fails on the
first request (an IndexError in the worker). On a CPU with AVX-512 BF16 the engine keeps
the state in float32, and so does the plan: the numbers differ, the equality holds. Mamba-1
is not served here: vLLM's CPU build sizes its cache (the same arithmetic) but has no
``selective_scan_fwd`` kernel to run it.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from servefit.adapters.detect import detect_cpu
from servefit.adapters.model_source import load_model
from servefit.core.engines.vllm_cpu import VllmCpuEngine, has_avx512_bf16
from servefit.core.plan import ServeSettings
from servefit.core.weights import count_params

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_server as helper
from test_planner_vs_vllm import GIB, cache_config_info, parse_startup_log

pytestmark = pytest.mark.integration

MAX_NUM_SEQS = 128  # vLLM's CPU default for the API server
MAX_NUM_BATCHED_TOKENS = 2048  # the CPU API server's default, given explicitly


@pytest.fixture(scope="module")
def mamba2_engine(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What vLLM built for the tiny Mamba-2 (its server already stopped)."""
    python = helper.VLLM_PYTHON
    if not python.exists():
        pytest.fail(
            f"the vLLM server interpreter {python} does not exist; "
            f"run `{helper.INSTALL_SCRIPT}` from the repository root first",
            pytrace=False,
        )
    # the helper turns prefix caching on; vLLM's default for an attention-free model is off,
    # and with it on (align mode) the CPU build's Mamba-2 kernels fail on the first request
    extra = [
        "--no-enable-prefix-caching",
        "--max-num-batched-tokens",
        str(MAX_NUM_BATCHED_TOKENS),
        "--max-num-seqs",
        str(MAX_NUM_SEQS),
    ]
    work_dir = tmp_path_factory.mktemp("vllm-mamba2")
    t0 = time.monotonic()
    server = helper.start(
        helper.free_port(), work_dir, python=python, arch="mamba2", extra_args=extra
    )
    try:
        info = cache_config_info(server.base_url)
        body = {
            "model": server.served_model_name,
            "prompt": "the quick brown fox jumps over the lazy dog " * 20,
            "max_tokens": 4,
            "ignore_eos": True,
        }
        request = urllib.request.Request(
            f"{server.base_url}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            usage = json.load(response)["usage"]
    finally:
        helper.stop_server(server.process)
    facts = parse_startup_log(server.log_text())
    facts.update(
        model_dir=server.model_dir,
        kv_cache_memory_bytes=int(info["kv_cache_memory_bytes"]),
        num_blocks=int(info["num_gpu_blocks"]),
        metrics=info,
        usage=usage,
        seconds=round(time.monotonic() - t0, 1),
    )
    return facts


def test_mamba2_plan_is_the_engines(mamba2_engine):
    f = mamba2_engine
    assert f["device"] == "CPU" and f["max_model_len"] == 4096
    assert f["kv_cache_memory_bytes"] == 1 * GIB
    assert f["usage"]["completion_tokens"] == 4  # the engine really ran the model
    loaded = load_model(str(f["model_dir"]), allow_hub=False)
    host = detect_cpu().device
    settings = ServeSettings(
        max_model_len=4096,
        kv_cache_memory_bytes=f["kv_cache_memory_bytes"],
        max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
        max_num_seqs=MAX_NUM_SEQS,
        vllm_version="0.32",
    )
    plan = VllmCpuEngine().plan(loaded.spec, host, settings, mamba_ssm_dtype=loaded.mamba_ssm_dtype)
    report = (
        f"vLLM {f['line']!r}, {f['num_blocks']} blocks; servefit: {plan.kv_cache_tokens:,} "
        f"tokens, {plan.max_concurrency:.2f}x, {plan.num_blocks} blocks ({f['seconds']} s)"
    )
    print("\n" + report)
    assert plan.num_blocks == f["num_blocks"], report
    assert plan.kv_cache_tokens == f["kv_cache_tokens"], report
    assert plan.max_concurrency == pytest.approx(
        float(f["metrics"]["kv_cache_max_concurrency"]), rel=1e-12
    ), report
    if not has_avx512_bf16(host):  # bf16 state: the docstring's numbers
        assert (plan.num_blocks, plan.kv_cache_tokens) == (15_307, 62_697_472)


def test_mamba2_parameters_are_the_checkpoints(mamba2_engine):
    """servefit's count of the tiny checkpoint equals transformers' own (BUILD_INFO)."""
    model_dir = mamba2_engine["model_dir"]
    built = json.loads((model_dir / "BUILD_INFO.json").read_text())
    spec = load_model(str(model_dir), allow_hub=False).spec
    assert count_params(spec).total == built["params"] == 497_304
