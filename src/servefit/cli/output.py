"""How every command ends: JSON or the terminal, and an exit code scripts can trust.

====  =========================================================================
code  meaning
====  =========================================================================
0     success; the deployment fits; every check passed
1     the deployment does not fit; a gate failed; the measured run failed (bench: more
      than ``--max-error-rate`` of its requests failed, default none, or none served)
2     usage or input error: a bad flag, an unknown model or GPU, a malformed file
3     an internal error: a servefit bug (please report it with the command line)
130   interrupted by SIGINT (Ctrl-C); bench: the run so far is written, marked interrupted
143   bench stopped by SIGTERM: the run so far is written, marked interrupted
====  =========================================================================
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from rich.console import Console

    from servefit.errors import ServefitError

EXIT_OK = 0
EXIT_DOES_NOT_FIT = 1
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXIT_TERMINATED = 143  # 128 + SIGTERM


def fail(error: ServefitError) -> NoReturn:
    """A user-fixable error: one paragraph naming what to fix, exit 2."""
    click.echo(f"error ({error.label}): {error}", err=True)
    sys.exit(EXIT_USAGE)


def emit_json(doc: Any) -> None:
    """A pydantic document (or a plain dict) as indented JSON on stdout."""
    if hasattr(doc, "model_dump_json"):
        click.echo(doc.model_dump_json(indent=2))
    else:
        import json

        click.echo(json.dumps(doc, indent=2))


def console() -> Console:
    from rich.console import Console

    return Console()


def verdict_exit(fits: bool) -> NoReturn:
    sys.exit(EXIT_OK if fits else EXIT_DOES_NOT_FIT)


@contextlib.contextmanager
def progress_bar(quiet: bool, total: int, label: str) -> Iterator[Any]:
    """A live progress bar on an interactive stderr (the listener advances it); nothing
    otherwise."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda record: bar.advance(task)
