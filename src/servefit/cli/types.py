"""Click parameter types for values spelled the way vLLM spells them."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import click

from servefit.errors import InvalidArgumentError
from servefit.units import parse_human_int


class HumanInt(click.ParamType):
    """A count as vLLM reads it: ``32768``, ``32k`` (32,000), ``32K`` (32,768), ``25.6k``.

    A bad value is a usage error (exit 2) whose message names the flag and the spellings
    vLLM accepts (see :func:`servefit.units.parse_human_int`).
    """

    name = "integer"  # --help shows INTEGER, as for click.INT

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value  # a default, or a value a caller passed already parsed
        flag = param.opts[0] if param is not None and param.opts else "value"
        try:
            return parse_human_int(str(value), flag=flag)
        except InvalidArgumentError as error:
            self.fail(str(error), param, ctx)


HUMAN_INT = HumanInt()


class FiniteFloat(click.ParamType):
    """A number flag that refuses NaN and infinities (``click.FLOAT`` takes ``nan`` and
    ``inf``, which no rate, memory size, fraction or latency limit can be), and numbers
    below ``minimum`` (or equal to it when ``is_minimum_open``)."""

    name = "float"

    def __init__(self, minimum: float | None = None, *, is_minimum_open: bool = False) -> None:
        self.minimum = minimum
        self.is_minimum_open = is_minimum_open

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        # click's "Invalid value for '--flag':" names the flag
        if isinstance(value, bool):
            self.fail(f"must be a number, got {value!r}", param, ctx)
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"must be a number, got {value!r}", param, ctx)
        if not math.isfinite(number):
            self.fail(f"must be a finite number, got {value!r}", param, ctx)
        low = self.minimum
        if low is not None and (number <= low if self.is_minimum_open else number < low):
            bound = f"greater than {low:g}" if self.is_minimum_open else f"at least {low:g}"
            self.fail(f"must be {bound}, got {value!r}", param, ctx)
        return number


FINITE_FLOAT = FiniteFloat()
NON_NEGATIVE_FLOAT = FiniteFloat(0.0)  # a delay, a pause: 0 allowed
POSITIVE_FLOAT = FiniteFloat(0.0, is_minimum_open=True)  # a scale, a price, a timeout


class RunByDefaultGroup(click.Group):
    """A command group whose ``run`` subcommand is the default: ``servefit bench URL ...`` is
    ``bench run URL ...`` while ``bench compare A B`` names its subcommand. A subcommand may
    also be spelled as an option (``eval --compare A B``), as its ``aliases`` say."""

    aliases: ClassVar[dict[str, str]] = {}

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] in self.aliases:
            args = [self.aliases[args[0]], *args[1:]]
        if not args or args[0] not in self.commands:
            args = ["run", *args]
        return super().parse_args(ctx, args)
