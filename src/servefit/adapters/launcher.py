"""The engine as a supervised child: its own process group, its output teed to a log file
and to the caller line by line, signals forwarded, and nothing left behind.

Guarantees, in the order they take effect:

1. the child leads a new session (``start_new_session``): a terminal's Ctrl-C reaches
   servefit only, and :meth:`Supervised.stop` signals the whole group (vLLM's API server,
   its engine core and workers);
2. on Linux the child is started with ``PR_SET_PDEATHSIG = SIGTERM``: if servefit itself is
   killed (even with SIGKILL), the kernel tells the server to shut down;
3. :meth:`Supervised.stop` sends SIGTERM to the group, waits ``grace_s``, then SIGKILLs the
   group (which may outlive its leader) and reaps the leader;
4. :func:`forward_signals` turns SIGINT/SIGTERM sent to servefit into a stop of the child
   (the caller then waits for it), and the context manager stops the child on every exit.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from servefit.adapters.redact import argv_secret_values, redact_text
from servefit.errors import InvalidArgumentError

STOP_GRACE_S = 30.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Ask the kernel to SIGTERM this process when its parent dies (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


@dataclass(slots=True)
class Supervised:
    """A running child process group whose output is copied to ``log_path``."""

    command: tuple[str, ...]
    log_path: Path
    process: subprocess.Popen[bytes]
    started_s: float  # time.monotonic() at start
    _reader: threading.Thread | None = None
    _log: IO[bytes] | None = None
    stopped_by_signal: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    def is_running(self) -> bool:
        return self.process.poll() is None

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)  # the group it leads (start_new_session)

    def group_alive(self) -> bool:
        """Does any process of the child's group still exist?"""
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop(self, grace_s: float = STOP_GRACE_S, sig: int = signal.SIGTERM) -> int | None:
        """Signal the group, wait ``grace_s``, SIGKILL what remains, reap the leader; the
        leader's exit code (None when it could not be reaped)."""
        with self._lock:
            if self.process.poll() is None or self.group_alive():
                self.signal_group(sig)
                deadline = time.monotonic() + grace_s
                while time.monotonic() < deadline and (
                    self.process.poll() is None or self.group_alive()
                ):
                    time.sleep(0.2)
                self.signal_group(signal.SIGKILL)
            try:
                code = self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
            self._finish_reader()
            return code

    def wait(self, timeout_s: float | None = None) -> int | None:
        """The leader's exit code once it exits (None on timeout)."""
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        return code

    def _finish_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()


def start(
    command: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    on_line: Callable[[str], None] | None = None,
) -> Supervised:
    """Start ``command`` (never through a shell) as the leader of a new session; every line
    it prints goes to ``log_path`` and to ``on_line`` (from a reader thread)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("ab")
    try:
        process = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
    except FileNotFoundError:
        log.close()
        raise InvalidArgumentError(
            f"cannot start {command[0]!r}: no such program (install the engine, or pass "
            "--python with the interpreter that has it)"
        ) from None
    except OSError as exc:
        log.close()
        raise InvalidArgumentError(f"cannot start {command[0]!r}: {exc.strerror}") from None
    child = Supervised(
        command=tuple(command),
        log_path=log_path,
        process=process,
        started_s=time.monotonic(),
        _log=log,
    )
    secrets = tuple(argv_secret_values(list(command)))
    child._reader = threading.Thread(
        target=_pump,
        args=(process.stdout, log, on_line, secrets),
        name="servefit-log",
        daemon=True,
    )
    child._reader.start()
    return child


def _pump(
    stream: IO[bytes] | None,
    log: IO[bytes],
    on_line: Callable[[str], None] | None,
    secrets: tuple[str, ...] = (),
) -> None:
    """Copy the child's output to the log (flushed per line, secrets redacted: vLLM logs
    its non-default args, an API key included) and hand each line on."""
    if stream is None:
        return
    for raw in iter(stream.readline, b""):
        line = redact_text(raw.decode("utf-8", errors="replace"), secrets=secrets)
        with contextlib.suppress(OSError, ValueError):
            log.write(line.encode("utf-8"))
            log.flush()
        if on_line is not None:
            with contextlib.suppress(Exception):  # a display error never stops the copy
                on_line(line.rstrip("\n"))
    with contextlib.suppress(OSError, ValueError):
        stream.close()


@contextlib.contextmanager
def supervised(
    command: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    grace_s: float = STOP_GRACE_S,
) -> Iterator[Supervised]:
    """:func:`start`, with SIGINT/SIGTERM forwarded and the group stopped on every exit."""
    child = start(command, log_path=log_path, env=env, cwd=cwd, on_line=on_line)
    try:
        with forward_signals(child):
            yield child
    finally:
        with _signals_ignored():  # a second Ctrl-C must not cut the cleanup short
            child.stop(grace_s=grace_s)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class SignalledError(Exception):
    """servefit received SIGINT or SIGTERM; the child has been asked to stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def forward_signals(child: Supervised) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM stop the child's group and raise :class:`SignalledError`
    in the main thread (the caller's ``finally`` then waits for the child)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        child.stopped_by_signal = signum
        for sig in previous:  # a second Ctrl-C while stopping is not a traceback
            signal.signal(sig, signal.SIG_IGN)
        child.signal_group(signal.SIGTERM)
        raise SignalledError(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)
