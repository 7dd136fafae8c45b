"""JSON sections for performance, scaling and cost (``plan``, ``compare`` and ``cost``
``--json``). Seconds, tokens per second and dollars, as named.

This module holds the scaling, cost and compare sections and documents; the performance and
load sections they embed are in :mod:`servefit.adapters.perf_sections` and stay importable
from here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servefit import __version__
from servefit.adapters.document import FrozenDoc

# `X as X`: re-exported, so ``servefit.adapters.perf_document.<name>`` keeps working
from servefit.adapters.perf_sections import AgentSection as AgentSection
from servefit.adapters.perf_sections import AgentTurnSection as AgentTurnSection
from servefit.adapters.perf_sections import LoadSection as LoadSection
from servefit.adapters.perf_sections import PerformanceSection, performance_section
from servefit.adapters.perf_sections import StatSection as StatSection
from servefit.adapters.perf_sections import TurnLoadSection as TurnLoadSection
from servefit.adapters.perf_sections import load_section as load_section

if TYPE_CHECKING:  # the converters only read attributes: plan --json stays quick to start
    from servefit.app.compare import Comparison
    from servefit.app.cost import CostOutcome
    from servefit.app.scaling import ScalingOutcome
    from servefit.core.cost import CostEstimate
    from servefit.core.scaling import LayoutResult

SCHEMA_VERSION = 1


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
    # the DP ranks are one vLLM engine (--data-parallel-size), not separate replicas
    one_engine: bool = False


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
        one_engine=r.layout.one_engine,
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
    if c.performance is None or c.estimate is None:  # the CLI prices only what runs
        raise ValueError("a cost document needs a deployment that runs (performance, price)")
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
