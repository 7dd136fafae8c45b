"""Which tensor-parallel sizes vLLM starts a model with: its divisibility and replication
rules, one function per layer kind, as vLLM 0.32 enforces them while it builds the layers.

vLLM refuses a ``--tensor-parallel-size`` at startup when a layer cannot be split evenly:
``divide()`` (``vllm/distributed/utils.py``) asserts ``numerator % denominator == 0`` for
every sharded dimension, and a few layers add rules of their own. Each rule below cites the
file and function it mirrors (vLLM 0.32.0, ``vllm/model_executor/...`` unless stated).

Worked example, Qwen3.6-27B-FP8 at ``-tp 3``: 24 query heads divide by 3, but 4 KV heads
neither divide by 3 nor does 3 divide by 4 (no replication), and the 16 Gated DeltaNet key
heads do not divide by 3: vLLM refuses. At ``-tp 8`` every rule holds (24 / 8 = 3 query
heads, 4 KV heads each replicated twice, 16 / 8 key heads, 48 / 8 value heads).

Not mirrored: vision towers (their heads are not in the spec), and the block check on
single-output column-parallel fp8 linears (``validate_fp8_block_shape``'s column branch),
which no catalog model trips below TP 128.
"""

from __future__ import annotations

from functools import lru_cache
from math import gcd

from servefit.core.model_spec import (
    AttentionSpec,
    DenseMlpSpec,
    LinearAttentionSpec,
    MambaSpec,
    MlaSpec,
    ModelSpec,
    MoeSpec,
)
from servefit.core.weight_inventory import Role, Shard
from servefit.core.weight_layers import weight_tensors
from servefit.core.weights import VOCAB_PADDING, moe_ranks
from servefit.units import round_up

# The TP sizes a refusal lists as valid (1 .. this).
MAX_LISTED_TP = 16
# The finest block vLLM 0.32 refines fp8 MoE scales to when the TP slice is not a multiple
# of the checkpoint's block (fused_moe/oracle/fp8.py refine_fp8_moe_block_shape: "< 32").
FP8_MOE_MIN_REFINED_BLOCK = 32
# Models whose MoE block refuses TP > num_experts (qwen3_moe.py Qwen3MoeSparseMoeBlock,
# qwen3_next.py Qwen3NextSparseMoeBlock, which qwen3_5.py reuses).
_TP_AT_MOST_EXPERTS = ("qwen3_moe", "qwen3_next", "qwen3_5")


def _attention(a: AttentionSpec, tp: int) -> list[str]:
    out = []
    # config/model.py ModelConfig.verify_with_parallel_config: "Total number of attention
    # heads must be divisible by tensor parallel size"; layers/linear.py QKVParallelLinear
    # divide(total_num_heads, tp_size).
    if a.num_q_heads % tp:
        out.append(f"{tp} does not divide the model's {a.num_q_heads} heads (query heads)")
    # layers/linear.py QKVParallelLinear: tp_size >= total_num_kv_heads replicates each KV
    # head divide(tp_size, total_num_kv_heads) times, otherwise divide(total_num_kv_heads,
    # tp_size). Llama-3.1-8B (8 KV heads): TP 16 replicates each head twice; TP 3 fails.
    kv = a.num_kv_heads
    if (tp >= kv and tp % kv) or (tp < kv and kv % tp):
        out.append(
            f"{tp} neither divides the {kv} KV heads nor is a multiple of them (vLLM "
            "replicates KV heads only when TP is a multiple of their number)"
        )
    return out


def _mla(m: MlaSpec, tp: int) -> list[str]:
    # models/deepseek_v2.py DeepseekV2MLAAttention: assert num_heads % tp_size == 0 (and
    # verify_with_parallel_config's head rule). The one latent KV is replicated on every rank.
    if m.num_heads % tp:
        return [f"{tp} does not divide the model's {m.num_heads} heads (MLA heads)"]
    return []


def _linear_attention(g: LinearAttentionSpec, tp: int) -> list[str]:
    # layers/mamba/gdn/qwen_gdn_linear_attn.py QwenGatedDeltaNetAttention: A_log is
    # divide(num_v_heads, tp_size); in_proj_qkvz is a MergedColumnParallelLinear asserting
    # every output (key_dim, key_dim, value_dim, value_dim) % tp_size == 0, and the kernels
    # reshape q/k by num_k_heads // tp_size. No replication: both head counts must divide.
    out = []
    if g.num_k_heads % tp:
        out.append(f"{g.num_k_heads} linear-attention key heads do not divide by {tp}")
    if g.num_v_heads % tp:
        out.append(f"{g.num_v_heads} linear-attention value heads do not divide by {tp}")
    return out


def _mamba(m: MambaSpec, tp: int) -> list[str]:
    out = []
    if m.version == 1:
        # layers/mamba/mamba_mixer.py MambaMixer: in_proj MergedColumnParallelLinear
        # [intermediate_size] * 2 and conv1d ColumnParallelLinear(intermediate_size).
        if m.d_inner % tp:
            out.append(f"Mamba intermediate size {m.d_inner} does not divide by {tp}")
        return out
    # layers/mamba/mamba_mixer2.py MambaMixer2.__init__: "assert num_heads % tp_size == 0"
    # and "assert n_groups % tp_size == 0 or n_groups == 1": one group is replicated to every
    # rank (mamba_utils.py extra_groups_for_head_shards), more groups must divide.
    # Nemotron-H-56B (256 heads, 8 groups): TP 8 splits both, TP 16 fails on the groups.
    if m.num_heads % tp:
        out.append(f"{m.num_heads} Mamba heads do not divide by {tp}")
    if m.n_groups != 1 and m.n_groups % tp:
        out.append(
            f"{m.n_groups} Mamba groups do not divide by {tp} (only a single group is replicated)"
        )
    return out


def _dense_mlp(mlp: DenseMlpSpec, tp: int, what: str = "MLP") -> list[str]:
    # layers/linear.py MergedColumnParallelLinear: assert output_size % tp_size == 0 for
    # gate/up; RowParallelLinear divide(input_size, tp_size) for down.
    if mlp.intermediate_size % tp:
        return [f"{what} intermediate size {mlp.intermediate_size} does not divide by {tp}"]
    return []


def _moe(spec: ModelSpec, moe: MoeSpec, tp: int, ep: bool, dp: int = 1) -> list[str]:
    out = []
    if moe.shared_intermediate_size:  # a dense MLP on every rank, split by TP even under EP
        shared = DenseMlpSpec(intermediate_size=moe.shared_intermediate_size)
        out += _dense_mlp(shared, tp, "shared-expert")
    if ep:
        # fused_moe/config.py FusedMoEParallelConfig.make: with --enable-expert-parallel the
        # experts' TP is 1 and EP = TP x DP; expert_map_manager.py determine_expert_map gives
        # the remainder of num_experts / EP to the first ranks, so any expert count starts.
        return out
    # fused_moe/config.py FusedMoEConfig.__post_init__: assert intermediate_size % tp_size == 0,
    # where the experts' tp_size is TP x DP (FusedMoEParallelConfig.make)
    if moe.expert_intermediate_size % moe_ranks(tp, dp):
        out.append(
            f"expert intermediate size {moe.expert_intermediate_size} does not divide by "
            + (f"{tp}" if dp == 1 else f"TP x DP = {moe_ranks(tp, dp)}")
        )
    if spec.model_type.startswith(_TP_AT_MOST_EXPERTS) and tp > moe.num_experts:
        # models/qwen3_moe.py, qwen3_next.py: "Tensor parallel size is greater than the
        # number of experts".
        out.append(f"TP {tp} exceeds the {moe.num_experts} experts")
    return out


def _fp8_moe_block(
    spec: ModelSpec, intermediate: int, block: tuple[int, int], tp: int
) -> list[str]:
    """vLLM 0.32 fused MoE with fp8 block scales [block_n, block_k], split ``tp`` ways.

    quantization/fp8.py Fp8MoEMethod.create_weights -> utils/fp8_utils.py
    validate_fp8_block_shape_moe: the slice must be a multiple of block_n (and of block_k
    when tp > 1), unless fused_moe/oracle/fp8.py refine_fp8_moe_block_shape finds a finer
    block gcd(block_n, block_k, slice, hidden) >= 32 (the fp8 method with the default "auto"
    MoE backend only; compressed-tensors' fp8 MoE validates without refining).
    Qwen3-30B-A3B-FP8 (768, hidden 2048): TP 4 -> 192, refined to 64, starts; TP 16 -> 48,
    gcd 16, refused."""
    block_n, block_k = block
    ispp = intermediate // tp
    if ispp % block_n == 0 and (tp == 1 or ispp % block_k == 0):
        return []
    refined = gcd(block_n, block_k, ispp, spec.hidden_size)
    if spec.quant.method == "fp8" and refined >= FP8_MOE_MIN_REFINED_BLOCK:
        return []
    return [
        f"fp8 experts: the TP slice of the expert intermediate size ({intermediate} / {tp} = "
        f"{ispp}) is not a multiple of the {block_n}x{block_k} weight block"
        + (
            f" and no refined block >= {FP8_MOE_MIN_REFINED_BLOCK} divides it"
            if spec.quant.method == "fp8"
            else ""
        )
    ]


def _fp8_blocks(spec: ModelSpec, tp: int, ep: bool, dp: int = 1) -> list[str]:
    """fp8 block-quantized linears, from the weight inventory (so ignore lists apply)."""
    out: list[str] = []
    if moe_ranks(tp, dp) == 1 or not spec.quant.is_quantized:
        return out
    for t in weight_tensors(spec):
        if not t.is_linear or t.shard is not Shard.ROW or t.layer_index is None:
            continue
        fmt = spec.quant.format_for(t.name)
        if fmt is None or fmt.block_shape is None:
            continue
        if t.role is Role.ROUTED_EXPERTS:
            if not ep:
                out += _fp8_moe_block(spec, t.in_features, fmt.block_shape, moe_ranks(tp, dp))
            continue
        if tp == 1:
            continue
        # utils/fp8_utils.py validate_fp8_block_shape, "Required by row parallel": a
        # row-parallel layer's input_size_per_partition must be a multiple of block_k.
        # DeepSeek-R1's dense down_proj (18432): TP 32 -> 576, not a multiple of 128.
        block_k = fmt.block_shape[1]
        if t.in_features % tp == 0 and (t.in_features // tp) % block_k:
            out.append(
                f"fp8 {t.name.rsplit('.', 1)[-1]}: the TP slice of its input ({t.in_features} / "
                f"{tp} = {t.in_features // tp}) is not a multiple of the weight block {block_k}"
            )
    return out


def _vocab(spec: ModelSpec, tp: int) -> list[str]:
    # layers/vocab_parallel_embedding.py VocabParallelEmbedding: the vocabulary padded to a
    # multiple of 64 (pad_vocab_size, DEFAULT_VOCAB_PADDING_SIZE), then
    # divide(num_embeddings_padded, tp_size). Qwen3 (151,936 = 2,374 x 64): TP 3 fails.
    padded = round_up(spec.vocab_size, VOCAB_PADDING)
    if padded % tp:
        return [f"the vocabulary padded to {padded:,} does not divide by {tp}"]
    return []


@lru_cache(maxsize=4096)
def tp_refusals(spec: ModelSpec, tp: int, *, ep: bool = False, dp: int = 1) -> tuple[str, ...]:
    """Every reason vLLM 0.32 refuses ``--tensor-parallel-size tp`` for this model (empty
    when it starts); ``ep``: with ``--enable-expert-parallel``; ``dp``: the engine's
    ``--data-parallel-size``, over which the routed experts are split too (``tp x dp``
    ways, :func:`servefit.core.weights.moe_ranks`)."""
    reasons: dict[str, None] = {}  # ordered, without repeats (layers share shapes)
    if ep and not spec.is_moe:
        # config/model.py ModelConfig._verify_with_expert_parallelism
        reasons["expert parallelism needs a mixture-of-experts model"] = None
    for layer in spec.layers:  # MTP layers are not loaded by default
        mlp = layer.mlp
        found: list[str] = []
        for mixer in layer.mixers:  # Falcon-H1: attention and Mamba-2 side by side
            if isinstance(mixer, AttentionSpec):
                found += _attention(mixer, tp)
            elif isinstance(mixer, MlaSpec):
                found += _mla(mixer, tp)
            elif isinstance(mixer, LinearAttentionSpec):
                found += _linear_attention(mixer, tp)
            elif isinstance(mixer, MambaSpec):
                found += _mamba(mixer, tp)
        if isinstance(mlp, DenseMlpSpec):
            found += _dense_mlp(mlp, tp)
        elif isinstance(mlp, MoeSpec):
            found += _moe(spec, mlp, tp, ep, dp)
        reasons.update(dict.fromkeys(found))
    reasons.update(dict.fromkeys(_fp8_blocks(spec, tp, ep, dp)))
    reasons.update(dict.fromkeys(_vocab(spec, tp)))
    return tuple(reasons)


@lru_cache(maxsize=1024)
def valid_tp_sizes(
    spec: ModelSpec, *, ep: bool = False, upto: int = MAX_LISTED_TP, dp: int = 1
) -> tuple[int, ...]:
    """The tensor-parallel sizes 1 .. ``upto`` vLLM starts this model with."""
    return tuple(tp for tp in range(1, upto + 1) if not tp_refusals(spec, tp, ep=ep, dp=dp))
