"""Per-operator cost rows: what one engine step asks of one GPU.

A *step* is one forward pass of the engine: some sequences decode one token each, others
prefill a chunk of their prompt (continuous batching with chunked prefill). For a step,
every operator of every layer kind becomes one :class:`OpCost` row of the same few numbers
(FLOPs, weight bytes read, activation bytes in and out, KV/state bytes read and written,
bytes sent over the interconnect). :mod:`servefit.core.roofline` turns a row into time and
says what bounds it. Model families only describe shapes; this module only counts.

Conventions (all per GPU, i.e. one tensor-parallel rank of one pipeline stage):

- a linear layer of P parameters costs ``2 x tokens x P`` FLOPs and reads its weights once
  per step, in their stored format (quantized weights read their real bytes);
- attention costs ``2 x (d_qk + d_v)`` FLOPs per query head per attended (query, key) pair;
  a prefill chunk of n tokens after c cached tokens attends ``n x c + n (n + 1) / 2`` pairs
  (the causal L^2 term), a decode token ``c + 1``; a sliding window caps every row at W;
- attention reads each sequence's cached K/V once per step (flash-decoding), and writes the
  new tokens' K/V;
- MLA decodes in the absorbed form (scores against the latent: ``2 x (2 r + d_rope)`` FLOPs
  per head per pair) and prefills in the expanded form (``2 x (d_qk + d_v)``, plus the
  up-projection of the cached latent);
- linear attention and Mamba read and write their constant state once per sequence per step
  and do ``O(state)`` work per token: no L^2 term;
- a routed-expert layer reads the experts the step's tokens touch. Under uniform routing
  (an assumption) ``T`` tokens choosing ``k`` of ``E`` experts touch
  ``E x (1 - (1 - k/E)^T)`` distinct experts;
- the LM head runs only for the positions that are sampled (one per decoding sequence and
  one per prefill that finishes in this step);
- tensor parallelism adds two all-reduces of ``tokens x hidden`` activations per layer;
  pipeline parallelism sends hidden states and the residual to the next stage.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
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
    pipeline_layer_split,
    shard_fraction,
    tensor_bytes,
    vocab_shard_fraction,
    weight_tensors,
)
from servefit.errors import InvalidArgumentError
from servefit.units import dtype_bytes

# Elementwise traffic per layer, in units of (tokens x hidden x activation bytes): two
# RMSNorms (read + write each), two residual adds (read two, write one each) and the
# rotary embedding of q/k. An estimate; these rows are small next to the GEMMs.
ELEMENTWISE_PASSES_PER_LAYER = 10
# GEMM activations: each linear reads its input and writes its output once.
# MoE token permutation: each routed copy of a token is gathered and scattered once.
MOE_PERMUTE_PASSES = 2
# vLLM keeps the residual stream next to the hidden states between pipeline stages.
PP_TENSORS_PER_TOKEN = 2
# Per token, a Gated DeltaNet layer updates a (d_k x d_v) state per value head: decay,
# k^T S, the delta-rule correction and q S -- about three multiply-adds per state element.
LINEAR_ATTENTION_FLOPS_PER_STATE_ELEMENT = 6
# A Mamba selective scan does the same order of work per (channel x state) element.
MAMBA_FLOPS_PER_STATE_ELEMENT = 6


class OpKind(StrEnum):
    GEMM = "gemm"  # weight-stationary matrix multiplies (projections, MLP, experts, LM head)
    ATTENTION = "attention"  # softmax attention over the cached context
    STATE = "state"  # linear attention / Mamba recurrent state update
    ELEMENTWISE = "elementwise"  # norms, residuals, activations, rotary, MoE permutation
    COMM = "comm"  # tensor/expert-parallel collectives, pipeline transfers


@dataclass(frozen=True, slots=True, kw_only=True)
class OpCost:
    """One operator of one step on one GPU (already multiplied by its number of layers)."""

    name: str
    kind: OpKind
    compute_dtype: str  # the dtype the kernel computes in, before hardware fallback
    flops: float = 0.0
    weight_bytes: float = 0.0
    activation_in_bytes: float = 0.0
    activation_out_bytes: float = 0.0
    kv_read_bytes: float = 0.0
    kv_write_bytes: float = 0.0
    comm_bytes: float = 0.0  # payload per collective x collectives
    num_collectives: int = 0
    num_moe_layers: int = 0  # routed-expert rows: MoE layers (routing, sorting, permutation)
    is_low_bit: bool = False  # weights stored in fewer than 8 bits (dequantized on the fly)
    link: str = ""  # "intra" (NVLink/PCIe between TP ranks) or "inter" (between nodes)

    @property
    def memory_bytes(self) -> float:
        return (
            self.weight_bytes
            + self.activation_in_bytes
            + self.activation_out_bytes
            + self.kv_read_bytes
            + self.kv_write_bytes
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StepShape:
    """What one engine step computes: decoding sequences (their cached tokens) and prefill
    chunks (new tokens, tokens already cached before the chunk)."""

    decode_contexts: tuple[int, ...] = ()
    prefill_chunks: tuple[tuple[int, int], ...] = ()
    num_finishing_prefills: int | None = None  # prefills that sample a token (default: all)
    _memo: dict[int | None, int] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if any(c < 0 for c in self.decode_contexts):
            raise InvalidArgumentError("decode contexts must be >= 0")
        if any(n <= 0 or c < 0 for n, c in self.prefill_chunks):
            raise InvalidArgumentError("prefill chunks need > 0 new tokens and >= 0 cached")

    def decode_keys(self, window: int | None) -> int:
        """Keys the decoding sequences attend (and read): sum of min(context + 1, W)."""
        keys = self._memo.get(window)
        if keys is None:
            if window is None:
                keys = sum(self.decode_contexts) + len(self.decode_contexts)
            else:
                keys = sum(min(c + 1, window) for c in self.decode_contexts)
            self._memo[window] = keys
        return keys

    @property
    def num_tokens(self) -> int:
        return len(self.decode_contexts) + sum(n for n, _ in self.prefill_chunks)

    @property
    def num_seqs(self) -> int:
        return len(self.decode_contexts) + len(self.prefill_chunks)

    @property
    def num_sampled(self) -> int:
        finishing = self.num_finishing_prefills
        return len(self.decode_contexts) + (
            len(self.prefill_chunks) if finishing is None else finishing
        )


def decode_step(batch: int, context: int) -> StepShape:
    """``batch`` sequences decoding one token each, all with ``context`` cached tokens."""
    return StepShape(decode_contexts=(context,) * batch)


def prefill_step(new_tokens: int, cached_tokens: int = 0) -> StepShape:
    return StepShape(prefill_chunks=((new_tokens, cached_tokens),))


# ---------------------------------------------------------------------------------------
# attended pairs: the attention work of a step, per mixer geometry


def _causal_pairs(n: int, c: int, window: int | None) -> float:
    """(query, key) pairs when n new tokens follow c cached ones; each query at position
    p (1-based) attends min(p, W) keys."""
    first, last = c + 1, c + n
    if window is None or last <= window:
        return n * (first + last) / 2
    if first >= window:
        return n * window
    # rows first..window grow, the rest are capped at the window
    growing = window - first + 1
    return growing * (first + window) / 2 + (n - growing) * window


def _keys_read(n: int, c: int, window: int | None) -> int:
    """Cached + new tokens one step reads from the cache for one sequence."""
    total = c + n
    if window is None:
        return total
    return min(total, window + n - 1)


# ---------------------------------------------------------------------------------------
# per-layer coefficients, computed once per (model, TP, PP, EP)


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionCoeffs:
    kind: str  # "full", "window", "mla"
    window: int | None
    kv_bytes_per_token: float  # K+V (or the MLA latent) of one token in this layer, per GPU
    flops_per_pair: float  # prefill / expanded form
    decode_flops_per_pair: float  # decode (absorbed form for MLA)
    mla_expand_flops_per_key: float = 0.0  # MLA prefill: up-projection of each cached latent


@dataclass(frozen=True, slots=True, kw_only=True)
class StateCoeffs:
    state_bytes_per_seq: float  # conv + SSM state of one sequence in this layer, per GPU
    flops_per_token: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutedCoeffs:
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
    hidden_size: int
    activation_bytes: float
    tp: int
    pp: int
    ep: int
    stages: tuple[StageCoeffs, ...]
    assumptions: tuple[str, ...] = field(default=())

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
    spec: ModelSpec, *, tp: int = 1, pp: int = 1, ep: int = 1, kv_cache_dtype: str = "auto"
) -> ModelCoeffs:
    """Per-layer cost coefficients of ``spec`` on one GPU of a TP x PP (x EP) layout.

    With expert parallelism (``ep`` > 1) each GPU holds ``E / ep`` whole experts instead of
    a ``1/tp`` slice of every expert."""
    if ep < 1:
        raise InvalidArgumentError(f"expert parallel size must be >= 1, got {ep}")
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
            share = 1.0 if ep > 1 else shard_fraction(t, tp)
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
    return ModelCoeffs(
        hidden_size=spec.hidden_size,
        activation_bytes=act_bytes,
        tp=tp,
        pp=pp,
        ep=ep,
        stages=tuple(stages),
        assumptions=tuple(assumptions),
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


def expected_experts_touched(num_experts: int, top_k: int, num_tokens: int) -> float:
    """Distinct experts ``num_tokens`` tokens touch when each picks ``top_k`` of
    ``num_experts`` uniformly: ``E x (1 - (1 - k/E)^T)``."""
    if num_tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)


# ---------------------------------------------------------------------------------------
# rows


def _attention_rows(
    coeffs: AttentionCoeffs, count: int, shape: StepShape, act: float, label: str
) -> OpCost:
    window = coeffs.window
    flops = 0.0
    keys = 0.0
    decode_keys = shape.decode_keys(window)  # one query per sequence: pairs = keys
    flops += decode_keys * coeffs.decode_flops_per_pair
    keys += decode_keys
    for n, c in shape.prefill_chunks:
        flops += _causal_pairs(n, c, window) * coeffs.flops_per_pair
        read = _keys_read(n, c, window)
        keys += read
        flops += coeffs.mla_expand_flops_per_key * read
    return OpCost(
        name=f"{label}: attention core",
        kind=OpKind.ATTENTION,
        compute_dtype="bf16" if act >= 2 else "fp32",
        flops=flops * count,
        kv_read_bytes=keys * coeffs.kv_bytes_per_token * count,
        kv_write_bytes=shape.num_tokens * coeffs.kv_bytes_per_token * count,
    )


def _state_row(coeffs: StateCoeffs, count: int, shape: StepShape, label: str) -> OpCost:
    state = coeffs.state_bytes_per_seq * shape.num_seqs * count
    return OpCost(
        name=f"{label}: recurrent state",
        kind=OpKind.STATE,
        compute_dtype="fp32",
        flops=coeffs.flops_per_token * shape.num_tokens * count,
        kv_read_bytes=state,
        kv_write_bytes=state,
    )


def _routed_row(
    coeffs: RoutedCoeffs, count: int, tokens: int, hidden: int, act: float, label: str
) -> OpCost:
    touched_global = expected_experts_touched(coeffs.num_experts, coeffs.top_k, tokens)
    touched = touched_global * coeffs.num_local_experts / coeffs.num_experts
    local_tokens = tokens * coeffs.top_k * coeffs.num_local_experts / coeffs.num_experts
    return OpCost(
        name=f"{label}: routed experts",
        kind=OpKind.GEMM,
        compute_dtype=coeffs.compute_dtype,
        flops=2 * local_tokens * coeffs.params_per_expert * count,
        weight_bytes=touched * coeffs.bytes_per_expert * count,
        activation_in_bytes=MOE_PERMUTE_PASSES * local_tokens * hidden * act * count,
        activation_out_bytes=local_tokens * hidden * act * count,
        num_moe_layers=count,
        is_low_bit=coeffs.is_low_bit,
    )


def step_ops(m: ModelCoeffs, shape: StepShape, stage: int = 0) -> tuple[OpCost, ...]:
    """Every operator row of one step on one GPU of pipeline stage ``stage``."""
    st = m.stages[stage]
    tokens = shape.num_tokens
    hidden = m.hidden_size
    act = m.activation_bytes
    rows: list[OpCost] = []
    if st.is_first:
        rows.append(
            OpCost(
                name="embedding lookup",
                kind=OpKind.ELEMENTWISE,
                compute_dtype="bf16",
                weight_bytes=tokens * st.embedding_row_bytes,
                activation_out_bytes=tokens * hidden * act,
            )
        )
    for coeffs, count in st.layers:
        label = f"{count} x {coeffs.label}"
        for dtype, low_bit, wbytes, params, width in coeffs.linear:
            rows.append(
                OpCost(
                    name=f"{label}: projections ({dtype})",
                    kind=OpKind.GEMM,
                    compute_dtype=dtype,
                    is_low_bit=low_bit,
                    flops=2 * tokens * params * count,
                    weight_bytes=wbytes * count,
                    activation_in_bytes=tokens * width * act * count / 2,
                    activation_out_bytes=tokens * width * act * count / 2,
                )
            )
        if coeffs.attention is not None:
            rows.append(_attention_rows(coeffs.attention, count, shape, act, label))
        if coeffs.state is not None:
            rows.append(_state_row(coeffs.state, count, shape, label))
        if coeffs.routed is not None:
            rows.append(_routed_row(coeffs.routed, count, tokens, hidden, act, label))
        rows.append(
            OpCost(
                name=f"{label}: norms, residuals, rotary",
                kind=OpKind.ELEMENTWISE,
                compute_dtype="bf16",
                activation_in_bytes=ELEMENTWISE_PASSES_PER_LAYER
                / 2
                * tokens
                * hidden
                * act
                * count,
                activation_out_bytes=ELEMENTWISE_PASSES_PER_LAYER
                / 2
                * tokens
                * hidden
                * act
                * count,
            )
        )
        if m.tp > 1:
            rows.append(
                OpCost(
                    name=f"{label}: tensor-parallel all-reduce",
                    kind=OpKind.COMM,
                    compute_dtype="bf16",
                    # two all-reduces of tokens x hidden per layer; a ring moves
                    # 2 (tp - 1) / tp of the payload through each GPU's link
                    comm_bytes=2 * tokens * hidden * act * 2 * (m.tp - 1) / m.tp * count,
                    num_collectives=2 * count,
                    link="intra",
                )
            )
        if m.ep > 1 and coeffs.routed is not None:
            rows.append(
                OpCost(
                    name=f"{label}: expert-parallel all-to-all",
                    kind=OpKind.COMM,
                    compute_dtype="bf16",
                    comm_bytes=(
                        2 * tokens * coeffs.routed.top_k * hidden * act * (m.ep - 1) / m.ep * count
                    ),
                    num_collectives=2 * count,
                    link="intra",
                )
            )
    if st.is_last:
        sampled = shape.num_sampled
        rows.append(
            OpCost(
                name="LM head (sampled positions)",
                kind=OpKind.GEMM,
                compute_dtype=st.lm_head_dtype,
                flops=2 * sampled * st.lm_head_params,
                weight_bytes=st.lm_head_bytes,
                activation_in_bytes=sampled * hidden * act,
                activation_out_bytes=sampled * st.lm_head_params / hidden * 4,  # fp32 logits
            )
        )
    else:
        rows.append(
            OpCost(
                name="pipeline transfer to the next stage",
                kind=OpKind.COMM,
                compute_dtype="bf16",
                comm_bytes=PP_TENSORS_PER_TOKEN * tokens * hidden * act,
                num_collectives=1,
                link="inter",
            )
        )
    return tuple(rows)


def total(rows: Iterable[OpCost]) -> OpCost:
    """All rows summed into one (for "bytes per token" style summaries)."""
    flops = wb = ai = ao = kr = kw = cb = 0.0
    n = 0
    for r in rows:
        flops += r.flops
        wb += r.weight_bytes
        ai += r.activation_in_bytes
        ao += r.activation_out_bytes
        kr += r.kv_read_bytes
        kw += r.kv_write_bytes
        cb += r.comm_bytes
        n += r.num_collectives
    return OpCost(
        name="total",
        kind=OpKind.GEMM,
        compute_dtype="mixed",
        flops=flops,
        weight_bytes=wb,
        activation_in_bytes=ai,
        activation_out_bytes=ao,
        kv_read_bytes=kr,
        kv_write_bytes=kw,
        comm_bytes=cb,
        num_collectives=n,
    )
