"""``plan_performance``: how fast a workload runs on a capacity plan, and what bounds it.

The steps, one named call each:

1. per-layer cost coefficients of the model on one GPU of the layout (:mod:`.ops`);
2. a step timer: operator rows through the roofline with the efficiency profile
   (:mod:`.roofline`);
3. the single-request numbers: cold TTFT, TTFT with a cached prefix, time per output token
   at batch 1, and the bytes one decode step reads (the "active bytes per token");
4. the workload under load: the continuous-batching simulation (:mod:`.serving`), which
   runs agent sessions when the workload has turns and splits the GPU time between
   prefill and decode (what :func:`servefit.core.cost.cost_inputs_for` prices);
5. the latency-throughput curve over concurrency (sessions too, when there are turns);
6. one agent session alone, turn by turn, when the workload has turns (:mod:`.agent`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from servefit.core.data_parallel import all_ranks, rank_workload
from servefit.core.engine_scheduling import admission_rule
from servefit.core.error_band import PredictionBands
from servefit.core.hardware import GpuSpec
from servefit.core.kv_cache import blocks_per_request
from servefit.core.ops import (
    ModelCoeffs,
    OpKind,
    StepShape,
    decode_step,
    model_coeffs,
    prefill_step,
    step_ops,
    total,
)
from servefit.core.plan import CapacityPlan
from servefit.core.roofline import (
    Bound,
    EfficiencyProfile,
    kernel_dtype,
    peak_flops_per_s,
)
from servefit.core.serving import LoadResult, ServingLimits, simulate
from servefit.core.speculative import Speculation
from servefit.core.speculative_timing import SpeculationGain, speculation_gain, step_timer
from servefit.core.step_timer import make_timer as make_timer
from servefit.core.turn_reuse import history_block_tokens
from servefit.core.workload import Slo, Workload
from servefit.core.workload import fixed_workload as fixed_workload
from servefit.errors import InvalidArgumentError

if TYPE_CHECKING:
    from servefit.core.agent import AgentSession

CURVE_MAX_POINTS = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseEstimate:
    """One isolated phase (a prefill, or one decode step) with what bounds it."""

    time_s: float
    bound: Bound
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    flops: float
    bytes_read: float  # weights + KV/state + activations
    weight_bytes: float  # of which weights


@dataclass(frozen=True, slots=True, kw_only=True)
class PerformancePlan:
    """The predicted performance of a workload on a plan: the four numbers, bounds, the curve."""

    workload: Workload
    engine: str
    profile: EfficiencyProfile
    ttft_cold_s: float  # one request alone, nothing cached
    ttft_cached_s: float | None  # ... with the shared prefix cached
    prefill: PhaseEstimate  # the cold prefill of one prompt
    decode: PhaseEstimate  # one decode step at batch 1, mid-generation context
    tpot_batch1_s: float
    decode_bytes_per_token: float  # bytes one batch-1 decode step reads, all GPUs of a stage
    weight_bytes_per_token: float  # of which weights
    load: LoadResult  # the workload as asked
    curve: tuple[LoadResult, ...]  # concurrency 1..N
    agent: AgentSession | None  # when the workload has turns
    kernel_dtypes: tuple[str, ...]
    assumptions: tuple[str, ...]
    # the fidelity corpus's measured error of each figure for this deployment's group (the
    # application layer attaches them: the data is not the model's)
    bands: PredictionBands = field(default_factory=PredictionBands)
    speculation: SpeculationGain | None = None  # what --speculative-config buys, when given

    @property
    def ttft_s(self) -> float:
        return self.load.ttft_s.mean

    @property
    def tpot_s(self) -> float:
        return self.load.tpot_s.mean if self.load.tpot_s.mean else self.tpot_batch1_s

    @property
    def decode_tok_per_s(self) -> float:
        return 1.0 / self.tpot_s

    @property
    def output_throughput_tok_per_s(self) -> float:
        return self.load.output_throughput_tok_per_s

    @property
    def bound(self) -> Bound:
        return self.load.bound

    @property
    def offered_rate_per_s(self) -> float | None:
        """The open-loop request rate asked for (None: a closed loop, or agent sessions)."""
        w = self.workload
        return w.request_rate_per_s if w.turns == 1 else None

    @property
    def sustainable_rate_per_s(self) -> float:
        """The most requests a second this server completes: the peak of its closed-loop
        curve (and of the load asked for), the rate an open loop can offer without a queue
        that grows."""
        return max(r.request_throughput_per_s for r in (*self.curve, self.load))

    @property
    def queue_growth_per_s(self) -> float | None:
        """Requests a second the queue grows by when more are offered than the server can
        complete (:attr:`sustainable_rate_per_s`); 0 when it keeps up, None for a closed
        loop. A queue that grows has no steady state: its TTFT rises for as long as the load
        lasts, and the simulated one is that of the simulated requests only."""
        offered = self.offered_rate_per_s
        if offered is None:
            return None
        return max(0.0, offered - self.sustainable_rate_per_s)


def _phase(
    m: ModelCoeffs, shape: StepShape, gpu: GpuSpec, profile: EfficiencyProfile
) -> PhaseEstimate:
    st = make_timer(m, gpu, profile)(shape)
    t = total(op for stage in range(m.pp) for op in step_ops(m, shape, stage))
    return PhaseEstimate(
        time_s=st.time_s,
        bound=st.bound,
        compute_s=st.compute_s,
        memory_s=st.memory_s,
        comm_s=st.comm_s,
        overhead_s=st.overhead_s,
        flops=t.flops,
        bytes_read=t.weight_bytes + t.kv_read_bytes + t.activation_in_bytes,
        weight_bytes=t.weight_bytes,
    )


def prefill_time_s(
    m: ModelCoeffs,
    gpu: GpuSpec,
    profile: EfficiencyProfile,
    new_tokens: int,
    cached_tokens: int,
    chunk_tokens: int,
) -> float:
    """A prompt alone on the server: chunks of ``chunk_tokens`` one after another."""
    timer = make_timer(m, gpu, profile)
    seconds = 0.0
    done = 0
    while done < new_tokens:
        n = min(chunk_tokens, new_tokens - done)
        shape = StepShape(
            prefill_chunks=((n, cached_tokens + done),),
            num_finishing_prefills=1 if done + n >= new_tokens else 0,
        )
        seconds += timer(shape).time_s
        done += n
    return seconds


def serving_limits(plan: CapacityPlan) -> ServingLimits:
    r = plan.settings
    block = plan.layout.min_block_size if plan.layout.groups else 16
    return ServingLimits(
        max_num_seqs=r.max_num_seqs,
        max_num_batched_tokens=r.max_num_batched_tokens,
        num_kv_blocks=plan.num_blocks,
        block_size=block,
        enable_prefix_caching=r.enable_prefix_caching,
        history_block_tokens=history_block_tokens(
            block_tokens=block,
            enable_prefix_caching=r.enable_prefix_caching,
            is_hybrid=plan.model.is_hybrid,
            has_hybrid_prefix_caching=plan.behaviour.has_hybrid_prefix_caching,
        ),
        reserved_output_fraction=admission_rule(plan.engine).reserved_output_fraction,
    )


@lru_cache(maxsize=16)
def blocks_counter(plan: CapacityPlan):
    layout = plan.layout
    mnbt = plan.settings.max_num_batched_tokens

    @lru_cache(maxsize=65536)
    def blocks_for(length: int) -> int:
        if not layout.groups or length <= 0:
            return 0
        return blocks_per_request(layout, max(length, 1), mnbt)

    return blocks_for


def curve_concurrencies(top: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to ``top`` (and ``top`` itself)."""
    points: list[int] = []
    c = 1
    while c < top and len(points) < CURVE_MAX_POINTS - 1:
        points.append(c)
        c *= 2
    points.append(top)
    return tuple(points)


def simulate_load(
    plan: CapacityPlan,
    m: ModelCoeffs,
    profile: EfficiencyProfile,
    workload: Workload,
    slo: Slo | None = None,
    speculation: Speculation | None = None,
) -> LoadResult:
    return simulate(
        workload,
        serving_limits(plan),
        step_timer(m, plan.gpu, profile, speculation, plan.settings.kv_cache_dtype),
        blocks_counter(plan),
        request_overhead_s=profile.request_overhead_s,
        slo=slo,
    )


def plan_performance(
    plan: CapacityPlan,
    workload: Workload,
    profile: EfficiencyProfile,
    *,
    slo: Slo | None = None,
    curve_max_concurrency: int | None = None,
    ep: int = 1,
    speculation: Speculation | None = None,
) -> PerformancePlan:
    """Predict TTFT, TPOT, decode rate and throughput of ``workload`` on ``plan``
    (``speculation``: the deployment drafts and verifies, :func:`speculative_timer`)."""
    if not plan.starts:
        raise InvalidArgumentError(
            f"{plan.model.name} does not start on {plan.gpu.name} with these settings; "
            "performance needs a layout that fits (see the capacity verdict)"
        )
    spec, gpu, r = plan.model, plan.gpu, plan.settings
    dp = r.data_parallel_size
    m = model_coeffs(
        spec,
        tp=r.tensor_parallel_size,
        pp=r.pipeline_parallel_size,
        ep=ep,
        kv_cache_dtype=r.kv_cache_dtype,
        dp=dp,
    )
    whole, workload = workload, rank_workload(workload, dp)  # one DP rank's share
    in_len, out_len = workload.input_len.mean, workload.output_len.mean
    longest = workload.longest_request_tokens()
    if longest > r.max_model_len:
        raise InvalidArgumentError(
            f"requests of up to {longest:,} tokens (input + output"
            + (", all turns" if workload.turns > 1 else "")
            + f") exceed --max-model-len {r.max_model_len:,}: vLLM rejects them. Raise "
            "--max-model-len or shorten --input-len/--output-len"
        )
    chunk = r.max_num_batched_tokens
    prefill_cold = prefill_time_s(m, gpu, profile, in_len, 0, chunk)
    ttft_cold = prefill_cold + profile.request_overhead_s
    ttft_cached = None
    if workload.prefix_len and r.enable_prefix_caching:
        block = serving_limits(plan).block_size
        cached = (workload.prefix_len // block) * block
        ttft_cached = (
            prefill_time_s(m, gpu, profile, in_len - cached, cached, chunk)
            + profile.request_overhead_s
        )
    mid_context = in_len + out_len // 2
    decode = _phase(m, decode_step(1, mid_context), gpu, profile)
    timer = step_timer(m, gpu, profile, speculation, r.kv_cache_dtype)
    if speculation is not None:  # one token's share of a speculative step at batch 1
        decode = replace(decode, time_s=timer(decode_step(1, mid_context)).time_s)
    # the bound of its first chunk, the time of the whole (chunked) prompt
    prefill = replace(
        _phase(m, prefill_step(min(in_len, chunk)), gpu, profile), time_s=prefill_cold
    )

    agent = None
    if workload.turns > 1:
        # imported here: a plan without turns does not build the session table's classes
        from servefit.core.agent import plan_agent_session

        agent = plan_agent_session(
            turns=workload.turns,
            prefix_tokens=workload.prefix_len,
            message_tokens=in_len - workload.prefix_len,
            output_tokens=out_len,
            reuse_block_tokens=serving_limits(plan).block_size if r.enable_prefix_caching else 0,
            prefill_s=lambda new, cached: prefill_time_s(m, gpu, profile, new, cached, chunk),
            decode_s=lambda n, context: n * timer(decode_step(1, context + n // 2)).time_s,
            is_hybrid=spec.is_hybrid,
            has_hybrid_prefix_caching=plan.behaviour.has_hybrid_prefix_caching,
            request_overhead_s=profile.request_overhead_s,
        )
    load = simulate_load(plan, m, profile, workload, slo, speculation)
    top = curve_max_concurrency or _default_curve_top(plan, workload)
    curve = tuple(
        load
        if workload.is_closed_loop and c == workload.concurrency
        else simulate_load(plan, m, profile, _at_concurrency(workload, c), slo, speculation)
        for c in curve_concurrencies(top)
    )
    if dp > 1:  # the curve's points are one rank's concurrency, x dp for the deployment
        curve = tuple(
            all_ranks(p, _at_concurrency(whole, (p.concurrency or 1) * dp), dp) for p in curve
        )
        load = all_ranks(load, whole, dp)
    gain = None
    if speculation is not None:  # the same plan without it, and the best k
        plain = all_ranks(simulate_load(plan, m, profile, workload, slo), whole, dp)
        gain = speculation_gain(
            m,
            gpu,
            profile,
            speculation,
            r.kv_cache_dtype,
            context=mid_context,
            mean_batch=load.mean_batch,
            without=(
                make_timer(m, gpu, profile)(decode_step(1, mid_context)).time_s,
                plain.tpot_s.mean,
                plain.output_throughput_tok_per_s,
            ),
        )
    asked = sorted(
        {op.compute_dtype for op in step_ops(m, decode_step(1, 1), 0) if op.kind is OpKind.GEMM}
    )
    dtypes = sorted({kernel_dtype(gpu, d) for d in asked})
    assumptions = (
        *missing_rate_notes(gpu, asked, profile.unpublished_flops_per_byte),
        *profile.describe(),
        *m.assumptions,
        "continuous batching with chunked prefill as vLLM V1 schedules it "
        f"(max_num_batched_tokens {chunk}, max_num_seqs {r.max_num_seqs})",
        admission_rule(plan.engine).describe,
        *(
            (
                f"{dp} data-parallel ranks, each of {r.gpus_per_rank} GPU(s), share the load "
                "evenly: throughputs are all ranks', latencies the busiest rank's",
            )
            if dp > 1
            else ()
        ),
        *((speculation.describe(),) if speculation is not None else ()),
        *(
            ("pipeline stages run one after another for a batch (no micro-batch overlap)",)
            if m.pp > 1
            else ()
        ),
    )
    return PerformancePlan(
        workload=whole,
        engine=profile.engine,
        profile=profile,
        ttft_cold_s=ttft_cold,
        ttft_cached_s=ttft_cached,
        prefill=prefill,
        decode=decode,
        tpot_batch1_s=decode.time_s,
        decode_bytes_per_token=decode.bytes_read,
        weight_bytes_per_token=decode.weight_bytes,
        load=load,
        curve=curve,
        agent=agent,
        kernel_dtypes=tuple(dtypes),
        assumptions=assumptions,
        speculation=gain,
    )


def _default_curve_top(plan: CapacityPlan, workload: Workload) -> int:
    """Up to twice the requests the KV cache holds at the workload's length (to show the
    saturation), within max_num_seqs."""
    seq_len = workload.input_len.mean + workload.output_len.mean
    per_request = blocks_counter(plan)(seq_len)
    fits = plan.num_blocks // per_request if per_request else plan.settings.max_num_seqs
    top = max(workload.concurrency or 1, min(plan.settings.max_num_seqs, 2 * max(fits, 1)))
    return max(1, min(top, 512))


def _at_concurrency(w: Workload, concurrency: int) -> Workload:
    return Workload(
        input_len=w.input_len,
        output_len=w.output_len,
        concurrency=concurrency,
        request_rate_per_s=None,
        num_requests=None,
        prefix_len=w.prefix_len,
        turns=w.turns,
        seed=w.seed,
    )


def missing_rate_notes(
    gpu: GpuSpec, dtypes: list[str], unpublished_flops_per_byte: float
) -> tuple[str, ...]:
    """Say which matmul dtypes the catalog has no published rate for on ``gpu`` and what
    stands in (another dtype's rate, or the class's FLOPs per byte of bandwidth)."""
    notes = []
    for d in dtypes:
        real = kernel_dtype(gpu, d)
        if real == d:
            continue
        if real == "unknown":
            stand_in = (
                f"its bandwidth x {unpublished_flops_per_byte:g} FLOP/byte "
                f"({gpu.memory_bandwidth_bytes_per_s * unpublished_flops_per_byte / 1e12:,.0f} "
                "TFLOPS, the class's fitted figure)"
            )
        else:
            rate = peak_flops_per_s(gpu, real, unpublished_flops_per_byte)
            stand_in = f"its {real} rate ({rate / 1e12:,.0f} TFLOPS)"
        notes.append(
            f"{gpu.name}'s vendor publishes no {d} tensor rate: {d} matmuls are timed at "
            f"{stand_in}; the speed figures are only as good as that stand-in"
        )
    return tuple(notes)
