"""``servefit report --format md``: the checklist, the predicted latency-throughput curve
and the diagnosis as Markdown (terminals, pull requests)."""

from __future__ import annotations

from servefit.adapters.report_document import ReportDocument
from servefit.adapters.report_rows import checklist_rows, ms


def render_markdown(doc: ReportDocument) -> str:
    out = [
        f"# {doc.title}",
        "",
        f"servefit {doc.servefit_version} report. Predicted"
        + (" and measured" if doc.measured else "")
        + ".",
        "",
    ]
    for section, rows in checklist_rows(doc).items():
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
            f"| {c.concurrency} | {ms(c.ttft_s.mean)} | {ms(c.tpot_s.mean)} "
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
