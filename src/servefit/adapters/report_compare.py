"""``servefit report --compare A B``: two report documents side by side, row by row, as
Markdown or as HTML with both predicted latency-throughput curves on one plot. The columns
are titled by the settings that differ between the two (``max-num-seqs 64`` vs
``max-num-seqs 256``, the GPUs, the models), and a first section lists every difference."""

from __future__ import annotations

from html import escape

from servefit.adapters import svg
from servefit.adapters.report_document import ReportDocument
from servefit.adapters.report_html import CSS
from servefit.adapters.report_rows import checklist_rows

TITLE_SETTINGS = 2  # at most this many differing settings name a column


def settings_of(doc: ReportDocument) -> dict[str, str]:
    """What decides a report: the model, the GPUs, vLLM's flags, the workload, the bench."""
    p, s = doc.plan, doc.plan.settings
    return {
        "model": p.model.id,
        "GPU": f"{p.gpu.count} x {p.gpu.name}",
        "precision": f"{p.model.dtype}, {p.model.quantization}",
        "tensor-parallel-size": str(s.tensor_parallel_size),
        "pipeline-parallel-size": str(s.pipeline_parallel_size),
        "max-model-len": str(s.max_model_len),
        "max-num-seqs": str(s.max_num_seqs),
        "max-num-batched-tokens": str(s.max_num_batched_tokens),
        "gpu-memory-utilization": f"{s.gpu_memory_utilization:g}",
        "kv-cache-dtype": s.kv_cache_dtype,
        "block-size": str(s.block_size),
        "prefix caching": "on" if s.enable_prefix_caching else "off",
        "enforce-eager": "on" if s.enforce_eager else "off",
        "vLLM": s.vllm_version,
        "workload": p.performance.workload if p.performance else "-",
        "bench": doc.measured.source if doc.measured else "-",
    }


def differing_settings(a: ReportDocument, b: ReportDocument) -> list[tuple[str, str, str]]:
    """(setting, value in A, value in B) for every setting that differs, in a fixed order."""
    sa, sb = settings_of(a), settings_of(b)
    return [(k, sa[k], sb[k]) for k in sa if sa[k] != sb[k]]


def column_titles(a: ReportDocument, b: ReportDocument) -> tuple[str, str]:
    """Each column named by what sets it apart (the first differing settings); the report
    titles, marked A and B, when nothing in the settings differs."""
    diff = differing_settings(a, b)[:TITLE_SETTINGS]
    if not diff:
        return f"A: {a.title}", f"B: {b.title}"
    return (
        ", ".join(f"{k} {va}" for k, va, _ in diff),
        ", ".join(f"{k} {vb}" for k, _, vb in diff),
    )


def _rows(a: ReportDocument, b: ReportDocument) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(section, [(label, A, B)]): the differing settings first, then the checklist."""
    diff = differing_settings(a, b) or [("settings", "the same", "the same")]
    ra, rb = checklist_rows(a), checklist_rows(b)
    out = [("Differs", diff)]
    for section in ra:
        rows_b = dict(rb.get(section, []))
        out.append((section, [(k, v, rows_b.get(k, "-")) for k, v in ra[section]]))
    return out


def render_compare_markdown(a: ReportDocument, b: ReportDocument) -> str:
    ta, tb = column_titles(a, b)
    out = [f"# {a.title} vs {b.title}", "", f"| | {ta} | {tb} |", "| --- | --- | --- |"]
    for section, rows in _rows(a, b):
        out.append(f"| **{section}** | | |")
        out += [
            f"| {label} | {va.replace('|', '/')} | {vb.replace('|', '/')} |"
            for label, va, vb in rows
        ]
    return "\n".join(out) + "\n"


def render_compare_html(a: ReportDocument, b: ReportDocument) -> str:
    ta, tb = column_titles(a, b)
    body = [
        f"<h1>{escape(a.title)} vs {escape(b.title)}</h1><table>"
        f"<tr><th></th><th>{escape(ta)}</th><th>{escape(tb)}</th></tr>"
    ]
    for section, rows in _rows(a, b):
        body.append(f'<tr><td colspan="3"><b>{escape(section)}</b></td></tr>')
        body += [
            f'<tr><td class="k">{escape(k)}</td><td>{escape(va)}</td><td>{escape(vb)}</td></tr>'
            for k, va, vb in rows
        ]
    body.append("</table>")
    if a.plan.performance and b.plan.performance:
        series = [
            (
                title,
                [(c.output_throughput_tok_per_s, c.tpot_s.mean * 1e3) for c in perf.curve],
            )
            for title, perf in ((ta, a.plan.performance), (tb, b.plan.performance))
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
        f'charset="utf-8"><title>{escape(ta)} vs {escape(tb)}</title><style>{CSS}</style>'
        "</head><body>" + "".join(body) + "</body></html>"
    )
