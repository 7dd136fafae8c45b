"""The attention block of an attention + linear-attention hybrid, by hand.

vLLM 0.32, ``vllm/platforms/interface.py``, ``Platform._align_hybrid_block_size`` (on CUDA
through ``update_block_size_for_backend``; on the CPU backend through
``CpuPlatform.update_block_size_for_backend``, ``vllm/platforms/cpu.py``)::

    step  = max(smallest kernel block of the backend, cache_config.block_size)
    block = step * cdiv(mamba_page_size, step * attn_page_size_1_token)
    block = backend_alignment * cdiv(block, backend_alignment)
    if cache_config.block_size < block: cache_config.block_size = block

so the block rises *in steps of the block in force*: the user's ``--block-size``, else the
platform's (16 on CUDA, 128 on the CPU backend), never in steps of 16 alone. Kernel blocks:
FlashAttention ``[MultipleOf(16)]``, the CPU backend ``[MultipleOf(32)]``
(``vllm/v1/attention/backends/cpu_attn.py``).
"""

from __future__ import annotations

import json

import pytest

from servefit.adapters.model_source import load_model
from servefit.core.engines.vllm_cpu import VllmCpuEngine, cpu_device
from servefit.core.kv_cache import CacheSettings, hybrid_block_size, layer_specs
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.errors import InvalidArgumentError
from servefit.units import GIB_BYTES

CPU = cpu_device(name="CPU", memory_bytes=8 * GIB_BYTES, isa_flags=("avx2",))

# The integration tests' tiny Qwen3-Next (make_tiny_model.py --arch hybrid), as written
TINY_QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "dtype": "bfloat16",
    "torch_dtype": "bfloat16",
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "full_attention_interval": 4,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "partial_rotary_factor": 0.25,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    "tie_word_embeddings": False,
}
# attention: 2 KV heads x (32 + 32) dims x 2 bytes = 256 bytes a token
TINY_ATTENTION_BYTES_PER_TOKEN = 2 * (32 + 32) * 2
# state: conv (4 - 1) x (2 x 2 x 64 + 4 x 64) x 2 bytes + ssm 4 x 64 x 64 x 2 bytes
TINY_STATE_PAGE_BYTES = 3 * (2 * 2 * 64 + 4 * 64) * 2 + 4 * 64 * 64 * 2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-hybrid")
    (path / "config.json").write_text(json.dumps(TINY_QWEN3_NEXT))
    return load_model(str(path), allow_hub=False)


def test_the_rule_rounds_in_steps_of_the_block_in_force():
    assert TINY_STATE_PAGE_BYTES == 3_072 + 32_768 == 35_840
    per_token = TINY_ATTENTION_BYTES_PER_TOKEN
    state = TINY_STATE_PAGE_BYTES

    def block(block_size: int, kernel: int) -> int:
        return hybrid_block_size(
            block_size=block_size,
            state_page_bytes=state,
            attention_bytes_per_token=per_token,
            kernel_block_size=kernel,
        )

    # CUDA default 16: 16 x cdiv(35,840, 16 x 256) = 16 x 9 = 144 (the old rule's answer)
    assert block(16, 16) == 144
    # CPU backend, 128 in force: 128 x cdiv(35,840, 32,768) = 128 x 2 = 256 (logged by vLLM)
    assert block(128, 32) == 256
    # --block-size 32: 32 x cdiv(35,840, 8,192) = 32 x 5 = 160; 64: 64 x 3 = 192
    assert block(32, 32) == block(32, 16) == 160
    assert block(64, 32) == block(64, 16) == 192
    # --block-size 16 on the CPU: the step is the kernel's 32, not 16: 32 x 5 = 160
    assert block(16, 32) == 160
    # a block already large enough stays: 256 x 256 B = 64 KiB >= 35,840 B
    assert block(256, 32) == 256
    # MLA hybrids step in at least 128 (TRTLLM/FlashInfer MLA decode kernels)
    mla = hybrid_block_size(
        block_size=16, state_page_bytes=state, attention_bytes_per_token=per_token, has_mla=True
    )
    assert mla == 256


def test_qwen3_next_80b_block_on_cuda_and_cpu(catalog_model):
    """Attention 2 x 2 KV heads x 256 x 2 B = 2,048 B a token; state 1,097,728 B."""
    spec = catalog_model("Qwen/Qwen3-Next-80B-A3B-Thinking").spec

    def block(settings: CacheSettings) -> int:
        return next(s.block_size for s in layer_specs(spec, None, settings) if not s.is_state)

    assert block(CacheSettings()) == 16 * 34 == 544  # CUDA default: unchanged
    assert block(CacheSettings(block_size=32)) == 32 * 17 == 544  # cdiv(1,097,728, 65,536)
    assert block(CacheSettings(block_size=64)) == 64 * 9 == 576  # was 544
    assert block(CacheSettings(block_size=128)) == 128 * 5 == 640  # was 544
    assert block(CacheSettings(block_size=128, kernel_block_size=32)) == 640  # CPU backend


@pytest.mark.parametrize(
    ("block_size", "expected_block", "old_block"),
    [(None, 784, 784), (32, 800, 784), (64, 832, 784), (128, 896, 784)],
)
@pytest.mark.parametrize("max_model_len", [32_768, 131_072])
def test_qwen36_27b_fp8_on_an_a40(
    catalog_model, gpu, block_size, expected_block, old_block, max_model_len
):
    """Qwen3.6-27B-FP8 on an A40 with 20 GiB of KV cache given (so every number is hand
    arithmetic). Attention: 2 x 4 KV heads x 256 dims x 2 B (bf16 cache) = 4,096 B a token.
    State (mamba_ssm_dtype float32): conv 3 x (2 x 16 x 128 + 48 x 128) x 2 B = 61,440 +
    ssm 48 x 128 x 128 x 4 B = 3,145,728 -> 3,207,168 B. Blocks: default 16 x cdiv(.., 65,536)
    = 16 x 49 = 784; 32 x 25 = 800; 64 x 13 = 832; 128 x 7 = 896 (servefit said 784 for all).
    16 attention + 48 GDN layers: 4 groups of 16; a block id costs 16 pages; prefix caching
    (vLLM's default) keeps 2 state blocks a request in each of the 3 GDN groups."""
    loaded = catalog_model("Qwen/Qwen3.6-27B-FP8")
    settings = ServeSettings(
        max_model_len=max_model_len,
        block_size=block_size,
        kv_cache_memory_bytes=20 * GIB_BYTES,
        vllm_version="0.32",
    )
    plan = plan_capacity(loaded.spec, gpu("A40"), settings, mamba_ssm_dtype=loaded.mamba_ssm_dtype)
    assert plan.settings.block_size == expected_block
    page = expected_block * 4096
    assert plan.layout.page_size_bytes == page
    assert plan.layout.group_size == 16 and len(plan.layout.groups) == 4
    blocks = 20 * GIB_BYTES // page // 16
    assert plan.num_blocks == blocks
    per_request = -(-max_model_len // expected_block) + 3 * 2
    assert plan.max_concurrency == pytest.approx(blocks / per_request)
    if expected_block != old_block:  # the old rule's answer, for the record
        old_blocks = 20 * GIB_BYTES // (old_block * 4096) // 16
        old = old_blocks / (-(-max_model_len // old_block) + 6)
        assert plan.max_concurrency != pytest.approx(old)


def test_tiny_qwen3_next_on_the_cpu_backend_is_the_engines_log(tiny):
    """vLLM 0.32.0 CPU, VLLM_CPU_KVCACHE_SPACE=1, --max-model-len 4096, prefix caching on
    (tests/integration/test_up.py): 'Setting attention block size to 256 tokens', 'Padding
    mamba page size by 82.86%', 'CPU KV cache size: 3,050,402 tokens, Maximum concurrency
    for 4,096 tokens per request: 744.73x', num_gpu_blocks 16384.

    By hand: block 256 (above); page 256 x 256 B = 65,536 B, state padded 35,840 -> 65,536
    (+82.86 %); 1 attention + 3 GDN layers: 4 groups of 1 layer, a block id costs 64 KiB,
    1 GiB = 16,384 blocks; a 4,096-token request needs 4096 / 256 = 16 attention blocks +
    3 groups x 2 state blocks (align mode) = 22: 16,384 / 22 = 744.727x, and vLLM prints
    int(744.727 x 4096) = 3,050,402 tokens. servefit's old rule (steps of 16) said 144,
    29,127 blocks, 832.20x."""
    settings = ServeSettings(
        max_model_len=4096, kv_cache_memory_bytes=GIB_BYTES, vllm_version="0.32"
    )
    plan = VllmCpuEngine().plan(tiny.spec, CPU, settings)
    assert plan.settings.block_size == 256
    assert round(100 * (65_536 - TINY_STATE_PAGE_BYTES) / TINY_STATE_PAGE_BYTES, 2) == 82.86
    assert plan.layout.page_size_bytes == 65_536 and len(plan.layout.groups) == 4
    assert plan.num_blocks == 16_384
    assert plan.max_concurrency == 16_384 / 22
    assert plan.kv_cache_tokens == int(16_384 / 22 * 4096) == 3_050_402


@pytest.mark.parametrize(
    ("block_size", "expected_block", "blocks", "per_request"),
    [
        # 32 x cdiv(35,840, 8,192) = 160; 1 GiB / (160 x 256) = 26,214; 26 + 6
        (32, 160, 26_214, 26 + 6),
        # 64 x cdiv(35,840, 16,384) = 192; 1 GiB / (192 x 256) = 21,845; 22 + 6
        (64, 192, 21_845, 22 + 6),
    ],
)
def test_tiny_qwen3_next_with_a_user_block_size_on_the_cpu(
    tiny, block_size, expected_block, blocks, per_request
):
    settings = ServeSettings(
        max_model_len=4096,
        kv_cache_memory_bytes=GIB_BYTES,
        block_size=block_size,
        vllm_version="0.32",
    )
    plan = VllmCpuEngine().plan(tiny.spec, CPU, settings)
    assert plan.settings.block_size == expected_block
    assert plan.num_blocks == blocks
    assert plan.max_concurrency == blocks / per_request


def test_kernel_block_must_be_positive():
    with pytest.raises(InvalidArgumentError, match="kernel_block_size"):
        CacheSettings(kernel_block_size=0)
