"""servefit's capacity planner against a real vLLM engine (CPU build, tiny random model).

The server (``conftest.py``) serves a 2-layer Llama (4 query heads, 2 KV heads of 32 dims,
bf16) with ``VLLM_CPU_KVCACHE_SPACE=1`` (1 GiB of KV cache, given rather than profiled) and
``--max-model-len 4096``. vLLM 0.32 logs what it built::

    (Worker ...) Explicitly set (1.0/7.46) GiB for KV cache on node 0.
    (EngineCore ...) CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 4,096
        tokens per request: 512.00x

("CPU", not "GPU": ``kv_cache_utils._kv_cache_device_name`` names the device type.) The block
size is not logged at INFO; ``/metrics`` publishes the whole cache config
(``vllm:cache_config_info``: block_size 128, kv_cache_memory_bytes 1073741824,
num_gpu_blocks 16384), and prefix-cache hits come in whole 128-token blocks.

Arithmetic: a block of one layer holds 2 (K, V) x 128 tokens x 2 KV heads x 32 dims x 2
bytes = 32 KiB; both layers share block ids, so a block id costs 64 KiB and 1 GiB holds
16,384 blocks. A 4,096-token request needs 32 blocks: 512x, and vLLM >= 0.32 prints the token
count as int(512 x 4096) = 2,097,152.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from servefit.adapters.model_source import load_model
from servefit.core.hardware import custom_gpu
from servefit.core.plan import ServeSettings, plan_capacity

pytestmark = pytest.mark.integration

GIB = 2**30
REL_TOL = 0.01

KV_SIZE_RE = re.compile(
    r"(?P<device>[A-Z]+(?: \+ host)?) KV cache size: (?P<tokens>[\d,]+) tokens, "
    r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<conc>[\d.]+)x"
)
KV_EXPLICIT_RE = re.compile(
    r"Explicitly set \((?P<gib>[\d.]+)/(?P<total>[\d.]+)\) GiB for KV cache on node"
)
ENGINE_DTYPE_RE = re.compile(r"Initializing a V1 LLM engine .*?\bdtype=torch\.(?P<dtype>\w+)")
MAX_SEQ_LEN_RE = re.compile(r"\bmax_seq_len=(?P<len>\d+)")
METRIC_LABEL_RE = re.compile(r'(\w+)="([^"]*)"')


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_startup_log(text: str) -> dict:
    """The KV-cache facts of one vLLM V1 startup log (0.32, CPU or GPU)."""
    kv = KV_SIZE_RE.search(text)
    assert kv, "no '<device> KV cache size: N tokens, Maximum concurrency ...' line in the log"
    facts = {
        "line": kv.group(0),
        "device": kv.group("device"),
        "kv_cache_tokens": _int(kv.group("tokens")),
        "max_model_len": _int(kv.group("len")),
        "max_concurrency": float(kv.group("conc")),
    }
    explicit = KV_EXPLICIT_RE.search(text)
    facts["kv_cache_gib_logged"] = float(explicit.group("gib")) if explicit else None
    facts["kv_line"] = explicit.group(0) if explicit else None
    dtype = ENGINE_DTYPE_RE.search(text)
    facts["dtype"] = dtype.group("dtype") if dtype else None
    seq = MAX_SEQ_LEN_RE.search(text)
    facts["max_seq_len"] = int(seq.group("len")) if seq else None
    return facts


def cache_config_info(base_url: str) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` from the server's Prometheus endpoint."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:
        return cache_config_labels(response.read().decode())


def cache_config_labels(text: str) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` in a ``/metrics`` text."""
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            return dict(METRIC_LABEL_RE.findall(line))
    raise AssertionError("vllm:cache_config_info is not in /metrics")


def _post(base_url: str, path: str, body: dict, timeout: float = 60):
    request = urllib.request.Request(
        f"{base_url}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    return urllib.request.urlopen(request, timeout=timeout)


def _plan(model_dir: Path, *, max_model_len: int, kv_bytes: int, block_size: int):
    loaded = load_model(str(model_dir), allow_hub=False)
    gpu = custom_gpu(memory_bytes=8 * GIB, memory_bandwidth_bytes_per_s=1e11)
    settings = ServeSettings(
        max_model_len=max_model_len,
        kv_cache_memory_bytes=kv_bytes,
        block_size=block_size,
        enforce_eager=True,
        enable_prefix_caching=True,
        vllm_version="0.32",
    )
    return plan_capacity(loaded.spec, gpu, settings, mamba_ssm_dtype=loaded.mamba_ssm_dtype)


@pytest.fixture(scope="module")
def engine_facts(vllm_server) -> dict:
    """What the real engine built: its startup log, cross-checked with /metrics."""
    facts = parse_startup_log(vllm_server.log_text())
    info = cache_config_info(vllm_server.base_url)
    facts["block_size"] = int(info["block_size"])
    facts["kv_cache_memory_bytes"] = int(info["kv_cache_memory_bytes"])
    facts["num_blocks"] = int(info["num_gpu_blocks"])
    facts["metrics"] = info
    return facts


def test_startup_log_is_as_configured(engine_facts, vllm_server):
    f = engine_facts
    assert f["device"] == "CPU"
    assert f["max_model_len"] == f["max_seq_len"] == 4096
    # VLLM_CPU_KVCACHE_SPACE=1 -> kv_cache_memory_bytes = 1 * GiB (vllm/platforms/cpu.py)
    assert f["kv_cache_memory_bytes"] == 1 * GIB
    assert f["kv_cache_gib_logged"] == 1.0
    # the CPU platform's default block size (vllm/platforms/cpu.py), not CUDA's 16
    assert f["block_size"] == 128
    assert f["metrics"]["user_specified_block_size"] == "False"
    # a bf16 checkpoint runs in bf16 with --dtype auto
    assert f["dtype"] == "bfloat16"
    # the metrics agree with the log line
    assert int(f["metrics"]["kv_cache_size_tokens"]) == f["kv_cache_tokens"]
    assert float(f["metrics"]["kv_cache_max_concurrency"]) == pytest.approx(f["max_concurrency"])


def test_planner_matches_engine(engine_facts, vllm_server):
    f = engine_facts
    plan = _plan(
        vllm_server.model_dir,
        max_model_len=f["max_model_len"],
        kv_bytes=f["kv_cache_memory_bytes"],
        block_size=f["block_size"],
    )
    report = (
        f"vLLM: {f['line']!r}, {f['num_blocks']} blocks of {f['block_size']} tokens; "
        f"servefit: {plan.kv_cache_tokens:,} tokens, {plan.max_concurrency:.2f}x, "
        f"{plan.num_blocks} blocks of {plan.settings.block_size} tokens"
    )
    assert plan.starts, plan.problems
    assert plan.settings.block_size == f["block_size"], report
    assert plan.num_blocks == f["num_blocks"], report
    assert plan.kv_cache_tokens == pytest.approx(f["kv_cache_tokens"], rel=REL_TOL), report
    assert plan.max_concurrency == pytest.approx(f["max_concurrency"], rel=REL_TOL), report


def test_planner_float32_checkpoint_auto_dtype(engine_facts, vllm_server, tmp_path):
    """The same model saved as float32. With --dtype auto vLLM downcasts a float32 checkpoint
    to the platform's preferred dtype (vllm/config/model.py _resolve_auto_dtype; bf16 on CPUs
    and CUDA cc >= 8.0). Observed with vLLM 0.32.0 CPU: "Downcasting torch.float32 to
    torch.bfloat16", then "CPU KV cache size: 2,097,152 tokens, ... 512.00x", the bf16
    server's numbers."""
    f = engine_facts
    config = json.loads((vllm_server.model_dir / "config.json").read_text())
    config["torch_dtype"] = config["dtype"] = "float32"
    (tmp_path / "config.json").write_text(json.dumps(config))
    plan = _plan(
        tmp_path,
        max_model_len=f["max_model_len"],
        kv_bytes=f["kv_cache_memory_bytes"],
        block_size=f["block_size"],
    )
    assert plan.kv_cache_tokens == pytest.approx(f["kv_cache_tokens"], rel=REL_TOL)
    assert plan.max_concurrency == pytest.approx(f["max_concurrency"], rel=REL_TOL)


def test_streaming_completion_returns_tokens_and_usage(vllm_server):
    body = {
        "model": "tiny-llama",
        "prompt": "the quick brown fox",
        "max_tokens": 8,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks, usage = [], None
    with _post(vllm_server.base_url, "/v1/completions", body) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line.removeprefix("data: "))
            chunks.extend(choice["text"] for choice in event.get("choices", []))
            usage = event.get("usage") or usage
    # streamed in more than one event, at most one a token: a busy server's output processor
    # may merge tokens that are ready together into one event, so the count of tokens is
    # the usage's, not the events'
    assert 1 < len(chunks) <= 8
    assert usage is not None
    assert usage["completion_tokens"] == 8
    assert usage["prompt_tokens"] > 1
    assert usage["total_tokens"] == usage["prompt_tokens"] + 8


def test_chat_and_tokenize(vllm_server):
    with _post(
        vllm_server.base_url,
        "/v1/chat/completions",
        {
            "model": "tiny-llama",
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 4,
        },
    ) as response:
        chat = json.load(response)
    assert chat["usage"]["completion_tokens"] <= 4
    assert chat["choices"][0]["message"]["role"] == "assistant"
    with _post(
        vllm_server.base_url, "/tokenize", {"model": "tiny-llama", "prompt": "hello world"}
    ) as response:
        tokens = json.load(response)
    assert tokens["count"] == len(tokens["tokens"]) >= 2
    assert tokens["tokens"][0] == 1  # the BOS the tokenizer's post-processor adds


def test_prefix_cache_hits_are_whole_blocks(engine_facts, vllm_server):
    block = engine_facts["block_size"]
    prompt = " ".join(f"capacity plan engine {i}" for i in range(60))  # ~270 tokens
    body = {"model": "tiny-llama", "prompt": prompt, "max_tokens": 1}
    usages = []
    for _ in range(2):
        with _post(vllm_server.base_url, "/v1/completions", body) as response:
            usages.append(json.load(response)["usage"])
    prompt_tokens = usages[1]["prompt_tokens"]
    assert prompt_tokens > block
    # the last prompt token is always recomputed; hits are whole blocks before it
    cached = usages[1]["prompt_tokens_details"]["cached_tokens"]
    assert cached == (prompt_tokens - 1) // block * block
