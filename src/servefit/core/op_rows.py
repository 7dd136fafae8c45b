"""Cost rows of one step, per layer kind: attention, recurrent state, routed experts.

The attended (query, key) pairs of a step (:func:`causal_pairs`, the L^2 term a sliding
window caps), the keys it reads, and the experts its tokens touch under uniform routing
(:func:`expected_experts_touched`) become one :class:`~servefit.core.op_cost.OpCost` row per
layer group. :func:`servefit.core.ops.step_ops` assembles them with the projection,
elementwise and communication rows into a step.
"""

from __future__ import annotations

from servefit.core.op_coeffs import AttentionCoeffs, RoutedCoeffs, StateCoeffs
from servefit.core.op_cost import OpCost, OpKind, StepShape

# MoE token permutation: each routed copy of a token is gathered and scattered once.
MOE_PERMUTE_PASSES = 2


def causal_pairs(n: int, c: int, window: int | None) -> float:
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


def keys_read(n: int, c: int, window: int | None) -> int:
    """Cached + new tokens one step reads from the cache for one sequence."""
    total = c + n
    if window is None:
        return total
    return min(total, window + n - 1)


def expected_experts_touched(num_experts: int, top_k: int, num_tokens: int) -> float:
    """Distinct experts ``num_tokens`` tokens touch when each picks ``top_k`` of
    ``num_experts`` uniformly: ``E x (1 - (1 - k/E)^T)``."""
    if num_tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)


def attention_row(
    coeffs: AttentionCoeffs, count: int, shape: StepShape, act: float, label: str
) -> OpCost:
    window = coeffs.window
    flops = 0.0
    keys = 0.0
    # each decoding sequence's queries (1, or 1 + k when verifying drafts) read its keys
    # once: pairs = keys x queries
    decode_keys = shape.decode_keys(window)
    flops += decode_keys * coeffs.decode_flops_per_pair * shape.decode_query_tokens
    keys += decode_keys
    for n, c in shape.prefill_chunks:
        flops += causal_pairs(n, c, window) * coeffs.flops_per_pair
        read = keys_read(n, c, window)
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


def state_row(coeffs: StateCoeffs, count: int, shape: StepShape, label: str) -> OpCost:
    state = coeffs.state_bytes_per_seq * shape.num_seqs * count
    return OpCost(
        name=f"{label}: recurrent state",
        kind=OpKind.STATE,
        compute_dtype="fp32",
        flops=coeffs.flops_per_token * shape.num_tokens * count,
        kv_read_bytes=state,
        kv_write_bytes=state,
    )


def routed_row(
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
