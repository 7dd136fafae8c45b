"""The per-layer byte rules of core/kv_pages.py, each against a hand calculation written out
here from the vLLM 0.32 shape each rule mirrors (``get_kv_cache_spec`` of the layer kinds,
``MambaStateShapeCalculator``). A tensor-parallel size that does not divide a dimension
(7) shows where vLLM floors a per-rank size before multiplying, not after.
"""

from __future__ import annotations

import pytest

from servefit.core.kv_pages import (
    FP8_DS_MLA_BYTES_PER_TOKEN,
    attention_bytes_per_token,
    indexer_bytes_per_token,
    kv_heads_per_rank,
    mla_bytes_per_token,
    state_bytes,
)
from servefit.core.model_spec import AttentionSpec, LinearAttentionSpec, MambaSpec, MlaSpec


@pytest.mark.parametrize(
    ("kv_heads", "tp", "per_rank"),
    [
        (8, 1, 8),
        (8, 2, 4),
        (8, 8, 1),
        (8, 16, 1),  # fewer heads than ranks: each rank keeps a replica of one head
        (1, 4, 1),
        (12, 8, 1),  # 12 // 8: a whole head, never 1.5
    ],
)
def test_kv_heads_per_rank(kv_heads, tp, per_rank):
    assert kv_heads_per_rank(kv_heads, tp) == per_rank


def test_attention_keeps_k_and_v_of_its_rank_s_heads():
    llama = AttentionSpec(num_q_heads=32, num_kv_heads=8, head_dim=128)
    assert attention_bytes_per_token(llama, 1, 2) == 8 * (128 + 128) * 2  # 4,096
    assert attention_bytes_per_token(llama, 4, 2) == 2 * 256 * 2
    assert attention_bytes_per_token(llama, 16, 1) == 1 * 256 * 1  # replicated head, fp8
    # MLA-style value width apart from the key's
    wide_v = AttentionSpec(num_q_heads=16, num_kv_heads=4, head_dim=192, v_head_dim=128)
    assert attention_bytes_per_token(wide_v, 1, 2) == 4 * (192 + 128) * 2


def _mla(index_head_dim: int = 0) -> MlaSpec:
    return MlaSpec(
        num_heads=128,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        index_num_heads=64 if index_head_dim else 0,
        index_head_dim=index_head_dim,
    )


def test_the_indexer_key_is_fp8_plus_an_fp32_scale_per_128():
    assert indexer_bytes_per_token(_mla()) == 0
    assert indexer_bytes_per_token(_mla(128)) == 128 + 4
    assert indexer_bytes_per_token(_mla(64)) == 64  # under one block of 128: no scale
    assert indexer_bytes_per_token(_mla(320)) == 320 + 2 * 4  # two whole blocks


def test_an_mla_latent_is_one_row_a_token_whatever_the_tp():
    # (512 + 64) x 2 bytes in bf16; fp8_ds_mla's opaque 656-byte row
    assert mla_bytes_per_token(_mla(), "auto", 2) == 576 * 2
    assert mla_bytes_per_token(_mla(), "fp8_ds_mla", 1) == FP8_DS_MLA_BYTES_PER_TOKEN == 656
    # DeepSeek-V3.2 under a sparse backend that stores fp8 as fp8_ds_mla: 656 + 132
    sparse = frozenset({"fp8"})
    assert mla_bytes_per_token(_mla(128), "fp8", 1, sparse_ds_mla_dtypes=sparse) == 788
    assert mla_bytes_per_token(_mla(128), "auto", 2, sparse_ds_mla_dtypes=sparse) == 1284
    # a dense MLA layer (no indexer) keeps its plain fp8 latent
    assert mla_bytes_per_token(_mla(), "fp8", 1, sparse_ds_mla_dtypes=sparse) == 576


GDN = LinearAttentionSpec(
    num_k_heads=16, num_v_heads=32, k_head_dim=128, v_head_dim=128, conv_kernel=4
)


def test_gated_deltanet_state_is_a_conv_window_and_a_k_by_v_state_per_head():
    # conv_dim = 2 x 16 x 128 + 32 x 128 = 8,192 channels over kernel - 1 = 3 steps;
    # ssm = 32 heads x 128 x 128. bf16 conv (2 bytes), fp32 state (4 bytes):
    assert state_bytes(GDN, 1, 2, 4) == 3 * 8192 * 2 + 32 * 128 * 128 * 4  # 2,146,304
    # 2 speculative tokens widen the conv window to 3 + 2 steps
    assert state_bytes(GDN, 1, 2, 4, num_spec=2) == 5 * 8192 * 2 + 32 * 128 * 128 * 4
    # TP 7: conv 3 x 8,192 // 7 = 3,510 channel-steps (3,510.86 floored), heads 32 // 7 = 4
    assert state_bytes(GDN, 7, 2, 4) == 3510 * 2 + 4 * 128 * 128 * 4  # 269,164


def test_mamba1_state_is_a_conv_window_and_d_inner_by_state_size():
    m = MambaSpec(version=1, d_inner=4096, state_size=16, conv_kernel=4, dt_rank=256)
    assert state_bytes(m, 1, 2, 4) == 3 * 4096 * 2 + 4096 * 16 * 4
    # TP 7: conv 12,288 // 7 = 1,755; ssm (4,096 // 7 = 585) x 16 = 9,360; all fp32
    assert state_bytes(m, 7, 4, 4) == 1755 * 4 + 9360 * 4  # 44,460
    # Mamba-1's conv window does not grow with speculative tokens
    assert state_bytes(m, 1, 2, 4, num_spec=3) == state_bytes(m, 1, 2, 4)


def test_mamba2_state_replicates_groups_that_tp_does_not_divide():
    m = MambaSpec(
        version=2,
        d_inner=4096,
        state_size=128,
        conv_kernel=4,
        num_heads=64,
        head_dim=64,
        n_groups=8,
    )
    # TP 1: conv_dim = 4,096 + 2 x 8 x 128 = 6,144 over 3 steps; ssm 64 x 64 x 128
    assert state_bytes(m, 1, 2, 4) == 3 * 6144 * 2 + 64 * 64 * 128 * 4
    # TP 2 divides the 8 groups: conv 3 x 6,144 // 2, ssm 32 heads
    assert state_bytes(m, 2, 2, 4) == 3 * 6144 // 2 * 2 + 32 * 64 * 128 * 4
    # TP 7 does not: the groups become 7 (a multiple of TP), conv_dim 4,096 + 2 x 7 x 128 =
    # 5,888, 3 x 5,888 // 7 = 2,523 channel-steps a rank; 64 // 7 = 9 heads
    assert state_bytes(m, 7, 2, 4) == 2523 * 2 + 9 * 64 * 128 * 4  # 299,958
    # one speculative token: 4 steps, 4 x 5,888 // 7 = 3,364
    assert state_bytes(m, 7, 2, 4, num_spec=1) == 3364 * 2 + 9 * 64 * 128 * 4
