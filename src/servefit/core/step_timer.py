"""The roofline of a whole step, compiled once per (model layout, device, profile).

:func:`servefit.core.roofline.step_time` builds every operator row of a step
(:func:`servefit.core.ops.step_ops`) and puts each through the roofline: readable, and the
reference. A serving simulation times hundreds of step shapes of one layout, so
:func:`compile_step_timer` does the same arithmetic without the rows: what does not depend
on the step's shape (each row's divisors, weight bytes, collective latencies) is computed
once, and each step evaluates only the shape-dependent products, in the same order of
floating-point operations as the rows and the roofline do, so every time is bit-identical
to ``step_time``'s (``tests/unit/test_step_timer.py`` holds the two to equality).

Two shortcuts are exact and used throughout: a row field the rows leave at 0.0 adds
nothing (``x + 0.0 == x``), and a row without FLOPs is bandwidth-bound unless it moves
nothing, when both branches add 0.0.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from servefit.core.hardware import GpuSpec
from servefit.core.op_coeffs import LayerCoeffs, ModelCoeffs
from servefit.core.op_cost import StepShape
from servefit.core.op_rows import MOE_PERMUTE_PASSES, causal_pairs, keys_read
from servefit.core.ops import ELEMENTWISE_PASSES_PER_LAYER, PP_TENSORS_PER_TOKEN
from servefit.core.roofline import (
    EfficiencyProfile,
    StepTime,
    link_bandwidth_bytes_per_s,
    peak_flops_per_s,
)


def compile_step_timer(
    m: ModelCoeffs, gpu: GpuSpec, profile: EfficiencyProfile
) -> Callable[[StepShape], StepTime]:
    """``shape -> step_time(m, shape, gpu, profile)``, the same numbers, a few times faster.

    The constants are plain tuples, unpacked per step (no value class: each one would cost
    a CLI start a dataclass build at import):

    - a stage: (its :class:`StageCoeffs`, its layer groups, the LM head's compute divisor);
    - a layer group: (attention, state and routed coefficients, number of layers, linear
      rows, attention / state / routed compute divisors, the routed weights' extra-traffic
      factor, the MoE overhead of the group, the latency of its 2 x layers collectives);
    - a linear row: (params, activation width, weight bytes x layers, compute divisor,
      extra-traffic factor of its weights).

    A compute divisor is peak FLOP/s x efficiency; a weights' extra-traffic factor is
    1 / weight efficiency - 1 (0.0 for 8 bits and more), as the roofline has them."""
    unpublished = profile.unpublished_flops_per_byte
    bandwidth = gpu.memory_bandwidth_bytes_per_s
    memory_div = bandwidth * profile.memory_efficiency
    kv_eff = profile.kv_memory_efficiency
    kv_div = bandwidth * (kv_eff if kv_eff is not None else profile.memory_efficiency)
    intra_div = link_bandwidth_bytes_per_s(gpu, "intra", profile) * profile.interconnect_efficiency
    inter_div = link_bandwidth_bytes_per_s(gpu, "inter", profile) * profile.interconnect_efficiency
    act = m.activation_bytes
    attention_dtype = "bf16" if act >= 2 else "fp32"  # as op_rows.attention_row

    def compute_div(dtype: str, eff: float, is_low_bit: bool) -> float:
        if is_low_bit:
            eff *= profile.low_bit_compute_efficiency
        # peak_flops_per_s: the value roofline's per-device table holds
        return peak_flops_per_s(gpu, dtype, unpublished) * eff

    def weight_factor(is_low_bit: bool) -> float:
        weight_eff = 1.0
        if is_low_bit:
            weight_eff *= profile.low_bit_memory_efficiency
        return 1 / weight_eff - 1

    def group(coeffs: LayerCoeffs, count: int) -> tuple:
        routed = coeffs.routed
        linear = tuple(
            (
                params,
                width,
                wbytes * count,
                compute_div(dtype, profile.gemm_efficiency, low_bit),
                weight_factor(low_bit),
            )
            for dtype, low_bit, wbytes, params, width in coeffs.linear
        )
        return (
            coeffs.attention,
            coeffs.state,
            routed,
            count,
            linear,
            compute_div(attention_dtype, profile.attention_efficiency, False),
            compute_div("fp32", profile.attention_efficiency, False),
            compute_div(routed.compute_dtype, profile.gemm_efficiency, routed.is_low_bit)
            if routed
            else 0.0,
            weight_factor(routed.is_low_bit) if routed else 0.0,
            count * profile.moe_layer_overhead_s,
            profile.collective_latency_s * (2 * count),
        )

    stages = tuple(
        (
            st,
            tuple(group(coeffs, count) for coeffs, count in st.layers),
            compute_div(st.lm_head_dtype, profile.gemm_efficiency, False),
        )
        for st in m.stages
    )
    windows = {c.attention.window for st in m.stages for c, _ in st.layers if c.attention}
    pp_latency_s = profile.collective_latency_s * 1  # one transfer per stage boundary
    hidden = m.hidden_size
    tp, ep, dp = m.tp, m.ep, m.dp

    step_overhead_s, per_seq_overhead_s = profile.step_overhead_s, profile.per_seq_overhead_s
    no_chunks: dict[int | None, list[tuple[float, int]]] = {w: [] for w in windows}

    def timer(shape: StepShape) -> StepTime:
        chunks = shape.prefill_chunks
        num_decodes = len(shape.decode_contexts)
        queries = shape.decode_query_tokens
        # shape.num_tokens and num_seqs (integers), without the properties' generator
        tokens = num_decodes * queries
        for n, _ in chunks:
            tokens += n
        seqs = num_decodes + len(chunks)
        # per attention window: each chunk's (causal pairs, keys read), shared by the groups
        per_window = (
            {w: [(causal_pairs(n, c, w), keys_read(n, c, w)) for n, c in chunks] for w in windows}
            if chunks
            else no_chunks
        )
        compute = memory = comm = 0.0
        overhead = step_overhead_s + per_seq_overhead_s * seqs
        for st, groups, lm_head_div in stages:
            if st.is_first:  # embedding lookup: no FLOPs
                memory += (tokens * st.embedding_row_bytes + tokens * hidden * act) / memory_div
            for (
                a,
                state,
                r,
                count,
                linear,
                attention_div,
                state_div,
                routed_div,
                routed_weight_factor,
                routed_overhead_s,
                latency_s,
            ) in groups:
                for params, width, weight_bytes, div, factor in linear:
                    flops = 2 * tokens * params * count
                    act_bytes = tokens * width * act * count / 2
                    moved = weight_bytes + act_bytes + act_bytes
                    if factor:
                        moved = moved + weight_bytes * factor
                    op_compute = flops / div if flops else 0.0
                    op_memory = moved / memory_div
                    if op_compute >= op_memory:
                        compute += op_compute
                    else:
                        memory += op_memory
                if a is not None:
                    decode_keys = shape.decode_keys(a.window)
                    flops = 0.0
                    keys = 0.0
                    flops += decode_keys * a.decode_flops_per_pair * queries
                    keys += decode_keys
                    for pairs, read in per_window[a.window]:
                        flops += pairs * a.flops_per_pair
                        keys += read
                        flops += a.mla_expand_flops_per_key * read
                    flops = flops * count
                    moved = keys * a.kv_bytes_per_token * count + (
                        tokens * a.kv_bytes_per_token * count
                    )
                    op_compute = flops / attention_div if flops else 0.0
                    op_memory = moved / kv_div
                    if op_compute >= op_memory:
                        compute += op_compute
                    else:
                        memory += op_memory
                if state is not None:
                    state_bytes = state.state_bytes_per_seq * seqs * count
                    flops = state.flops_per_token * tokens * count
                    op_compute = flops / state_div if flops else 0.0
                    op_memory = (state_bytes + state_bytes) / memory_div
                    if op_compute >= op_memory:
                        compute += op_compute
                    else:
                        memory += op_memory
                if r is not None:
                    moe_tokens = tokens * dp  # every DP rank's tokens (ops.step_ops)
                    touched = 0.0  # op_rows.expected_experts_touched, inlined
                    if moe_tokens > 0:
                        touched = r.num_experts * (
                            1.0 - (1.0 - r.top_k / r.num_experts) ** moe_tokens
                        )
                    touched = touched * r.num_local_experts / r.num_experts
                    local_tokens = moe_tokens * r.top_k * r.num_local_experts / r.num_experts
                    flops = 2 * local_tokens * r.params_per_expert * count
                    weight_bytes = touched * r.bytes_per_expert * count
                    moved = (
                        weight_bytes
                        + MOE_PERMUTE_PASSES * local_tokens * hidden * act * count
                        + local_tokens * hidden * act * count
                    )
                    if routed_weight_factor:
                        moved = moved + weight_bytes * routed_weight_factor
                    op_compute = flops / routed_div if flops else 0.0
                    op_memory = moved / memory_div
                    overhead += routed_overhead_s
                    if op_compute >= op_memory:
                        compute += op_compute
                    else:
                        memory += op_memory
                # norms, residuals, rotary: no FLOPs
                norm_bytes = ELEMENTWISE_PASSES_PER_LAYER / 2 * tokens * hidden * act * count
                memory += (norm_bytes + norm_bytes) / memory_div
                if tp > 1:
                    comm_bytes = 2 * tokens * hidden * act * 2 * (tp - 1) / tp * count
                    comm += latency_s + comm_bytes / intra_div
                if ep > 1 and r is not None:
                    comm_bytes = 2 * tokens * r.top_k * hidden * act * (ep - 1) / ep * count
                    comm += latency_s + comm_bytes / intra_div
                if dp > 1 and ep == 1 and r is not None:
                    comm_bytes = 2 * tokens * hidden * act * (dp - 1) * count
                    comm += latency_s + comm_bytes / intra_div
            if st.is_last:
                sampled = shape.num_sampled
                flops = 2 * sampled * st.lm_head_params
                moved = (
                    st.lm_head_bytes
                    + sampled * hidden * act
                    + sampled * st.lm_head_params / hidden * 4
                )
                op_compute = flops / lm_head_div if flops else 0.0
                op_memory = moved / memory_div
                if op_compute >= op_memory:
                    compute += op_compute
                else:
                    memory += op_memory
            else:
                comm_bytes = PP_TENSORS_PER_TOKEN * tokens * hidden * act
                comm += pp_latency_s + comm_bytes / inter_div
        return StepTime(
            time_s=compute + memory + comm + overhead,
            compute_s=compute,
            memory_s=memory,
            comm_s=comm,
            overhead_s=overhead,
        )

    return timer


@lru_cache(maxsize=16)
def make_timer(m: ModelCoeffs, gpu: GpuSpec, profile: EfficiencyProfile):
    """The step timer of one model layout on one device, shared by every simulation of it
    (a plan's load and its curve points, a search's bisection): a step shape seen before is
    not timed again (about half of a plan's steps repeat across its curve). The times are
    ``step_time``'s, bit for bit, computed without building the rows (:mod:`.step_timer`)."""
    return lru_cache(maxsize=8192)(compile_step_timer(m, gpu, profile))
