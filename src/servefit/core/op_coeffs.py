"""Per-layer cost coefficients of a model on one GPU, computed once per (model, TP, PP, EP).

:func:`model_coeffs` walks the weight inventory (:func:`servefit.core.weights.weight_tensors`)
and the layer specs and keeps, per distinct decoder layer, what a step's rows need: the
linear weights grouped by kernel dtype, the attention geometry (full, windowed, MLA), the
recurrent-state size and the routed experts; then groups the layers by pipeline stage. The
rows themselves are built in :mod:`servefit.core.op_rows` and :mod:`servefit.core.ops`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from servefit.core.kv_cache import (
    attention_bytes_per_token,
    mla_bytes_per_token,
    resolve_kv_dtype_bytes,
    state_bytes,
)
from servefit.core.model_spec import (
    AttentionSpec,
    LinearAttentionSpec,
    MambaSpec,
    MlaSpec,
    ModelSpec,
    MoeSpec,
)
from servefit.core.weights import (
    Role,
    Shard,
    moe_ranks,
    pipeline_layer_split,
    shard_fraction,
    tensor_bytes,
    vocab_shard_fraction,
    weight_tensors,
)
from servefit.errors import InvalidArgumentError
from servefit.units import dtype_bytes

# Per token, a Gated DeltaNet layer updates a (d_k x d_v) state per value head: decay,
# k^T S, the delta-rule correction and q S -- about three multiply-adds per state element.
LINEAR_ATTENTION_FLOPS_PER_STATE_ELEMENT = 6
# A Mamba selective scan does the same order of work per (channel x state) element.
MAMBA_FLOPS_PER_STATE_ELEMENT = 6


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionCoeffs:
    """Per-layer attention shape for the cost rows: heads, head widths, window, KV bytes."""

    kind: str  # "full", "window", "mla"
    window: int | None
    kv_bytes_per_token: float  # K+V (or the MLA latent) of one token in this layer, per GPU
    flops_per_pair: float  # prefill / expanded form
    decode_flops_per_pair: float  # decode (absorbed form for MLA)
    mla_expand_flops_per_key: float = 0.0  # MLA prefill: up-projection of each cached latent


@dataclass(frozen=True, slots=True, kw_only=True)
class StateCoeffs:
    """Per-layer recurrent-state shape (Mamba, linear attention) for the cost rows."""

    state_bytes_per_seq: float  # conv + SSM state of one sequence in this layer, per GPU
    flops_per_token: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutedCoeffs:
    """Per-layer routed-expert shape for the cost rows: experts, top-k, expert bytes."""

    num_experts: int  # E of the model
    num_local_experts: int  # experts this GPU holds (E / EP)
    top_k: int
    bytes_per_expert: float  # per GPU (TP-sharded unless EP)
    params_per_expert: float  # per GPU
    compute_dtype: str
    is_low_bit: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerCoeffs:
    """One decoder layer's costs on one GPU; identical layers share one value."""

    label: str
    # (kernel dtype, weights below 8 bits, bytes, params, activation width per token)
    linear: tuple[tuple[str, bool, float, float, float], ...]
    attention: AttentionCoeffs | None = None
    state: StateCoeffs | None = None
    routed: RoutedCoeffs | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StageCoeffs:
    """The layers of one pipeline stage, grouped, plus what only first/last stages do."""

    layers: tuple[tuple[LayerCoeffs, int], ...]  # (coefficients, number of such layers)
    embedding_row_bytes: float  # one embedding row, per GPU (first stage)
    lm_head_bytes: float  # LM head weights per GPU (last stage; 0 elsewhere)
    lm_head_params: float
    lm_head_dtype: str
    is_first: bool
    is_last: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCoeffs:
    """Everything the cost rows need of a model on one GPU of a TP x PP x EP layout."""

    hidden_size: int
    activation_bytes: float
    tp: int
    pp: int
    ep: int
    stages: tuple[StageCoeffs, ...]
    assumptions: tuple[str, ...] = field(default=())
    # data-parallel ranks of one engine: a MoE layer runs the tokens of all of them at once
    # (the ranks step together, vLLM's DP lockstep), over experts spread on TP x DP GPUs
    dp: int = 1

    @property
    def num_layers(self) -> int:
        return sum(n for stage in self.stages for _, n in stage.layers)


def _attention_coeffs(
    mixer: AttentionSpec | MlaSpec, tp: int, kv_cache_dtype: str, kv_bytes: float
) -> AttentionCoeffs:
    if isinstance(mixer, MlaSpec):
        heads = mixer.num_heads / tp
        qk = mixer.qk_nope_head_dim + mixer.qk_rope_head_dim
        return AttentionCoeffs(
            kind="mla",
            window=None,
            kv_bytes_per_token=mla_bytes_per_token(mixer, kv_cache_dtype, kv_bytes),
            flops_per_pair=2 * heads * (qk + mixer.v_head_dim),
            decode_flops_per_pair=2 * heads * (2 * mixer.kv_lora_rank + mixer.qk_rope_head_dim),
            mla_expand_flops_per_key=(
                2 * mixer.kv_lora_rank * heads * (mixer.qk_nope_head_dim + mixer.v_head_dim)
            ),
        )
    heads = mixer.num_q_heads / tp
    window = mixer.sliding_window_tokens or mixer.attention_chunk_tokens
    per_pair = 2 * heads * (mixer.head_dim + mixer.value_head_dim)
    return AttentionCoeffs(
        kind="window" if window else "full",
        window=window,
        kv_bytes_per_token=attention_bytes_per_token(mixer, tp, kv_bytes),
        flops_per_pair=per_pair,
        decode_flops_per_pair=per_pair,
    )


def _state_coeffs(
    mixer: LinearAttentionSpec | MambaSpec, tp: int, model_bytes: float
) -> StateCoeffs:
    if isinstance(mixer, LinearAttentionSpec):
        elements = mixer.num_v_heads / tp * mixer.k_head_dim * mixer.v_head_dim
        flops = LINEAR_ATTENTION_FLOPS_PER_STATE_ELEMENT * elements
    elif mixer.version == 1:
        flops = MAMBA_FLOPS_PER_STATE_ELEMENT * mixer.d_inner / tp * mixer.state_size
    else:
        elements = mixer.num_heads / tp * mixer.head_dim * mixer.state_size
        flops = MAMBA_FLOPS_PER_STATE_ELEMENT * elements
    flops += 2 * mixer.conv_kernel * mixer.conv_dim / tp if isinstance(mixer, MambaSpec) else 0
    # vLLM keeps the recurrent state in the model dtype unless mamba_ssm_dtype says otherwise
    return StateCoeffs(
        state_bytes_per_seq=state_bytes(mixer, tp, model_bytes, model_bytes),
        flops_per_token=flops,
    )


def _tensor_format(spec: ModelSpec, name: str, role: Role) -> tuple[str, bool]:
    """(the dtype its matmul computes in, whether it is stored in fewer than 8 bits)."""
    if role in (Role.ROUTER, Role.EMBEDDING, Role.VISION, Role.NORM):
        return _dtype_name(spec.dtype), False
    if role is Role.LM_HEAD:
        rule = spec.quant.rule_for(name)
        fmt = rule.fmt if rule else None
    else:
        fmt = spec.quant.format_for(name)
    if fmt is None:
        return _dtype_name(spec.dtype), False
    return fmt.compute_dtype, fmt.bits < 8


def _dtype_name(dtype: str) -> str:
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, dtype)


@lru_cache(maxsize=256)
def model_coeffs(
    spec: ModelSpec,
    *,
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    kv_cache_dtype: str = "auto",
    dp: int = 1,
) -> ModelCoeffs:
    """Per-layer cost coefficients of ``spec`` on one GPU of a TP x PP (x EP) layout.

    With expert parallelism (``ep`` > 1) each GPU holds ``E / ep`` whole experts instead of
    a ``1/tp`` slice of every expert. With ``dp`` data-parallel ranks in one engine a MoE
    model's experts are spread over ``tp x dp`` GPUs (:func:`servefit.core.weights.moe_ranks`:
    sliced that many ways, or EP = TP x DP whole experts); a dense model's DP ranks are
    replicas and its coefficients do not change."""
    if ep < 1:
        raise InvalidArgumentError(f"expert parallel size must be >= 1, got {ep}")
    if dp < 1:
        raise InvalidArgumentError(f"--data-parallel-size must be >= 1, got {dp}")
    if not spec.is_moe:
        dp = 1
    act_bytes = dtype_bytes(spec.dtype)
    kv_bytes = resolve_kv_dtype_bytes(spec, kv_cache_dtype)
    linear: dict[int, dict[tuple[str, bool], list[float]]] = {}
    routed_bytes: dict[int, float] = {}
    routed_params: dict[int, float] = {}
    routed_dtype: dict[int, tuple[str, bool]] = {}
    lm_bytes = lm_params = 0.0
    lm_dtype = _dtype_name(spec.dtype)
    embed_row = spec.hidden_size * act_bytes
    for t in weight_tensors(spec):
        if t.role in (Role.MTP, Role.VISION):
            continue
        if t.role is Role.EMBEDDING:
            if spec.tie_word_embeddings:  # the LM head multiplies by the embedding
                frac = vocab_shard_fraction(spec.vocab_size, tp)
                lm_bytes, lm_params = tensor_bytes(spec, t) * frac, t.num_params * frac
            continue
        if t.role is Role.LM_HEAD:
            frac = vocab_shard_fraction(spec.vocab_size, tp)
            lm_bytes, lm_params = tensor_bytes(spec, t) * frac, t.num_params * frac
            lm_dtype = _tensor_format(spec, t.name, t.role)[0]
            continue
        if t.layer_index is None:  # final norm
            continue
        if t.role is Role.ROUTED_EXPERTS:
            share = 1.0 if ep > 1 else shard_fraction(t, moe_ranks(tp, dp))
            layer_mlp = spec.layers[t.layer_index].mlp
            moe_copies = layer_mlp.num_experts if isinstance(layer_mlp, MoeSpec) else 1
            per_expert = tensor_bytes(spec, t) * share / max(moe_copies, 1)
            params = t.num_params * share / max(moe_copies, 1)
            routed_bytes[t.layer_index] = routed_bytes.get(t.layer_index, 0.0) + per_expert
            routed_params[t.layer_index] = routed_params.get(t.layer_index, 0.0) + (
                params if t.is_linear else 0.0
            )
            if t.is_linear:
                routed_dtype[t.layer_index] = _tensor_format(spec, t.name, t.role)
            continue
        share = shard_fraction(t, tp)
        key = (
            _tensor_format(spec, t.name, t.role)
            if t.is_linear
            else (_dtype_name(spec.dtype), False)
        )
        entry = linear.setdefault(t.layer_index, {}).setdefault(key, [0.0, 0.0, 0.0])
        entry[0] += tensor_bytes(spec, t) * share
        if t.is_linear:
            entry[1] += t.num_params * share
            # activations each linear reads and writes per token (sharded side counts 1/tp)
            entry[2] += t.in_features * (share if t.shard is Shard.ROW else 1.0) + (
                t.out_features * t.num_copies * (share if t.shard is not Shard.ROW else 1.0)
            )

    per_layer: list[LayerCoeffs] = []
    for index, layer in enumerate(spec.layers):
        mixer = layer.mixer
        attention = state = routed = None
        if isinstance(mixer, AttentionSpec | MlaSpec):
            attention = _attention_coeffs(mixer, tp, kv_cache_dtype, kv_bytes)
        elif isinstance(mixer, LinearAttentionSpec | MambaSpec):
            state = _state_coeffs(mixer, tp, act_bytes)
        if isinstance(layer.parallel_mixer, LinearAttentionSpec | MambaSpec):  # Falcon-H1
            state = _state_coeffs(layer.parallel_mixer, tp, act_bytes)
        if isinstance(layer.mlp, MoeSpec):
            moe = layer.mlp
            dtype, low_bit = routed_dtype.get(index, (_dtype_name(spec.dtype), False))
            routed = RoutedCoeffs(
                num_experts=moe.num_experts,
                num_local_experts=max(1, moe.num_experts // ep),
                top_k=moe.num_experts_per_token,
                bytes_per_expert=routed_bytes.get(index, 0.0),
                params_per_expert=routed_params.get(index, 0.0),
                compute_dtype=dtype,
                is_low_bit=low_bit,
            )
        groups = tuple(
            (dtype, low, b, p, w)
            for (dtype, low), (b, p, w) in sorted(linear.get(index, {}).items())
        )
        per_layer.append(
            LayerCoeffs(
                label=_layer_label(mixer, layer.mlp),
                linear=groups,
                attention=attention,
                state=state,
                routed=routed,
            )
        )

    stages = []
    split = pipeline_layer_split(spec.num_layers, pp)
    for s, layer_range in enumerate(split):
        counted = Counter(per_layer[i] for i in layer_range)
        stages.append(
            StageCoeffs(
                layers=tuple(counted.items()),
                embedding_row_bytes=embed_row if s == 0 else 0.0,
                lm_head_bytes=lm_bytes if s == pp - 1 else 0.0,
                lm_head_params=lm_params if s == pp - 1 else 0.0,
                lm_head_dtype=lm_dtype,
                is_first=s == 0,
                is_last=s == pp - 1,
            )
        )
    assumptions = []
    if spec.is_moe:
        assumptions.append(
            "MoE routing is uniform: T tokens touch E x (1 - (1 - k/E)^T) distinct experts"
        )
    if ep > 1:
        assumptions.append(f"expert parallelism: each GPU holds {ep}-th of the experts, whole")
    if dp > 1:
        assumptions.append(
            f"data parallelism: the {dp} ranks step together and share their load evenly; "
            f"each MoE layer runs all {dp} ranks' tokens on experts spread over "
            f"{moe_ranks(tp, dp)} GPUs"
            + ("" if ep > 1 else " (each expert sliced that many ways, gathered over DP)")
        )
    return ModelCoeffs(
        hidden_size=spec.hidden_size,
        activation_bytes=act_bytes,
        tp=tp,
        pp=pp,
        ep=ep,
        stages=tuple(stages),
        assumptions=tuple(assumptions),
        dp=dp,
    )


def _layer_label(mixer: object, mlp: object) -> str:
    if isinstance(mixer, MlaSpec):
        m = "MLA"
    elif isinstance(mixer, AttentionSpec):
        window = mixer.sliding_window_tokens or mixer.attention_chunk_tokens
        m = f"attention (window {window})" if window else "attention"
    elif isinstance(mixer, LinearAttentionSpec):
        m = "linear attention"
    elif isinstance(mixer, MambaSpec):
        m = f"Mamba{mixer.version}"
    else:
        m = "no mixer"
    return f"{m} + {'MoE' if isinstance(mlp, MoeSpec) else 'MLP' if mlp else 'no MLP'}"
