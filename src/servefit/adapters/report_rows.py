"""The report's checklist as (label, value) rows per section -- model, memory, workload,
performance, scaling, economics -- the same for Markdown, HTML and ``report --compare``, and
the number formats they share."""

from __future__ import annotations

from servefit.adapters.report_document import ReportDocument
from servefit.core.diagnosis import Verdict

GIB = 2**30
MISMATCH = Verdict.MISMATCH.value


def evidence_fails(doc: ReportDocument) -> bool:
    """The measurement is not the planned deployment (the evidence check's finding)."""
    return any(f.verdict == MISMATCH for f in doc.diagnosis)


def ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f} s" if v >= 10 else f"{v * 1e3:,.1f} ms"


def num(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def checklist_rows(doc: ReportDocument) -> dict[str, list[tuple[str, str]]]:
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
            ("TTFT cold, one request", ms(perf.ttft_cold_s)),
            (
                "TTFT under load",
                f"{ms(perf.ttft_s)} predicted" + (f" / {ms(meas.ttft_s)} measured" if meas else ""),
            ),
            (
                "TPOT",
                f"{ms(perf.tpot_s)} predicted" + (f" / {ms(meas.tpot_s)} measured" if meas else ""),
            ),
            (
                "decode rate per request",
                f"{perf.decode_tok_per_s:,.0f} tok/s predicted"
                + (f" / {num(meas.decode_tok_per_s)} tok/s measured" if meas else ""),
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
        if meas is not None and evidence_fails(doc):
            sections["Performance"].insert(
                0,
                (
                    "measured evidence",
                    f"{MISMATCH}: the measured figures are shown, not diagnosed (see Diagnosis)",
                ),
            )
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
                    f"TTFT {ms(perf.ttft_cold_s)} -> "
                    f"{ms(perf.ttft_cached_prefix_s)} with the prefix cached",
                )
            )
        if perf.agent is not None:
            scaling.append(
                (
                    "agent sessions",
                    f"prefix caching saves {ms(perf.agent.gpu_time_saved_s)} of prefill "
                    f"per session; decode unchanged ({ms(perf.agent.total_decode_s)})",
                )
            )
        if perf.speculation is not None:
            g = perf.speculation
            line = (
                f"{g['expected_tokens_per_step']:.2f} tokens a step planned "
                f"(TPOT {ms(perf.tpot_batch1_s)} against {ms(g['tpot_batch1_without_s'])} "
                "without, at batch 1)"
            )
            if meas is not None and meas.spec_mean_acceptance_length is not None:
                per_position = " / ".join(f"{v:.2f}" for v in meas.spec_acceptance_per_position)
                line += (
                    f"; measured {meas.spec_mean_acceptance_length:.2f} (per position "
                    f"{per_position})"
                )
            scaling.append(("speculative decoding", line))
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
            (
                "per successful task",
                f"${c.usd_per_successful_task:,.5f}"
                + "".join(
                    f" ({a})"
                    for a in c.assumptions
                    if a.startswith(("a task takes", "over that interval"))
                ),
            ),
        ]
        if doc.cost_basis:
            sections["Economics"].insert(0, ("throughput", doc.cost_basis))
    return sections
