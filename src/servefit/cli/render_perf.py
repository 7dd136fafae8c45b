"""Terminal rendering of performance, scaling, comparisons and cost (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from servefit.core.error_band import FIGURE_LABELS
from servefit.core.perf import PerformancePlan


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 10:
        return f"{seconds:,.1f} s"
    return f"{seconds * 1e3:,.1f} ms"


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def render_performance(p: PerformancePlan, console: Console) -> None:
    console.print()
    console.print(f"[bold]Performance[/] ({p.workload.describe()}; {p.profile.label})")
    console.print(
        f"  one request alone: TTFT {_ms(p.ttft_cold_s)} ({p.prefill.bound.value}-bound prefill)"
        + (f", {_ms(p.ttft_cached_s)} with the prefix cached" if p.ttft_cached_s else "")
        + f"; {_ms(p.tpot_batch1_s)} per output token = {1 / p.tpot_batch1_s:,.0f} tok/s "
        f"({p.decode.bound.value}-bound decode)"
    )
    console.print(
        f"  a decode step reads {p.decode_bytes_per_token / 1e9:,.2f} GB per GPU "
        f"({p.weight_bytes_per_token / 1e9:,.2f} GB of weights); kernels in "
        f"{', '.join(p.kernel_dtypes)}"
    )
    load = p.load
    console.print(
        f"  under this load: TTFT {_ms(load.ttft_s.mean)} (p99 {_ms(load.ttft_s.p99)}), "
        f"TPOT {_ms(load.tpot_s.mean)} = {load.decode_tok_per_s:,.0f} tok/s per request, "
        f"{_rate(load.output_throughput_tok_per_s)} output tok/s in total, "
        f"{load.request_throughput_per_s:,.2f} req/s; bound by [bold]{load.bound.value}[/]"
        + (f"; goodput {load.goodput_per_s:,.2f} req/s" if load.goodput_per_s is not None else "")
    )
    if p.speculation is not None:
        g = p.speculation
        console.print(
            f"  speculation (k={g.k}, {g.expected_tokens_per_step:.2f} tokens a step): TPOT "
            f"{_ms(p.tpot_batch1_s)} against {_ms(g.tpot_batch1_without_s)} without at batch 1 "
            f"({g.tpot_batch1_without_s / p.tpot_batch1_s:.2f}x), {_ms(load.tpot_s.mean)} "
            f"against {_ms(g.tpot_without_s)} under this load "
            f"({g.tpot_without_s / load.tpot_s.mean:.2f}x); fastest k: {g.best_k_batch1} at "
            f"batch 1, {g.best_k_at_load} at this load's mean batch of {g.mean_batch:,.1f}"
        )
    for figure in ("ttft", "tpot", "throughput"):
        console.print(
            f"  {FIGURE_LABELS[figure]} error: {p.bands.describe(figure)}", highlight=False
        )
    growth = p.queue_growth_per_s
    if growth and p.offered_rate_per_s is not None:
        console.print(
            f"  [red]overloaded[/]: {p.offered_rate_per_s:,.2f} req/s offered, at most "
            f"{p.sustainable_rate_per_s:,.2f} completed (the curve's peak): the queue grows "
            f"by {growth:,.2f} requests a second, so TTFT rises for as long as the load lasts "
            f"(the figures above are of the {load.num_requests:,} simulated requests). More "
            "replicas for the rate: servefit recommend"
        )
    table = Table(title="Latency-throughput curve (closed loop)", title_justify="left")
    for col in (
        "concurrency",
        "TTFT",
        "TTFT p99",
        "TPOT",
        "tok/s per request",
        "output tok/s",
        "batch",
        "bound",
    ):
        table.add_column(col, justify="right" if col != "bound" else "left")
    for c in p.curve:
        table.add_row(
            str(c.concurrency),
            _ms(c.ttft_s.mean),
            _ms(c.ttft_s.p99),
            _ms(c.tpot_s.mean),
            f"{c.decode_tok_per_s:,.0f}",
            _rate(c.output_throughput_tok_per_s),
            f"{c.mean_batch:,.1f}",
            c.bound.value,
        )
    console.print(table)
    if p.agent is not None:
        a = p.agent
        turns = Table(title="Agent session: TTFT per turn", title_justify="left")
        for col in ("turn", "prompt", "cached", "TTFT cold", "TTFT cached", "decode"):
            turns.add_column(col, justify="right")
        for t in a.turns:
            turns.add_row(
                str(t.turn),
                f"{t.prompt_tokens:,}",
                f"{t.cached_tokens:,}",
                _ms(t.ttft_cold_s),
                _ms(t.ttft_cached_s),
                _ms(t.decode_s),
            )
        console.print(turns)
        console.print(
            f"  prefix caching saves {_ms(a.gpu_time_saved_s)} of prefill per session "
            f"({_ms(a.total_ttft_cold_s)} -> {_ms(a.total_ttft_cached_s)}); decode stays "
            f"{_ms(a.total_decode_s)}"
        )
        for note in a.notes:
            console.print(f"  - {note}")
    console.print("[dim]Assumptions:[/]")
    for note in p.assumptions:
        console.print(f"[dim]  - {note}[/]")


def render_scaling(section: Any, console: Console) -> None:
    console.print()
    table = Table(
        title=f"Scaling: {section.num_gpus} GPUs, {section.gpus_per_node} per node "
        f"(objective: {section.objective})",
        title_justify="left",
    )
    for col in ("layout", "fits", "output tok/s (all GPUs)", "TPOT", "TTFT", "note"):
        table.add_column(col)
    for row in section.layouts:
        table.add_row(
            ("* " if row.layout == section.best else "  ") + row.layout,
            "yes" if row.fits else "no",
            _rate(row.output_throughput_tok_per_s) if row.fits else "-",
            _ms(row.tpot_s),
            _ms(row.ttft_s),
            row.problem[:60],
        )
    console.print(table)
    if section.best:
        console.print(f"  best: [bold]{section.best}[/]")
        for line in section.commands:
            console.print(f"    {line}")


def render_compare(doc: Any, console: Console) -> None:
    table = Table(title=f"Same workload: {doc.workload}", title_justify="left")
    for col in (
        "model",
        "GPU",
        "memory",
        "bandwidth",
        "16-bit peak",
        "interconnect",
        "fits",
        "TTFT",
        "tok/s per req (batch 1)",
        "output tok/s",
        "bound",
    ):
        table.add_column(col)
    for r in doc.rows:
        p = r.performance
        table.add_row(
            r.model,
            (f"{r.num_gpus} x " if r.num_gpus > 1 else "") + r.gpu,
            f"{r.memory_bytes / 2**30:,.0f} GiB",
            f"{r.memory_bandwidth_bytes_per_s / 1e9:,.0f} GB/s",
            f"{r.peak_16bit_flops_per_s / 1e12:,.0f} TFLOPS" if r.peak_16bit_flops_per_s else "n/p",
            (
                f"{r.interconnect_bandwidth_bytes_per_s / 1e9:,.0f} GB/s"
                if r.interconnect_bandwidth_bytes_per_s
                else "-"
            ),
            "yes" if r.fits else f"no: {r.problem[:40]}",
            _ms(p.ttft_s) if p else "-",
            f"{1 / p.tpot_batch1_s:,.0f}" if p else "-",
            _rate(p.output_throughput_tok_per_s) if p else "-",
            f"{p.bound} (decode: {p.decode_bound})" if p else "-",
        )
    console.print(table)
    for line in doc.explanation:
        console.print(f"  {line}")
    for r in doc.rows:
        if r.performance is not None and r.performance.error_bands is not None:
            console.print(
                f"  {r.model} on {r.gpu}: {_band_line(r.performance.error_bands)}",
                highlight=False,
            )


def _band_line(bands: Any) -> str:
    """One line of a document's error bands: each speed figure's median and p90, or
    unvalidated (the full wording is in --json and under `plan`)."""
    parts = []
    for key, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("throughput", "throughput")):
        band = getattr(bands, key)
        parts.append(
            f"{label} +-{band.median_abs_error:.0%} median / +-{band.p90_abs_error:.0%} p90 "
            f"({band.records} measurements)"
            if band is not None
            else f"{label} unvalidated"
        )
    return "measured error " + "; ".join(parts)


def render_cost(doc: Any, console: Console) -> None:
    c = doc.cost
    p = doc.performance
    console.print(
        f"[bold]{doc.model}[/] on {doc.num_gpus} x {doc.gpu}: {p.workload}; "
        f"{_rate(p.output_throughput_tok_per_s)} output tok/s, {p.request_throughput_per_s:,.2f} "
        f"req/s per replica ({p.bound}-bound)"
    )
    if p.error_bands is not None:
        console.print(f"  {_band_line(p.error_bands)}", highlight=False)
    console.print(
        f"  ${c.usd_per_hour:,.2f}/hour; ${c.usd_per_million_input_tokens:,.3f} per 1M input "
        f"and ${c.usd_per_million_output_tokens:,.3f} per 1M output tokens "
        f"(prefill is {c.prefill_share:.0%} of a request's GPU time); "
        f"${c.usd_per_request:,.5f} per request; "
        f"[bold]${c.usd_per_successful_task:,.5f} per successful task[/]"
    )
    table = Table(title="Per day", title_justify="left")
    for col in ("scenario", "requests/day", "replicas", "GPU-hours", "self-hosted $", "API $"):
        table.add_column(col, justify="right" if col != "scenario" else "left")
    for s in c.scenarios:
        table.add_row(
            s.label,
            f"{s.requests_per_day:,.0f}",
            str(s.replicas),
            f"{s.gpu_hours_per_day:,.0f}",
            f"{s.self_hosted_usd_per_day:,.2f}",
            f"{s.api_usd_per_day:,.2f}" if s.api_usd_per_day is not None else "-",
        )
    console.print(table)
    if c.break_even_requests_per_day is not None:
        console.print(
            f"  break-even with {c.api}: {c.break_even_requests_per_day:,.0f} requests/day keep "
            "one always-on replica cheaper than the API"
        )
    console.print("[dim]Assumptions:[/]")
    for note in c.assumptions:
        console.print(f"[dim]  - {note}[/]")


def render_calibration(doc: Any, console: Console, output: str | None) -> None:
    d, m, ds = doc.device, doc.measured, doc.datasheet
    console.print(
        f"[bold]{d.name}[/] ({d.backend}"
        + (f", compute capability {d.compute_capability}" if d.compute_capability else "")
        + f"), {doc.model or 'no model (microbenchmarks only)'} in {doc.dtype}, plan "
        + f"{doc.plan}; datasheet: "
        + (d.catalog_gpu or "none (the measured ceilings stand in)")
    )
    table = Table(title="Ceilings: measured vs datasheet", title_justify="left")
    for col in ("what", "measured", "datasheet", "ratio"):
        table.add_column(col, justify="right" if col != "what" else "left")
    table.add_row(
        "read bandwidth",
        f"{m.read_bandwidth_bytes_per_s / 1e9:,.1f} GB/s",
        f"{ds.memory_bandwidth_bytes_per_s / 1e9:,.1f} GB/s",
        f"{m.read_bandwidth_bytes_per_s / ds.memory_bandwidth_bytes_per_s:.0%}",
    )
    table.add_row(
        "copy bandwidth (read + write)", f"{m.copy_bandwidth_bytes_per_s / 1e9:,.1f} GB/s", "", ""
    )
    for dtype, flops in m.matmul_flops_per_s.items():
        peak = ds.peak_flops_per_s.get(dtype)
        table.add_row(
            f"matmul {dtype}",
            f"{flops / 1e12:,.2f} TFLOP/s",
            f"{peak / 1e12:,.2f} TFLOP/s" if peak else "-",
            f"{flops / peak:.0%}" if peak else "-",
        )
    table.add_row(
        "prefill attention (SDPA)", f"{m.attention_flops_per_s / 1e12:,.2f} TFLOP/s", "", ""
    )
    table.add_row(
        "decode attention (KV read)",
        f"{m.decode_attention_bytes_per_s / 1e9:,.1f} GB/s",
        f"{ds.memory_bandwidth_bytes_per_s / 1e9:,.1f} GB/s",
        f"{m.decode_attention_bytes_per_s / ds.memory_bandwidth_bytes_per_s:.0%}",
    )
    for shape, flops in m.projection_flops_per_s.items():
        table.add_row(f"projection {shape}", f"{flops / 1e12:,.3f} TFLOP/s", "", "")
    table.add_row("kernel launch", f"{m.launch_overhead_s * 1e6:,.1f} us", "", "")
    console.print(table)
    f = doc.profile
    if doc.scope == "device":
        console.print(
            f"  device factors (ceilings over the datasheet, no model steps fitted): GEMM "
            f"{f.gemm_efficiency:.0%}, attention {f.attention_efficiency:.0%}, memory "
            f"{f.memory_efficiency:.0%}; upper bounds: a model's steps reach less"
        )
    else:
        _render_steps(doc, console)
    if output:
        console.print(
            f"  profile written to {output}: pass it to plan/compare/cost with --calibration"
        )


def _render_steps(doc: Any, console: Console) -> None:
    steps = Table(
        title="Steps of the whole model (layers built, extrapolated): predicted vs measured",
        title_justify="left",
    )
    for col in ("step", "measured", "before", "after", "bound"):
        steps.add_column(col, justify="right" if col != "step" else "left")
    for p in doc.points:
        steps.add_row(
            f"{p.label} ({p.layers_built}/{p.layers_total} layers)",
            _ms(p.measured_s),
            f"{_ms(p.predicted_before_s)} ({p.predicted_before_s / p.measured_s - 1:+.0%})",
            f"{_ms(p.predicted_after_s)} ({p.predicted_after_s / p.measured_s - 1:+.0%})",
            p.bound,
        )
    console.print(steps)
    f = doc.profile
    console.print(
        f"  fitted: GEMM {f.gemm_efficiency:.0%}, attention {f.attention_efficiency:.0%}, "
        f"memory {f.memory_efficiency:.0%}, {f.step_overhead_s * 1e3:.2f} ms per step; "
        f"median |error| {doc.median_error_before:.0%} -> {doc.median_error_after:.0%}"
    )
