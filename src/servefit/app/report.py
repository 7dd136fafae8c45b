"""``report``: the five-minute checklist of a deployment, planned as ``plan`` plans it, with
a benchmark run and GPU samples measured side by side and the bottleneck diagnosis.

Before the diagnosis reads a benchmark, the evidence check (:mod:`servefit.core.evidence`)
asks whether it can be this model on this GPU (the served model's name, every measured
figure under its physical ceiling); when it cannot, the diagnosis is that finding alone and
the economics stay on the predicted throughput. Otherwise the economics use the measured
throughput and tokens per request."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from servefit.adapters.catalog import gpu_price
from servefit.app.cost import CostRequest, cost_inputs, gpu_hour_price
from servefit.app.deployment import Deployment
from servefit.app.plan import plan_deployment
from servefit.app.resolve import Resolved
from servefit.core.cost import check_task_terms, estimate_cost
from servefit.core.diagnosis import Finding, Verdict, diagnose
from servefit.core.evidence import Evidence, check_evidence
from servefit.core.ops import decode_step, model_coeffs, prefill_step, step_ops, total
from servefit.core.roofline import peak_flops_per_s

if TYPE_CHECKING:
    from servefit.adapters.report import MeasuredSection, ReportDocument
    from servefit.bench.runner import BenchResult
    from servefit.core.cost import CostInputs


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportRequest:
    bench_dir: str | None = None
    gpu_samples: str | None = None
    usd_per_gpu_hour: float | None = None
    requests_per_task: float | None = None  # None: one session (its turns' requests)
    success_rate: float = 1.0
    success_source: str = ""  # a measured rate's origin (``--success-from``)
    success_range: tuple[float, float] | None = None  # and its interval
    served_model_name: str | None = None  # the alias the benchmarked server was started with

    def __post_init__(self) -> None:
        check_task_terms(self.requests_per_task, self.success_rate)


def _measured_inputs(base: CostInputs, measured: MeasuredSection | None) -> CostInputs | None:
    """The cost inputs at the measured request throughput and tokens per request (the
    prefill share of the GPU time stays the simulation's: a bench does not measure it)."""
    if measured is None or measured.request_throughput_per_s <= 0:
        return None
    if not measured.output_tokens_mean or measured.prompt_tokens_mean is None:
        return None
    return replace(
        base,
        request_throughput_per_s=measured.request_throughput_per_s,
        input_tokens=measured.prompt_tokens_mean,
        output_tokens=measured.output_tokens_mean,
    )


def _with_measured_acceptance(
    d: Deployment, req: ReportRequest, result: BenchResult | None
) -> Deployment:
    """A speculative deployment measured by the bench run is predicted at the acceptance the
    run measured (as ``--acceptance-from RUN``), unless the user gave one."""
    if (
        result is None
        or d.settings.speculative is None
        or d.acceptance_rate is not None
        or d.acceptance_from is not None
        or "spec_decode_mean_acceptance_length" not in result.server_metrics
    ):
        return d
    return replace(d, acceptance_from=str(req.bench_dir))


def report_deployment(
    d: Deployment, req: ReportRequest, *, resolved: Resolved | None = None
) -> ReportDocument:
    """The report of ``d``; ``resolved`` reuses a model already loaded (the web page's
    uploaded configs, its catalog cache)."""
    from servefit.adapters import report as rep
    from servefit.adapters.perf_document import cost_section
    from servefit.adapters.plan_document import outcome_document
    from servefit.monitor.nvml import read_samples

    result = records = None
    if req.bench_dir:
        result, records = rep.load_bench(Path(req.bench_dir))
    d = _with_measured_acceptance(d, req, result)
    outcome = plan_deployment(d, resolved=resolved)
    plan, perf, gpu = outcome.capacity, outcome.performance, outcome.resolved.gpu
    doc = outcome_document(outcome)
    measured = samples = None
    gpu_samples = req.gpu_samples
    if req.bench_dir and result is not None and records is not None:
        bench = Path(req.bench_dir)
        groups = rep.load_groups(bench)
        measured = rep.measured_section(result, records, source=str(req.bench_dir), groups=groups)
        default_samples = bench / "gpu_samples.jsonl"
        if gpu_samples is None and default_samples.exists():
            gpu_samples = str(default_samples)
    if gpu_samples:
        samples = rep.gpu_section(read_samples(Path(gpu_samples)))
    r = plan.settings
    # the layout as deployed: TP, PP and the KV dtype decide the bytes and FLOPs per step
    m = model_coeffs(
        plan.model,
        tp=r.tensor_parallel_size,
        pp=r.pipeline_parallel_size,
        ep=r.expert_parallel_size,
        kv_cache_dtype=r.kv_cache_dtype,
        dp=r.data_parallel_size,
    )
    batch = max(1, round(measured.concurrency)) if measured and measured.concurrency else 1
    w = d.workload
    # the tokens the bench really sent when it says (its prompts may not be the plan's)
    prompt = round(measured.prompt_tokens_mean) if measured and measured.prompt_tokens_mean else 0
    prompt = prompt or w.input_len.mean
    output = round(measured.output_tokens_mean) if measured and measured.output_tokens_mean else 0
    output = output or w.output_len.mean
    # a cached prefix (a shared prefix, an agent's history) costs no prefill FLOPs
    if measured and measured.cached_tokens_mean is not None:
        cached = min(round(measured.cached_tokens_mean), prompt - 1)
    elif w.prefix_len or w.turns > 1:
        cached = max(0, min(prompt - (w.input_len.mean - w.prefix_len), prompt - 1))
    else:
        cached = 0
    decode_bytes = total(step_ops(m, decode_step(batch, prompt + output // 2))).memory_bytes
    weight_bytes = total(step_ops(m, decode_step(1, 1))).memory_bytes  # read once per step
    prefill_flops = total(step_ops(m, prefill_step(prompt - cached, cached))).flops
    # the peak of the dtype the matmuls really run in (fp8 where the GPU has it, else 16-bit)
    kernel = perf.kernel_dtypes[0] if perf is not None and perf.kernel_dtypes else "bf16"
    peak = peak_flops_per_s(gpu, kernel)
    bandwidth = gpu.memory_bandwidth_bytes_per_s
    observed = rep.observations(
        measured,
        samples,
        decode_bytes_per_step=decode_bytes,
        prefill_flops=prefill_flops,
        bandwidth_bytes_per_s=bandwidth,
        peak_flops_per_s=peak,
    )
    findings: tuple[Finding, ...] = ()
    if measured is not None:
        # every output token: >= 2 FLOPs per active parameter on every GPU of the replica;
        # every decode step reads each GPU's weights once for the batch in flight
        ceiling = min(
            r.num_gpus * peak / (2 * doc.model.params_active),
            (measured.concurrency or batch) * bandwidth / weight_bytes,
        )
        findings = check_evidence(
            Evidence(
                planned_model=doc.model.id,
                gpu=f"{r.num_gpus} x {gpu.name}",
                served_model=measured.served_model,
                served_alias=req.served_model_name,
                decode_bandwidth_fraction=observed.decode_bandwidth_fraction,
                prefill_compute_fraction=observed.prefill_compute_fraction,
                output_throughput_tok_per_s=measured.output_throughput_tok_per_s,
                output_ceiling_tok_per_s=ceiling,
            )
        )
    if not findings:
        comm_share = perf.decode.comm_s / perf.decode.time_s if perf else 0.0
        findings = diagnose(observed, rep.expectations_from(doc, comm_share), gpu=gpu)
    cost = cost_basis = None
    if perf is not None:
        price = (
            gpu_hour_price(gpu.name, req.usd_per_gpu_hour)
            if req.usd_per_gpu_hour is not None or gpu_price(gpu.name) is not None
            else None
        )  # no catalog price and none given: the report goes without economics
        if price is not None:
            usd, source = price
            terms = CostRequest(
                requests_per_task=req.requests_per_task,
                success_rate=req.success_rate,
                success_source=req.success_source,
                success_range=req.success_range,
            )
            inputs = cost_inputs(perf, plan.settings.num_gpus, usd, source, terms)
            at_measured = _measured_inputs(inputs, measured)
            if measured and at_measured and findings[0].verdict is not Verdict.MISMATCH:
                inputs = at_measured
                cost_basis = (
                    f"measured: {measured.output_throughput_tok_per_s:,.0f} output tok/s, "
                    f"{inputs.request_throughput_per_s:,.2f} requests/s ({req.bench_dir})"
                )
            else:
                predicted = doc.performance.output_throughput_tok_per_s if doc.performance else 0
                cost_basis = f"predicted: {predicted:,.0f} output tok/s" + (
                    " (the measurement is not this deployment)" if measured else ""
                )
            cost = cost_section(
                estimate_cost(inputs), usd_per_gpu_hour=usd, price_source=source, api=None
            )
    return rep.build_report(
        doc,
        cost=cost,
        measured=measured,
        gpu=samples,
        findings=findings,
        workload=w,
        cost_basis=cost_basis,
    )
