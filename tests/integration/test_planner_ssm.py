"""servefit's capacity planner against a real vLLM 0.32 engine (CPU build) on state-space
models, each served with 1 GiB of KV space (``VLLM_CPU_KVCACHE_SPACE``).

**Pure Mamba-2**: ``make_tiny_model.py --arch mamba2`` (2 layers, 4 heads of 64 dims, 1
group, state 64, conv kernel 4, bf16).

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

**Falcon-H1**: ``make_tiny_model.py --arch falcon_h1``, 2 layers of attention (2 KV heads of
32 dims: 256 bytes a token) beside the same Mamba-2 (35,072-byte state page). vLLM registers
2 attention + 2 Mamba cache layers and raises the CPU's 128-token block to
128 x cdiv(35,072, 128 x 256) = 256 (page 65,536 bytes); two groups of 2 layers: 2**30 //
65,536 // 2 = 8,192 blocks. Prefix caching on (a hybrid's default): a 4,096-token request
needs cdiv(4096, 256) = 16 attention blocks + 3 Mamba-2 blocks (align mode, one a prefill
checkpoint) = 19: 431.16x. Observed with vLLM 0.32.0 CPU::

    CPU KV cache size: 1,766,022 tokens, Maximum concurrency for 4,096 tokens per
        request: 431.16x

(and, run with prefix caching off, 16 + 1 = 17 blocks: 1,973,790 tokens, 481.88x).

**Granite-4.0-H**: ``make_tiny_model.py --arch granite_hybrid``, 3 Mamba-2 layers (the same
state page) and 1 attention layer (the same 256 bytes a token): block 256, page 65,536; 3
Mamba layers and 1 attention layer make 4 groups of 1 (3 is not under 1.5 x 1), so 2**30 //
65,536 = 16,384 blocks; a request needs 16 + 3 groups x 3 = 25: 655.36x. Observed::

    CPU KV cache size: 2,684,354 tokens, Maximum concurrency for 4,096 tokens per
        request: 655.36x
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest

from servefit.adapters.detect import detect_cpu
from servefit.adapters.model_source import load_model
from servefit.core.engines.vllm_cpu import VllmCpuEngine, has_avx512_bf16
from servefit.core.plan import ServeSettings
from servefit.core.weights import count_params

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_server as helper
from test_planner_vs_vllm import GIB, cache_config_labels, parse_startup_log

pytestmark = pytest.mark.integration

MAX_NUM_SEQS = 128  # vLLM's CPU default for the API server
MAX_NUM_BATCHED_TOKENS = 2048  # the CPU API server's default, given explicitly


def _serve(arch: str, extra: list[str], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Start the ``arch`` server, read what it built, send one request, stop it."""
    python = helper.require_vllm()
    extra = [
        *extra,
        "--max-num-batched-tokens",
        str(MAX_NUM_BATCHED_TOKENS),
        "--max-num-seqs",
        str(MAX_NUM_SEQS),
    ]
    served = helper.serve_once(
        tmp_path_factory.mktemp(f"vllm-{arch}"), python=python, arch=arch, extra_args=extra
    )
    server, info = served.server, cache_config_labels(served.metrics_text)
    facts = parse_startup_log(server.log_text())
    facts.update(
        arch=arch,
        model_dir=server.model_dir,
        kv_cache_memory_bytes=int(info["kv_cache_memory_bytes"]),
        block_size=int(info["block_size"]),
        num_blocks=int(info["num_gpu_blocks"]),
        metrics=info,
        usage=served.usage,
        seconds=round(served.seconds, 1),
    )
    return facts


# the helper turns prefix caching on; vLLM's default for an attention-free model is off, and
# with it on (align mode) the CPU build's Mamba-2 path fails on the first request
SERVED = {"mamba2": ["--no-enable-prefix-caching"], "falcon_h1": [], "granite_hybrid": []}


@pytest.fixture(scope="module")
def _engines(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every arch's servers started, read and stopped, two at a time."""
    helper.require_vllm()
    return helper.run_concurrently(
        {
            arch: functools.partial(_serve, arch, extra, tmp_path_factory)
            for arch, extra in SERVED.items()
        }
    )


@pytest.fixture(scope="module")
def mamba2_engine(_engines) -> dict:
    """What vLLM built for the tiny Mamba-2, prefix caching off (its server stopped)."""
    return helper.result_of(_engines, "mamba2")


@pytest.fixture(scope="module")
def falcon_h1_engine(_engines) -> dict:
    """What vLLM built for the tiny Falcon-H1, prefix caching on (its server stopped)."""
    return helper.result_of(_engines, "falcon_h1")


@pytest.fixture(scope="module")
def granite_engine(_engines) -> dict:
    """What vLLM built for the tiny Granite-4.0-H, prefix caching on (its server stopped)."""
    return helper.result_of(_engines, "granite_hybrid")


ENGINES = ["mamba2_engine", "falcon_h1_engine", "granite_engine"]
EXPECTED = {  # bf16 state (a host without AVX-512 BF16): the docstring's numbers
    "mamba2": (4096, 15_307, 62_697_472),
    "falcon_h1": (256, 8_192, 1_766_022),
    "granite_hybrid": (256, 16_384, 2_684_354),
}


@pytest.mark.parametrize("engine", ENGINES)
def test_plan_is_the_engines(engine, request):
    f = request.getfixturevalue(engine)
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
        f"{f['arch']}: vLLM {f['line']!r}, {f['num_blocks']} blocks of {f['block_size']}; "
        f"servefit: {plan.kv_cache_tokens:,} tokens, {plan.max_concurrency:.2f}x, "
        f"{plan.num_blocks} blocks of {plan.settings.block_size} ({f['seconds']} s)"
    )
    print("\n" + report)
    assert plan.num_blocks == f["num_blocks"], report
    assert plan.kv_cache_tokens == f["kv_cache_tokens"], report
    assert plan.max_concurrency == pytest.approx(
        float(f["metrics"]["kv_cache_max_concurrency"]), rel=1e-12
    ), report
    # Falcon-H1: the raised attention block; Mamba-2: max_model_len, the Mamba block
    assert plan.settings.block_size == f["block_size"], report
    if not has_avx512_bf16(host):
        block, blocks, tokens = EXPECTED[f["arch"]]
        assert (plan.num_blocks, plan.kv_cache_tokens) == (blocks, tokens), report
        assert plan.settings.block_size == block, report


@pytest.mark.parametrize(
    ("engine", "params"),
    [("mamba2_engine", 497_304), ("falcon_h1_engine", 791_960), ("granite_engine", 1_027_108)],
)
def test_parameters_are_the_checkpoints(engine, params, request):
    """servefit's count of the tiny checkpoint equals transformers' own (BUILD_INFO)."""
    model_dir = request.getfixturevalue(engine)["model_dir"]
    built = json.loads((model_dir / "BUILD_INFO.json").read_text())
    spec = load_model(str(model_dir), allow_hub=False).spec
    assert count_params(spec).total == built["params"] == params
