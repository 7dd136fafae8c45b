"""The bundled acceptance figures of the speculative methods (``data/acceptance.toml``),
read once per process: what a plan assumes when the user gives no ``--acceptance-rate``."""

from __future__ import annotations

import json
import tomllib
from functools import cache
from pathlib import Path

from servefit.adapters.catalog import DATA_DIR
from servefit.core.speculative import Acceptance, SpecMethod
from servefit.errors import ConfigError, InvalidArgumentError

FILE = DATA_DIR / "acceptance.toml"


@cache
def published_acceptance() -> dict[SpecMethod, Acceptance]:
    raw = tomllib.loads(FILE.read_text(encoding="utf-8"))
    if raw.get("schema_version") != 1:
        raise ConfigError(
            f"acceptance.toml: unsupported schema_version {raw.get('schema_version')!r}"
        )
    out: dict[SpecMethod, Acceptance] = {}
    for row in raw.get("method", []):
        try:
            method = SpecMethod(row["method"])
            out[method] = Acceptance(
                per_position=tuple(float(p) for p in row["per_position"]),
                source=f"published: {row['source']}",
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"acceptance.toml: malformed row {row!r} ({exc})") from None
    return out


def acceptance_for(method: SpecMethod, k: int, rate: float | None) -> Acceptance:
    """The user's ``--acceptance-rate`` (a constant per-token rate), else the method's
    published figure, else none (0: drafting costs, nothing is gained) said as such."""
    if rate is not None:
        return Acceptance.constant(rate, k, source="--acceptance-rate")
    known = published_acceptance().get(method)
    if known is not None:
        return known
    return Acceptance(
        per_position=(0.0,),
        source=f"no published figure for {method.value}: planned at 0 (give --acceptance-rate)",
    )


def acceptance_from_run(path: str) -> Acceptance:
    """The per-position acceptance a ``servefit bench`` run measured (its folder or its
    summary.json): vLLM's counters over the run, as bench saved them."""
    where = Path(path).expanduser()
    summary = where / "summary.json" if where.is_dir() else where
    try:
        doc = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(
            f"--acceptance-from {path}: not a bench run's folder or summary.json ({exc})"
        ) from None
    metrics = doc.get("server_metrics") if isinstance(doc, dict) else None
    prefix = "spec_decode_acceptance_pos_"
    found = {
        int(k[len(prefix) :]): v
        for k, v in (metrics or {}).items()
        if k.startswith(prefix) and k[len(prefix) :].isdigit() and isinstance(v, int | float)
    }
    if not found:
        raise InvalidArgumentError(
            f"--acceptance-from {path}: the run holds no speculative-decoding counters (was the "
            "server started with --speculative-config, and is it vLLM?)"
        )
    positions = tuple(float(found.get(i, 0.0)) for i in range(max(found) + 1))
    return Acceptance(per_position=positions, source=f"measured by the bench run {summary}")
