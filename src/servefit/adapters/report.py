"""``servefit report``: the five-minute checklist -- model, memory, workload, performance,
scaling, economics -- predicted and (when a benchmark ran) measured side by side, with the
diagnosis. Rendered as Markdown (terminals, pull requests) and as one self-contained HTML
file with inline SVG plots (works offline, no scripts).
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from servefit import __version__
from servefit.adapters import svg
from servefit.adapters.document import FrozenDoc
from servefit.adapters.perf_document import CostSection
from servefit.adapters.plan_document import PlanDocument
from servefit.bench.metrics import latencies
from servefit.bench.records import Outcome, RequestRecord
from servefit.bench.runner import BenchResult
from servefit.core.diagnosis import Expectations, Finding, Observations
from servefit.core.workload import Workload
from servefit.errors import ConfigError
from servefit.monitor.nvml import GpuSample

SCHEMA_VERSION = 1
GIB = 2**30
MAX_SERIES_POINTS = 400


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


# ---------------------------------------------------------------------------------------
# inputs


def load_bench(directory: Path) -> tuple[BenchResult, list[RequestRecord]]:
    summary = directory / "summary.json"
    try:
        result = BenchResult.model_validate_json(summary.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"--bench {directory}: no summary.json ({error.strerror})") from None
    except ValueError as error:
        raise ConfigError(f"--bench {summary} is not a servefit bench summary: {error}") from None
    records = []
    path = directory / "requests.jsonl"
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                records.append(RequestRecord.model_validate_json(line))
    return result, records


def measured_section(
    result: BenchResult, records: list[RequestRecord], source: str
) -> MeasuredSection:
    s = result.summary
    ok = [r for r in records if r.outcome is Outcome.OK and not r.is_warmup]
    per_request = [latencies(r) for r in ok]  # the simulator's formulas (core.metrics)
    ttfts = [v.ttft_s for v in per_request if v.ttft_s is not None]
    tpots = [v.tpot_s for v in per_request if v.tpot_s is not None]
    return MeasuredSection(
        source=source,
        num_requests=s.successful,
        errored=s.errored,
        concurrency=s.achieved_concurrency,
        ttft_s=s.ttft_s.mean,
        ttft_p99_s=s.ttft_s.p99,
        tpot_s=s.tpot_s.mean,
        decode_tok_per_s=1 / s.tpot_s.mean if s.tpot_s.mean else None,
        output_throughput_tok_per_s=s.output_throughput_tok_per_s,
        request_throughput_per_s=s.request_throughput_per_s,
        ttft_values_s=ttfts,
        tpot_values_s=tpots,
        turn_ttft_s=[t.ttft_s_mean for t in result.turns if t.ttft_s_mean is not None],
        kv_usage_max=result.server_peaks.get("kv_cache_usage"),
        waiting_max=result.server_peaks.get("requests_waiting"),
        preemptions=result.server_metrics.get("preemptions"),
    )


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


# ---------------------------------------------------------------------------------------
# rendering


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f} s" if v >= 10 else f"{v * 1e3:,.1f} ms"


def _num(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _rows(doc: ReportDocument) -> dict[str, list[tuple[str, str]]]:
    """The checklist as (label, value) rows per section: the same for Markdown and HTML."""
    p, m = doc.plan, doc.plan.memory
    model = p.model
    kinds = ", ".join(f"{n} {k}" for k, n in model.layer_kinds.items())
    sections: dict[str, list[tuple[str, str]]] = {
        "Model": [
            ("model", model.id),
            ("family", f"{model.family}, {model.num_layers} layers ({kinds})"),
            (
                "parameters",
                f"{model.params_total / 1e9:,.2f} B total, "
                f"{model.params_active / 1e9:,.2f} B active per token",
            ),
            ("precision", f"{model.dtype}, {model.quantization}"),
        ],
        "Memory": [
            (
                "GPU",
                f"{p.gpu.count} x {p.gpu.name}, {p.gpu.cuda_total_bytes / GIB:,.1f} GiB visible",
            ),
            ("weights", f"{m.weights_bytes_per_gpu / GIB:,.2f} GiB per GPU"),
            (
                "KV cache + state",
                f"{m.kv_cache_memory_bytes / GIB:,.2f} GiB: {m.kv_cache_tokens:,} tokens, "
                f"{m.max_concurrency:,.2f}x {p.settings.max_model_len:,}-token requests",
            ),
            ("verdict", "fits" if p.fits else "does not fit: " + "; ".join(p.problems[:2])),
        ],
        "Workload": [("traits", "; ".join(doc.workload_traits) or "-")],
    }
    perf = p.performance
    if perf is not None:
        sections["Workload"].insert(0, ("workload", perf.workload))
        meas = doc.measured
        sections["Performance"] = [
            (
                "bound (predicted)",
                f"{perf.bound}; prefill {perf.prefill_bound}, decode {perf.decode_bound}",
            ),
            ("TTFT cold, one request", _ms(perf.ttft_cold_s)),
            (
                "TTFT under load",
                f"{_ms(perf.ttft_s)} predicted"
                + (f" / {_ms(meas.ttft_s)} measured" if meas else ""),
            ),
            (
                "TPOT",
                f"{_ms(perf.tpot_s)} predicted"
                + (f" / {_ms(meas.tpot_s)} measured" if meas else ""),
            ),
            (
                "decode rate per request",
                f"{perf.decode_tok_per_s:,.0f} tok/s predicted"
                + (f" / {_num(meas.decode_tok_per_s)} tok/s measured" if meas else ""),
            ),
            (
                "output throughput",
                f"{perf.output_throughput_tok_per_s:,.0f} tok/s predicted"
                + (f" / {meas.output_throughput_tok_per_s:,.0f} tok/s measured" if meas else ""),
            ),
            (
                "bytes per decode step",
                f"{perf.decode_bytes_per_token / 1e9:,.2f} GB "
                f"({perf.weight_bytes_per_token / 1e9:,.2f} GB weights)",
            ),
            ("efficiency profile", perf.efficiency_profile),
        ]
        scaling = [
            (
                "batching",
                f"concurrency 1 -> {perf.curve[-1].concurrency}: "
                f"{perf.curve[0].output_throughput_tok_per_s:,.0f} -> "
                f"{perf.curve[-1].output_throughput_tok_per_s:,.0f} output tok/s",
            ),
        ]
        if perf.ttft_cached_prefix_s is not None:
            scaling.append(
                (
                    "prefix caching",
                    f"TTFT {_ms(perf.ttft_cold_s)} -> "
                    f"{_ms(perf.ttft_cached_prefix_s)} with the prefix cached",
                )
            )
        if perf.agent is not None:
            scaling.append(
                (
                    "agent sessions",
                    f"prefix caching saves {_ms(perf.agent.gpu_time_saved_s)} of prefill "
                    f"per session; decode unchanged ({_ms(perf.agent.total_decode_s)})",
                )
            )
        if p.scaling is not None and p.scaling.best:
            scaling.append(
                (
                    "parallelism",
                    f"best of {p.scaling.num_gpus} GPUs: {p.scaling.best} ({p.scaling.objective})",
                )
            )
        scaling.append(
            (
                "quantisation",
                f"kernels in {', '.join(perf.kernel_dtypes)}; fp8/int4 "
                "weights shrink the bytes each decode step reads",
            )
        )
        sections["Scaling"] = scaling
    if doc.cost is not None:
        c = doc.cost
        sections["Economics"] = [
            ("price", f"${c.usd_per_gpu_hour:,.2f}/GPU-hour ({c.price_source})"),
            (
                "per token",
                f"${c.usd_per_million_input_tokens:,.3f} per 1M input, "
                f"${c.usd_per_million_output_tokens:,.3f} per 1M output",
            ),
            ("per successful task", f"${c.usd_per_successful_task:,.5f}"),
        ]
    return sections


def render_markdown(doc: ReportDocument) -> str:
    out = [
        f"# {doc.title}",
        "",
        f"servefit {doc.servefit_version} report. Predicted"
        + (" and measured" if doc.measured else "")
        + ".",
        "",
    ]
    for section, rows in _rows(doc).items():
        out += [f"## {section}", "", "| | |", "| --- | --- |"]
        out += [f"| {label} | {value.replace('|', '/')} |" for label, value in rows]
        out.append("")
    if doc.plan.performance is not None:
        out += [
            "### Latency-throughput curve (predicted)",
            "",
            "| concurrency | TTFT | TPOT | output tok/s | bound |",
            "| --- | --- | --- | --- | --- |",
        ]
        out += [
            f"| {c.concurrency} | {_ms(c.ttft_s.mean)} | {_ms(c.tpot_s.mean)} "
            f"| {c.output_throughput_tok_per_s:,.0f} | {c.bound} |"
            for c in doc.plan.performance.curve
        ]
        out.append("")
    out += ["## Diagnosis", ""]
    out += [
        f"- **{f.verdict}** ({f.phase}): {f.evidence}. *Remedy*: {f.remedy}." for f in doc.diagnosis
    ]
    out += ["", f"vLLM command: `{doc.plan.vllm_command}`", ""]
    return "\n".join(out)


CSS = "".join(
    "body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;"
    "margin:24px auto;max-width:1000px;color:#111827;padding:0 16px}"
    "h1{font-size:22px;margin-bottom:4px}"
    "h2{font-size:17px;margin-top:26px;border-bottom:1px solid #e5e7eb;padding-bottom:4px}"
    "table{border-collapse:collapse;width:100%;margin:6px 0}"
    "td,th{padding:4px 8px;border-bottom:1px solid #f3f4f6;text-align:left;vertical-align:top}"
    "td.k{color:#4b5563;width:220px}"
    ".chart{max-width:100%;height:auto;margin:8px 0;background:#fff}"
    ".chart .title{font-weight:600;font-size:13px}"
    ".chart .axis,.chart .tick,.chart .legend{font-size:11px;fill:#374151}"
    ".chart .grid{stroke:#e5e7eb}"
    ".chart .axisline{stroke:#6b7280}"
    ".chart .outline{stroke:#6b7280}"
    ".finding{border-left:4px solid #2563eb;padding:6px 10px;margin:8px 0;background:#f9fafb}"
    ".finding b{font-weight:600}"
    ".muted{color:#6b7280}"
    ".grid2{display:grid;grid-template-columns:1fr 1fr;gap:12px}"
)


def _charts(doc: ReportDocument) -> list[str]:
    charts = []
    p, m = doc.plan, doc.plan.memory
    parts = [
        ("weights", m.weights_bytes_per_gpu / GIB),
        ("KV cache + state", m.kv_cache_memory_bytes / GIB),
        ("activations", m.activation_peak_bytes_per_gpu / GIB),
        ("runtime", (m.non_torch_bytes_per_gpu + m.cuda_graph_bytes_per_gpu) / GIB),
        ("headroom", m.headroom_bytes_per_gpu / GIB),
    ]
    charts.append(
        svg.stacked_bar(
            "chart-memory",
            "Where one GPU's memory goes",
            parts,
            total=m.total_bytes_per_gpu / GIB,
            unit="GiB",
        )
    )
    perf = p.performance
    if perf is not None:
        series = [
            (
                "predicted",
                [(c.output_throughput_tok_per_s, c.tpot_s.mean * 1e3) for c in perf.curve],
            )
        ]
        if doc.measured and doc.measured.tpot_s:
            series.append(
                (
                    "measured",
                    [(doc.measured.output_throughput_tok_per_s, doc.measured.tpot_s * 1e3)],
                )
            )
        charts.append(
            svg.line_chart(
                "chart-curve",
                "Latency vs throughput (points: concurrency 1, 2, 4, ...)",
                series,
                x_label="output tokens/s (all requests)",
                y_label="time per output token (ms)",
                markers_only=(False, True),
            )
        )
        if perf.agent is not None:
            a = perf.agent
            bars = [
                ("cold", [t.ttft_cold_s * 1e3 for t in a.turns]),
                ("prefix cached", [t.ttft_cached_s * 1e3 for t in a.turns]),
            ]
            if doc.measured and len(doc.measured.turn_ttft_s) == len(a.turns):
                bars.append(("measured", [v * 1e3 for v in doc.measured.turn_ttft_s]))
            charts.append(
                svg.grouped_bars(
                    "chart-turns",
                    "Agent session: TTFT per turn",
                    [str(t.turn) for t in a.turns],
                    bars,
                    y_label="TTFT (ms)",
                )
            )
    if doc.measured is not None:
        charts.append(
            svg.histogram(
                "chart-ttft",
                "Measured TTFT distribution",
                [v * 1e3 for v in doc.measured.ttft_values_s],
                x_label="TTFT (ms)",
            )
        )
        charts.append(
            svg.histogram(
                "chart-tpot",
                "Measured TPOT distribution",
                [v * 1e3 for v in doc.measured.tpot_values_s],
                x_label="time per output token (ms)",
            )
        )
    if doc.gpu is not None:
        for s in doc.gpu.series:
            lines = [
                ("GPU util %", list(zip(s.t_s, s.util_pct, strict=True))),
                ("memory util %", list(zip(s.t_s, s.mem_util_pct, strict=True))),
            ]
            tensor = [
                (t, v) for t, v in zip(s.t_s, s.tensor_active_pct, strict=True) if v is not None
            ]
            if tensor:
                lines.append(("tensor active %", tensor))
            charts.append(
                svg.line_chart(
                    f"chart-gpu{s.gpu}",
                    f"GPU {s.gpu} while serving",
                    lines,
                    x_label="seconds",
                    y_label="%",
                )
            )
    return charts


def render_html(doc: ReportDocument) -> str:
    body = [
        f"<h1>{escape(doc.title)}</h1>",
        f'<p class="muted">servefit {escape(doc.servefit_version)} report: predicted'
        + (" and measured" if doc.measured else "")
        + "</p>",
    ]
    charts = _charts(doc)
    for section, rows in _rows(doc).items():
        body.append(f"<h2>{escape(section)}</h2><table>")
        body += [f'<tr><td class="k">{escape(k)}</td><td>{escape(v)}</td></tr>' for k, v in rows]
        body.append("</table>")
        if section == "Memory":
            body.append(charts[0])
        if section == "Performance":
            body += [c for c in charts[1:] if 'id="chart-curve"' in c or 'id="chart-turns"' in c]
            body.append(
                '<div class="grid2">'
                + "".join(c for c in charts if 'id="chart-ttft"' in c or 'id="chart-tpot"' in c)
                + "</div>"
            )
            body += [c for c in charts if 'id="chart-gpu' in c]
    body.append("<h2>Diagnosis</h2>")
    body += [
        f'<div class="finding"><b>{escape(f.verdict)}</b> '
        f"({escape(f.phase)}): {escape(f.evidence)}.<br>"
        f"<i>Remedy</i>: {escape(f.remedy)}.</div>"
        for f in doc.diagnosis
    ]
    body.append(f"<h2>Command</h2><pre>{escape(doc.plan.vllm_command)}</pre>")
    data = escape(doc.model_dump_json())
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(doc.title)}</title><style>{CSS}</style></head><body>"
        + "".join(body)
        + f'<script type="application/json" id="servefit-report">{data}</script></body></html>'
    )


def render_compare_markdown(a: ReportDocument, b: ReportDocument) -> str:
    ra, rb = _rows(a), _rows(b)
    out = [f"# {a.title} vs {b.title}", "", f"| | {a.title} | {b.title} |", "| --- | --- | --- |"]
    for section in ra:
        out.append(f"| **{section}** | | |")
        rows_b = dict(rb.get(section, []))
        for label, value in ra[section]:
            out.append(
                f"| {label} | {value.replace('|', '/')} | "
                f"{rows_b.get(label, '-').replace('|', '/')} |"
            )
    return "\n".join(out) + "\n"


def render_compare_html(a: ReportDocument, b: ReportDocument) -> str:
    ra, rb = _rows(a), _rows(b)
    body = [
        f"<h1>{escape(a.title)} vs "
        f"{escape(b.title)}</h1><table><tr><th></th><th>{escape(a.title)}</th><th>{escape(b.title)}</th></tr>"
    ]
    for section in ra:
        body.append(f'<tr><td colspan="3"><b>{escape(section)}</b></td></tr>')
        rows_b = dict(rb.get(section, []))
        body += [
            f'<tr><td class="k">{escape(k)}</td><td>{escape(v)}</td>'
            f"<td>{escape(rows_b.get(k, '-'))}</td></tr>"
            for k, v in ra[section]
        ]
    body.append("</table>")
    if a.plan.performance and b.plan.performance:
        series = [
            (
                a.title,
                [
                    (c.output_throughput_tok_per_s, c.tpot_s.mean * 1e3)
                    for c in a.plan.performance.curve
                ],
            ),
            (
                b.title,
                [
                    (c.output_throughput_tok_per_s, c.tpot_s.mean * 1e3)
                    for c in b.plan.performance.curve
                ],
            ),
        ]
        body.append(
            svg.line_chart(
                "chart-compare",
                "Latency vs throughput",
                series,
                x_label="output tokens/s",
                y_label="time per output token (ms)",
            )
        )
    return (
        '<!doctype html><html lang="en"><head><meta '
        f'charset="utf-8"><title>compare</title><style>{CSS}</style></head><body>'
        + "".join(body)
        + "</body></html>"
    )


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
