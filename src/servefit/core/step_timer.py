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
from dataclasses import dataclass

from servefit.core.hardware import GpuSpec
from servefit.core.op_coeffs import LayerCoeffs, ModelCoeffs, StageCoeffs
from servefit.core.op_cost import StepShape
from servefit.core.op_rows import MOE_PERMUTE_PASSES, causal_pairs, keys_read
from servefit.core.ops import ELEMENTWISE_PASSES_PER_LAYER, PP_TENSORS_PER_TOKEN
from servefit.core.roofline import (
    EfficiencyProfile,
    StepTime,
    link_bandwidth_bytes_per_s,
    peak_flops_per_s,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Linear:
    """A projection row's constants: params, width, weight bytes x layers, its divisors."""

    params: float
    width: float
    weight_bytes: float  # wbytes x count, as the row computes it
    compute_div: float  # peak x efficiency
    weight_factor: float  # 1 / weight efficiency - 1 (0.0 above 8 bits)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Group:
    """One group of identical layers in a stage: its coefficients and the divisors."""

    coeffs: LayerCoeffs
    count: int
    linear: tuple[_Linear, ...]
    attention_div: float  # attention and state rows: peak x attention efficiency
    state_div: float
    routed_div: float
    routed_weight_factor: float
    routed_overhead_s: float  # MoE layers x moe_layer_overhead_s
    tp_latency_s: float  # collectives x latency of the TP all-reduce
    ep_latency_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class _Stage:
    stage: StageCoeffs
    groups: tuple[_Group, ...]
    lm_head_div: float
    pp_latency_s: float


def compile_step_timer(
    m: ModelCoeffs, gpu: GpuSpec, profile: EfficiencyProfile
) -> Callable[[StepShape], StepTime]:
    """``shape -> step_time(m, shape, gpu, profile)``, the same numbers, a few times faster."""
    unpublished = profile.unpublished_flops_per_byte

    def peak(dtype: str) -> float:  # the value roofline's per-device table holds
        return peak_flops_per_s(gpu, dtype, unpublished)

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
        return peak(dtype) * eff

    def weight_factor(is_low_bit: bool) -> float:
        weight_eff = 1.0
        if is_low_bit:
            weight_eff *= profile.low_bit_memory_efficiency
        return 1 / weight_eff - 1

    def group(coeffs: LayerCoeffs, count: int) -> _Group:
        routed = coeffs.routed
        return _Group(
            coeffs=coeffs,
            count=count,
            linear=tuple(
                _Linear(
                    params=params,
                    width=width,
                    weight_bytes=wbytes * count,
                    compute_div=compute_div(dtype, profile.gemm_efficiency, low_bit),
                    weight_factor=weight_factor(low_bit),
                )
                for dtype, low_bit, wbytes, params, width in coeffs.linear
            ),
            attention_div=compute_div(attention_dtype, profile.attention_efficiency, False),
            state_div=compute_div("fp32", profile.attention_efficiency, False),
            routed_div=(
                compute_div(routed.compute_dtype, profile.gemm_efficiency, routed.is_low_bit)
                if routed
                else 0.0
            ),
            routed_weight_factor=weight_factor(routed.is_low_bit) if routed else 0.0,
            routed_overhead_s=count * profile.moe_layer_overhead_s,
            tp_latency_s=profile.collective_latency_s * (2 * count),
            ep_latency_s=profile.collective_latency_s * (2 * count),
        )

    stages = tuple(
        _Stage(
            stage=st,
            groups=tuple(group(coeffs, count) for coeffs, count in st.layers),
            lm_head_div=compute_div(st.lm_head_dtype, profile.gemm_efficiency, False),
            pp_latency_s=profile.collective_latency_s * 1,
        )
        for st in m.stages
    )
    windows = {
        g.coeffs.attention.window
        for s in stages
        for g in s.groups
        if g.coeffs.attention is not None
    }
    hidden = m.hidden_size
    tp, ep = m.tp, m.ep

    def timer(shape: StepShape) -> StepTime:
        tokens = shape.num_tokens
        seqs = shape.num_seqs
        chunks = shape.prefill_chunks
        # per attention window: each chunk's (causal pairs, keys read), shared by the groups
        per_window = {
            w: [(causal_pairs(n, c, w), keys_read(n, c, w)) for n, c in chunks] for w in windows
        }
        compute = memory = comm = 0.0
        overhead = profile.step_overhead_s + profile.per_seq_overhead_s * seqs
        for s in stages:
            st = s.stage
            if st.is_first:  # embedding lookup: no FLOPs
                memory += (tokens * st.embedding_row_bytes + tokens * hidden * act) / memory_div
            for g in s.groups:
                coeffs, count = g.coeffs, g.count
                for lin in g.linear:
                    flops = 2 * tokens * lin.params * count
                    act_bytes = tokens * lin.width * act * count / 2
                    moved = lin.weight_bytes + act_bytes + act_bytes
                    if lin.weight_factor:
                        moved = moved + lin.weight_bytes * lin.weight_factor
                    op_compute = flops / lin.compute_div if flops else 0.0
                    op_memory = moved / memory_div
                    if op_compute >= op_memory:
                        compute += op_compute
                    else:
                        memory += op_memory
                a = coeffs.attention
                if a is not None:
                    decode_keys = shape.decode_keys(a.window)
                    flops = 0.0
                    keys = 0.0
                    flops += decode_keys * a.decode_flops_per_pair
                    keys += decode_keys
                    for pairs, read in per_window[a.window]:
                        flops += pairs * a.flops_per_pair
                        keys += read
                        flops += a.mla_expand_flops_per_key * read
                    flops = flops * count
                    moved = keys * a.kv_bytes_per_token * count + (
                        tokens * a.kv_bytes_per_token * count
                    )
                    op_compute = flops / g.attention_div if flops else 0.0
                    op_memory = moved / kv_div
                    if op_compute >= op_memory:
                        compute += op_compute
                    else:
                        memory += op_memory
                state = coeffs.state
                if state is not None:
                    state_bytes = state.state_bytes_per_seq * seqs * count
                    flops = state.flops_per_token * tokens * count
                    op_compute = flops / g.state_div if flops else 0.0
                    op_memory = (state_bytes + state_bytes) / memory_div
                    if op_compute >= op_memory:
                        compute += op_compute
                    else:
                        memory += op_memory
                r = coeffs.routed
                if r is not None:
                    touched = 0.0  # op_rows.expected_experts_touched, inlined
                    if tokens > 0:
                        touched = r.num_experts * (1.0 - (1.0 - r.top_k / r.num_experts) ** tokens)
                    touched = touched * r.num_local_experts / r.num_experts
                    local_tokens = tokens * r.top_k * r.num_local_experts / r.num_experts
                    flops = 2 * local_tokens * r.params_per_expert * count
                    weight_bytes = touched * r.bytes_per_expert * count
                    moved = (
                        weight_bytes
                        + MOE_PERMUTE_PASSES * local_tokens * hidden * act * count
                        + local_tokens * hidden * act * count
                    )
                    if g.routed_weight_factor:
                        moved = moved + weight_bytes * g.routed_weight_factor
                    op_compute = flops / g.routed_div if flops else 0.0
                    op_memory = moved / memory_div
                    overhead += g.routed_overhead_s
                    if op_compute >= op_memory:
                        compute += op_compute
                    else:
                        memory += op_memory
                # norms, residuals, rotary: no FLOPs
                norm_bytes = ELEMENTWISE_PASSES_PER_LAYER / 2 * tokens * hidden * act * count
                memory += (norm_bytes + norm_bytes) / memory_div
                if tp > 1:
                    comm_bytes = 2 * tokens * hidden * act * 2 * (tp - 1) / tp * count
                    comm += g.tp_latency_s + comm_bytes / intra_div
                if ep > 1 and r is not None:
                    comm_bytes = 2 * tokens * r.top_k * hidden * act * (ep - 1) / ep * count
                    comm += g.ep_latency_s + comm_bytes / intra_div
            if st.is_last:
                sampled = shape.num_sampled
                flops = 2 * sampled * st.lm_head_params
                moved = (
                    st.lm_head_bytes
                    + sampled * hidden * act
                    + sampled * st.lm_head_params / hidden * 4
                )
                op_compute = flops / s.lm_head_div if flops else 0.0
                op_memory = moved / memory_div
                if op_compute >= op_memory:
                    compute += op_compute
                else:
                    memory += op_memory
            else:
                comm_bytes = PP_TENSORS_PER_TOKEN * tokens * hidden * act
                comm += s.pp_latency_s + comm_bytes / inter_div
        return StepTime(
            time_s=compute + memory + comm + overhead,
            compute_s=compute,
            memory_s=memory,
            comm_s=comm,
            overhead_s=overhead,
        )

    return timer
