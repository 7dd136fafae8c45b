"""The bundled acceptance figures of the speculative methods (``data/acceptance.toml``),
read once per process: what a plan assumes when the user gives no ``--acceptance-rate``."""

from __future__ import annotations

import tomllib
from functools import cache

from servefit.adapters.catalog import DATA_DIR
from servefit.core.speculative import Acceptance, SpecMethod
from servefit.errors import ConfigError

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
