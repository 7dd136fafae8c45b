"""plan_capacity: verdicts, inverse questions, flag handling."""

import pytest

from servefit.core.plan import ServeSettings, plan_capacity
from servefit.core.vllm_command import vllm_serve_args
from servefit.errors import InvalidArgumentError
from servefit.units import GIB_BYTES


def plan(catalog_model, gpu, model_id, gpu_name, **flags):
    loaded = catalog_model(model_id)
    return plan_capacity(
        loaded.spec, gpu(gpu_name), ServeSettings(**flags), mamba_ssm_dtype=loaded.mamba_ssm_dtype
    )


def test_memory_parts_sum_to_total(catalog_model, gpu):
    p = plan(catalog_model, gpu, "meta-llama/Llama-3.1-8B", "H100", max_model_len=8192)
    assert sum(p.memory.parts_bytes.values()) == p.memory.total_bytes
    assert p.fits and p.starts


def test_seed_example_qwen36_fp8_on_a40(catalog_model, gpu):
    """DESIGN.md's example: Qwen3.6-27B-FP8 on an A40 at 32k vs 128k, and an A100 80GB at 128k."""
    at_32k = plan(catalog_model, gpu, "Qwen/Qwen3.6-27B-FP8", "A40", max_model_len=32_768)
    at_128k = plan(catalog_model, gpu, "Qwen/Qwen3.6-27B-FP8", "A40", max_model_len=131_072)
    a100 = plan(catalog_model, gpu, "Qwen/Qwen3.6-27B-FP8", "A100-80GB", max_model_len=131_072)
    # ~28 GiB of weights leave ~10 GiB of KV on a 48 GB card; only 16 of 64 layers hold KV
    assert 27 < at_32k.memory.weights_bytes / GIB_BYTES < 30
    assert 3.5 < at_32k.max_concurrency < 5.5
    assert 1.0 < at_128k.max_concurrency < 1.5  # one 128k request fits, barely
    assert at_128k.max_concurrency < at_32k.max_concurrency / 3
    assert a100.fits and a100.max_concurrency > 4
    # vLLM >= 0.30 refuses max_num_seqs above the Mamba block count (256 by default on an A40)
    assert not at_32k.starts and at_32k.mamba_block_limit < 256
    assert any(f"--max-num-seqs {at_32k.mamba_block_limit}" in line for line in at_32k.problems)
    fixed = plan(
        catalog_model,
        gpu,
        "Qwen/Qwen3.6-27B-FP8",
        "A40",
        max_model_len=32_768,
        max_num_seqs=at_32k.mamba_block_limit,
    )
    assert fixed.fits


def test_does_not_fit_says_what_would(catalog_model, gpu):
    p = plan(catalog_model, gpu, "meta-llama/Llama-3.1-70B", "A100-80GB", max_model_len=8192)
    assert not p.starts and not p.fits
    assert p.memory.kv_cache_bytes < 0
    # 70.55 B bf16 parameters are 131 GiB: more than the 79 GiB the card has, so vLLM dies
    # loading them (CUDA out of memory), before any "no memory for the KV cache"
    assert p.memory.weights_bytes > p.memory.total_bytes
    assert any("fails while loading them (CUDA out of memory)" in line for line in p.problems)
    assert not any("no memory is left for the KV cache" in line for line in p.problems)
    assert any("--tensor-parallel-size 2" in line for line in p.problems)


def test_weights_that_fit_the_device_but_not_the_budget_stop_at_the_kv_cache(catalog_model, gpu):
    # Qwen3-32B in bf16: 32.8 B parameters x 2 bytes = 61 GiB, under the A100-80GB's 79 GiB
    # visible but over a 0.7 x 79 = 55 GiB budget: vLLM loads them, profiles, then stops
    p = plan(
        catalog_model, gpu, "Qwen/Qwen3-32B", "A100-80GB",
        max_model_len=8192, gpu_memory_utilization=0.7,
    )  # fmt: skip
    assert p.memory.requested_bytes < p.memory.weights_bytes < p.memory.total_bytes
    assert not p.starts
    assert any("no memory is left for the KV cache" in line for line in p.problems)
    assert not any("while loading" in line for line in p.problems)


def test_max_model_len_too_long_suggests_the_longest(catalog_model, gpu):
    # 32 GiB of FP8 weights leave ~8 GiB on a 48 GB L40S; 40,960 tokens x 256 KiB needs 10 GiB
    p = plan(catalog_model, gpu, "Qwen/Qwen3-32B-FP8", "L40S", max_model_len=40_960)
    assert not p.starts and p.memory.kv_cache_bytes > 0
    assert any("would fit: --max-model-len" in line for line in p.problems)
    assert 0 < p.largest_max_model_len < 40_960


def test_concurrency_target_not_met(catalog_model, gpu):
    p = plan(
        catalog_model, gpu, "meta-llama/Llama-3.1-8B", "L4", max_model_len=8192, concurrency=64
    )
    assert p.starts and not p.meets_target
    assert p.max_context_at_concurrency < 8192
    assert any("64 requests of up to" in line for line in p.problems)


def test_kv_memory_given_bypasses_budget(catalog_model, gpu):
    p = plan(
        catalog_model,
        gpu,
        "meta-llama/Llama-3.1-8B",
        "H100",
        max_model_len=8192,
        kv_cache_memory_bytes=20 * GIB_BYTES,
    )
    assert p.memory.kv_cache_bytes == 20 * GIB_BYTES and p.memory.is_kv_cache_given
    assert p.num_blocks == 10_240


def test_tp_must_divide_heads(catalog_model, gpu):
    with pytest.raises(InvalidArgumentError, match="does not divide the model's 28 heads"):
        plan(catalog_model, gpu, "Qwen/Qwen2.5-7B", "H100", tensor_parallel_size=8)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"gpu_memory_utilization": 90}, "fraction, not a percentage"),
        ({"max_model_len": 0}, "--max-model-len must be a positive integer"),
        ({"tensor_parallel_size": -2}, "--tensor-parallel-size must be a positive integer"),
        ({"vllm_version": "latest"}, "not a version number"),
        ({"vllm_version": "0.4"}, "from 0.5"),
        ({"quantization": "awq"}, "needs a checkpoint quantized that way"),
        ({"dtype": "float7"}, "unknown dtype"),
    ],
)
def test_bad_flags_are_named(catalog_model, gpu, flags, message):
    with pytest.raises(Exception, match=message):
        plan(catalog_model, gpu, "meta-llama/Llama-3.1-8B", "H100", **flags)


def test_server_defaults_follow_the_gpu(catalog_model, gpu):
    big = plan(catalog_model, gpu, "meta-llama/Llama-3.1-8B", "H100", max_model_len=4096)
    small = plan(catalog_model, gpu, "meta-llama/Llama-3.1-8B", "A100-80GB", max_model_len=4096)
    assert (big.settings.max_num_batched_tokens, big.settings.max_num_seqs) == (8192, 1024)
    assert (small.settings.max_num_batched_tokens, small.settings.max_num_seqs) == (2048, 256)


def test_vllm_command_realises_the_plan(catalog_model, gpu):
    asked = ServeSettings(
        tensor_parallel_size=2,
        max_model_len=16_384,
        kv_cache_dtype="fp8",
        gpu_memory_utilization=0.85,
    )
    loaded = catalog_model("meta-llama/Llama-3.1-70B")
    p = plan_capacity(loaded.spec, gpu("H100"), asked)
    args = vllm_serve_args("meta-llama/Llama-3.1-70B", p, asked)
    assert args[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-70B"]
    joined = " ".join(args)
    for flag in (
        "--tensor-parallel-size 2",
        "--max-model-len 16384",
        "--kv-cache-dtype fp8",
        "--gpu-memory-utilization 0.85",
    ):
        assert flag in joined
