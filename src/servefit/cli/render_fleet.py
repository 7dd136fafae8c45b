"""The terminal view of ``servefit recommend``: the ranked fleets, the Pareto front, why
the winner wins, its launch commands, and what the search did."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from servefit.app.fleet_types import Candidate, FleetOutcome


def _ms(limit: float | None) -> str:
    return "-" if limit is None else f"{limit:g} ms"


def _formats(c: Candidate) -> str:
    weights = c.quantization or "ckpt"
    return f"{weights}/{'fp8' if c.kv_cache_dtype.startswith('fp8') else 'auto'}"


def render_fleet(outcome: FleetOutcome, out: Console) -> None:
    r = outcome.request
    pct = r.slo.label
    out.print(
        f"[bold]servefit recommend[/] {', '.join(r.models)}: {r.workload.describe()}; SLO "
        f"TTFT {pct} <= {_ms(r.slo.slo.ttft_ms)}, TPOT {pct} <= {_ms(r.slo.slo.tpot_ms)}; "
        f"headroom {r.headroom:.0%}"
    )
    if outcome.best is None:
        out.print(f"[bold red]No fleet meets the SLO within the budget[/]: {outcome.closest_miss}")
    if outcome.candidates:
        _table(outcome, out)
    _front_why_and_commands(outcome, out)


def _table(outcome: FleetOutcome, out: Console) -> None:
    from rich.table import Table

    r = outcome.request
    pct = r.slo.label
    table = Table(title="Fleets, cheapest first", title_justify="left")
    for name, justify in (
        ("#", "right"),
        ("GPU", "left"),
        ("layout", "left"),
        ("GPUs", "right"),
        ("$/h", "right"),
        ("$/1M out", "right"),
        ("$/task", "right"),
        (f"TTFT {pct}", "right"),
        (f"TPOT {pct}", "right"),
        ("KV reqs", "right"),
        ("load/rep", "right"),
        ("binds", "left"),
    ):
        table.add_column(
            name,
            justify=justify,  # type: ignore[arg-type]
            no_wrap=name in ("GPU", "layout", "GPUs"),
        )
    multi = len(r.models) > 1
    for i, c in enumerate(outcome.candidates[: r.top], start=1):
        mark = "" if c.is_recommendable else (" (over budget)" if c.meets_slo else " (misses)")
        table.add_row(
            str(i),
            (f"{c.model} " if multi else "") + c.gpu,
            ("P/D " if c.mode == "disaggregated" else "")
            + f"{c.layout} {_formats(c)} seqs {c.max_num_seqs}",
            f"{c.replicas}x{c.gpus_per_replica}" if c.mode == "aggregated" else str(c.num_gpus),
            f"{c.usd_per_hour:,.2f}",
            f"{c.usd_per_million_output_tokens:,.3f}" if c.meets_slo else "-",
            f"{c.usd_per_task:.6f}" if c.meets_slo else "-",
            f"{c.ttft_s * 1e3:,.0f} ms",
            f"{c.tpot_s * 1e3:,.1f} ms",
            str(c.kv_concurrency),
            f"{c.per_replica_load:,.2f}",
            c.binding + mark,
        )
    out.print(table)


def _front_why_and_commands(outcome: FleetOutcome, out: Console) -> None:
    from rich.table import Table

    from servefit.adapters.fleet_document import why_text

    if outcome.pareto:
        front = Table(
            title="Pareto front: output tok/s per GPU vs decode tok/s per user",
            title_justify="left",
        )
        for name in ("GPU", "mode", "layout", "tok/s/GPU", "tok/s/user", "$/1M out"):
            front.add_column(name)
        for c in outcome.pareto:
            front.add_row(
                c.gpu,
                c.mode,
                c.layout,
                f"{c.output_tok_per_s_per_gpu:,.0f}",
                f"{c.decode_tok_per_s_per_user:,.1f}",
                f"{c.usd_per_million_output_tokens:,.3f}",
            )
        out.print(front)
    out.print(f"\n[bold]Why:[/] {why_text(outcome)}")
    best = outcome.best
    if best is not None:
        out.print("\n[bold]Launch[/] (one replica; run it on each):")
        for line in best.commands:
            out.print(f"  {line}", soft_wrap=True, highlight=False, markup=False)
    n = outcome.counts
    out.print(
        f"\n[dim]Searched {n.gpus} GPU types ({len(n.gpus_skipped)} skipped: no price or not "
        f"vLLM), {n.options} options; pruned {n.pruned_capacity} at capacity, "
        f"{n.pruned_latency} on a single request's latency, {n.pruned_bound} by the cost "
        f"bound; simulated {n.simulated} fleets ({n.simulations} simulations).[/]"
    )
    for line in outcome.assumptions:
        out.print(f"[dim]- {line}[/]")
