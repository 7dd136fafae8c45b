"""Sequence state, accounted the way vLLM's V1 engine accounts it.

One small frozen spec per layer kind answers two questions, as in vLLM's
``vllm/v1/kv_cache_interface.py``: *how many bytes is one page (block) of this layer*, and
*how much memory can one request of ``max_model_len`` tokens need*. The layers are then
grouped (``vllm/v1/core/kv_cache_utils.py``), and the KV-cache memory is cut into a number
of blocks shared by all groups. Everything here is per GPU (per tensor-parallel rank of one
pipeline stage).

Worked example (Llama-3.1-8B, bf16, TP=1, block 16): a page of one layer holds
2 (K and V) x 16 tokens x 8 KV heads x 128 dims x 2 bytes = 65,536 bytes; 32 layers share a
block id, so 20 GiB of KV memory is 20 x 2**30 // 65,536 // 32 = 10,240 blocks = 163,840
tokens, and a request of 8,192 tokens needs 512 blocks: "Maximum concurrency 20.00x".

Hybrid models (Gated DeltaNet / Mamba + attention) keep one constant-size state per
sequence per layer. vLLM makes the attention page at least as large as that state page by
raising the attention block size *in steps of the block size in force* (see
:func:`hybrid_block_size`), pads the state page to the attention page, and splits layers
into groups of equal size, each group taking one block per request (state) or one block per
``block_size`` tokens (attention).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache

# `X as X`: re-exported, so ``servefit.core.kv_cache.<name>`` keeps working
from servefit.core.kv_pages import FP8_DS_MLA_BYTES_PER_TOKEN as FP8_DS_MLA_BYTES_PER_TOKEN
from servefit.core.kv_pages import attention_bytes_per_token as attention_bytes_per_token
from servefit.core.kv_pages import indexer_bytes_per_token as indexer_bytes_per_token
from servefit.core.kv_pages import kv_heads_per_rank as kv_heads_per_rank
from servefit.core.kv_pages import mla_bytes_per_token as mla_bytes_per_token
from servefit.core.kv_pages import state_bytes as state_bytes
from servefit.core.model_spec import (
    AttentionSpec,
    LinearAttentionSpec,
    MambaSpec,
    MixerKind,
    MlaSpec,
    ModelSpec,
)
from servefit.errors import InvalidArgumentError
from servefit.units import cdiv, dtype_bytes

DEFAULT_BLOCK_SIZE = 16  # vLLM CacheConfig default block size on CUDA
# The smallest block the attention kernel takes: FlashAttention's and Triton's
# get_supported_kernel_block_sizes() is [MultipleOf(16)] (vLLM 0.32, vllm/v1/attention/
# backends/); the CPU backend's is [MultipleOf(32)] (set by the vllm-cpu engine).
KERNEL_BLOCK_SIZE = 16
# A hybrid with MLA attention raises its block in steps of at least 128 (vLLM 0.32,
# Platform._align_hybrid_block_size: TRTLLM/FlashInfer MLA decode kernels)
HYBRID_MLA_BLOCK_ALIGNMENT = 128


class CacheMode(StrEnum):
    """How vLLM keeps Mamba/linear-attention state per request (``mamba_cache_mode``)."""

    NONE = "none"  # one state block per request
    ALIGN = "align"  # prefix caching on hybrids: two blocks a request (Mamba-2: three, 0.32+)


@dataclass(frozen=True, slots=True, kw_only=True)
class KvLayerSpec:
    """The cache of one layer on one GPU."""

    kind: MixerKind
    block_size: int  # tokens per block (state layers: one block per request)
    page_size_bytes: int  # bytes of one block of this layer, after padding
    sliding_window_tokens: int | None = None
    state_blocks_per_request: int = 1
    is_state: bool = field(init=False, compare=False, hash=False)  # constant state, no tokens

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "is_state", self.kind in (MixerKind.LINEAR_ATTENTION, MixerKind.MAMBA)
        )

    def max_memory_usage_bytes(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Most memory one request of ``max_model_len`` tokens can hold in this layer."""
        if self.is_state:
            return self.state_blocks_per_request * self.page_size_bytes
        if self.sliding_window_tokens is not None:
            # the window, plus one scheduled chunk of prefill, plus one block of slack
            tokens = min(self.sliding_window_tokens - 1 + max_num_batched_tokens, max_model_len)
            return (cdiv(tokens, self.block_size) + 1) * self.page_size_bytes
        return cdiv(max_model_len, self.block_size) * self.page_size_bytes

    def bytes_per_request(self, context_tokens: int, max_num_batched_tokens: int) -> int:
        """Memory one request of ``context_tokens`` holds in this layer (whole blocks)."""
        return self.max_memory_usage_bytes(context_tokens, max_num_batched_tokens)


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheSettings:
    """The engine flags that shape the cache."""

    tp: int = 1
    kv_cache_dtype: str = "auto"  # auto = the model dtype
    block_size: int | None = None  # None = vLLM's choice
    mamba_ssm_dtype: str | None = None  # from the config's mamba_ssm_dtype; None = model dtype
    cache_mode: CacheMode = CacheMode.NONE
    mla_block_size: int = DEFAULT_BLOCK_SIZE  # MLA backends force their own block size
    kernel_block_size: int = KERNEL_BLOCK_SIZE  # the attention backend's smallest block
    # align mode: extra blocks per request of a Mamba-2 layer (vLLM 0.32's prefill checkpoint)
    mamba2_checkpoint_blocks: int = 0
    # the --kv-cache-dtype values the sparse-MLA backend stores as fp8_ds_mla (by GPU)
    sparse_ds_mla_dtypes: frozenset[str] = frozenset()
    # no hybrid KV-cache manager (vLLM 0.8): sliding-window layers beside full attention
    # are allocated as full attention (unify_hybrid_kv_cache_specs)
    unify_sliding_window: bool = False
    speculative_tokens: int = 0  # --speculative-config's k: more state blocks and conv steps

    def __post_init__(self) -> None:
        if self.kernel_block_size < 1:
            raise InvalidArgumentError(
                f"kernel_block_size must be a positive integer, got {self.kernel_block_size}"
            )


def resolve_kv_dtype_bytes(spec: ModelSpec, kv_cache_dtype: str) -> float:
    if kv_cache_dtype in ("auto", ""):
        return dtype_bytes(spec.dtype)
    return dtype_bytes(kv_cache_dtype)


def hybrid_block_size(
    *,
    block_size: int,
    state_page_bytes: int,
    attention_bytes_per_token: int,
    kernel_block_size: int = KERNEL_BLOCK_SIZE,
    has_mla: bool = False,
) -> int:
    """The attention block size of an attention + Mamba/linear-attention hybrid: the
    smallest that makes one attention page hold one state page, rounded *in steps of the
    block in force*.

    vLLM 0.32, ``vllm/platforms/interface.py``, ``Platform._align_hybrid_block_size``
    (called by ``update_block_size_for_backend``, on CUDA and on the CPU platform alike)::

        step  = max(smallest kernel block of the backend, cache_config.block_size)
        block = step * cdiv(mamba_page, step * attn_page_per_token)
        block = kernel * cdiv(block, kernel)      # every backend's smallest kernel block
        if cache_config.block_size < block: cache_config.block_size = block

    ``block_size`` is the block in force: the user's ``--block-size``, else the platform's
    (16 on CUDA, 128 on the CPU backend). Worked example (Qwen3-Next-80B, bf16, 2,048 B of
    attention per token, a 1,097,728-byte state page): on CUDA's 16, 16 x cdiv(1,097,728,
    16 x 2,048) = 544; with ``--block-size 64``, 64 x cdiv(1,097,728, 64 x 2,048) = 576;
    on the CPU backend's 128, 128 x 5 = 640. A block already large enough stays.
    """
    step = max(kernel_block_size, block_size)
    if has_mla:  # TRTLLM/FlashInfer MLA decode kernels want multiples of 128 kernel blocks
        step = max(step, HYBRID_MLA_BLOCK_ALIGNMENT)
    raised = step * cdiv(state_page_bytes, step * attention_bytes_per_token)
    raised = kernel_block_size * cdiv(raised, kernel_block_size)
    return max(block_size, raised)


def _reads_shared_kv(mixer: object) -> bool:
    return isinstance(mixer, AttentionSpec) and mixer.shares_kv_cache


@lru_cache(maxsize=1024)
def layer_specs(spec: ModelSpec, layers: range | None, s: CacheSettings) -> tuple[KvLayerSpec, ...]:
    """One :class:`KvLayerSpec` per layer that keeps state, for the layers of one stage."""
    kv_bytes = resolve_kv_dtype_bytes(spec, s.kv_cache_dtype)
    model_bytes = dtype_bytes(spec.dtype)
    ssm_bytes = dtype_bytes(s.mamba_ssm_dtype) if s.mamba_ssm_dtype else model_bytes
    indices = layers if layers is not None else range(spec.num_layers)
    # a layer with two mixers (Falcon-H1) registers two cache layers, as vLLM does; a layer
    # that reads another's KV cache (Gemma 4's last num_kv_shared_layers) registers none:
    # vLLM 0.32 gpu_model_runner.py get_kv_cache_spec skips every Attention with a
    # kv_sharing_target_layer_name ("KV cache management logic will act as this layer does
    # not exist"), so it is in no KV-cache group and costs no page
    mixers = [m for i in indices for m in spec.layers[i].mixers if not _reads_shared_kv(m)]

    attention_token_bytes = [
        attention_bytes_per_token(m, s.tp, kv_bytes) for m in mixers if isinstance(m, AttentionSpec)
    ] + [
        mla_bytes_per_token(
            m, s.kv_cache_dtype, kv_bytes, sparse_ds_mla_dtypes=s.sparse_ds_mla_dtypes
        )
        for m in mixers
        if isinstance(m, MlaSpec)
    ]
    states = [
        state_bytes(m, s.tp, model_bytes, ssm_bytes, s.speculative_tokens)
        for m in mixers
        if isinstance(m, LinearAttentionSpec | MambaSpec)
    ]
    has_mla = any(isinstance(m, MlaSpec) for m in mixers)
    block = s.block_size or (s.mla_block_size if has_mla else DEFAULT_BLOCK_SIZE)
    state_page = max(states, default=0)
    if states and attention_token_bytes:
        # Hybrid: raise the attention block size until one attention page holds a state page.
        per_token = max(attention_token_bytes)
        block = hybrid_block_size(
            block_size=block,
            state_page_bytes=state_page,
            attention_bytes_per_token=per_token,
            kernel_block_size=s.kernel_block_size,
            has_mla=has_mla,
        )
        state_page = max(state_page, block * per_token)  # state page padded up to match

    attention = [m for m in mixers if isinstance(m, AttentionSpec)]
    as_full = s.unify_sliding_window and any(m.sliding_window_tokens is None for m in attention)
    result = []
    for m in mixers:
        if isinstance(m, AttentionSpec):
            page = block * attention_bytes_per_token(m, s.tp, kv_bytes)
            result.append(
                KvLayerSpec(
                    kind=m.kind,
                    block_size=block,
                    page_size_bytes=page,
                    sliding_window_tokens=None if as_full else m.sliding_window_tokens,
                )
            )
        elif isinstance(m, MlaSpec):
            page = block * mla_bytes_per_token(
                m, s.kv_cache_dtype, kv_bytes, sparse_ds_mla_dtypes=s.sparse_ds_mla_dtypes
            )
            result.append(KvLayerSpec(kind=MixerKind.MLA, block_size=block, page_size_bytes=page))
        elif isinstance(m, LinearAttentionSpec | MambaSpec):
            # + k under speculation (MambaSpec.num_speculative_blocks, mamba/abstract.py)
            per_request = 1 + s.speculative_tokens
            if s.cache_mode is CacheMode.ALIGN:
                is_mamba2 = isinstance(m, MambaSpec) and m.version == 2
                per_request += 1 + (s.mamba2_checkpoint_blocks if is_mamba2 else 0)
            result.append(
                KvLayerSpec(
                    kind=m.kind,
                    block_size=block,
                    page_size_bytes=state_page,
                    state_blocks_per_request=per_request,
                )
            )
    return tuple(result)


@dataclass(frozen=True, slots=True, kw_only=True)
class KvGroup:
    """Layers that share block ids: the i-th layer of every group uses the same tensor."""

    spec: KvLayerSpec
    num_layers: int


@dataclass(frozen=True, slots=True, kw_only=True)
class KvLayout:
    """How one GPU's layers are grouped and how big a block id is."""

    groups: tuple[KvGroup, ...]
    group_size: int  # layers per group (padding layers included)
    page_size_bytes: int  # common page size after unification
    _hash: int = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        # layouts key the per-request cost cache, looked up on every binary-search step
        object.__setattr__(
            self, "_hash", hash((self.groups, self.group_size, self.page_size_bytes))
        )

    def __hash__(self) -> int:
        return self._hash

    @property
    def bytes_per_block(self) -> int:
        """Memory one block id costs across all the layers that use it."""
        return self.page_size_bytes * self.group_size

    @property
    def min_block_size(self) -> int:
        return min(g.spec.block_size for g in self.groups)

    @property
    def num_padding_layers(self) -> int:
        return len(self.groups) * self.group_size - sum(g.num_layers for g in self.groups)


@lru_cache(maxsize=1024)
def kv_layout(specs: tuple[KvLayerSpec, ...]) -> KvLayout:
    """Group layers as vLLM's ``get_kv_cache_groups`` does.

    Identical specs form one group. Otherwise pages are unified to the largest (by growing
    the smaller specs' block size), layers are bucketed by spec, the group size is the
    smallest bucket (or the largest, when it is under 1.5x the smallest), and each bucket is
    cut into ``ceil(count / group_size)`` groups.
    """
    if not specs:
        return KvLayout(groups=(), group_size=0, page_size_bytes=0)
    buckets: dict[KvLayerSpec, int] = {}
    for spec in specs:
        buckets[spec] = buckets.get(spec, 0) + 1
    if len(buckets) == 1:
        ((only, count),) = buckets.items()
        return KvLayout(
            groups=(KvGroup(spec=only, num_layers=count),),
            group_size=count,
            page_size_bytes=only.page_size_bytes,
        )
    uniform = _uniform_type_group(buckets)
    if uniform is not None:
        return uniform
    page = max(s.page_size_bytes for s in buckets)
    unified: dict[KvLayerSpec, int] = {}
    for spec, count in buckets.items():
        if page % spec.page_size_bytes:
            raise InvalidArgumentError(
                f"layer page sizes {spec.page_size_bytes} and {page} bytes cannot be unified "
                "(vLLM raises NotImplementedError for this model/flag combination)"
            )
        ratio = page // spec.page_size_bytes
        grown = KvLayerSpec(
            kind=spec.kind,
            block_size=spec.block_size * ratio,
            page_size_bytes=page,
            sliding_window_tokens=spec.sliding_window_tokens,
            state_blocks_per_request=spec.state_blocks_per_request,
        )
        unified[grown] = unified.get(grown, 0) + count
    counts = list(unified.values())
    smallest, largest = min(counts), max(counts)
    group_size = largest if largest < 1.5 * smallest else smallest
    groups: list[KvGroup] = []
    for spec, count in unified.items():
        num_groups = cdiv(count, group_size)
        for g in range(num_groups):
            groups.append(KvGroup(spec=spec, num_layers=min(group_size, count - g * group_size)))
    return KvLayout(groups=tuple(groups), group_size=group_size, page_size_bytes=page)


def _uniform_type_group(buckets: dict[KvLayerSpec, int]) -> KvLayout | None:
    """Full-attention (or MLA) layers of one block size but different pages (Nemotron-NAS's
    per-layer KV heads, DeepSeek-V3.2's latent + indexer caches): vLLM 0.32 keeps them in
    *one* group, a block id costing the sum of every layer's page
    (``UniformTypeKVCacheSpecs.from_specs`` in ``get_kv_cache_groups``,
    v1/core/kv_cache_utils.py; its ``page_size_bytes`` is that sum). Modelled as one group of
    one aggregate layer whose page is the sum. None when the layers are not all full
    attention of one block size."""
    specs = list(buckets)
    uniform = all(
        not s.is_state and s.sliding_window_tokens is None and s.block_size == specs[0].block_size
        for s in specs
    )
    if not uniform:
        return None
    total = sum(s.page_size_bytes * count for s, count in buckets.items())
    aggregate = KvLayerSpec(
        kind=specs[0].kind, block_size=specs[0].block_size, page_size_bytes=total
    )
    return KvLayout(
        groups=(KvGroup(spec=aggregate, num_layers=1),), group_size=1, page_size_bytes=total
    )


@lru_cache(maxsize=4096)
def stage_layout(spec: ModelSpec, layers: range | None, s: CacheSettings) -> KvLayout:
    """The grouped cache of one pipeline stage (all layers when ``layers`` is None)."""
    return kv_layout(layer_specs(spec, layers, s))


def num_blocks(layout: KvLayout, kv_cache_memory_bytes: float) -> int:
    """Blocks the KV-cache memory holds (``avail // page // group_size``)."""
    if not layout.groups or kv_cache_memory_bytes <= 0:
        return 0
    return int(kv_cache_memory_bytes // layout.page_size_bytes // layout.group_size)


@lru_cache(maxsize=1024)
def _group_terms(layout: KvLayout, max_num_batched_tokens: int) -> tuple[tuple[int, int, int], ...]:
    """Each group as (block_size, token cap or 0 for none, constant blocks), in units of the
    common page: a full-attention group needs ceil(L / block), a sliding group
    ceil(min(cap, L) / block) + 1, a state group a constant."""
    terms = []
    for g in layout.groups:
        spec = g.spec
        ratio = layout.page_size_bytes // spec.page_size_bytes  # 1 after unification
        if spec.is_state:
            terms.append((0, 0, cdiv(spec.state_blocks_per_request, ratio)))
        elif spec.sliding_window_tokens is not None:
            terms.append(
                (spec.block_size, spec.sliding_window_tokens - 1 + max_num_batched_tokens, 1)
            )
        else:
            terms.append((spec.block_size, 0, 0))
    return tuple(terms)


def blocks_per_request(layout: KvLayout, context_tokens: int, max_num_batched_tokens: int) -> int:
    """Blocks one request of ``context_tokens`` takes across all groups (as
    ``max_memory_usage_bytes`` per group, in whole pages)."""
    total = 0
    for block, cap, const in _group_terms(layout, max_num_batched_tokens):
        if block:
            tokens = min(cap, context_tokens) if cap else context_tokens
            total += -(tokens // -block)
        total += const
    return total


def max_concurrency(
    layout: KvLayout, blocks: int, max_model_len: int, max_num_batched_tokens: int
) -> float:
    """vLLM's "Maximum concurrency for N tokens per request"."""
    need = blocks_per_request(layout, max_model_len, max_num_batched_tokens)
    return blocks / need if need else float("inf")


def kv_cache_tokens(layout: KvLayout, blocks: int) -> int:
    """vLLM's "GPU KV cache size: N tokens" as v0.10-v0.3x print it:
    ``num_blocks // num_groups * min_block_size``."""
    if not layout.groups:
        return 0
    return blocks // len(layout.groups) * layout.min_block_size


def largest_fitting_len(
    layout: KvLayout, blocks: int, max_num_batched_tokens: int, upper: int
) -> int:
    """The largest context one request can have with ``blocks`` (vLLM's estimate of the
    maximum model length). Closed form when the answer lies past every sliding window;
    binary search otherwise."""
    if blocks_per_request(layout, 1, max_num_batched_tokens) > blocks:
        return 0
    terms = _group_terms(layout, max_num_batched_tokens)
    full = [block for block, cap, _ in terms if block and not cap]
    if full and len(set(full)) == 1:
        # Past every window: sliding and state groups cost a constant, full groups ceil(L / bs).
        fixed = sum(
            const + (-(cap // -block) if cap else 0)
            for block, cap, const in terms
            if not (block and not cap)
        )
        whole_blocks = (blocks - fixed) // len(full)
        longest = whole_blocks * full[0]
        if whole_blocks > 0 and longest >= max((cap for _, cap, _ in terms), default=0):
            return min(longest, upper)
    lo, hi = 1, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if blocks_per_request(layout, mid, max_num_batched_tokens) <= blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo
