"""Unit factors and small integer helpers: the only place unit factors live.

SI inside the library (bytes, seconds, FLOP/s); convert only at the edges.
GiB (2**30) and GB (10**9) are different units and are always named as such.
"""

from __future__ import annotations

import math
import re

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


# ------------------------------------------------------------ vLLM's human-readable integers

# Source: vllm/utils/argparse_utils.py `human_readable_int` (vLLM 0.32.0). Lowercase suffixes
# are decimal, uppercase binary, and they count tokens as well as bytes.
_HUMAN_INT_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_HUMAN_INT_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
# vLLM keeps these in 64-bit integers; anything larger is a typo, not a setting.
_HUMAN_INT_MAX = 2**63 - 1
HUMAN_INT_SPELLINGS = (
    "an integer as vLLM spells it: 32768, 32_768, 32k (= 32,000), 32K (= 32,768), "
    "25.6k (= 25,600), 1g (= 10^9), 1G (= 2^30)"
)


def parse_human_int(text: str, *, flag: str) -> int:
    """A count as vLLM's ``human_readable_int`` reads it: ``"32k"`` -> 32000, ``"32K"`` -> 32768.

    Lowercase ``k m g t`` are decimal (10^3 ... 10^12), uppercase ``K M G T`` binary
    (2^10 ... 2^40); a decimal number is allowed only with a decimal suffix (``25.6k``);
    without a suffix the text is read as Python's ``int`` reads it (``+5``, ``32_768``).
    With a decimal suffix vLLM multiplies a float and truncates, and so do we, so that the
    number planned is the number served: ``1.001k`` is 1000 there (1.001 * 1000 =
    1000.9999999999999), not 1001.

    Stricter than vLLM where vLLM's answer cannot be a setting: negative numbers, digits
    other than ASCII, and values beyond 64 bits (where vLLM overflows) are refused.
    """
    from servefit.errors import InvalidArgumentError

    value = text.strip()

    def refuse(reason: str) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"{flag} {reason}, got {text!r}; it takes {HUMAN_INT_SPELLINGS}"
        )

    if not value.isascii():
        raise refuse("takes ASCII digits")
    suffixed = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kmgtKMGT])", value)
    if suffixed is not None:
        number, suffix = suffixed.groups()
        if len(number) > 40:  # far beyond 64 bits or a float's precision
            raise refuse("has too many digits")
        if suffix in _HUMAN_INT_BINARY:
            if "." in number:
                raise refuse(
                    f"allows decimals only with a decimal suffix (write "
                    f"{number}{suffix.lower()} for {number} x 10^"
                    f"{3 * 'kmgt'.index(suffix.lower()) + 3})"
                )
            result = int(number) * _HUMAN_INT_BINARY[suffix]
        else:
            product = float(number) * _HUMAN_INT_DECIMAL[suffix]  # vLLM's float arithmetic
            if not math.isfinite(product):
                raise refuse("is too large")
            result = int(product)
    elif re.fullmatch(r"[+-]?[0-9]+(?:_[0-9]+)*", value):  # what int() accepts, base 10
        digits = value.lstrip("+-").replace("_", "").lstrip("0")
        if value.startswith("-") and digits:
            raise refuse("must not be negative")
        if len(digits) > 19:  # longer than any 64-bit integer: do not build a huge int
            raise refuse("is too large")
        result = int(value)
    elif unit := re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([kmgtKMGT])i?[bB]", value):
        raise refuse(f"has no byte units in vLLM (write {_human_int_for_bytes(*unit.groups())})")
    else:
        raise refuse("is not an integer")
    if result > _HUMAN_INT_MAX:
        raise refuse("is too large")
    return result


def _human_int_for_bytes(number: str, letter: str) -> str:
    """How to write ``10GiB`` or ``1.5GB`` for vLLM: ``10G for 10 GiB, 10g for 10 GB``."""
    decimal = f"{number}{letter.lower()} for {number} {'kMGT'['kmgt'.index(letter.lower())]}B"
    if "." in number:
        return decimal  # decimals only with a decimal suffix
    return f"{number}{letter.upper()} for {number} {letter.upper()}iB, {decimal}"
