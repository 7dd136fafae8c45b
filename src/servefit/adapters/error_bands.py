"""The bundled error bands (``data/error_bands.toml``): read once per process, written by
``benchmarks/fidelity.py`` from the fidelity corpus."""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from functools import cache

from servefit.adapters.catalog import DATA_DIR
from servefit.core.error_band import ErrorBand, ErrorBands
from servefit.errors import ConfigError

FILE = DATA_DIR / "error_bands.toml"
_FIELDS = ("figure", "hardware_class", "engine", "load", "records", "median_rel", "p90_rel")


@cache
def error_bands() -> ErrorBands:
    """Every band of the bundled file (none when it is absent: every figure unvalidated)."""
    if not FILE.exists():
        return ErrorBands()
    raw = tomllib.loads(FILE.read_text(encoding="utf-8"))
    if raw.get("schema_version") != 1:
        raise ConfigError(
            f"error_bands.toml: unsupported schema_version {raw.get('schema_version')!r}"
        )
    try:
        bands = tuple(ErrorBand(**{k: row[k] for k in _FIELDS}) for row in raw.get("band", []))
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"error_bands.toml: malformed band row ({exc})") from None
    return ErrorBands(bands=bands, source=str(raw.get("source", "")))


def bands_toml(bands: Sequence[ErrorBand], logs: int, measurements: int) -> str:
    """The file ``error_bands.toml`` for these bands (rounded to 0.1 %, so a rerun on the same
    corpus writes the same bytes)."""
    lines = [
        "# Measured error of servefit's predictions per group: written by",
        "# `python benchmarks/fidelity.py --write` from the public fidelity corpus",
        "# (benchmarks/fidelity/); do not edit by hand. median_rel and p90_rel are the median and",
        "# 90th percentile of |predicted - measured| / measured over `records` corpus records.",
        "schema_version = 1",
        f'source = "benchmarks/fidelity/: {logs} vLLM start-up logs, '
        f'{measurements} speed measurements"',
    ]
    for b in bands:
        lines += [
            "",
            "[[band]]",
            f'figure = "{b.figure}"',
            f'hardware_class = "{b.hardware_class}"',
            f'engine = "{b.engine}"',
            f'load = "{b.load}"',
            f"records = {b.records}",
            f"median_rel = {round(b.median_rel, 3)}",
            f"p90_rel = {round(b.p90_rel, 3)}",
        ]
    return "\n".join(lines) + "\n"
