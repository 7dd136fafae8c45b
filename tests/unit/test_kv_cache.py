"""vLLM's KV-cache accounting, hand-derived."""

import pytest

from servefit.core.kv_cache import (
    CacheMode,
    CacheSettings,
    blocks_per_request,
    kv_cache_tokens,
    kv_layout,
    largest_fitting_len,
    layer_specs,
    max_concurrency,
    num_blocks,
)
from servefit.core.model_spec import MixerKind
from servefit.units import GIB_BYTES


def test_llama_8b_worked_example(catalog_model):
    spec = catalog_model("meta-llama/Llama-3.1-8B").spec
    specs = layer_specs(spec, None, CacheSettings())
    # 2 (K, V) x 16 tokens x 8 KV heads x 128 dims x 2 bytes
    assert {s.page_size_bytes for s in specs} == {2 * 16 * 8 * 128 * 2}
    layout = kv_layout(specs)
    assert len(layout.groups) == 1 and layout.group_size == 32
    blocks = num_blocks(layout, 20 * GIB_BYTES)
    assert blocks == 20 * GIB_BYTES // 65_536 // 32 == 10_240
    assert kv_cache_tokens(layout, blocks) == 163_840
    assert max_concurrency(layout, blocks, 8192, 8192) == pytest.approx(20.0)


def test_tp_replicates_kv_heads(catalog_model):
    spec = catalog_model("meta-llama/Llama-3.1-8B").spec  # 8 KV heads
    pages = {
        tp: layer_specs(spec, None, CacheSettings(tp=tp))[0].page_size_bytes for tp in (1, 2, 8, 16)
    }
    assert pages[2] == pages[1] // 2
    assert pages[8] == pages[16]  # one head per rank is the floor


def test_mla_keeps_one_latent(catalog_model):
    spec = catalog_model("deepseek-ai/DeepSeek-V2-Lite").spec
    s = layer_specs(spec, None, CacheSettings(mla_block_size=64))[0]
    # (kv_lora_rank 512 + rope 64) x 2 bytes per token, no factor 2 for K and V
    assert s.page_size_bytes == 64 * 576 * 2


def test_qwen3_next_hybrid_block_inflation(catalog_model):
    # Hand calculation: attention page per token = 2 x 2 KV heads x 256 x 2 B = 2048 B.
    # Gated DeltaNet state: conv (4-1) x (2x16x128 + 32x128) + ssm 32 x 128 x 128
    # = 24,576 + 524,288 elements x 2 B = 1,097,728 B.
    # Block size = 16 x ceil(1,097,728 / (16 x 2048)) = 544 tokens; padding 1.49 %.
    spec = catalog_model("Qwen/Qwen3-Next-80B-A3B-Thinking").spec
    specs = layer_specs(spec, None, CacheSettings())
    attention = [s for s in specs if s.kind is MixerKind.FULL_ATTENTION]
    state = [s for s in specs if s.is_state]
    assert attention[0].block_size == 544
    assert attention[0].page_size_bytes == 544 * 2048 == state[0].page_size_bytes
    layout = kv_layout(specs)
    assert layout.group_size == 12 and len(layout.groups) == 4  # 12 attention + 36 GDN layers


def test_qwen36_fp32_state_matches_logged_block_2096(catalog_model):
    # vLLM 0.20 log for Qwen3.6-35B-A3B with --kv-cache-dtype fp8 printed "Setting attention
    # block size to 2096 tokens": 1 KiB per token of attention, a state page of
    # 3 x 8192 x 2 B (bf16 conv) + 32 x 128 x 128 x 4 B (mamba_ssm_dtype float32) = 2,146,304 B.
    loaded = catalog_model("Qwen/Qwen3.6-35B-A3B")
    settings = CacheSettings(kv_cache_dtype="fp8", mamba_ssm_dtype=loaded.mamba_ssm_dtype)
    specs = layer_specs(loaded.spec, None, settings)
    assert {s.block_size for s in specs if not s.is_state} == {2096}


def test_sliding_window_request_needs_window_plus_chunk(catalog_model):
    spec = catalog_model("google/gemma-2-9b").spec
    layout = kv_layout(layer_specs(spec, None, CacheSettings()))
    assert len(layout.groups) == 2  # 21 full + 21 sliding layers
    # full: 8192/16 = 512 blocks; sliding: ceil(min(4095 + 8192, 8192)/16) + 1 = 513
    assert blocks_per_request(layout, 8192, 8192) == 512 + 513
    # a short request needs the same in both groups
    assert blocks_per_request(layout, 1000, 8192) == 2 * 63 + 1


def test_gemma3_groups_are_padded(catalog_model):
    spec = catalog_model("google/gemma-3-27b-it").spec
    layout = kv_layout(layer_specs(spec, None, CacheSettings()))
    # 10 full and 52 sliding layers: group size 10 -> 1 + 6 groups, 8 padding layers
    assert layout.group_size == 10 and len(layout.groups) == 7
    assert layout.num_padding_layers == 8


def test_align_mode_holds_two_state_blocks(catalog_model):
    spec = catalog_model("Qwen/Qwen3.6-27B").spec
    none = kv_layout(layer_specs(spec, None, CacheSettings(cache_mode=CacheMode.NONE)))
    align = kv_layout(layer_specs(spec, None, CacheSettings(cache_mode=CacheMode.ALIGN)))
    assert blocks_per_request(align, 4096, 2048) - blocks_per_request(none, 4096, 2048) == 3


def test_largest_fitting_len_is_the_boundary(catalog_model):
    spec = catalog_model("meta-llama/Llama-3.1-8B").spec
    layout = kv_layout(layer_specs(spec, None, CacheSettings()))
    longest = largest_fitting_len(layout, 100, 8192, 1_000_000)
    assert longest == 1600  # 100 blocks x 16 tokens
    assert blocks_per_request(layout, longest + 1, 8192) > 100
