"""What ``servefit up`` prints and writes: each logged quantity next to the plan's, the smoke
bench of the planned workload (predicted next to measured), and the run folder's documents
(``startup.json``, ``report.md``; ``plan.json``, ``vllm.log`` and ``bench/`` are written as
the run goes)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servefit.adapters.redact import redact_argv, write_text
from servefit.adapters.vllm_log import StartupLog
from servefit.app.check_log import Comparison, LogRefusal
from servefit.app.plan import PlanOutcome
from servefit.units import GIB_BYTES


@dataclass(slots=True)
class UpResult:
    exit_code: int
    run_dir: Path | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    refusals: list[LogRefusal] = field(default_factory=list)
    explanation: str = ""
    ready_s: float | None = None  # from the command's start to /v1/models answering
    launch_to_ready_s: float | None = None
    smoke: dict[str, Any] | None = None
    eval: dict[str, Any] | None = None  # ``--eval``: the short eval after the smoke bench
    command: list[str] = field(default_factory=list)

    @property
    def findings(self) -> list[str]:
        return [c.explain() for c in self.comparisons if c.explain()]


def fmt(quantity: str, value: float | None) -> str:
    if value is None:
        return "-"
    if quantity.endswith("_bytes"):
        return f"{value / GIB_BYTES:.2f} GiB"
    if quantity == "max_concurrency":
        return f"{value:.2f}x"
    return f"{value:,.0f}"


def describe(c: Comparison) -> str:
    mark = "!" if c.explain() else "="
    given = (
        f", given the logged KV memory {fmt(c.quantity, c.predicted_given_logged_kv_memory)}"
        if c.predicted_given_logged_kv_memory is not None and c.quantity != "block_size"
        else ""
    )
    # an error that rounds to 0.00 % is the log's own rounding (vLLM prints "%.2fx")
    shown = f"{c.relative_error:+.2%}" if c.relative_error else ""
    error = f" ({shown})" if shown not in ("", "+0.00%", "-0.00%") else ""
    text = (
        f"  {mark} {c.quantity}: logged {fmt(c.quantity, c.logged)}, planned "
        f"{fmt(c.quantity, c.predicted)}{error}{given}"
    )
    return text + (f"\n    finding: {c.explain()}" if c.explain() else "")


def smoke_bench(
    outcome: PlanOutcome,
    base_url: str,
    num_requests: int,
    out_dir: Path,
    *,
    api_key: str | None = None,
) -> dict[str, Any]:
    """A short bench of the planned workload (``servefit.bench``), predicted next to measured."""
    from servefit.bench.config import BenchConfig
    from servefit.bench.runner import run
    from servefit.bench.schedules import Schedule
    from servefit.bench.workloads import WorkloadConfig

    w = outcome.deployment.workload
    concurrency = max(1, min(w.concurrency or 1, num_requests))
    cfg = BenchConfig(
        base_urls=(base_url,),
        workload=WorkloadConfig(
            kind="random",
            num_requests=num_requests,
            input_len=w.input_len.mean,
            output_len=w.output_len.mean,
        ),
        schedule=Schedule(concurrency=concurrency),
        timeout_s=600.0,
    )
    result = run(cfg, api_key=api_key, out_dir=out_dir)
    s = result.summary
    perf = outcome.performance
    return {
        "requests": num_requests,
        "concurrency": concurrency,
        "input_len": w.input_len.mean,
        "output_len": w.output_len.mean,
        "successful": s.successful,
        "errored": s.errored,
        "incomplete": s.incomplete,
        "errors": s.errors,
        "measured": {
            "ttft_s": s.ttft_s.mean,
            "tpot_s": s.tpot_s.mean,
            "output_throughput_tok_per_s": s.output_throughput_tok_per_s,
        },
        "predicted": {
            "ttft_s": perf.ttft_s if perf else None,
            "tpot_s": perf.tpot_s if perf else None,
            "output_throughput_tok_per_s": perf.output_throughput_tok_per_s if perf else None,
        },
        "interrupted": result.interrupted,
    }


def launch_eval(
    items: list[Any], base_url: str, out_dir: Path, *, api_key: str | None, seed: int = 0
) -> dict[str, Any]:
    """``up --eval``: the already-read items (a seeded subset) scored against the engine just
    launched, with servefit's own runner (greedy, the served model); SIGINT or SIGTERM during
    it is handed on once what was scored is written, so the engine still stops."""
    import signal

    from servefit.app.evals import EvalRequest, evaluate
    from servefit.bench.evals import EvalConfig
    from servefit.bench.interrupt import Interrupt

    request = EvalRequest(config=EvalConfig(base_url=base_url, seed=seed), out_dir=out_dir)
    with Interrupt(hand_on=frozenset({signal.SIGINT, signal.SIGTERM})) as interrupt:
        doc = evaluate(request, api_key=api_key, interrupt=interrupt, items=items)
    o = doc.overall
    return {
        "items": len(items),
        "scored": o.scored,
        "correct": o.correct,
        "failed": o.failed,
        "accuracy": o.accuracy,
        "low": o.low,
        "high": o.high,
        "confidence": o.confidence,
        "tasks": {t.task: t.accuracy for t in doc.tasks},
        "folder": str(out_dir),
    }


def write_report(run_dir: Path, outcome: PlanOutcome, result: UpResult, hw: str) -> None:
    """``report.md``: the plan, the startup log held against it, the smoke bench."""
    plan = outcome.capacity
    lines = [
        f"# servefit up: {outcome.resolved.model_id}",
        "",
        f"- hardware: {hw}",
        f"- engine: {plan.engine_label} {plan.settings.vllm_version}",
        f"- command: `{' '.join(redact_argv(result.command))}`",
        f"- verdict: {outcome.verdict.headline}",
    ]
    if result.ready_s is not None:
        lines.append(
            f"- ready {result.ready_s:.1f} s after the command started "
            f"({result.launch_to_ready_s:.1f} s after launch)"
        )
    lines += [
        "",
        "## Startup log against the plan",
        "",
        "| quantity | logged | planned | error | planned given logged KV memory |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in result.comparisons:
        error = f"{c.relative_error:+.2%}" if c.relative_error is not None else "-"
        lines.append(
            f"| {c.quantity} | {fmt(c.quantity, c.logged)} | {fmt(c.quantity, c.predicted)} "
            f"| {error} | {fmt(c.quantity, c.predicted_given_logged_kv_memory)} |"
        )
    lines += ["", "Findings: " + ("; ".join(result.findings) or "none (all within 2 %)")]
    if result.explanation:
        lines += ["", "## Engine refusal", "", result.explanation]
    if result.smoke is not None:
        s = result.smoke
        lines += [
            "",
            "## Smoke bench (predicted next to measured)",
            "",
            f"{s['requests']} requests of {s['input_len']} + {s['output_len']} tokens at "
            f"concurrency {s['concurrency']}: {s['successful']} ok, {s['errored']} errors, "
            f"{s['incomplete']} incomplete",
            "",
            "| metric | predicted | measured |",
            "| --- | --- | --- |",
        ]
        for key in ("ttft_s", "tpot_s", "output_throughput_tok_per_s"):
            p, m = s["predicted"][key], s["measured"][key]
            lines.append(
                f"| {key} | {'-' if p is None else f'{p:.4g}'} | "
                f"{'-' if m is None else f'{m:.4g}'} |"
            )
        lines += [
            "",
            "Predictions on a CPU rest on an assumed memory bandwidth and the generic "
            "efficiency profile; capacity figures do not.",
        ]
    if result.eval is not None:
        lines += ["", "## Eval (answers, greedy)", "", eval_line(result.eval)]
    write_text(run_dir / "report.md", "\n".join(lines) + "\n")


def eval_line(e: dict[str, Any]) -> str:
    """``up --eval``'s result in one line."""
    if e["accuracy"] is None:
        return f"{e['items']} items: none scored ({e['failed']} failed requests)"
    return (
        f"{e['correct']}/{e['scored']} right ({e['accuracy']:.1%}, {e['confidence']:.0%} "
        f"interval {e['low']:.1%}-{e['high']:.1%}), {e['failed']} failed; items in {e['folder']}"
    )


def startup_doc(result: UpResult, log: StartupLog) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "engine_version": log.engine_version,
        "comparisons": [c.as_dict() for c in result.comparisons],
        "findings": result.findings,
        "refusals": [{"kind": r.kind.value, "line": r.line, **r.detail} for r in result.refusals],
        "explanation": result.explanation,
        "ready_s": result.ready_s,
        "launch_to_ready_s": result.launch_to_ready_s,
    }


def default_run_dir() -> Path:
    return Path("servefit-runs") / time.strftime("up-%Y%m%d-%H%M%S")


def write_startup(run_dir: Path, result: UpResult, log: StartupLog) -> None:
    write_text(run_dir / "startup.json", json.dumps(startup_doc(result, log), indent=2))


def num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"
