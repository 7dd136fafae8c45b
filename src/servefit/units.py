"""Unit factors and small integer helpers: the only place unit factors live.

SI inside the library (bytes, seconds, FLOP/s); convert only at the edges.
GiB (2**30) and GB (10**9) are different units and are always named as such.
"""

from __future__ import annotations

KIB_BYTES = 1024
MIB_BYTES = 1024**2
GIB_BYTES = 1024**3
TIB_BYTES = 1024**4
GB_BYTES = 10**9
TB_BYTES = 10**12

TERA = 10**12
GIGA = 10**9

# Bytes of one element of each storage dtype we meet in configs and vLLM flags.
DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "float": 4,
    "fp32": 4,
    "float16": 2,
    "half": 2,
    "fp16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "fp8_ds_mla": 1,
    "int8": 1,
    "uint8": 1,
    "int4": 0.5,
    "fp4": 0.5,
}


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers (as vLLM's ``cdiv``)."""
    return -(a // -b)


def round_up(x: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= ``x``."""
    return cdiv(x, multiple) * multiple


def gib(num_bytes: float) -> float:
    """Bytes -> GiB, for display only."""
    return num_bytes / GIB_BYTES


def gb(num_bytes: float) -> float:
    """Bytes -> GB (decimal), for display only."""
    return num_bytes / GB_BYTES


def dtype_bytes(name: str) -> float:
    """Bytes per element of a dtype name as configs and vLLM flags spell it."""
    key = name.lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        from servefit.errors import ConfigError

        raise ConfigError(
            f"unknown dtype {name!r}; expected one of {', '.join(sorted(DTYPE_BYTES))}"
        )
    return DTYPE_BYTES[key]


_BYTE_SUFFIXES = {
    "": 1,
    "b": 1,
    "kib": KIB_BYTES,
    "mib": MIB_BYTES,
    "gib": GIB_BYTES,
    "tib": TIB_BYTES,
    "kb": 10**3,
    "mb": 10**6,
    "gb": GB_BYTES,
    "tb": TB_BYTES,
}


def parse_bytes(text: str) -> int:
    """ "44981556224", "41.89GiB", "45 GB" -> bytes. GiB and GB are different units."""
    import re

    from servefit.errors import InvalidArgumentError

    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    suffix = match.group(2).lower() if match else None
    if match is None or suffix not in _BYTE_SUFFIXES:
        raise InvalidArgumentError(
            f"{text!r} is not a size: use bytes (44981556224) or a unit: 41.89GiB, 45GB, 512MiB"
        )
    return int(float(match.group(1)) * _BYTE_SUFFIXES[suffix])
