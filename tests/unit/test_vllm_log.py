"""The startup-log reader on real vLLM lines of several versions (0.10 to 0.32 wording).

Sources: the 0.32 CPU lines were printed by the integration tests' server (vLLM 0.32.0 CPU
build, tiny Llama, ``VLLM_CPU_KVCACHE_SPACE=1``); the 0.19 lines are the llm-d-planner logs
in ``benchmarks/fidelity/startup_logs.json``; the 0.10 lines are the format strings of vLLM
0.10 (``"Model loading took %.4f GiB and %.6f seconds"`` in ``v1/worker/gpu_model_runner.py``,
``"vLLM API server version %s"`` in ``entrypoints/openai/api_server.py``, the KV size and
concurrency on two lines in ``v1/core/kv_cache_utils.py``), the refusals those of
``v1/core/kv_cache_utils.py`` / ``config/compilation.py`` / ``v1/worker/cpu_worker.py``
(0.32).
"""

from __future__ import annotations

import pytest

from servefit.adapters.vllm_log import Refusal, StartupLog, read_line, refusal_detail, split_prefix
from servefit.units import GIB_BYTES

V032_CPU = [
    "(APIServer pid=17758) INFO 11-30 07:53:17 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  "
    "version 0.32.0",
    "(APIServer pid=17758) INFO 11-30 07:53:17 [api_utils.py:347]   █▄█▀ █     █     █     █  "
    "model   /srv/models/tiny-llama",
    "(APIServer pid=17758) INFO 11-30 07:53:17 [api_utils.py:286] non-default args: "
    "{'enable_prompt_tokens_details': True, 'host': '127.0.0.1', 'port': 45921, 'model': "
    "'/srv/models/tiny-llama', 'max_model_len': 4096, 'enforce_eager': True, "
    "'served_model_name': ['tiny-llama'], 'enable_prefix_caching': True}",
    "(APIServer pid=17758) INFO 11-30 07:54:03 [model.py:733] Resolved architecture: "
    "LlamaForCausalLM",
    "(EngineCore pid=18127) INFO 11-30 07:54:40 [core.py:133] Initializing a V1 LLM engine "
    "(v0.32.0) with config: model='/srv/models/tiny-llama', speculative_config=None, "
    "tokenizer='/srv/models/tiny-llama', skip_tokenizer_init=False, tokenizer_mode=auto, "
    "revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
    "max_seq_len=4096, download_dir=None, load_format=auto, tensor_parallel_size=1",
    "(Worker pid=18364) INFO 11-30 07:55:18 [cpu_worker.py:260] Explicitly set (1.0/8.09) GiB "
    "for KV cache on node 0.",
    "(EngineCore pid=18127) INFO 11-30 07:55:18 [kv_cache_utils.py:2327] CPU KV cache size: "
    "2,097,152 tokens, Maximum concurrency for 4,096 tokens per request: 512.00x",
]

V019_GPU = [
    "(VllmWorker TP0 pid=3) INFO 09-01 10:00:00 [gpu_model_runner.py:2007] Model loading took "
    "14.99 GiB memory and 6.965058 seconds",
    "(VllmWorker TP0 pid=3) INFO 09-01 10:00:30 [gpu_worker.py:276] Available KV cache "
    "memory: 58.11 GiB",
    "(EngineCore_0 pid=2) INFO 09-01 10:00:31 [kv_cache_utils.py:849] GPU KV cache size: "
    "476,016 tokens",
    "(EngineCore_0 pid=2) INFO 09-01 10:00:31 [kv_cache_utils.py:853] Maximum concurrency for "
    "8,192 tokens per request: 58.11x",
]

V010_GPU = [
    "INFO 08-01 12:00:00 [api_server.py:1805] vLLM API server version 0.10.1.1",
    "INFO 08-01 12:00:20 [gpu_model_runner.py:1892] Model loading took 14.9917 GiB and "
    "4.568988 seconds",
    "INFO 08-01 12:00:40 [gpu_worker.py:255] Available KV cache memory: 58.11 GiB",
    "INFO 08-01 12:00:41 [kv_cache_utils.py:833] GPU KV cache size: 476,016 tokens",
    "INFO 08-01 12:00:41 [kv_cache_utils.py:837] Maximum concurrency for 8,192 tokens per "
    "request: 58.11x",
]


def test_prefix_is_split_from_the_message():
    proc, msg = split_prefix(V019_GPU[1])
    assert proc == "VllmWorker TP0 pid=3"
    assert msg == "Available KV cache memory: 58.11 GiB"
    assert split_prefix("plain text") == ("", "plain text")


def test_v032_cpu_log():
    log = StartupLog.read(V032_CPU)
    assert log.engine_version == "0.32.0"
    assert log.model == "/srv/models/tiny-llama"
    assert log.non_default_args["max_model_len"] == 4096
    assert log.value("dtype") == "bfloat16"
    assert log.value("max_model_len") == 4096
    assert log.value("device") == "CPU"
    assert log.value("kv_cache_explicit") is True
    assert log.value("kv_cache_memory_bytes") == 1 * GIB_BYTES
    assert log.value("device_total_bytes") == pytest.approx(8.09 * GIB_BYTES, abs=1)
    assert log.value("kv_cache_tokens") == 2_097_152
    assert log.value("max_concurrency") == 512.0
    assert log.first("max_concurrency").rounding == pytest.approx(0.005)
    assert log.is_vllm_log and not log.refusals


@pytest.mark.parametrize(
    ("lines", "weights_gib", "rounding_gib"),
    [(V019_GPU, 14.99, 0.005), (V010_GPU, 14.9917, 0.00005)],
    ids=["0.19", "0.10"],
)
def test_gpu_logs_of_two_wordings(lines, weights_gib, rounding_gib):
    log = StartupLog.read(lines)
    weights = log.first("weights_bytes")
    assert weights.value == round(weights_gib * GIB_BYTES)
    assert weights.rounding == pytest.approx(rounding_gib * GIB_BYTES)
    assert log.value("kv_cache_memory_bytes") == round(58.11 * GIB_BYTES)
    assert log.value("kv_cache_tokens") == 476_016
    assert log.value("device") == "GPU"
    assert log.value("max_concurrency") == pytest.approx(58.11)
    assert log.value("max_model_len") == 8192


def test_version_lines_of_each_era():
    assert read_line(V010_GPU[0])[0].value == "0.10.1.1"
    line = "(APIServer pid=1) INFO 06-01 00:00:00 [api_utils.py:327] vLLM server version 0.24.0, "
    line += "serving model Qwen/Qwen3-8B"
    facts = {f.quantity: f.value for f in read_line(line)}
    assert facts == {"engine_version": "0.24.0", "model": "Qwen/Qwen3-8B"}


def test_hybrid_block_line_and_block_size_flag():
    hybrid = read_line(
        "INFO [config.py:1] Setting attention block size to 2096 tokens to ensure that "
        "attention page size is >= mamba page size."
    )
    assert [(f.quantity, f.value) for f in hybrid] == [("block_size", 2096)]
    args = read_line("INFO 01-01 00:00:00 [x.py:1] non-default args: {'block_size': 32}")
    assert ("block_size", 32) in [(f.quantity, f.value) for f in args]


REFUSALS = [
    (
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
        Refusal.NO_KV_CACHE_MEMORY,
        {},
    ),
    (
        "ValueError: To serve at least one request with the models's max seq len (131072), "
        "(16.00 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(9.53 GiB). Based on the available memory, the estimated maximum model length is "
        "78000. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine.",
        Refusal.MAX_MODEL_LEN_DOES_NOT_FIT,
        {"estimated_max_model_len": 78000},
    ),
    (
        "ValueError: max_num_seqs (256) exceeds available Mamba cache blocks (120). Each "
        "decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed.",
        Refusal.MAMBA_BLOCKS,
        {"max_num_seqs": 256, "mamba_cache_blocks": 120},
    ),
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        Refusal.OUT_OF_MEMORY,
        {},
    ),
    (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig "
        "Value error, User-specified max_model_len (200000) is greater than the derived "
        "max_model_len (max_position_embeddings=131072 or model_max_length=None in model's "
        "config.json).",
        Refusal.MAX_MODEL_LEN_TOO_LONG,
        {},
    ),
    (
        "ValueError: Available memory on node 0 (3.10/8.09 GiB) on startup is less than "
        "desired CPU memory utilization (0.92, 7.44 GiB).",
        Refusal.HOST_MEMORY,
        {},
    ),
    ("OSError: [Errno 98] Address already in use", Refusal.PORT_IN_USE, {}),
]


@pytest.mark.parametrize(("line", "kind", "detail"), REFUSALS, ids=[r[1].value for r in REFUSALS])
def test_refusals(line, kind, detail):
    (fact,) = read_line(f"(EngineCore pid=9) ERROR 01-01 00:00:00 [c.py:1] {line}")
    assert fact.quantity == "refusal"
    assert fact.value is kind
    assert refusal_detail(fact) == detail


def test_not_a_vllm_log():
    log = StartupLog.read(["hello", "Traceback (most recent call last):", "KeyError: 'x'"])
    assert not log.is_vllm_log


def test_feed_returns_the_new_facts_as_lines_arrive():
    log = StartupLog()
    assert log.feed("unrelated") == ()
    new = log.feed(V019_GPU[2])
    assert [f.quantity for f in new] == ["kv_cache_tokens", "device"]
    assert log.num_lines == 2


def test_tensor_parallel_ranks_repeat_lines_smallest_wins():
    lines = [
        "(Worker_TP0 pid=1) INFO [w.py:1] Available KV cache memory: 63.76 GiB",
        "(Worker_TP1 pid=2) INFO [w.py:1] Available KV cache memory: 63.70 GiB",
    ]
    log = StartupLog.read(lines)
    assert log.smallest("kv_cache_memory_bytes").value == round(63.70 * GIB_BYTES)
    assert log.smallest("kv_cache_memory_bytes").process == "Worker_TP1 pid=2"
