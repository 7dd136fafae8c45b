"""The ui tests' shared fixture: a real bench run folder to open."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.null_server_cli import CLI, free_port, null_server
from tests.unit.test_cli import OFFLINE

__all__ = ["CLI", "free_port"]  # the ui tests import them from here


@pytest.fixture(scope="session")
def bench_run(tmp_path_factory) -> Path:
    """A real `servefit bench --output DIR` run against a real `servefit null-server`."""
    with null_server("--ttft-ms", "5", "--itl-ms", "1") as url:
        out = tmp_path_factory.mktemp("bench") / "run-a"
        done = subprocess.run(
            [
                *CLI,
                "bench",
                url,
                "--input-len",
                "128",
                "--output-len",
                "16",
                "--concurrency",
                "2",
                "--num-requests",
                "4",
                "--output",
                str(out),
            ],
            capture_output=True,
            text=True,
            env=OFFLINE,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return out
