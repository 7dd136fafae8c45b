"""Every weight tensor of a model, named as the checkpoint names it, and what it costs.

:func:`weight_tensors` lists each tensor group of a :class:`ModelSpec` with its shape, its
Hugging Face module name (so quantization ignore-lists and targets can be matched the way
the engine matches them) and how tensor parallelism shards it. Parameter counts and bytes
per GPU are sums over that list, so "total = sum of parts" holds by construction.

Sharding follows vLLM's parallel layers:

- column/row-parallel linears (attention projections, MLPs, experts' intermediate dim)
  are split ``tp`` ways;
- K and V projections are split by KV head; with fewer KV heads than ranks each rank keeps
  one whole KV head (``max(1, num_kv_heads // tp)``), so they are partly replicated;
- the embedding and LM head are split along the vocabulary, padded to a multiple of 64;
- MoE routers, MLA's small down-projections and norms are replicated.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from servefit.core.model_spec import (
    AttentionSpec,
    DenseMlpSpec,
    LayerSpec,
    LinearAttentionSpec,
    MambaSpec,
    MlaSpec,
    ModelSpec,
    MoeSpec,
)
from servefit.errors import InvalidArgumentError
from servefit.units import dtype_bytes, round_up

VOCAB_PADDING = (
    64  # vLLM DEFAULT_VOCAB_PADDING_SIZE (vllm/model_executor/layers/vocab_parallel_embedding.py)
)


class Shard(StrEnum):
    COLUMN = "column"  # split along the output dim
    ROW = "row"  # split along the input dim
    KV_HEADS = "kv_heads"  # split by KV head, replicated below one head per rank
    VOCAB = "vocab"  # split along the (padded) vocabulary
    REPLICATED = "replicated"


class Role(StrEnum):
    EMBEDDING = "embedding"
    LM_HEAD = "lm_head"
    ATTENTION = "attention"
    MIXER = "mixer"  # linear attention / Mamba projections and state parameters
    MLP = "mlp"
    ROUTED_EXPERTS = "routed_experts"
    SHARED_EXPERTS = "shared_experts"
    ROUTER = "router"
    NORM = "norm"
    VISION = "vision"
    MTP = "mtp"


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightTensor:
    """One tensor group: a linear layer (``in_features`` x ``out_features``, ``num_copies``
    experts of that shape) or a non-linear parameter (norm, conv, bias, embedding)."""

    name: str
    role: Role
    shard: Shard
    num_params: int
    in_features: int = 0
    out_features: int = 0
    num_copies: int = 1
    is_linear: bool = False
    layer_index: int | None = None  # decoder layer; None for embedding, head, final norm, vision
    shard_units: int = 0  # for KV_HEADS: the number of KV heads


# Module names by family: the parts that differ between checkpoints.
NAMING: dict[str, dict[str, str]] = {
    "default": {
        "layers": "layers",
        "attn": "self_attn",
        "linear_attn": "linear_attn",
        "mamba": "mamba",
        "mlp": "mlp",
        "moe": "mlp",
        "gate": "gate_proj",
        "up": "up_proj",
        "down": "down_proj",
        "router": "gate",
        "shared": "shared_expert",
        "gdn_in": "in_proj_qkvz",
        "gdn_ba": "in_proj_ba",
    },
    "qwen3_5": {"gdn_in": "in_proj_qkv", "gdn_ba": "in_proj_b"},
    "mixtral": {"moe": "block_sparse_moe", "gate": "w1", "down": "w2", "up": "w3"},
    "deepseek": {"shared": "shared_experts"},
    "gpt_oss": {"router": "router"},
    "llama4": {"moe": "feed_forward", "mlp": "feed_forward", "router": "router"},
    "jamba": {"mamba": "mamba", "mlp": "feed_forward", "moe": "feed_forward", "router": "router"},
    "nemotron_h": {"attn": "mixer", "mamba": "mixer", "mlp": "mixer", "moe": "mixer"},
}


def _names(naming: str) -> dict[str, str]:
    return {**NAMING["default"], **NAMING.get(naming, {})}


class _Builder:
    def __init__(self) -> None:
        self.tensors: list[WeightTensor] = []

    def linear(
        self,
        name: str,
        in_features: int,
        out_features: int,
        *,
        role: Role,
        shard: Shard,
        layer: int | None,
        copies: int = 1,
        bias: bool = False,
        shard_units: int = 0,
    ) -> None:
        self.tensors.append(
            WeightTensor(
                name=name,
                role=role,
                shard=shard,
                num_params=in_features * out_features * copies,
                in_features=in_features,
                out_features=out_features,
                num_copies=copies,
                is_linear=True,
                layer_index=layer,
                shard_units=shard_units,
            )
        )
        if bias:
            bias_shard = Shard.REPLICATED if shard is Shard.ROW else shard
            self.param(
                f"{name}.bias",
                out_features * copies,
                role=role,
                shard=bias_shard,
                layer=layer,
                shard_units=shard_units,
            )

    def param(
        self,
        name: str,
        count: int,
        *,
        role: Role,
        shard: Shard,
        layer: int | None,
        shard_units: int = 0,
    ) -> None:
        if count:
            self.tensors.append(
                WeightTensor(
                    name=name,
                    role=role,
                    shard=shard,
                    num_params=count,
                    layer_index=layer,
                    shard_units=shard_units,
                )
            )


def _attention(
    b: _Builder, p: str, h: int, a: AttentionSpec, layer: int | None, role: Role
) -> None:
    q_out = a.num_q_heads * a.head_dim * (2 if a.has_output_gate else 1)
    kv = a.num_kv_heads
    b.linear(
        f"{p}.q_proj", h, q_out, role=role, shard=Shard.COLUMN, layer=layer, bias=a.has_qkv_bias
    )
    b.linear(
        f"{p}.k_proj",
        h,
        kv * a.head_dim,
        role=role,
        shard=Shard.KV_HEADS,
        layer=layer,
        bias=a.has_qkv_bias,
        shard_units=kv,
    )
    b.linear(
        f"{p}.v_proj",
        h,
        kv * a.value_head_dim,
        role=role,
        shard=Shard.KV_HEADS,
        layer=layer,
        bias=a.has_qkv_bias,
        shard_units=kv,
    )
    b.linear(
        f"{p}.o_proj",
        a.num_q_heads * a.value_head_dim,
        h,
        role=role,
        shard=Shard.ROW,
        layer=layer,
        bias=a.has_o_bias,
    )
    if a.has_qk_norm:
        b.param(f"{p}.qk_norm", 2 * a.head_dim, role=Role.NORM, shard=Shard.REPLICATED, layer=layer)
    if a.has_sinks:
        b.param(f"{p}.sinks", a.num_q_heads, role=role, shard=Shard.COLUMN, layer=layer)


def _mla(b: _Builder, p: str, h: int, m: MlaSpec, layer: int | None, role: Role) -> None:
    qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank:
        b.linear(f"{p}.q_a_proj", h, m.q_lora_rank, role=role, shard=Shard.REPLICATED, layer=layer)
        b.param(
            f"{p}.q_a_layernorm", m.q_lora_rank, role=Role.NORM, shard=Shard.REPLICATED, layer=layer
        )
        b.linear(
            f"{p}.q_b_proj",
            m.q_lora_rank,
            m.num_heads * qk_head,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
        )
    else:
        b.linear(
            f"{p}.q_proj", h, m.num_heads * qk_head, role=role, shard=Shard.COLUMN, layer=layer
        )
    b.linear(
        f"{p}.kv_a_proj_with_mqa",
        h,
        m.kv_lora_rank + m.qk_rope_head_dim,
        role=role,
        shard=Shard.REPLICATED,
        layer=layer,
    )
    b.param(
        f"{p}.kv_a_layernorm", m.kv_lora_rank, role=Role.NORM, shard=Shard.REPLICATED, layer=layer
    )
    b.linear(
        f"{p}.kv_b_proj",
        m.kv_lora_rank,
        m.num_heads * (m.qk_nope_head_dim + m.v_head_dim),
        role=role,
        shard=Shard.COLUMN,
        layer=layer,
    )
    b.linear(f"{p}.o_proj", m.num_heads * m.v_head_dim, h, role=role, shard=Shard.ROW, layer=layer)


def _gated_deltanet(
    b: _Builder, p: str, h: int, g: LinearAttentionSpec, layer: int | None, n: dict[str, str]
) -> None:
    role = Role.MIXER
    if n["gdn_in"] == "in_proj_qkv":  # Qwen3.5 splits the projections
        b.linear(
            f"{p}.in_proj_qkv",
            h,
            2 * g.key_dim + g.value_dim,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
        )
        b.linear(f"{p}.in_proj_z", h, g.value_dim, role=role, shard=Shard.COLUMN, layer=layer)
        b.linear(f"{p}.in_proj_b", h, g.num_v_heads, role=role, shard=Shard.COLUMN, layer=layer)
        b.linear(f"{p}.in_proj_a", h, g.num_v_heads, role=role, shard=Shard.COLUMN, layer=layer)
    else:
        b.linear(
            f"{p}.in_proj_qkvz",
            h,
            2 * g.key_dim + 2 * g.value_dim,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
        )
        b.linear(
            f"{p}.in_proj_ba", h, 2 * g.num_v_heads, role=role, shard=Shard.COLUMN, layer=layer
        )
    conv_dim = 2 * g.key_dim + g.value_dim
    b.param(f"{p}.conv1d", conv_dim * g.conv_kernel, role=role, shard=Shard.COLUMN, layer=layer)
    b.param(f"{p}.dt_bias+A_log", 2 * g.num_v_heads, role=role, shard=Shard.COLUMN, layer=layer)
    b.param(f"{p}.norm", g.v_head_dim, role=Role.NORM, shard=Shard.REPLICATED, layer=layer)
    b.linear(f"{p}.out_proj", g.value_dim, h, role=role, shard=Shard.ROW, layer=layer)


def _mamba(b: _Builder, p: str, h: int, m: MambaSpec, layer: int | None) -> None:
    role = Role.MIXER
    bias = m.has_proj_bias
    conv_bias = m.conv_dim if m.has_conv_bias else 0
    if m.version == 2:
        in_out = 2 * m.d_inner + 2 * m.n_groups * m.state_size + m.num_heads
        b.linear(f"{p}.in_proj", h, in_out, role=role, shard=Shard.COLUMN, layer=layer, bias=bias)
        b.param(
            f"{p}.conv1d",
            m.conv_dim * m.conv_kernel + conv_bias,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
        )
        b.param(f"{p}.dt_bias+A_log+D", 3 * m.num_heads, role=role, shard=Shard.COLUMN, layer=layer)
        b.param(f"{p}.norm", m.d_inner, role=Role.NORM, shard=Shard.COLUMN, layer=layer)
    else:
        b.linear(
            f"{p}.in_proj", h, 2 * m.d_inner, role=role, shard=Shard.COLUMN, layer=layer, bias=bias
        )
        b.param(
            f"{p}.conv1d",
            m.conv_dim * m.conv_kernel + conv_bias,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
        )
        b.linear(
            f"{p}.x_proj",
            m.d_inner,
            m.dt_rank + 2 * m.state_size,
            role=role,
            shard=Shard.ROW,
            layer=layer,
        )
        b.linear(
            f"{p}.dt_proj",
            m.dt_rank,
            m.d_inner,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
            bias=True,
        )
        b.param(
            f"{p}.A_log+D",
            m.d_inner * m.state_size + m.d_inner,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
        )
        if m.has_dt_norms:
            b.param(
                f"{p}.dt_B_C_norms",
                m.dt_rank + 2 * m.state_size,
                role=Role.NORM,
                shard=Shard.REPLICATED,
                layer=layer,
            )
    b.linear(f"{p}.out_proj", m.d_inner, h, role=role, shard=Shard.ROW, layer=layer, bias=bias)


def _dense_mlp(
    b: _Builder,
    p: str,
    h: int,
    mlp: DenseMlpSpec,
    layer: int | None,
    n: dict[str, str],
    role: Role,
    *,
    copies: int = 1,
) -> None:
    i = mlp.intermediate_size
    if mlp.is_gated:
        b.linear(
            f"{p}.{n['gate']}",
            h,
            i,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
            copies=copies,
            bias=mlp.has_bias,
        )
    b.linear(
        f"{p}.{n['up']}",
        h,
        i,
        role=role,
        shard=Shard.COLUMN,
        layer=layer,
        copies=copies,
        bias=mlp.has_bias,
    )
    b.linear(
        f"{p}.{n['down']}",
        i,
        h,
        role=role,
        shard=Shard.ROW,
        layer=layer,
        copies=copies,
        bias=mlp.has_bias,
    )


def _moe(
    b: _Builder,
    p: str,
    h: int,
    moe: MoeSpec,
    layer: int | None,
    n: dict[str, str],
    role: Role | None,
) -> None:
    router_role = role or Role.ROUTER
    b.linear(
        f"{p}.{n['router']}",
        h,
        moe.num_experts,
        role=router_role,
        shard=Shard.REPLICATED,
        layer=layer,
        bias=moe.has_router_bias,
    )
    if moe.has_score_correction_bias:
        b.param(
            f"{p}.{n['router']}.e_score_correction_bias",
            moe.num_experts,
            role=router_role,
            shard=Shard.REPLICATED,
            layer=layer,
        )
    expert = DenseMlpSpec(
        intermediate_size=moe.expert_intermediate_size,
        is_gated=moe.is_gated,
        has_bias=moe.has_expert_bias,
    )
    _dense_mlp(
        b,
        f"{p}.experts.0",
        h,
        expert,
        layer,
        n,
        role or Role.ROUTED_EXPERTS,
        copies=moe.num_experts,
    )
    if moe.shared_intermediate_size:
        shared = DenseMlpSpec(intermediate_size=moe.shared_intermediate_size, is_gated=moe.is_gated)
        _dense_mlp(b, f"{p}.{n['shared']}", h, shared, layer, n, role or Role.SHARED_EXPERTS)
    if moe.has_shared_gate:
        b.linear(
            f"{p}.shared_expert_gate", h, 1, role=router_role, shard=Shard.REPLICATED, layer=layer
        )


def _layer(
    b: _Builder,
    p: str,
    h: int,
    layer: LayerSpec,
    index: int | None,
    n: dict[str, str],
    role_override: Role | None = None,
) -> None:
    mixer = layer.mixer
    if isinstance(mixer, AttentionSpec):
        _attention(b, f"{p}.{n['attn']}", h, mixer, index, role_override or Role.ATTENTION)
    elif isinstance(mixer, MlaSpec):
        _mla(b, f"{p}.{n['attn']}", h, mixer, index, role_override or Role.ATTENTION)
    elif isinstance(mixer, LinearAttentionSpec):
        _gated_deltanet(b, f"{p}.{n['linear_attn']}", h, mixer, index, n)
    elif isinstance(mixer, MambaSpec):
        _mamba(b, f"{p}.{n['mamba']}", h, mixer, index)
    if isinstance(layer.mlp, MoeSpec):
        _moe(b, f"{p}.{n['moe']}", h, layer.mlp, index, n, role_override)
    elif isinstance(layer.mlp, DenseMlpSpec):
        _dense_mlp(b, f"{p}.{n['mlp']}", h, layer.mlp, index, n, role_override or Role.MLP)
    b.param(f"{p}.norms", layer.num_norms * h, role=Role.NORM, shard=Shard.REPLICATED, layer=index)


@lru_cache(maxsize=256)
def weight_tensors(spec: ModelSpec) -> tuple[WeightTensor, ...]:
    """All weight tensors of the language model, its MTP layers and its vision tower."""
    n = _names(spec.naming)
    h = spec.hidden_size
    b = _Builder()
    prefix = spec.module_prefix
    b.param(
        f"{prefix}embed_tokens",
        spec.vocab_size * h,
        role=Role.EMBEDDING,
        shard=Shard.VOCAB,
        layer=None,
    )
    for index, layer in enumerate(spec.layers):
        _layer(b, f"{prefix}{n['layers']}.{index}", h, layer, index, n)
    b.param(f"{prefix}norm", h, role=Role.NORM, shard=Shard.REPLICATED, layer=None)
    if not spec.tie_word_embeddings:
        b.linear("lm_head", h, spec.vocab_size, role=Role.LM_HEAD, shard=Shard.VOCAB, layer=None)
    for index, layer in enumerate(spec.mtp_layers):
        p = f"mtp.layers.{index}"
        b.linear(f"{p}.eh_proj", 2 * h, h, role=Role.MTP, shard=Shard.REPLICATED, layer=None)
        b.param(f"{p}.mtp_norms", 3 * h, role=Role.MTP, shard=Shard.REPLICATED, layer=None)
        _layer(b, p, h, layer, None, n, role_override=Role.MTP)
    if spec.vision is not None:
        b.param("visual", spec.vision.num_params, role=Role.VISION, shard=Shard.COLUMN, layer=None)
    return tuple(b.tensors)


@dataclass(frozen=True, slots=True, kw_only=True)
class ParamCounts:
    """Parameter counts in the conventions model authors publish."""

    total: int  # language model + vision tower, without MTP layers
    active: int  # per token: total minus the routed experts a token does not use
    embedding: int  # input embedding (+ LM head when untied)
    input_embedding: (
        int  # the lookup table alone (no matmul: some authors leave it out of "active")
    )
    mtp: int  # multi-token-prediction layers the checkpoint carries (not loaded by default)
    vision: int
    routed_experts: int

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding - self.vision


@lru_cache(maxsize=256)
def count_params(spec: ModelSpec) -> ParamCounts:
    tensors = weight_tensors(spec)
    by_role: dict[Role, int] = {}
    for t in tensors:
        by_role[t.role] = by_role.get(t.role, 0) + t.num_params
    mtp = by_role.pop(Role.MTP, 0)
    total = sum(by_role.values())
    inactive = 0
    for layer in spec.layers:
        if isinstance(layer.mlp, MoeSpec):
            moe = layer.mlp
            per_expert = (
                (3 if moe.is_gated else 2) * spec.hidden_size * moe.expert_intermediate_size
            )
            if moe.has_expert_bias:
                per_expert += (
                    2 if moe.is_gated else 1
                ) * moe.expert_intermediate_size + spec.hidden_size
            inactive += per_expert * (moe.num_experts - moe.num_experts_per_token)
    return ParamCounts(
        total=total,
        active=total - inactive,
        embedding=by_role.get(Role.EMBEDDING, 0) + by_role.get(Role.LM_HEAD, 0),
        input_embedding=0 if spec.tie_word_embeddings else by_role.get(Role.EMBEDDING, 0),
        mtp=mtp,
        vision=by_role.get(Role.VISION, 0),
        routed_experts=by_role.get(Role.ROUTED_EXPERTS, 0),
    )


def tensor_bytes(spec: ModelSpec, t: WeightTensor) -> float:
    """Bytes of one tensor group as stored: quantized linears in their format, the rest in
    the model dtype."""
    if t.is_linear and t.role not in (Role.ROUTER, Role.EMBEDDING, Role.VISION):
        if t.role is Role.LM_HEAD:
            # quantized only when a rule names it: vLLM builds lm_head without a quant method
            # for fp8/AWQ/GPTQ unless the checkpoint lists it
            rule = spec.quant.rule_for(t.name)
            fmt = rule.fmt if rule else None
        else:
            fmt = spec.quant.format_for(t.name)
        if fmt is not None:
            return fmt.linear_bytes(t.in_features, t.out_features) * t.num_copies
    return t.num_params * dtype_bytes(spec.dtype)


def shard_fraction(t: WeightTensor, tp: int) -> float:
    """Fraction of a tensor one of ``tp`` tensor-parallel ranks holds."""
    if tp < 1:
        raise InvalidArgumentError(f"--tensor-parallel-size must be >= 1, got {tp}")
    if t.shard is Shard.REPLICATED or tp == 1:
        return 1.0
    if t.shard is Shard.KV_HEADS:
        return max(1, t.shard_units // tp) / t.shard_units
    return 1.0 / tp


def vocab_shard_fraction(vocab_size: int, tp: int) -> float:
    """vLLM pads the vocabulary to a multiple of 64 before splitting it across ranks."""
    padded = round_up(vocab_size, VOCAB_PADDING)
    per_rank = round_up(padded, tp) // tp
    return per_rank / vocab_size


def pipeline_layer_split(num_layers: int, pp: int) -> tuple[range, ...]:
    """Decoder layers of each pipeline stage, as vLLM's ``get_pp_indices`` splits them:
    an even split, with the remainder given one each to the stages before the last."""
    if pp < 1:
        raise InvalidArgumentError(f"--pipeline-parallel-size must be >= 1, got {pp}")
    if pp > num_layers:
        raise InvalidArgumentError(
            f"--pipeline-parallel-size {pp} exceeds the model's {num_layers} layers"
        )
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    ranges = []
    start = 0
    for size in sizes:
        ranges.append(range(start, start + size))
        start += size
    return tuple(ranges)


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightBytes:
    """Weight bytes held by the busiest GPU, split by role."""

    total_bytes: float  # the checkpoint's parameters as loaded (all ranks, no MTP, no buffers)
    per_gpu_bytes: float  # the largest pipeline stage's share on one TP rank
    per_gpu_by_role_bytes: dict[str, float]
    per_stage_bytes: tuple[float, ...]
    buffer_bytes_per_gpu: float = 0.0  # non-parameter tensors every GPU holds (RoPE tables)

    def all_gpus_bytes(self, num_gpus: int) -> float:
        """The parameters once plus every GPU's buffers: what the layout loads in all."""
        return self.total_bytes + self.buffer_bytes_per_gpu * num_gpus


@lru_cache(maxsize=1024)
def weight_bytes(
    spec: ModelSpec, *, tp: int = 1, pp: int = 1, include_mtp: bool = False
) -> WeightBytes:
    """Bytes of weights per GPU under TP x PP (vLLM loads MTP layers only for speculative
    decoding, so they are excluded unless ``include_mtp``)."""
    stages = pipeline_layer_split(spec.num_layers, pp)
    stage_of_layer = {i: s for s, r in enumerate(stages) for i in r}
    per_stage = [0.0] * pp
    per_stage_roles: list[dict[str, float]] = [{} for _ in range(pp)]
    total = 0.0
    for t in weight_tensors(spec):
        if t.role is Role.MTP and not include_mtp:
            continue
        full = tensor_bytes(spec, t)
        total += full
        if t.shard is Shard.VOCAB:
            share = full * vocab_shard_fraction(spec.vocab_size, tp)
        else:
            share = full * shard_fraction(t, tp)
        if t.layer_index is not None:
            stage = stage_of_layer[t.layer_index]
        elif t.role in (Role.EMBEDDING, Role.VISION):
            stage = 0
        else:  # final norm, LM head, MTP
            stage = pp - 1
        per_stage[stage] += share
        roles = per_stage_roles[stage]
        roles[t.role.value] = roles.get(t.role.value, 0.0) + share
    # the RoPE cos/sin table(s): a buffer, not a parameter; one per GPU, in the model dtype
    rope = spec.rope_cache_positions * sum(spec.rope_cache_dims) * dtype_bytes(spec.dtype)
    for stage in range(pp):
        if rope:
            per_stage[stage] += rope
            per_stage_roles[stage]["rope_cache"] = rope
    busiest = max(range(pp), key=lambda s: per_stage[s])
    return WeightBytes(
        total_bytes=total,
        per_gpu_bytes=per_stage[busiest],
        per_gpu_by_role_bytes=per_stage_roles[busiest],
        per_stage_bytes=tuple(per_stage),
        buffer_bytes_per_gpu=rope,
    )
