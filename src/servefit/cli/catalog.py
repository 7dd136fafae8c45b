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
def models() -> None:
    """List the bundled model catalog (usable offline)."""
    from servefit.adapters.catalog import model_ids

    for model_id in model_ids():
        click.echo(model_id)
