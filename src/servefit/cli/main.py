"""``servefit`` command line: parse -> call the application layer -> render -> exit code.

Each command lives in its own module and is imported only when it runs (click's lazy group
pattern), so ``servefit plan --json`` pays for the plan alone. Exit codes are listed in
:mod:`servefit.cli.output`: 0 fits / success, 1 does not fit / failed, 2 input error,
3 internal error.
"""

from __future__ import annotations

import os
import sys
from importlib import import_module
from typing import Any

import click

from servefit import __version__
from servefit.cli.output import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE

# command name -> "module:function"
COMMANDS = {
    "plan": "servefit.cli.plan:plan",
    "compare": "servefit.cli.compare:compare",
    "cost": "servefit.cli.cost:cost",
    "report": "servefit.cli.report:report",
    "bench": "servefit.cli.bench:bench",
    "eval": "servefit.cli.eval:eval_",
    "exporter": "servefit.cli.exporter:exporter",
    "null-server": "servefit.cli.null_server:null_server",
    "preflight": "servefit.cli.preflight:preflight",
    "up": "servefit.cli.up:up",
    "deploy": "servefit.cli.deploy:deploy",
    "recommend": "servefit.cli.recommend:recommend",
    "check-log": "servefit.cli.check_log:check_log",
    "calibrate": "servefit.cli.calibrate:calibrate",
    "gpus": "servefit.cli.catalog:gpus",
    "models": "servefit.cli.catalog:models",
    "fit": "servefit.cli.fit:fit",
    "ui": "servefit.cli.ui:ui",
    "history": "servefit.cli.history:history",
}


class LazyGroup(click.Group):
    """A group whose commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, name = target.partition(":")
        command: click.Command = getattr(import_module(module), name)
        return command


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="servefit")
def cli() -> None:
    """Will this LLM workload fit this serving system, how fast will it run, what will it
    cost, and how close does the running deployment come to the plan?"""


def main(argv: list[str] | None = None) -> Any:
    """The console entry point: a servefit bug exits 3 with one line to report, never 1
    (which scripts read as "does not fit"); Ctrl-C exits 130, never click's "Aborted!" and
    1. Everything it prints goes through the one redaction (secrets of its command line,
    of the environment, URL credentials), whatever the command."""
    from servefit.adapters.redact import redact_standard_streams

    args = sys.argv[1:] if argv is None else argv
    redact_standard_streams(args)
    try:
        # standalone_mode=False: click would turn Ctrl-C into "Aborted!" and exit 1
        outcome = cli.main(args=args, prog_name="servefit", standalone_mode=False)
    except click.exceptions.Abort as error:
        # click raises Abort from the KeyboardInterrupt (or from an EOF at a prompt)
        if isinstance(error.__cause__, EOFError):
            click.echo("error: standard input ended where an answer was expected", err=True)
            sys.exit(EXIT_USAGE)
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as error:  # a usage error: click's message, its code (2)
        error.show()
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as error:
        import traceback

        if os.environ.get("SERVEFIT_TRACEBACK"):
            traceback.print_exc()
        click.echo(
            f"internal error ({type(error).__name__}: {error}): this is a servefit bug; please "
            "report it with the command line (set SERVEFIT_TRACEBACK=1 for the traceback)",
            err=True,
        )
        sys.exit(EXIT_INTERNAL)
    # a command that returns instead of exiting: --help and --version (click's Exit code)
    sys.exit(outcome if isinstance(outcome, int) else 0)


if __name__ == "__main__":
    main()
