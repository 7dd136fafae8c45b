"""Human-readable rendering of a plan: a breakdown table, a memory bar, the verdict."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from servefit.core.plan import CapacityPlan

if TYPE_CHECKING:
    from servefit.adapters.model_source import LoadedModel
    from servefit.app.plan import PlanOutcome
from servefit.units import GIB_BYTES, MIB_BYTES

MIB = MIB_BYTES

BAR_WIDTH = 60
PART_STYLES = {
    "weights": ("Weights", "blue"),
    "kv_cache": ("KV cache + state", "green"),
    "activations": ("Activations (peak)", "yellow"),
    "runtime": ("Runtime (non-torch + CUDA graphs)", "magenta"),
    "headroom": ("Headroom (unused by vLLM)", "grey50"),
}


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB_BYTES:,.2f} GiB"


def _params(count: int) -> str:
    return f"{count / 1e9:,.2f} B" if count >= 1e8 else f"{count / 1e6:,.1f} M"


# A catalog note's opening words that only restate its level ("medium:", "RECONSTRUCTED:").
_LEVEL_PREFIX = re.compile(r"^(?:(?:reconstructed|low-medium|medium|high|low)\b[\s:.,;-]*)+", re.I)
NOTE_WIDTH = 140  # characters of a catalog note the terminal shows (the JSON has it all)


def catalog_caveat(loaded: LoadedModel | None) -> str | None:
    """One line when the config came from a catalog entry below high confidence or
    reconstructed from other files; None otherwise."""
    if loaded is None or loaded.catalog_confidence is None:
        return None
    note = (loaded.catalog_note or "").replace("**", "").strip()
    reconstructed = "reconstruct" in f"{note} {loaded.source}".lower()
    if loaded.catalog_confidence == "high" and not reconstructed:
        return None
    level = f"{loaded.catalog_confidence} confidence" + (", reconstructed" if reconstructed else "")
    summary = _LEVEL_PREFIX.sub("", note).split(". ")[0].rstrip(".")
    if summary.startswith("(") and summary.endswith(")"):
        summary = summary[1:-1]
    if len(summary) > NOTE_WIDTH:
        summary = summary[: NOTE_WIDTH - 3].rstrip() + "..."
    return (
        f"catalog entry: {level}"
        + (f" ({summary})" if summary else "")
        + "; give a path to the model's own config.json to plan on the real file"
    )


def memory_bar(plan: CapacityPlan) -> Text:
    parts = plan.memory.parts_bytes
    total = max(plan.memory.total_bytes, sum(max(v, 0) for v in parts.values()))
    bar = Text()
    used = 0
    for key, value in parts.items():
        width = round(max(value, 0) / total * BAR_WIDTH) if total else 0
        width = min(width, BAR_WIDTH - used)
        used += width
        bar.append("█" * width, style=PART_STYLES[key][1])
    bar.append("░" * (BAR_WIDTH - used), style="grey23")
    return bar


def render_capacity(
    plan: CapacityPlan,
    *,
    model_id: str,
    console: Console,
    checkpoint_bytes: int | None = None,
    loaded: LoadedModel | None = None,
) -> None:
    """The model, where the memory goes, and the KV cache as the engine reports it.
    ``loaded``: where the config came from (a catalog entry's confidence is shown)."""
    device = "CPU" if plan.gpu.vendor == "cpu" else "GPU"  # as vLLM names the device
    spec, p, m, r = plan.model, plan.params, plan.memory, plan.settings
    gpus = f"{r.num_gpus} x {plan.gpu.name}" if r.num_gpus > 1 else plan.gpu.name
    # vLLM names its release; other engines plan by their own rules (their assumptions
    # say which), so no vLLM release number is printed beside their name
    version = r.vllm_version if plan.engine.startswith("vllm") else plan.engine_version
    under = f"{plan.engine_label} {version}".rstrip()
    console.print(f"[bold]{model_id}[/] on [bold]{gpus}[/] under {under}")
    active = ""
    if p.active != p.total:
        active = f", {_params(p.active)} active per token"
        if p.active_non_embedding != p.active:
            active += f" ({_params(p.active_non_embedding)} without the input embedding)"
    console.print(
        f"  {spec.family}, {spec.num_layers} layers, {_params(p.total)} parameters{active}; "
        f"{spec.dtype}, {spec.quant.description}"
    )
    kinds: dict[str, int] = {}
    for layer in spec.layers:
        # Nemotron-NAS has layers of neither attention nor MLP (both no_op)
        kind = layer.mixer.kind.value if layer.mixer else ("mlp only" if layer.mlp else "no-op")
        kinds[kind] = kinds.get(kind, 0) + 1
    console.print("  layers: " + ", ".join(f"{n} {k}" for k, n in kinds.items()))
    caveat = catalog_caveat(loaded)
    if caveat:
        console.print(f"  [yellow]{escape(caveat)}[/]", highlight=False)
    if checkpoint_bytes:
        console.print(
            f"  weights: {_gib(plan.weights_total_bytes)} as loaded (servefit), "
            f"{_gib(checkpoint_bytes)} in the checkpoint (safetensors index, MTP and all)"
        )

    table = Table(
        title=f"Memory per {device} ({_gib(m.total_bytes)} {plan.memory_label})",
        title_justify="left",
    )
    table.add_column("part")
    table.add_column("size", justify="right")
    table.add_column("share", justify="right")
    for key, value in m.parts_bytes.items():
        label, style = PART_STYLES[key]
        if plan.engine != "vllm":  # no CUDA graphs, not vLLM's headroom
            label = label.partition(" (")[0]
        if key == "headroom" and value < 0:  # no negative memory: what is missing, in red
            table.add_row(Text("Short (more than the device has)", style="red"), _gib(-value), "")
            continue
        share = value / m.total_bytes if m.total_bytes else 0
        table.add_row(Text(label, style=style), _gib(value), f"{share:.0%}")
    table.add_row(
        f"budget (x {plan.budget_label})",
        _gib(m.requested_bytes),
        f"{r.gpu_memory_utilization:.0%}",
    )
    console.print(table)
    console.print(memory_bar(plan))

    console.print()
    held = "reports it at startup" if plan.engine == "vllm" else "would hold it"
    console.print(f"[bold]KV cache[/] (as {plan.engine_label} {held})")
    source = "given (--kv-cache-memory-bytes)" if m.is_kv_cache_given else "predicted"
    if m.kv_cache_bytes > 0:
        console.print(f"  Available KV cache memory: {_gib(m.kv_cache_bytes)} ({source})")
    elif m.weights_bytes > m.total_bytes:
        console.print("  Available KV cache memory: none: the engine stops loading the weights")
    else:
        console.print(
            f"  Available KV cache memory: none: the budget is {_gib(-m.kv_cache_bytes)} short "
            f"({source})"
        )
    if plan.behaviour.is_v0_engine:  # V0 prints its blocks (worker.py / executor)
        console.print(f"  # {device} blocks: {plan.num_blocks:,} ({plan.kv_cache_tokens:,} tokens)")
    else:
        console.print(f"  {device} KV cache size: {plan.kv_cache_tokens:,} tokens")
    console.print(
        f"  Maximum concurrency for {r.max_model_len:,} tokens per request: "
        f"{plan.max_concurrency:.2f}x"
    )
    groups = len(plan.layout.groups)
    console.print(
        f"  {plan.num_blocks:,} blocks of {r.block_size} tokens, {groups} KV-cache group"
        f"{'s' if groups != 1 else ''}, {_gib(plan.layout.bytes_per_block)} per block"
    )
    if plan.kv_bytes_per_token:
        console.print(
            f"  attention KV per token: {plan.kv_bytes_per_token / 1024:,.1f} KiB per {device}"
        )
    if plan.state_bytes_per_sequence:
        console.print(
            f"  constant state per sequence: {plan.state_bytes_per_sequence / MIB:,.1f} MiB "
            f"per {device} (linear attention / Mamba layers, whatever the context)"
        )
    console.print(
        f"  one sequence of {r.context_tokens:,} tokens: "
        f"{plan.sequence_bytes_at_context / MIB:,.1f} MiB per {device}; "
        f"{plan.concurrency_at_context:.2f} such sequences fit at once"
    )
    console.print(f"  longest single request that fits: {plan.largest_max_model_len:,} tokens")
    if r.data_parallel_size > 1:  # every DP rank logs its own KV cache lines, as above
        dp = r.data_parallel_size
        console.print(
            f"  each of the {dp} data-parallel ranks ({r.gpus_per_rank} GPU(s) each) logs the "
            f"lines above; together: {plan.kv_cache_tokens * dp:,} tokens, "
            f"{plan.max_concurrency * dp:.2f}x, up to {r.max_num_seqs * dp:,} running requests"
        )
    if r.concurrency > 1:
        console.print(
            f"  longest context for {r.concurrency} concurrent requests: "
            f"{plan.max_context_at_concurrency:,} tokens"
        )
    if plan.mamba_block_limit is not None:
        console.print(
            f"  state blocks cap --max-num-seqs at {plan.mamba_block_limit:,} "
            f"(now {r.max_num_seqs})"
        )


def render_gpus(rows: Sequence[tuple[str, ...]], console: Console) -> None:
    table = Table(title="GPU catalog (dense peak figures)", title_justify="left")
    for col in ("name", "memory", "bandwidth", "bf16", "fp8", "CC", "aliases"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    console.print(table)


_MARKS = {
    "pass": ("✓", "green"),
    "warn": ("!", "yellow"),
    "fail": ("✗", "red"),
    "skip": ("-", "grey50"),
}


def render_checks(checks: list[Any], *, passed: bool, command: list[str], console: Console) -> None:
    """The preflight checklist: one line per link, remedies under failures and warnings."""
    for check in checks:
        mark, style = _MARKS[check.status.value]
        console.print(f"[{style}]{mark}[/] [bold]{check.name}[/]: {check.reason}", highlight=False)
        if check.remedy and check.status.value in ("fail", "warn"):
            console.print(f"    [dim]-> {check.remedy}[/]", highlight=False)
    console.print()
    if passed:
        tail = f": running {' '.join(command)}" if command else ""
        console.print(f"[bold green]PREFLIGHT PASSED[/]{tail}", highlight=False)
    else:
        tail = "; not running the command" if command else ""
        console.print(f"[bold red]PREFLIGHT FAILED[/]{tail}", highlight=False)


def render_bench(result: Any, console: Console) -> None:
    """The console table of a benchmark run."""
    s = result.summary
    console.print(
        f"[bold]{result.server.get('model', '?')}[/] at {', '.join(result.server['base_urls'])}: "
        f"{s.successful} ok, {s.errored} errored, {s.incomplete} incomplete in {s.duration_s:.2f} s"
    )
    table = Table(title_justify="left")
    for col in ("metric", "aggregation", "mean", "p50", "p90", "p99"):
        table.add_column(col, justify="right" if col not in ("metric", "aggregation") else "left")

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:,.1f} ms"

    for label, d in (
        ("TTFT", s.ttft_s),
        ("TPOT (excl. 1st token)", s.tpot_s),
        ("ITL (chunk gaps)", s.itl_s),
        ("E2E", s.e2e_s),
        ("client lag", s.client_lag_s),
    ):
        table.add_row(label, d.aggregation, ms(d.mean), ms(d.p50), ms(d.p90), ms(d.p99))
    d = s.decode_tok_per_s
    table.add_row(
        "decode rate",
        d.aggregation,
        *(f"{v:,.1f} tok/s" if v is not None else "-" for v in (d.mean, d.p50, d.p90, d.p99)),
    )
    console.print(table)
    console.print(
        f"requests {s.request_throughput_per_s:,.2f}/s | "
        f"output {s.output_throughput_tok_per_s:,.1f} tok/s | "
        f"total {s.total_token_throughput_tok_per_s:,.1f} tok/s | achieved concurrency "
        f"{s.achieved_concurrency:.1f} | tokens from {s.token_count_source}"
    )
    if s.goodput_per_s is not None:
        console.print(f"goodput {s.goodput_per_s:,.2f} requests/s meeting the SLOs")
    if s.cached_tokens_total is not None:
        console.print(
            f"cached prompt tokens: {s.cached_tokens_total:,} of {s.prompt_tokens_total:,}"
        )
    m = result.server_metrics
    if "spec_decode_acceptance_rate" in m:  # vLLM's own counters over the run
        positions = sorted(
            (int(k.rsplit("_", 1)[1]), v)
            for k, v in m.items()
            if k.startswith("spec_decode_acceptance_pos_")
        )
        console.print(
            f"speculative decoding: {m['spec_decode_drafts']:,.0f} drafts, acceptance "
            f"{m['spec_decode_acceptance_rate']:.1%} of drafted tokens, mean acceptance "
            f"length {m['spec_decode_mean_acceptance_length']:.2f}; per position "
            + " / ".join(f"{v:.2f}" for _, v in positions)
        )
    for t in result.turns:
        console.print(
            f"  turn {t.turn}: {t.requests} requests, prompt {t.prompt_tokens_mean or 0:,.0f} tok, "
            f"cached {t.cached_tokens_mean if t.cached_tokens_mean is not None else '-'}, "
            f"TTFT {ms(t.ttft_s_mean)}"
        )
    if result.prefix_cache_comparison:
        console.print("[bold]prefix cache, per turn[/] (same sessions: cache-busted vs as sent)")
        for c in result.prefix_cache_comparison:
            console.print(
                f"  turn {c.turn}: prompt {c.prompt_tokens_mean or 0:,.0f} tok, TTFT cold "
                f"{ms(c.ttft_cold_s)} -> warm {ms(c.ttft_warm_s)} (saved {ms(c.ttft_saved_s)})"
            )
    if result.prediction:
        p = result.prediction
        peak = result.server_peaks.get("kv_cache_usage")
        measured = f"; server KV usage peaked at {peak:.0%}" if peak is not None else ""
        console.print(
            f"predicted (servefit plan, {p['model']} on {p['gpu']}): the KV cache holds "
            f"{p['max_concurrent_requests_at_context']:.1f} requests of "
            f"{p['context_tokens']:,} tokens; "
            f"measured achieved concurrency {s.achieved_concurrency:.1f}{measured}"
        )
    for name, count in s.errors.items():
        console.print(f"  [red]{count} x {name}[/]")
    for line in result.warnings:
        console.print(f"[yellow]! {line}[/]")


def render_verdict(outcome: PlanOutcome, console: Console) -> None:
    """The one verdict, what was checked, the one recommendation and the launch command."""
    v, plan = outcome.verdict, outcome.capacity
    console.print()
    style = "yellow" if v.is_at_edge else ("green" if v.fits else ("yellow" if v.starts else "red"))
    console.print(f"[bold {style}]{v.headline}[/]", highlight=False)
    if outcome.deployment.is_workload_given:
        console.print(f"  workload: {outcome.deployment.workload.describe()}", highlight=False)
    for line in v.reasons:
        console.print(f"  - {escape(line)}", highlight=False)
    for line in v.checks:
        console.print(f"  [green]ok[/] {escape(line)}", highlight=False)
    if v.margin is not None:
        console.print(f"  margin: {escape(v.margin.describe())}", highlight=False)
    if v.edge_advice:
        console.print(
            f"  out of the edge: {' or '.join(v.edge_advice)}", soft_wrap=True, highlight=False
        )
    for line in plan.warnings:
        console.print(f"  [yellow]! {escape(line)}[/]", highlight=False)
    console.print()
    rec = outcome.recommendation
    if v.fits:
        console.print("[bold]Launch command[/]")
    elif rec is not None:
        console.print("[bold]Recommendation[/] (every change together, re-planned: it fits)")
        for ch in rec.changes:
            console.print(f"  {ch.flag} {ch.before} -> {ch.after}: {ch.gives_up}", highlight=False)
        c, rv = rec.capacity, rec.verdict
        held = (
            f"; {rv.workload_requests_held:,.2f} of the workload's {rv.workload_tokens:,}-token "
            "requests"
            if rv.workload_tokens
            else ""
        )
        console.print(
            f"  then: {c.kv_cache_tokens:,} tokens of KV cache, {c.max_concurrency:,.2f} requests "
            f"of {c.settings.max_model_len:,} tokens at once{held}",
            highlight=False,
        )
        console.print(f"  {outcome.recommended_command}", soft_wrap=True, highlight=False)
        console.print()
        console.print("[bold]Your command[/] (does not fit as it is)")
    else:
        console.print(
            "[bold]No recommendation[/]: no layout of up to 8 GPUs, fp8 KV cache or shorter "
            "context makes it fit; a larger GPU or a quantized checkpoint is needed"
        )
        console.print()
        console.print("[bold]Your command[/] (does not fit as it is)")
    console.print(f"  {outcome.vllm_command}", soft_wrap=True, highlight=False)
    console.print()
    console.print("[dim]Assumptions:[/]")
    for line in plan.assumptions:
        console.print(f"[dim]  - {line}[/]", highlight=False)


def render_fit(outcome: Any, rows: Sequence[Any], console: Console) -> None:
    """``servefit fit``'s ranked table: what fits first, the largest model first."""
    fitting = len(outcome.fitting)
    table = Table(
        title=(
            f"Bundled models on {outcome.gpu} for {outcome.task}: {fitting} of "
            f"{len(outcome.rows)} fit (largest first)"
        ),
        title_justify="left",
    )
    for col in ("model", "weights", "params", "fits", "context", "longest", "at once", "tok/s"):
        table.add_column(col, justify="left" if col in ("model", "weights", "fits") else "right")
    for r in rows:
        table.add_row(
            r.model,
            r.weights,
            f"{r.total_params / 1e9:,.1f} B",
            "yes" if r.fits else "[red]no[/]",
            f"{r.context_tokens:,}",
            f"{r.largest_context_tokens:,}" if r.largest_context_tokens else "-",
            f"{r.max_concurrency:,.1f}" if r.fits else "-",
            f"{r.decode_tok_per_s:,.0f}" if r.decode_tok_per_s else "-",
        )
    console.print(table)
    console.print(
        "[dim]longest: the longest request the KV cache holds; at once: requests of the "
        "context held together; tok/s: one request decoding at 1,024 tokens of context "
        "(vLLM rows; `plan`'s performance section for llama.cpp and MLX). "
        "Each row is `servefit plan MODEL --max-model-len CONTEXT` (with its weights' flag).[/]"
    )
    if outcome.skipped:
        console.print(f"[dim]not planned here: {len(outcome.skipped)} (--json lists them)[/]")
