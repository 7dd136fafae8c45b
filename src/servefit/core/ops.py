"""Per-operator cost rows: what one engine step asks of one GPU.

A *step* is one forward pass of the engine: some sequences decode one token each, others
prefill a chunk of their prompt (continuous batching with chunked prefill). For a step,
every operator of every layer kind becomes one :class:`OpCost` row of the same few numbers
(FLOPs, weight bytes read, activation bytes in and out, KV/state bytes read and written,
bytes sent over the interconnect). :mod:`servefit.core.roofline` turns a row into time and
says what bounds it. Model families only describe shapes; this module only counts.

This module assembles a step's rows (:func:`step_ops`). The value types (:class:`StepShape`,
:class:`OpCost`, :func:`total`) are in :mod:`servefit.core.op_cost`; the per-layer
coefficients (:func:`model_coeffs`) in :mod:`servefit.core.op_coeffs`; the attention, state
and routed-expert rows in :mod:`servefit.core.op_rows`. All stay importable from here.

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
  pipeline parallelism sends hidden states and the residual to the next stage;
- data parallelism (a MoE model's DP ranks in one engine) runs each MoE layer on every
  rank's tokens: expert parallelism moves them by all-to-all, otherwise each rank gathers
  the others' tokens and scatters their sums back.
"""

from __future__ import annotations

# `X as X`: re-exported, so ``servefit.core.ops.<name>`` keeps working
from servefit.core.op_coeffs import (
    LINEAR_ATTENTION_FLOPS_PER_STATE_ELEMENT as LINEAR_ATTENTION_FLOPS_PER_STATE_ELEMENT,
)
from servefit.core.op_coeffs import MAMBA_FLOPS_PER_STATE_ELEMENT as MAMBA_FLOPS_PER_STATE_ELEMENT
from servefit.core.op_coeffs import AttentionCoeffs as AttentionCoeffs
from servefit.core.op_coeffs import LayerCoeffs as LayerCoeffs
from servefit.core.op_coeffs import ModelCoeffs
from servefit.core.op_coeffs import RoutedCoeffs as RoutedCoeffs
from servefit.core.op_coeffs import StageCoeffs as StageCoeffs
from servefit.core.op_coeffs import StateCoeffs as StateCoeffs
from servefit.core.op_coeffs import model_coeffs as model_coeffs
from servefit.core.op_cost import OpCost, OpKind, StepShape
from servefit.core.op_cost import decode_step as decode_step
from servefit.core.op_cost import prefill_step as prefill_step
from servefit.core.op_cost import total as total
from servefit.core.op_rows import MOE_PERMUTE_PASSES as MOE_PERMUTE_PASSES
from servefit.core.op_rows import attention_row, causal_pairs, routed_row, state_row
from servefit.core.op_rows import expected_experts_touched as expected_experts_touched

_causal_pairs = causal_pairs  # its name before the split (tests reach it by that name)

# Elementwise traffic per layer, in units of (tokens x hidden x activation bytes): two
# RMSNorms (read + write each), two residual adds (read two, write one each) and the
# rotary embedding of q/k. An estimate; these rows are small next to the GEMMs.
ELEMENTWISE_PASSES_PER_LAYER = 10
# vLLM keeps the residual stream next to the hidden states between pipeline stages.
PP_TENSORS_PER_TOKEN = 2
# GEMM activations: each linear reads its input and writes its output once (the MoE token
# permutation's passes are op_rows.MOE_PERMUTE_PASSES).


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
            rows.append(attention_row(coeffs.attention, count, shape, act, label))
        if coeffs.state is not None:
            rows.append(state_row(coeffs.state, count, shape, label))
        if coeffs.routed is not None:  # with DP, the experts run every rank's tokens
            rows.append(routed_row(coeffs.routed, count, tokens * m.dp, hidden, act, label))
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
        if m.dp > 1 and m.ep == 1 and coeffs.routed is not None:
            rows.append(
                OpCost(
                    name=f"{label}: data-parallel all-gather and reduce-scatter",
                    kind=OpKind.COMM,
                    compute_dtype="bf16",
                    # each rank receives the other ranks' tokens and returns their sums
                    comm_bytes=2 * tokens * hidden * act * (m.dp - 1) * count,
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
