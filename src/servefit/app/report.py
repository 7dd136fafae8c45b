"""``report``: the five-minute checklist of a deployment, planned as ``plan`` plans it, with
a benchmark run and GPU samples measured side by side and the bottleneck diagnosis."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from servefit.adapters.catalog import gpu_price
from servefit.app.cost import CostRequest, cost_inputs, gpu_hour_price
from servefit.app.deployment import Deployment
from servefit.app.plan import plan_deployment
from servefit.app.resolve import Resolved
from servefit.core.cost import estimate_cost
from servefit.core.diagnosis import diagnose
from servefit.core.ops import decode_step, model_coeffs, prefill_step, step_ops, total
from servefit.core.roofline import peak_flops_per_s

if TYPE_CHECKING:
    from servefit.adapters.report import ReportDocument


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportRequest:
    bench_dir: str | None = None
    gpu_samples: str | None = None
    usd_per_gpu_hour: float | None = None


def report_deployment(
    d: Deployment, req: ReportRequest, *, resolved: Resolved | None = None
) -> ReportDocument:
    """The report of ``d``; ``resolved`` reuses a model already loaded (the web page's
    uploaded configs, its catalog cache)."""
    from servefit.adapters import report as rep
    from servefit.adapters.perf_document import cost_section
    from servefit.adapters.plan_document import outcome_document
    from servefit.monitor.nvml import read_samples

    outcome = plan_deployment(d, resolved=resolved)
    plan, perf, gpu = outcome.capacity, outcome.performance, outcome.resolved.gpu
    doc = outcome_document(outcome)
    cost = None
    if perf is not None:
        price = (
            gpu_hour_price(gpu.name, req.usd_per_gpu_hour)
            if req.usd_per_gpu_hour is not None or gpu_price(gpu.name) is not None
            else None
        )  # no catalog price and none given: the report goes without economics
        if price is not None:
            usd, source = price
            inputs = cost_inputs(perf, plan.settings.num_gpus, usd, source, CostRequest())
            cost = cost_section(
                estimate_cost(inputs), usd_per_gpu_hour=usd, price_source=source, api=None
            )
    measured = samples = None
    gpu_samples = req.gpu_samples
    if req.bench_dir:
        result, records = rep.load_bench(Path(req.bench_dir))
        measured = rep.measured_section(result, records, source=str(req.bench_dir))
        default_samples = Path(req.bench_dir) / "gpu_samples.jsonl"
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
        kv_cache_dtype=r.kv_cache_dtype,
    )
    batch = max(1, round(measured.concurrency)) if measured and measured.concurrency else 1
    w = d.workload
    context = w.input_len.mean + w.output_len.mean // 2
    decode_bytes = total(step_ops(m, decode_step(batch, context))).memory_bytes
    prefill_flops = total(step_ops(m, prefill_step(w.input_len.mean))).flops
    # the peak of the dtype the matmuls really run in (fp8 where the GPU has it, else 16-bit)
    kernel = perf.kernel_dtypes[0] if perf is not None and perf.kernel_dtypes else "bf16"
    observed = rep.observations(
        measured,
        samples,
        decode_bytes_per_step=decode_bytes,
        prefill_flops=prefill_flops,
        bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
        peak_flops_per_s=peak_flops_per_s(gpu, kernel),
    )
    comm_share = perf.decode.comm_s / perf.decode.time_s if perf else 0.0
    findings = diagnose(observed, rep.expectations_from(doc, comm_share))
    return rep.build_report(
        doc, cost=cost, measured=measured, gpu=samples, findings=findings, workload=w
    )
