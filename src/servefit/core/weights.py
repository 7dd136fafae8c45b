"""Every weight tensor of a model, named as the checkpoint names it, and what it costs.

:func:`weight_tensors` lists each tensor group of a :class:`ModelSpec` with its shape, its
Hugging Face module name (so quantization ignore-lists and targets can be matched the way
the engine matches them) and how tensor parallelism shards it. Parameter counts and bytes
per GPU are sums over that list, so "total = sum of parts" holds by construction.

:func:`weight_tensors` (the inventory) lives in :mod:`servefit.core.weight_layers`, the types
it is made of in :mod:`servefit.core.weight_inventory`; both stay importable from here. This
module does the counting: parameters (:func:`count_params`), bytes as stored
(:func:`tensor_bytes`), each rank's share (:func:`shard_fraction`,
:func:`vocab_shard_fraction`), pipeline stages (:func:`pipeline_layer_split`) and the bytes
on the busiest GPU (:func:`weight_bytes`).

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
from functools import lru_cache

from servefit.core.kernel_layout import (
    KernelLayout,
    LayerKind,
    kernel_layout,
    laid_out_bias_bytes,
    laid_out_bytes,
    moe_padded_dims,
)
from servefit.core.model_spec import ModelSpec, MoeSpec
from servefit.core.quant_formats import WeightFormat

# `X as X`: re-exported, so ``servefit.core.weights.<name>`` keeps working
from servefit.core.weight_inventory import NAMING as NAMING
from servefit.core.weight_inventory import Role, Shard, WeightTensor
from servefit.core.weight_layers import weight_tensors
from servefit.errors import InvalidArgumentError
from servefit.units import dtype_bytes, round_up

VOCAB_PADDING = (
    64  # vLLM DEFAULT_VOCAB_PADDING_SIZE (vllm/model_executor/layers/vocab_parallel_embedding.py)
)


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

    @property
    def active_non_embedding(self) -> int:
        """Active per token without the input embedding lookup (OpenAI's convention for
        gpt-oss: 5.1B of 116.8B); ``active`` keeps it (Mistral's: Mixtral's 12.9B). A tied
        embedding is the LM head's matmul too, so it stays in both (docs/model.md)."""
        return self.active - self.input_embedding


@lru_cache(maxsize=256)
def count_params(spec: ModelSpec) -> ParamCounts:
    tensors = weight_tensors(spec)
    by_role: dict[Role, int] = {}
    for t in tensors:
        if t.in_checkpoint:  # a V slot filled from k_proj is memory, not a parameter
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


def linear_format(spec: ModelSpec, t: WeightTensor) -> WeightFormat | None:
    """The format a linear tensor group is stored in, None when it is in the model dtype."""
    if not t.is_linear or t.dtype is not None:
        return None
    if t.role in (Role.ROUTER, Role.EMBEDDING, Role.VISION):
        return None
    if t.role is Role.LM_HEAD:
        # quantized only when a rule names it: vLLM builds lm_head without a quant method
        # for fp8/AWQ/GPTQ unless the checkpoint lists it
        rule = spec.quant.rule_for(t.name)
        return rule.fmt if rule else None
    return spec.quant.format_for(t.name)


def tensor_bytes(spec: ModelSpec, t: WeightTensor) -> float:
    """Bytes of one tensor group as stored: quantized linears in their format, a tensor
    with a dtype of its own (Mamba's float32 ``A``) in it, the rest in the model dtype."""
    if t.dtype is not None:
        return t.num_params * dtype_bytes(t.dtype)
    if t.role is Role.EMBEDDING and spec.quant.includes_embedding and spec.quant.default:
        return t.num_params * spec.quant.default.bits / 8
    fmt = linear_format(spec, t)
    if fmt is not None:
        return fmt.linear_bytes(t.in_features, t.out_features) * t.num_copies
    return t.num_params * dtype_bytes(spec.dtype)


def _layout_of(
    spec: ModelSpec,
    t: WeightTensor,
    capability: tuple[int, int] | None,
    has_triton_kernels: bool = True,
) -> tuple[KernelLayout, WeightFormat] | None:
    fmt = linear_format(spec, t)
    if fmt is None or t.shard is Shard.VOCAB:
        return None
    kind = LayerKind.MOE if t.role is Role.ROUTED_EXPERTS else LayerKind.DENSE
    layout = kernel_layout(fmt, capability, kind, has_triton_kernels=has_triton_kernels)
    return None if layout is None else (layout, fmt)


def _rank_shape(t: WeightTensor, tp: int) -> tuple[int, int]:
    """(in, out) features of one rank's slice of a linear tensor group."""
    if t.shard is Shard.COLUMN:
        return t.in_features, t.out_features // tp
    if t.shard is Shard.ROW:
        return t.in_features // tp, t.out_features
    if t.shard is Shard.KV_HEADS:
        return t.in_features, t.out_features * max(1, t.shard_units // tp) // t.shard_units
    return t.in_features, t.out_features


def laid_out_share_bytes(
    spec: ModelSpec,
    t: WeightTensor,
    tp: int,
    capability: tuple[int, int] | None,
    linears: dict[str, WeightTensor],
    has_triton_kernels: bool = True,
) -> float | None:
    """One rank's bytes of ``t`` as the kernel vLLM picks for ``capability`` lays it out
    (:mod:`servefit.core.kernel_layout`), or None where that is the checkpoint's share."""
    if capability is None or tp < 1:
        return None
    if t.is_linear:
        found = _layout_of(spec, t, capability, has_triton_kernels)
        if found is None:
            return None
        layout, fmt = found
        k, n = _rank_shape(t, 1 if t.shard is Shard.REPLICATED else tp)
        if t.role is Role.ROUTED_EXPERTS:  # w13 (column): K hidden, N intermediate; w2: swapped
            is_w13 = t.shard is not Shard.ROW
            hidden, inter = moe_padded_dims(
                layout,
                fmt,
                hidden_size=k if is_w13 else n,
                intermediate_per_rank=n if is_w13 else k,
            )
            k, n = (hidden, inter) if is_w13 else (inter, hidden)
        per_copy = laid_out_bytes(
            layout, fmt, in_features=k, out_features=n, model_dtype_bytes=dtype_bytes(spec.dtype)
        )
        return per_copy * t.num_copies
    # a routed expert's bias: padded with its linear, in the kernel's bias dtype
    parent = linears.get(t.name.removesuffix(".bias")) if t.name.endswith(".bias") else None
    if parent is None or parent.role is not Role.ROUTED_EXPERTS:
        return None
    found = _layout_of(spec, parent, capability, has_triton_kernels)
    if found is None:
        return None
    layout, fmt = found
    k, n = _rank_shape(parent, tp)
    is_w13 = parent.shard is not Shard.ROW
    hidden, inter = moe_padded_dims(
        layout, fmt, hidden_size=k if is_w13 else n, intermediate_per_rank=n if is_w13 else k
    )
    elements = (inter if is_w13 else hidden) * parent.num_copies
    return elements * laid_out_bias_bytes(layout, dtype_bytes(spec.dtype))


def moe_ranks(tp: int, dp: int = 1) -> int:
    """The GPUs a routed-expert layer is spread over: vLLM flattens TP across the
    data-parallel ranks of one engine for the MoE layers (fused_moe/config.py
    ``FusedMoEParallelConfig.make``, ``flatten_tp_across_dp``), slicing every expert
    ``tp x dp`` ways, or, with ``--enable-expert-parallel``, giving each GPU whole experts
    (EP = TP x DP). Attention, dense MLPs, shared experts and the embedding stay per DP rank."""
    return tp * dp


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
    # the same, as the checkpoint stores them (equal to the above unless a kernel lays the
    # weights out otherwise on the GPU asked about); counted in the same pass
    checkpoint_total_bytes: float
    checkpoint_per_stage_bytes: tuple[float, ...]
    buffer_bytes_per_gpu: float = 0.0  # non-parameter tensors every GPU holds (RoPE tables)
    # with data parallelism (dp > 1): every DP rank loads all but the routed experts again
    dp: int = 1
    replicated_per_dp_bytes: float = 0.0  # total_bytes less the routed experts

    def all_gpus_bytes(self, num_gpus: int) -> float:
        """The parameters once (the non-expert part once per DP rank) plus every GPU's
        buffers: what the layout loads in all."""
        again = (self.dp - 1) * self.replicated_per_dp_bytes
        return self.total_bytes + again + self.buffer_bytes_per_gpu * num_gpus


@lru_cache(maxsize=1024)
def weight_bytes(
    spec: ModelSpec,
    *,
    tp: int = 1,
    pp: int = 1,
    include_mtp: bool = False,
    capability: tuple[int, int] | None = None,
    has_triton_kernels: bool = True,
    dp: int = 1,
) -> WeightBytes:
    """Bytes of weights per GPU under TP x PP (vLLM loads MTP layers only for speculative
    decoding, so they are excluded unless ``include_mtp``). With a GPU's compute
    ``capability``, quantized weights count as the kernel vLLM picks there lays them out
    (:mod:`servefit.core.kernel_layout`: Marlin or triton_kernels padding, converted
    scales); without one, as the checkpoint stores them.

    ``dp``: the data-parallel ranks of one engine (``--data-parallel-size``). Each holds the
    whole model at TP ``tp``, except the routed experts, which are spread over all
    ``tp x dp`` GPUs (:func:`moe_ranks`). ``total_bytes`` is one copy of the parameters;
    :meth:`WeightBytes.all_gpus_bytes` counts the non-expert part once per DP rank."""
    if capability is not None and not spec.quant.is_quantized:
        # every tensor is in the model dtype (or its own): no kernel repacks anything, so
        # one answer serves every GPU (a sweep over GPUs computes it once)
        return weight_bytes(spec, tp=tp, pp=pp, include_mtp=include_mtp, dp=dp)
    if dp < 1:
        raise InvalidArgumentError(f"--data-parallel-size must be >= 1, got {dp}")
    stages = pipeline_layer_split(spec.num_layers, pp)
    stage_of_layer = {i: s for s, r in enumerate(stages) for i in r}
    per_stage = [0.0] * pp
    checkpoint_per_stage = [0.0] * pp
    per_stage_roles: list[dict[str, float]] = [{} for _ in range(pp)]
    total = checkpoint_total = routed_total = 0.0
    tensors = weight_tensors(spec)
    linears = {t.name: t for t in tensors if t.is_linear} if capability else {}
    for t in tensors:
        if t.role is Role.MTP and not include_mtp:
            continue
        full = tensor_bytes(spec, t)
        ranks = moe_ranks(tp, dp) if t.role is Role.ROUTED_EXPERTS else tp
        if t.shard is Shard.VOCAB:
            checkpoint_share = full * vocab_shard_fraction(spec.vocab_size, tp)
        else:
            checkpoint_share = full * shard_fraction(t, ranks)
        checkpoint_total += full
        laid_out = laid_out_share_bytes(spec, t, ranks, capability, linears, has_triton_kernels)
        if laid_out is not None:  # the rank's bytes as the kernel holds them
            share = laid_out
            held = share / shard_fraction(t, ranks)
        else:
            share = checkpoint_share
            held = full
        total += held
        routed_total += held if t.role is Role.ROUTED_EXPERTS else 0.0
        if t.layer_index is not None:
            stage = stage_of_layer[t.layer_index]
        elif t.role in (Role.EMBEDDING, Role.VISION):
            stage = 0
        else:  # final norm, LM head, MTP
            stage = pp - 1
        per_stage[stage] += share
        checkpoint_per_stage[stage] += checkpoint_share
        roles = per_stage_roles[stage]
        roles[t.role.value] = roles.get(t.role.value, 0.0) + share
    # the RoPE cos/sin table(s): a buffer, not a parameter; one per GPU, in the model dtype
    rope = spec.rope_cache_positions * sum(spec.rope_cache_dims) * dtype_bytes(spec.dtype)
    for stage in range(pp):
        if rope:
            per_stage[stage] += rope
            checkpoint_per_stage[stage] += rope
            per_stage_roles[stage]["rope_cache"] = rope
    busiest = max(range(pp), key=lambda s: per_stage[s])
    return WeightBytes(
        total_bytes=total,
        per_gpu_bytes=per_stage[busiest],
        per_gpu_by_role_bytes=per_stage_roles[busiest],
        per_stage_bytes=tuple(per_stage),
        checkpoint_total_bytes=checkpoint_total,
        checkpoint_per_stage_bytes=tuple(checkpoint_per_stage),
        buffer_bytes_per_gpu=rope,
        dp=dp,
        replicated_per_dp_bytes=total - routed_total,
    )


@lru_cache(maxsize=256)
def kernel_layouts(
    spec: ModelSpec, capability: tuple[int, int] | None, has_triton_kernels: bool = True
) -> tuple[KernelLayout, ...]:
    """The kernel layouts :func:`weight_bytes` applies to this model on a GPU of
    ``capability`` (for the plan's assumptions), in the order first met."""
    found: dict[KernelLayout, None] = {}
    for t in weight_tensors(spec):
        if t.is_linear:
            layout = _layout_of(spec, t, capability, has_triton_kernels)
            if layout is not None:
                found.setdefault(layout[0])
    return tuple(found)
