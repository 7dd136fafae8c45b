"""The ui tests' shared fixture: a real bench run folder to open."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.unit.test_cli import OFFLINE

CLI = [sys.executable, "-m", "servefit.cli.main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def bench_run(tmp_path_factory) -> Path:
    """A real `servefit bench --output DIR` run against a real `servefit null-server`."""
    port = free_port()
    server = subprocess.Popen(
        [*CLI, "null-server", "--port", str(port), "--ttft-ms", "5", "--itl-ms", "1"],
        env=OFFLINE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        out = tmp_path_factory.mktemp("bench") / "run-a"
        done = subprocess.run(
            [
                *CLI,
                "bench",
                f"http://127.0.0.1:{port}",
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
    finally:
        server.terminate()
        server.wait(10)
