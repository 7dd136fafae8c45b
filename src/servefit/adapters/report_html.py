"""``servefit report --format html``: one self-contained HTML file -- the checklist, inline
SVG plots (:mod:`servefit.adapters.svg`: memory, latency vs throughput, agent turns, TTFT and
TPOT distributions, GPU activity) and the diagnosis, with the report document embedded as
JSON (``JSON.parse`` reads it back). Works offline, no scripts."""

from __future__ import annotations

from html import escape

from servefit.adapters import svg
from servefit.adapters.report_document import ReportDocument
from servefit.adapters.report_rows import GIB, checklist_rows

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
    ".finding.mismatch{border-left-color:#dc2626;background:#fef2f2}"
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
        meas = doc.measured
        # a --prefix-cache-compare run: its cold and warm records, labelled, on shared bins
        groups = [(g.label, g.ttft_values_s, g.tpot_values_s) for g in meas.groups] or [
            ("measured", meas.ttft_values_s, meas.tpot_values_s)
        ]
        charts.append(
            svg.histogram(
                "chart-ttft",
                "Measured TTFT distribution",
                [(label, [v * 1e3 for v in ttft]) for label, ttft, _ in groups],
                x_label="TTFT (ms)",
            )
        )
        charts.append(
            svg.histogram(
                "chart-tpot",
                "Measured TPOT distribution",
                [(label, [v * 1e3 for v in tpot]) for label, _, tpot in groups],
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


def embedded_json(text: str) -> str:
    """JSON safe inside ``<script type="application/json">`` and still JSON: a script's
    text is raw (no entities are decoded), so HTML-escaping would break ``JSON.parse``.
    ``<``, ``>`` and ``&`` become the JSON escapes ``\\u003c``, ``\\u003e``, ``\\u0026``
    (as Django's ``json_script``): they occur only inside JSON strings, so the text parses
    to the same document, and no ``</script>``, ``<!--`` or markup of a hostile model name
    is left in the page."""
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(doc: ReportDocument) -> str:
    body = [
        f"<h1>{escape(doc.title)}</h1>",
        f'<p class="muted">servefit {escape(doc.servefit_version)} report: predicted'
        + (" and measured" if doc.measured else "")
        + "</p>",
    ]
    charts = _charts(doc)
    for section, rows in checklist_rows(doc).items():
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
        f'<div class="finding{" mismatch" if f.phase == "evidence" else ""}">'
        f"<b>{escape(f.verdict)}</b> "
        f"({escape(f.phase)}): {escape(f.evidence)}.<br>"
        f"<i>Remedy</i>: {escape(f.remedy)}.</div>"
        for f in doc.diagnosis
    ]
    body.append(f"<h2>Command</h2><pre>{escape(doc.plan.vllm_command)}</pre>")
    data = embedded_json(doc.model_dump_json())
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(doc.title)}</title><style>{CSS}</style></head><body>"
        + "".join(body)
        + f'<script type="application/json" id="servefit-report">{data}</script></body></html>'
    )
