"""The ``servefit`` console script: Ctrl-C while Python is still importing the CLI (click,
the command's modules) is an interrupted run like any other, one line and exit 130, not a
traceback. Only the standard library is imported before that guard is in place."""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130  # as servefit.cli.output has it (128 + SIGINT)


def main() -> object:
    try:
        from servefit.cli.main import main as run
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    return run()
