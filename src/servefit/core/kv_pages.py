"""Bytes one token (attention, MLA) or one sequence (linear attention, Mamba) keeps in one
layer on one GPU, as vLLM 0.32's ``get_kv_cache_spec`` of each layer kind sizes them.

:mod:`servefit.core.kv_cache` turns these into pages, groups and blocks.
"""

from __future__ import annotations

from servefit.core.model_spec import AttentionSpec, LinearAttentionSpec, MambaSpec, MlaSpec

# DeepSeek's fp8_ds_mla cache format, one opaque row a token: 512 fp8 latent values, 4 fp32
# scales (one per 128), 64 bf16 RoPE dims = 656 bytes (vLLM 0.32,
# model_executor/layers/attention/mla_attention.py MLAAttention.get_kv_cache_spec:
# state_content_bytes={"fp8_ds_mla": 656, ...})
FP8_DS_MLA_BYTES_PER_TOKEN = 656
# DeepSeek-V3.2's lightning-indexer key cache: index_head_dim fp8 values plus one fp32 scale
# per 128 of them, a uint8 row of 1 "head" a token (vLLM 0.32, model_executor/models/
# deepseek_v2.py Indexer.__init__: DeepseekV32IndexerCache(head_dim=head_dim + head_dim //
# quant_block_size * 4, dtype=torch.uint8), quant_block_size 128): 128 + 4 = 132 bytes
INDEXER_QUANT_BLOCK = 128
INDEXER_SCALE_BYTES = 4


def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """vLLM replicates KV heads when there are fewer of them than TP ranks."""
    return max(1, num_kv_heads // tp)


def attention_bytes_per_token(a: AttentionSpec, tp: int, kv_dtype_bytes: float) -> int:
    """K and V of one token in one layer on one rank."""
    heads = kv_heads_per_rank(a.num_kv_heads, tp)
    return int(heads * (a.head_dim + a.value_head_dim) * kv_dtype_bytes)


def indexer_bytes_per_token(m: MlaSpec) -> int:
    """DeepSeek-V3.2's indexer key of one token (0 without an indexer): fp8 + fp32 scales."""
    return m.index_head_dim + m.index_head_dim // INDEXER_QUANT_BLOCK * INDEXER_SCALE_BYTES


def mla_bytes_per_token(
    m: MlaSpec,
    kv_cache_dtype: str,
    kv_dtype_bytes: float,
    *,
    sparse_ds_mla_dtypes: frozenset[str] = frozenset(),
) -> int:
    """One latent (kv_lora_rank + rope dims) per token, not split by TP, no factor 2; plus,
    for DeepSeek-V3.2, its indexer key.

    vLLM registers the indexer cache as a layer of its own (an ``MLAAttentionSpec`` of the
    same block size), and since every layer then needs the same token slots,
    ``get_kv_cache_groups`` puts latent and indexer layers in *one* group whose block costs
    the sum of their pages (``UniformTypeKVCacheSpecs``, vLLM 0.32 v1/core/kv_cache_utils.py):
    the same arithmetic as one layer of latent + indexer bytes. A sparse layer's quantized
    cache is stored as fp8_ds_mla where the sparse backend asks for it
    (``_canonicalize_sparse_mla_kv_cache_dtype``: FLASHMLA_SPARSE turns any fp8 dtype into
    fp8_ds_mla, FLASHINFER_MLA_SPARSE_SM120 auto and fp8 too): ``sparse_ds_mla_dtypes``.
    Worked example, DeepSeek-V3.2 on an H100 with ``--kv-cache-dtype fp8``: 656 + 132 = 788
    bytes a token a layer, a 64-token page of 50,432 bytes; bf16: 576 x 2 + 132 = 1,284.
    """
    ds_mla = kv_cache_dtype == "fp8_ds_mla" or (
        m.has_indexer and kv_cache_dtype in sparse_ds_mla_dtypes
    )
    latent = (
        FP8_DS_MLA_BYTES_PER_TOKEN
        if ds_mla
        else int((m.kv_lora_rank + m.qk_rope_head_dim) * kv_dtype_bytes)
    )
    return latent + indexer_bytes_per_token(m)


def state_bytes(
    mixer: LinearAttentionSpec | MambaSpec,
    tp: int,
    conv_bytes: float,
    ssm_bytes: float,
    num_spec: int = 0,
) -> int:
    """Constant per-sequence state of one linear-attention or Mamba layer on one rank
    (vLLM ``MambaStateShapeCalculator``): a conv window of (kernel - 1) steps plus the SSM
    state. Under speculative decoding the Gated DeltaNet and Mamba-2 conv windows hold
    ``num_spec`` more steps (``conv_kernel - 1 + num_spec``, vLLM 0.32 mamba_utils.py
    gated_delta_net_state_shape / mamba2_state_shape; Mamba-1's does not)."""
    if isinstance(mixer, LinearAttentionSpec):
        conv_dim = 2 * mixer.key_dim + mixer.value_dim
        conv = (mixer.conv_kernel - 1 + num_spec) * conv_dim // tp
        ssm = (mixer.num_v_heads // tp) * mixer.k_head_dim * mixer.v_head_dim
    elif mixer.version == 1:
        conv = (mixer.conv_kernel - 1) * mixer.d_inner // tp
        ssm = mixer.d_inner // tp * mixer.state_size
    else:
        # groups are replicated to a multiple of tp when they do not divide it
        groups = (
            mixer.n_groups if mixer.n_groups % tp == 0 else mixer.n_groups + tp - mixer.n_groups
        )
        conv_dim = mixer.d_inner + 2 * groups * mixer.state_size
        conv = (mixer.conv_kernel - 1 + num_spec) * conv_dim // tp
        ssm = (mixer.num_heads // tp) * mixer.head_dim * mixer.state_size
    return int(conv * conv_bytes + ssm * ssm_bytes)
