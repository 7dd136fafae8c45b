"""JSON sections for performance, scaling and cost (``plan``, ``compare`` and ``cost``
``--json``). Seconds, tokens per second and dollars, as named."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from servefit import __version__
from servefit.adapters.document import FrozenDoc

if TYPE_CHECKING:  # the converters only read attributes: plan --json stays quick to start
    from servefit.app.compare import Comparison
    from servefit.app.cost import CostOutcome
    from servefit.app.scaling import ScalingOutcome
    from servefit.core.cost import CostEstimate
    from servefit.core.perf import PerformancePlan
    from servefit.core.scaling import LayoutResult
    from servefit.core.serving import LoadResult, Stat

SCHEMA_VERSION = 1


class StatSection(FrozenDoc):
    mean: float
    p50: float
    p90: float
    p99: float


class TurnLoadSection(FrozenDoc):
    turn: int
    num_requests: int
    mean_input_len: float
    mean_cached_tokens: float
    ttft_s: StatSection
    e2e_s: StatSection


class LoadSection(FrozenDoc):
    concurrency: int | None
    request_rate_per_s: float | None
    num_requests: int
    ttft_s: StatSection
    tpot_s: StatSection
    e2e_s: StatSection
    decode_tok_per_s: float  # per request
    output_throughput_tok_per_s: float
    total_throughput_tok_per_s: float
    request_throughput_per_s: float
    goodput_per_s: float | None
    mean_batch: float
    num_preemptions: int
    kv_blocked_fraction: float
    bound: str
    # GPU time by phase (defaults: documents written before these fields)
    busy_s: float | None = None
    prefill_gpu_s: float | None = None
    decode_gpu_s: float | None = None
    prefill_share: float | None = None
    num_input_tokens: int | None = None
    num_cached_tokens: int | None = None
    num_output_tokens: int | None = None
    # agent sessions (turns > 1); one turn: every request is a session
    turns: int = 1
    num_sessions: int | None = None
    session_throughput_per_s: float | None = None
    session_e2e_s: StatSection | None = None
    by_turn: list[TurnLoadSection] = Field(default_factory=list)


class AgentTurnSection(FrozenDoc):
    turn: int
    prompt_tokens: int
    cached_tokens: int
    ttft_cold_s: float
    ttft_cached_s: float
    decode_s: float


class AgentSection(FrozenDoc):
    turns: list[AgentTurnSection]
    total_ttft_cold_s: float
    total_ttft_cached_s: float
    gpu_time_saved_s: float
    total_decode_s: float
    reuse_block_tokens: int
    notes: list[str]


class PerformanceSection(FrozenDoc):
    engine: str
    efficiency_profile: str
    workload: str
    ttft_s: float  # mean TTFT under the workload's load
    tpot_s: float  # mean time per output token under load
    decode_tok_per_s: float  # per request, under load
    output_throughput_tok_per_s: float  # aggregate, under load
    total_throughput_tok_per_s: float
    request_throughput_per_s: float
    bound: str
    ttft_cold_s: float  # one request alone
    ttft_cached_prefix_s: float | None
    tpot_batch1_s: float
    prefill_bound: str
    decode_bound: str
    decode_bytes_per_token: float  # one batch-1 decode step, bytes read per GPU
    weight_bytes_per_token: float
    kernel_dtypes: list[str]
    load: LoadSection
    curve: list[LoadSection]
    agent: AgentSection | None
    assumptions: list[str]
    session_throughput_per_s: float | None = None  # agent sessions/s under load


def _stat(s: Stat) -> StatSection:
    return StatSection(mean=s.mean, p50=s.p50, p90=s.p90, p99=s.p99)


def load_section(r: LoadResult) -> LoadSection:
    return LoadSection(
        concurrency=r.concurrency,
        request_rate_per_s=r.request_rate_per_s,
        num_requests=r.num_requests,
        ttft_s=_stat(r.ttft_s),
        tpot_s=_stat(r.tpot_s),
        e2e_s=_stat(r.e2e_s),
        decode_tok_per_s=r.decode_tok_per_s,
        output_throughput_tok_per_s=r.output_throughput_tok_per_s,
        total_throughput_tok_per_s=r.total_throughput_tok_per_s,
        request_throughput_per_s=r.request_throughput_per_s,
        goodput_per_s=r.goodput_per_s,
        mean_batch=r.mean_batch,
        num_preemptions=r.num_preemptions,
        kv_blocked_fraction=r.kv_blocked_fraction,
        bound=r.bound.value,
        busy_s=r.busy_s,
        prefill_gpu_s=r.prefill_gpu_s,
        decode_gpu_s=r.decode_gpu_s,
        prefill_share=r.prefill_share,
        num_input_tokens=r.num_input_tokens,
        num_cached_tokens=r.num_cached_tokens,
        num_output_tokens=r.num_output_tokens,
        turns=r.turns,
        num_sessions=r.num_sessions,
        session_throughput_per_s=r.session_throughput_per_s,
        session_e2e_s=_stat(r.session_e2e_s),
        by_turn=[
            TurnLoadSection(
                turn=t.turn,
                num_requests=t.num_requests,
                mean_input_len=t.mean_input_len,
                mean_cached_tokens=t.mean_cached_tokens,
                ttft_s=_stat(t.ttft_s),
                e2e_s=_stat(t.e2e_s),
            )
            for t in r.by_turn
        ],
    )


def performance_section(p: PerformancePlan) -> PerformanceSection:
    agent = None
    if p.agent is not None:
        a = p.agent
        agent = AgentSection(
            turns=[
                AgentTurnSection(
                    turn=t.turn,
                    prompt_tokens=t.prompt_tokens,
                    cached_tokens=t.cached_tokens,
                    ttft_cold_s=t.ttft_cold_s,
                    ttft_cached_s=t.ttft_cached_s,
                    decode_s=t.decode_s,
                )
                for t in a.turns
            ],
            total_ttft_cold_s=a.total_ttft_cold_s,
            total_ttft_cached_s=a.total_ttft_cached_s,
            gpu_time_saved_s=a.gpu_time_saved_s,
            total_decode_s=a.total_decode_s,
            reuse_block_tokens=a.prefix_reuse_block_tokens,
            notes=list(a.notes),
        )
    return PerformanceSection(
        engine=p.engine,
        efficiency_profile=p.profile.label,
        workload=p.workload.describe(),
        ttft_s=p.ttft_s,
        tpot_s=p.tpot_s,
        decode_tok_per_s=p.decode_tok_per_s,
        output_throughput_tok_per_s=p.output_throughput_tok_per_s,
        total_throughput_tok_per_s=p.load.total_throughput_tok_per_s,
        request_throughput_per_s=p.load.request_throughput_per_s,
        bound=p.bound.value,
        ttft_cold_s=p.ttft_cold_s,
        ttft_cached_prefix_s=p.ttft_cached_s,
        tpot_batch1_s=p.tpot_batch1_s,
        prefill_bound=p.prefill.bound.value,
        decode_bound=p.decode.bound.value,
        decode_bytes_per_token=p.decode_bytes_per_token,
        weight_bytes_per_token=p.weight_bytes_per_token,
        kernel_dtypes=list(p.kernel_dtypes),
        load=load_section(p.load),
        curve=[load_section(c) for c in p.curve],
        agent=agent,
        assumptions=list(p.assumptions),
        session_throughput_per_s=p.load.session_throughput_per_s,
    )


class LayoutSection(FrozenDoc):
    layout: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    expert_parallel: bool
    fits: bool
    output_throughput_tok_per_s: float
    tpot_s: float | None
    ttft_s: float | None
    problem: str


class ScalingSection(FrozenDoc):
    num_gpus: int
    gpus_per_node: int
    objective: str
    layouts: list[LayoutSection]
    best: str | None
    commands: list[str]


def layout_section(r: LayoutResult) -> LayoutSection:
    return LayoutSection(
        layout=r.layout.label,
        tensor_parallel_size=r.layout.tp,
        pipeline_parallel_size=r.layout.pp,
        data_parallel_size=r.layout.dp,
        expert_parallel=r.layout.ep,
        fits=r.fits,
        output_throughput_tok_per_s=r.output_throughput_tok_per_s,
        tpot_s=r.load.tpot_s.mean if r.load else None,
        ttft_s=r.load.ttft_s.mean if r.load else None,
        problem=r.problem,
    )


class ScenarioSection(FrozenDoc):
    label: str
    requests_per_day: float
    replicas: int
    gpu_hours_per_day: float
    self_hosted_usd_per_day: float
    api_usd_per_day: float | None


class CostSection(FrozenDoc):
    usd_per_gpu_hour: float
    price_source: str
    usd_per_hour: float
    usd_per_request: float
    usd_per_million_input_tokens: float
    usd_per_million_output_tokens: float
    usd_per_million_tokens: float
    usd_per_successful_task: float
    prefill_share: float
    gpu_hours_per_day: float | None
    api: str | None
    break_even_requests_per_day: float | None
    scenarios: list[ScenarioSection]
    assumptions: list[str]
    decode_share: float | None = None  # of the GPU time, charged to output tokens
    usd_per_session: float | None = None  # an agent session: requests_per_session turns
    requests_per_session: float = 1.0


def cost_section(
    c: CostEstimate, *, usd_per_gpu_hour: float, price_source: str, api: str | None
) -> CostSection:
    return CostSection(
        usd_per_gpu_hour=usd_per_gpu_hour,
        price_source=price_source,
        usd_per_hour=c.usd_per_hour,
        usd_per_request=c.usd_per_request,
        usd_per_million_input_tokens=c.usd_per_million_input_tokens,
        usd_per_million_output_tokens=c.usd_per_million_output_tokens,
        usd_per_million_tokens=c.usd_per_million_tokens,
        usd_per_successful_task=c.usd_per_successful_task,
        prefill_share=c.prefill_share,
        gpu_hours_per_day=c.gpu_hours_per_day,
        api=api,
        break_even_requests_per_day=c.break_even_requests_per_day,
        scenarios=[
            ScenarioSection(
                label=s.label,
                requests_per_day=s.requests_per_day,
                replicas=s.replicas,
                gpu_hours_per_day=s.gpu_hours_per_day,
                self_hosted_usd_per_day=s.self_hosted_usd_per_day,
                api_usd_per_day=s.api_usd_per_day,
            )
            for s in c.scenarios
        ],
        assumptions=list(c.assumptions),
        decode_share=c.decode_share,
        usd_per_session=c.usd_per_session,
        requests_per_session=c.requests_per_session,
    )


class CompareRow(FrozenDoc):
    model: str
    gpu: str
    num_gpus: int
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float
    peak_16bit_flops_per_s: float | None
    interconnect_bandwidth_bytes_per_s: float | None
    fits: bool
    problem: str
    active_params: int
    performance: PerformanceSection | None


class CompareDocument(FrozenDoc):
    schema_version: int
    servefit_version: str
    workload: str
    rows: list[CompareRow]
    explanation: list[str]


class CostDocument(FrozenDoc):
    schema_version: int
    servefit_version: str
    model: str
    gpu: str
    num_gpus: int
    performance: PerformanceSection
    cost: CostSection


def compare_document(
    rows: list[CompareRow], workload: str, explanation: list[str]
) -> CompareDocument:
    return CompareDocument(
        schema_version=SCHEMA_VERSION,
        servefit_version=__version__,
        workload=workload,
        rows=rows,
        explanation=explanation,
    )


def cost_document(
    *, model: str, gpu: str, num_gpus: int, performance: PerformanceSection, cost: CostSection
) -> CostDocument:
    return CostDocument(
        schema_version=SCHEMA_VERSION,
        servefit_version=__version__,
        model=model,
        gpu=gpu,
        num_gpus=num_gpus,
        performance=performance,
        cost=cost,
    )


def scaling_section(s: ScalingOutcome) -> ScalingSection:
    return ScalingSection(
        num_gpus=s.request.num_gpus,
        gpus_per_node=s.request.gpus_per_node,
        objective=s.request.objective,
        layouts=[layout_section(r) for r in s.layouts],
        best=s.best.layout.label if s.best else None,
        commands=list(s.commands),
    )


def comparison_document(c: Comparison, workload: str) -> CompareDocument:
    """One row per (model, GPU) cell, as ``plan`` judges it."""
    rows = []
    for cell in c.cells:
        o = cell.outcome
        gpu = cell.gpu_spec
        n = o.capacity.settings.num_gpus if o is not None else 1
        rows.append(
            CompareRow(
                model=cell.model,
                gpu=cell.gpu,
                num_gpus=n,
                memory_bytes=gpu.memory_bytes * n,
                memory_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s * n,
                peak_16bit_flops_per_s=gpu.bf16_flops_per_s or gpu.fp16_flops_per_s or None,
                interconnect_bandwidth_bytes_per_s=gpu.interconnect_bandwidth_bytes_per_s,
                fits=cell.fits,
                problem=cell.problem,
                active_params=cell.active_params,
                performance=performance_section(o.performance)
                if o is not None and o.performance is not None and cell.fits
                else None,
            )
        )
    return compare_document(rows, workload, list(c.explanation))


def cost_outcome_document(c: CostOutcome) -> CostDocument:
    return cost_document(
        model=c.plan.resolved.model_id,
        gpu=c.plan.resolved.gpu.name,
        num_gpus=c.plan.capacity.settings.num_gpus,
        performance=performance_section(c.performance),
        cost=cost_section(
            c.estimate,
            usd_per_gpu_hour=c.usd_per_gpu_hour,
            price_source=c.price_source,
            api=c.api.name if c.api else None,
        ),
    )
