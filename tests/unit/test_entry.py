"""The console script's guard: Ctrl-C while the CLI is still being imported is one line and
exit 130, as an interrupted command is, never a traceback."""

from __future__ import annotations

import subprocess
import sys

from servefit.cli import entry, output

# Raise KeyboardInterrupt at the moment the CLI imports click, as a Ctrl-C arriving during
# start-up would: deterministic, where a real signal would race the imports.
INTERRUPT_DURING_IMPORT = """
import builtins
real_import = builtins.__import__
def interrupted_import(name, *args, **kwargs):
    if name == "click":
        raise KeyboardInterrupt
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupted_import
from servefit.cli.entry import main
main()
"""


def test_ctrl_c_during_imports_is_an_interrupted_run():
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPT_DURING_IMPORT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == output.EXIT_INTERRUPTED == 130
    assert done.stderr.strip() == "interrupted"
    assert "Traceback" not in done.stderr


def test_the_entry_point_runs_the_cli():
    done = subprocess.run(
        [sys.executable, "-c", "from servefit.cli.entry import main; main()", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "servefit" in done.stdout


def test_one_interrupted_code():
    assert entry.EXIT_INTERRUPTED == output.EXIT_INTERRUPTED
