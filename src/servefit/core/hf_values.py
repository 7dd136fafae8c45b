"""Typed reads of JSON values: a config's number as a count in a range, a share, and the
short form an error message quotes a value in. Shared by the config readers
(:mod:`servefit.core.hf_fields`) and the quantization parsers (:mod:`servefit.core.quant`).

Pure: takes values, returns values or raises :class:`~servefit.errors.ConfigError`.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from servefit.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Limit:
    """The range a config count may take, and why (the reason is in the error and the docs)."""

    minimum: int
    maximum: int
    reason: str


GENERIC = Limit(0, 2**31, "a count no model comes near")

_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother, _SHOW.maxlist = 2, 40, 40, 4


def show(value: Any) -> str:
    """A config value as an error message quotes it: short, with its JSON type."""
    if value is None:
        return "null"
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    kind = next((k for t, k in kinds.items() if isinstance(value, t)), None)
    if isinstance(value, list | tuple):
        kind = "a list"
    elif isinstance(value, Mapping):
        kind = "an object"
    if isinstance(value, float) and not math.isfinite(value):
        text = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**18:
        digits = int(value.bit_length() * math.log10(2)) + 1  # str() refuses > 4,300 digits
        return f"an integer of about {digits:,} digits"
    else:
        text = _SHOW.repr(value)
    return f"{text} ({kind})" if kind else text


def checked_int(where: str, name: str, value: Any, limit: Limit = GENERIC) -> int:
    """``value`` as a count in ``limit``: a JSON integer, never a bool, a float, NaN or a
    string."""
    if isinstance(value, bool) or not isinstance(value, int):
        hint = ""
        if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
            hint = f" (write {int(value)}: a count is a JSON integer)"
        raise ConfigError(f"{where}: {name} must be an integer, got {show(value)}{hint}")
    if value < limit.minimum:
        floor = "positive" if limit.minimum == 1 else f"at least {limit.minimum:,}"
        raise ConfigError(
            f"{where}: {name} must be {floor}, got {show(value)} (limit "
            f"{limit.minimum:,} to {limit.maximum:,}: {limit.reason})"
        )
    if value > limit.maximum:
        raise ConfigError(
            f"{where}: {name} must be at most {limit.maximum:,}, got {show(value)} ({limit.reason})"
        )
    return value


def checked_fraction(where: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: {name} must be a number in (0, 1], got {show(value)}")
    if not 0 < value <= 1:  # NaN fails this too
        raise ConfigError(f"{where}: {name} must be in (0, 1] (a share), got {show(value)}")
    return float(value)


def json_numbers(doc: Any, where: str = "") -> Iterator[tuple[str, float]]:
    """Every number of a decoded JSON document (bools are not numbers), with its dotted path
    (``a.b.0``): what a reader range-checks in one pass."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from json_numbers(value, f"{where}.{key}" if where else str(key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from json_numbers(value, f"{where}.{i}")
    elif isinstance(doc, int | float) and not isinstance(doc, bool):
        yield where, doc
