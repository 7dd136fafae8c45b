"""The ``servefit report`` document and its builders: the measured section (read from a bench
run by :mod:`servefit.adapters.report_bench`), the GPU section from NVML samples, the
diagnosis's observations and expectations, the workload's traits, :func:`build_report` and
:func:`load_report` / :func:`dumps` (the JSON form). Rendered by
:mod:`servefit.adapters.report_markdown`, :mod:`servefit.adapters.report_html` and
:mod:`servefit.adapters.report_compare`; every name stays importable from
:mod:`servefit.adapters.report`.
"""

from __future__ import annotations

import json
from dataclasses import field
from pathlib import Path
from typing import Any

from servefit import __version__
from servefit.adapters.document import FrozenDoc
from servefit.adapters.perf_document import CostSection
from servefit.adapters.plan_document import PlanDocument
from servefit.core.diagnosis import Expectations, Finding, Observations
from servefit.core.workload import Workload
from servefit.errors import ConfigError
from servefit.monitor.nvml import GpuSample

SCHEMA_VERSION = 1
MAX_SERIES_POINTS = 400


class RecordGroup(FrozenDoc):
    """The records of one phase of a ``--prefix-cache-compare`` run (cold, warm)."""

    label: str
    ttft_values_s: list[float]
    tpot_values_s: list[float]


class MeasuredSection(FrozenDoc):
    source: str
    num_requests: int
    errored: int
    concurrency: float | None
    ttft_s: float | None
    ttft_p99_s: float | None
    tpot_s: float | None
    decode_tok_per_s: float | None
    output_throughput_tok_per_s: float
    request_throughput_per_s: float
    ttft_values_s: list[float]
    tpot_values_s: list[float]
    turn_ttft_s: list[float]  # mean TTFT per agent turn, when the workload had turns
    kv_usage_max: float | None
    waiting_max: float | None
    preemptions: float | None
    served_model: str | None = None  # the bench summary's server identity
    prompt_tokens_mean: float | None = None  # per successful request
    output_tokens_mean: float | None = None
    cached_tokens_mean: float | None = None  # None: the server did not say
    groups: list[RecordGroup] = field(default_factory=list)  # cold and warm, when compared
    # speculative decoding, from vLLM's counters over the run (None: no drafts)
    spec_mean_acceptance_length: float | None = None
    spec_acceptance_per_position: list[float] = field(default_factory=list)


class GpuSeries(FrozenDoc):
    gpu: int
    t_s: list[float]
    util_pct: list[float]
    mem_util_pct: list[float]
    power_w: list[float]
    tensor_active_pct: list[float | None]


class GpuSection(FrozenDoc):
    num_samples: int
    util_pct_mean: float
    mem_util_pct_mean: float
    tensor_active_pct_mean: float | None
    power_fraction_mean: float
    mem_used_bytes_max: int
    series: list[GpuSeries]


class FindingSection(FrozenDoc):
    verdict: str
    phase: str
    evidence: str
    remedy: str


class ReportDocument(FrozenDoc):
    schema_version: int
    servefit_version: str
    title: str
    plan: PlanDocument
    cost: CostSection | None
    measured: MeasuredSection | None
    gpu: GpuSection | None
    diagnosis: list[FindingSection]
    workload_traits: list[str]
    # what the economics' throughput is: "measured (bench ...)" or "predicted ..."
    cost_basis: str | None = None


# ---------------------------------------------------------------------------------------
# inputs


def _downsample(values: list[Any]) -> list[Any]:
    step = max(1, len(values) // MAX_SERIES_POINTS)
    return values[::step]


def gpu_section(samples: list[GpuSample]) -> GpuSection | None:
    if not samples:
        return None
    t0 = min(s.t_s for s in samples)
    series = []
    for gpu in sorted({s.gpu for s in samples}):
        mine = [s for s in samples if s.gpu == gpu]
        series.append(
            GpuSeries(
                gpu=gpu,
                t_s=_downsample([s.t_s - t0 for s in mine]),
                util_pct=_downsample([s.util_pct for s in mine]),
                mem_util_pct=_downsample([s.mem_util_pct for s in mine]),
                power_w=_downsample([s.power_w for s in mine]),
                tensor_active_pct=_downsample([s.tensor_active_pct for s in mine]),
            )
        )
    tensor = [s.tensor_active_pct for s in samples if s.tensor_active_pct is not None]
    return GpuSection(
        num_samples=len(samples),
        util_pct_mean=sum(s.util_pct for s in samples) / len(samples),
        mem_util_pct_mean=sum(s.mem_util_pct for s in samples) / len(samples),
        tensor_active_pct_mean=sum(tensor) / len(tensor) if tensor else None,
        power_fraction_mean=sum(s.power_w / s.power_limit_w for s in samples if s.power_limit_w)
        / len(samples),
        mem_used_bytes_max=max(s.mem_used_bytes for s in samples),
        series=series,
    )


def observations(
    measured: MeasuredSection | None,
    gpu: GpuSection | None,
    *,
    decode_bytes_per_step: float | None,
    prefill_flops: float | None,
    bandwidth_bytes_per_s: float,
    peak_flops_per_s: float,
) -> Observations:
    """The diagnosis's inputs, from what was measured."""
    decode_fraction = prefill_fraction = None
    if measured and measured.tpot_s and decode_bytes_per_step:
        decode_fraction = decode_bytes_per_step / measured.tpot_s / bandwidth_bytes_per_s
    if measured and measured.ttft_s and prefill_flops:
        prefill_fraction = prefill_flops / measured.ttft_s / peak_flops_per_s
    return Observations(
        concurrency=measured.concurrency if measured else None,
        ttft_s=measured.ttft_s if measured else None,
        tpot_s=measured.tpot_s if measured else None,
        decode_bandwidth_fraction=decode_fraction,
        prefill_compute_fraction=prefill_fraction,
        kv_usage_max=measured.kv_usage_max if measured else None,
        waiting_mean=measured.waiting_max if measured else None,
        num_preemptions=int(measured.preemptions or 0) if measured else None,
        gpu_util_pct=gpu.util_pct_mean if gpu else None,
        mem_util_pct=gpu.mem_util_pct_mean if gpu else None,
        tensor_active_pct=gpu.tensor_active_pct_mean if gpu else None,
        power_fraction=gpu.power_fraction_mean if gpu else None,
    )


def workload_traits(w: Workload) -> list[str]:
    """What kind of workload this is, in the terms that decide what matters."""
    inp, out = w.input_len.mean, w.output_len.mean
    if inp >= 4 * out:
        traits = ["input-heavy (prefill dominates)"]
    elif out >= inp:
        traits = ["output-heavy (decode dominates)"]
    else:
        traits = ["balanced input and output"]
    interactive = w.request_rate_per_s is None and (w.concurrency or 0) <= 4
    traits.append(
        "interactive (few requests at once: latency matters)"
        if interactive
        else "batch / many users (throughput matters)"
    )
    if w.prefix_len:
        traits.append("shared prefixes: prefix caching removes their prefill")
    if w.turns > 1:
        traits.append("agent sessions re-send their history every turn")
    return traits


def build_report(
    plan: PlanDocument,
    *,
    cost: CostSection | None,
    measured: MeasuredSection | None,
    gpu: GpuSection | None,
    findings: tuple[Finding, ...],
    workload: Workload,
    cost_basis: str | None = None,
) -> ReportDocument:
    return ReportDocument(
        schema_version=SCHEMA_VERSION,
        servefit_version=__version__,
        title=f"{plan.model.id} on {plan.gpu.count} x {plan.gpu.name}",
        plan=plan,
        cost=cost,
        measured=measured,
        gpu=gpu,
        diagnosis=[
            FindingSection(
                verdict=f.verdict.value, phase=f.phase, evidence=f.evidence, remedy=f.remedy
            )
            for f in findings
        ],
        workload_traits=workload_traits(workload),
        cost_basis=cost_basis,
    )


def load_report(path: Path) -> ReportDocument:
    try:
        return ReportDocument.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"cannot read report {path}: {error.strerror}") from None
    except ValueError:
        raise ConfigError(
            f"{path} is not a servefit report document: make one with `servefit report ... "
            "--format json -o FILE`"
        ) from None


def expectations_from(plan: PlanDocument, comm_share: float) -> Expectations | None:
    if plan.performance is None:
        return None
    return Expectations(
        ttft_s=plan.performance.ttft_s,
        tpot_s=plan.performance.tpot_s,
        comm_share=comm_share,
        tensor_parallel_size=plan.settings.tensor_parallel_size,
    )


def dumps(doc: ReportDocument) -> str:
    return json.dumps(json.loads(doc.model_dump_json()), indent=2)
