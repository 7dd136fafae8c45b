"""servefit's capacity planner against a real vLLM 0.32 engine (CPU build) on three more
architectures: a tiny MoE, a tiny sliding-window hybrid and a tiny linear-attention hybrid.

Each architecture gets its own server (``make_tiny_model.py --arch moe|sliding``), started
by a module-scoped fixture that reads what the engine built (startup log and ``/metrics``),
sends one completion, and stops the server before any test runs, two servers at a time
(``vllm_server.serve_once``, ``run_concurrently``).

* ``moe``: ``Qwen3MoeForCausalLM``, 2 layers of 4 experts (top-2), 2 KV heads of 32 dims,
  bf16. The KV cache does not see the experts: it is the Llama's (64 KiB a block id),
  observed with vLLM 0.32.0 CPU::

      CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 4,096 tokens per
          request: 512.00x

* ``sliding``: ``Gemma2ForCausalLM``, 4 layers alternating sliding (window 64) and full
  attention, 2 KV heads of 32 dims, bf16, served with ``--max-num-batched-tokens 512``.
  vLLM puts the 2 sliding and the 2 full layers in two KV-cache groups of 2 layers sharing
  one pool (a block id costs 2 x 32 KiB: 1 GiB = 16,384 blocks). A 4,096-token request
  needs cdiv(4096, 128) = 32 blocks in the full group and
  ``SlidingWindowSpec.max_admission_blocks_per_request`` =
  cdiv(min(64 - 1 + 512, 4096), 128) + 1 = 6 in the sliding group: 16,384 / 38 = 431.16x,
  printed as int(431.16 x 4096) tokens::

      CPU KV cache size: 1,766,022 tokens, Maximum concurrency for 4,096 tokens per
          request: 431.16x

  (vLLM 0.32 counts ``max_in_flight_tokens`` = max_concurrent_batches x
  max_num_batched_tokens; the CPU platform turns async scheduling off, so that is 1 x 512.)

* ``hybrid``: ``Qwen3NextForCausalLM``, 3 Gated DeltaNet + 1 gated attention layer, bf16,
  served with ``--block-size 64`` (``test_up.py`` serves it at the CPU's default 128). vLLM
  raises the block in steps of the block in force (``Platform._align_hybrid_block_size``,
  ``vllm/platforms/interface.py``): one state page is 35,840 bytes (bf16 state; a CPU with
  AVX-512 BF16 keeps it in fp32: 68,608), an attention token 256 bytes, so 64 x cdiv(35,840,
  64 x 256) = 192 tokens (servefit's old steps of 16 said 144). 1 GiB / (192 x 256) = 21,845
  blocks; a 4,096-token request needs cdiv(4096, 192) = 22 + 3 GDN groups x 2 (``align``
  mode, prefix caching on) = 28: 780.18x.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from servefit.adapters.detect import detect_cpu
from servefit.adapters.model_source import load_model
from servefit.core.engines.vllm_cpu import VllmCpuEngine
from servefit.core.hardware import custom_gpu
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.core.weights import count_params

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_server as helper
from test_planner_vs_vllm import GIB, REL_TOL, cache_config_labels, parse_startup_log

pytestmark = pytest.mark.integration

MAX_NUM_SEQS = 128  # vLLM's CPU default for the API server (engine/arg_utils.py)
ARCHS = {
    # the CPU API server's default max_num_batched_tokens is 2048: given explicitly so the
    # plan uses what the server ran with
    "moe": {"architecture": "Qwen3MoeForCausalLM", "max_num_batched_tokens": 2048},
    # small enough that the 64-token window cuts a sliding layer's need (6 blocks, not 32)
    "sliding": {"architecture": "Gemma2ForCausalLM", "max_num_batched_tokens": 512},
    # a user block below the raise: vLLM raises it in steps of 64, not 16 nor 128
    "hybrid": {
        "architecture": "Qwen3NextForCausalLM",
        "max_num_batched_tokens": 2048,
        "block_size": 64,
    },
    # Nemotron-NAS: per-layer KV heads; its configuration module ships in the model directory
    "nas": {
        "architecture": "DeciLMForCausalLM",
        "max_num_batched_tokens": 2048,
        "extra_args": ["--trust-remote-code"],
    },
}

RESOLVED_ARCH_RE = re.compile(r"Resolved architecture: (?P<arch>\w+)")
NON_DEFAULT_ARGS_RE = re.compile(r"non-default args: (?P<args>\{.*\})")


def _serve_and_collect(arch: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Start the ``arch`` server, read what it built, send one request, stop it."""
    python = helper.require_vllm()
    mnbt = ARCHS[arch]["max_num_batched_tokens"]
    extra = ["--max-num-batched-tokens", str(mnbt), "--max-num-seqs", str(MAX_NUM_SEQS)]
    if "block_size" in ARCHS[arch]:
        extra += ["--block-size", str(ARCHS[arch]["block_size"])]
    extra += ARCHS[arch].get("extra_args", [])
    served = helper.serve_once(
        tmp_path_factory.mktemp(f"vllm-{arch}"), python=python, arch=arch, extra_args=extra
    )
    server, info = served.server, cache_config_labels(served.metrics_text)
    text = server.log_text()
    facts = parse_startup_log(text)
    resolved = RESOLVED_ARCH_RE.search(text)
    args = NON_DEFAULT_ARGS_RE.search(text)
    facts.update(
        arch=arch,
        model_dir=server.model_dir,
        log_path=server.log_path,
        resolved_architecture=resolved.group("arch") if resolved else None,
        non_default_args=ast.literal_eval(args.group("args")) if args else {},
        block_size=int(info["block_size"]),
        kv_cache_memory_bytes=int(info["kv_cache_memory_bytes"]),
        num_blocks=int(info["num_gpu_blocks"]),
        metrics=info,
        usage=served.usage,
        max_num_batched_tokens=mnbt,
        max_num_seqs=MAX_NUM_SEQS,
        seconds=round(served.seconds, 1),
        startup_seconds=round(server.startup_seconds, 1),
    )
    return facts


@pytest.fixture(scope="module")
def _engines(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every arch's servers started, read and stopped, two at a time."""
    helper.require_vllm()
    return helper.run_concurrently(
        {arch: functools.partial(_serve_and_collect, arch, tmp_path_factory) for arch in ARCHS}
    )


@pytest.fixture(scope="module")
def moe_engine(_engines) -> dict:
    """What vLLM built for the tiny Qwen3-MoE (its server already stopped)."""
    return helper.result_of(_engines, "moe")


@pytest.fixture(scope="module")
def sliding_engine(_engines) -> dict:
    """What vLLM built for the tiny Gemma 2 (its server already stopped)."""
    return helper.result_of(_engines, "sliding")


@pytest.fixture(scope="module")
def hybrid_engine(_engines) -> dict:
    """What vLLM built for the tiny Qwen3-Next at --block-size 64 (its server stopped)."""
    return helper.result_of(_engines, "hybrid")


@pytest.fixture(scope="module")
def nas_engine(_engines) -> dict:
    """What vLLM built for the tiny Nemotron-NAS (its server already stopped)."""
    return helper.result_of(_engines, "nas")


def _plan(model_dir: Path, f: dict):
    """As ``test_planner_vs_vllm._plan``, with the server's scheduler limits too."""
    loaded = load_model(str(model_dir), allow_hub=False)
    gpu = custom_gpu(memory_bytes=8 * GIB, memory_bandwidth_bytes_per_s=1e11)
    settings = ServeSettings(
        max_model_len=f["max_model_len"],
        kv_cache_memory_bytes=f["kv_cache_memory_bytes"],
        block_size=f["block_size"],
        max_num_batched_tokens=f["max_num_batched_tokens"],
        max_num_seqs=f["max_num_seqs"],
        enforce_eager=True,
        enable_prefix_caching=True,
        vllm_version="0.32",
    )
    return plan_capacity(loaded.spec, gpu, settings, mamba_ssm_dtype=loaded.mamba_ssm_dtype)


def _report(f: dict, plan) -> str:
    return (
        f"{f['arch']}: vLLM {f['line']!r} ({f['metrics']['kv_cache_max_concurrency']}x), "
        f"{f['num_blocks']} blocks of {f['block_size']} "
        f"tokens; servefit: {plan.kv_cache_tokens:,} tokens, {plan.max_concurrency:.2f}x, "
        f"{plan.num_blocks} blocks of {plan.settings.block_size} tokens, "
        f"{len(plan.layout.groups)} group(s) of {plan.layout.group_size} layers"
    )


ENGINES = pytest.mark.parametrize("engine", ["moe_engine", "sliding_engine", "nas_engine"])


@ENGINES
def test_startup_log_is_as_configured(engine, request):
    f = request.getfixturevalue(engine)
    assert f["resolved_architecture"] == ARCHS[f["arch"]]["architecture"]
    assert f["device"] == "CPU"
    assert f["max_model_len"] == f["max_seq_len"] == 4096
    assert f["kv_cache_memory_bytes"] == 1 * GIB
    assert f["kv_cache_gib_logged"] == 1.0
    assert f["block_size"] == 128
    assert f["dtype"] == "bfloat16"
    assert f["non_default_args"]["max_num_batched_tokens"] == f["max_num_batched_tokens"]
    assert f["non_default_args"]["max_num_seqs"] == f["max_num_seqs"]
    assert int(f["metrics"]["kv_cache_size_tokens"]) == f["kv_cache_tokens"]
    # the log rounds to 2 decimals (%.2fx); the metric is the unrounded float
    concurrency = float(f["metrics"]["kv_cache_max_concurrency"])
    assert concurrency == pytest.approx(f["max_concurrency"], abs=0.005)
    assert f["usage"]["completion_tokens"] == 4  # the engine really served the model


def test_sliding_window_shapes_the_engine_cache(sliding_engine):
    """The window matters: 32 (full group) + 6 (sliding group) blocks per request, not the
    32 + 32 the same layers would need without a window."""
    f = sliding_engine
    per_request = f["num_blocks"] / float(f["metrics"]["kv_cache_max_concurrency"])
    assert per_request == pytest.approx(32 + 6)
    assert f["num_blocks"] == 1 * GIB // (2 * 32 * 1024)  # 2 layers a group, 32 KiB a page


@ENGINES
def test_planner_matches_engine(engine, request):
    f = request.getfixturevalue(engine)
    plan = _plan(f["model_dir"], f)
    report = _report(f, plan)
    assert plan.starts, plan.problems
    assert plan.settings.block_size == f["block_size"], report
    assert plan.settings.max_num_batched_tokens == f["max_num_batched_tokens"], report
    assert plan.num_blocks == f["num_blocks"], report
    assert plan.kv_cache_tokens == pytest.approx(f["kv_cache_tokens"], rel=REL_TOL), report
    assert plan.max_concurrency == pytest.approx(f["max_concurrency"], rel=REL_TOL), report


def test_moe_config_as_transformers5_saves_it(moe_engine, tmp_path):
    """The same MoE checkpoint with config.json as transformers 5.19 writes it: the expert
    count as ``num_local_experts`` (Qwen3MoeConfig.attribute_map), where published
    checkpoints say ``num_experts``. Both are read."""
    f = moe_engine
    config = json.loads((f["model_dir"] / "config.json").read_text())
    config["num_local_experts"] = config.pop("num_experts")
    (tmp_path / "config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (f["model_dir"] / name).exists():
            shutil.copy(f["model_dir"] / name, tmp_path / name)
    plan = _plan(tmp_path, f)
    assert plan.max_concurrency == pytest.approx(f["max_concurrency"], rel=REL_TOL)


HYBRID_BLOCK_RAISE_RE = re.compile(r"Setting attention block size to (?P<block>\d+) tokens")


def test_hybrid_block_size_64_plans_as_the_engine_runs(hybrid_engine):
    """Planned as a user plans it (``--gpu cpu --block-size 64``, the host's ISA flags), not
    given the block the engine chose: the raised block, the blocks, the logged KV cache
    size and concurrency are the engine's exactly."""
    f = hybrid_engine
    assert f["resolved_architecture"] == "Qwen3NextForCausalLM"
    assert f["non_default_args"]["block_size"] == 64
    loaded = load_model(str(f["model_dir"]), allow_hub=False)
    settings = ServeSettings(
        max_model_len=f["max_model_len"],
        kv_cache_memory_bytes=f["kv_cache_memory_bytes"],
        block_size=64,
        max_num_batched_tokens=f["max_num_batched_tokens"],
        max_num_seqs=f["max_num_seqs"],
        vllm_version="0.32",
    )
    host = detect_cpu().device
    plan = VllmCpuEngine().plan(loaded.spec, host, settings, mamba_ssm_dtype=loaded.mamba_ssm_dtype)
    report = _report(f, plan) + f" (server ready in {f['startup_seconds']} s)"
    print("\n" + report)
    raised = HYBRID_BLOCK_RAISE_RE.search(f["log_path"].read_text(errors="replace"))
    assert raised and int(raised.group("block")) == f["block_size"], report
    assert plan.settings.block_size == f["block_size"], report
    assert plan.num_blocks == f["num_blocks"], report
    assert plan.kv_cache_tokens == f["kv_cache_tokens"], report
    assert plan.max_concurrency == pytest.approx(
        float(f["metrics"]["kv_cache_max_concurrency"]), rel=1e-12
    ), report
    assert f"{plan.max_concurrency:.2f}" == f"{f['max_concurrency']:.2f}", report
    if "avx512_bf16" not in host.architecture.split():  # bf16 state: the docstring's numbers
        assert (plan.settings.block_size, plan.num_blocks) == (192, 21_845)


def test_nas_layers_of_unequal_pages_share_one_group(nas_engine):
    """Nemotron-NAS's three attention layers (2, 1 and 2 KV heads; block 1 has none) keep
    pages of 32, 16 and 32 KiB at the CPU's 128-token block: vLLM 0.32 puts them in one
    group (``UniformTypeKVCacheSpecs``), a block id costing their sum, 80 KiB. 1 GiB holds
    2^30 // 81,920 = 13,107 blocks; a 4,096-token request needs 32 of them: 409.59x, printed
    as int(409.59375 x 4,096) = 1,677,696 tokens. Unifying the pages instead (the smaller
    page's block doubled, two groups) would have said 13,107 / 48 = 273.06x."""
    f = nas_engine
    loaded = load_model(str(f["model_dir"]), allow_hub=False)
    settings = ServeSettings(
        max_model_len=f["max_model_len"],
        kv_cache_memory_bytes=f["kv_cache_memory_bytes"],
        max_num_batched_tokens=f["max_num_batched_tokens"],
        max_num_seqs=f["max_num_seqs"],
        vllm_version="0.32",
    )
    plan = VllmCpuEngine().plan(loaded.spec, detect_cpu().device, settings)
    report = _report(f, plan) + f" (server ready in {f['startup_seconds']} s)"
    print("\n" + report)
    assert (f["num_blocks"], f["kv_cache_tokens"]) == (13_107, 1_677_696), report
    assert (plan.num_blocks, plan.kv_cache_tokens) == (13_107, 1_677_696), report
    assert plan.max_concurrency == pytest.approx(
        float(f["metrics"]["kv_cache_max_concurrency"]), rel=1e-12
    ), report
    built = json.loads((f["model_dir"] / "BUILD_INFO.json").read_text())
    assert count_params(loaded.spec).total == built["params"] == 697_216
