"""``servefit gpus`` and ``servefit models``: the bundled catalogs."""

from __future__ import annotations

import click


@click.command()
def gpus() -> None:
    """List the hardware catalog."""
    from rich.console import Console

    from servefit.adapters.catalog import gpu_catalog
    from servefit.cli.render import render_gpus

    def tflops(value: float | None) -> str:
        return f"{value / 1e12:,.0f}" if value else "-"

    rows = [
        (
            g.name + (" ?" if g.is_provisional else ""),
            f"{g.memory_bytes / 2**30:,.0f} GiB",
            f"{g.memory_bandwidth_bytes_per_s / 1e9:,.0f} GB/s",
            tflops(g.bf16_flops_per_s),
            tflops(g.fp8_flops_per_s),
            g.compute_capability or "-",
            ", ".join(g.aliases[:3]),
        )
        for g in gpu_catalog().gpus
    ]
    render_gpus(rows, Console())


@click.command()
@click.option(
    "--search",
    metavar="TEXT",
    help="Only the ids holding every word of TEXT (case-insensitive): 'qwen3 30b', 'llama 70b'.",
)
@click.option(
    "--details", is_flag=True, help="Each id with its confidence and where its config came from."
)
def models(search: str | None, details: bool) -> None:
    """List the bundled model catalog (usable offline)."""
    from servefit.adapters.catalog import find_catalog_model, model_ids

    words = (search or "").lower().split()
    found = [m for m in model_ids() if all(w in m.lower() for w in words)]
    if search is not None and not found:
        click.echo(
            f"no bundled model matches {search!r}; `servefit models` lists them all", err=True
        )
        raise SystemExit(1)
    for model_id in found:
        if not details:
            click.echo(model_id)
            continue
        entry = find_catalog_model(model_id)
        confidence = entry.confidence if entry is not None else "?"
        source = entry.source if entry is not None else ""
        click.echo(f"{model_id}\t{confidence}\t{source}")
