"""``servefit report --compare A B``: two report documents side by side, row by row, as
Markdown or as HTML with both predicted latency-throughput curves on one plot."""

from __future__ import annotations

from html import escape

from servefit.adapters import svg
from servefit.adapters.report_document import ReportDocument
from servefit.adapters.report_html import CSS
from servefit.adapters.report_rows import checklist_rows


def render_compare_markdown(a: ReportDocument, b: ReportDocument) -> str:
    ra, rb = checklist_rows(a), checklist_rows(b)
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
    ra, rb = checklist_rows(a), checklist_rows(b)
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
