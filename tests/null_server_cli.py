"""A real `servefit null-server` in its own process, for tests that run `servefit bench`
through the CLI against it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.unit.test_cli import OFFLINE

CLI = [sys.executable, "-m", "servefit.cli.main"]
STARTUP_S = 30.0  # a generous bound on a busy machine: the loop ends as soon as it listens


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def null_server(*flags: str) -> Iterator[str]:
    """Start ``servefit null-server FLAGS`` on a free port; yield its base URL; stop it."""
    port = free_port()
    server = subprocess.Popen(
        [*CLI, "null-server", "--port", str(port), *flags],
        env=OFFLINE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


@contextmanager
def page(*flags: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Start ``servefit ui --port 0 FLAGS``; yield the URL it printed (the port the OS
    gave); stop it with Ctrl-C and check it stopped cleanly (exit 0)."""
    import signal

    proc = subprocess.Popen(
        [*CLI, "ui", "--port", "0", *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env or OFFLINE,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # "servefit ui: http://127.0.0.1:PORT/ (Ctrl-C stops it)"
        assert line.startswith("servefit ui: http://"), line
        yield line.split()[2]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert proc.returncode == 0, f"servefit ui exited {proc.returncode} on Ctrl-C"
