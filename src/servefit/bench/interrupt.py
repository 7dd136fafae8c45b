"""SIGINT and SIGTERM for the length of a benchmark: the first one stops the whole run.

One :class:`Interrupt` spans a whole command (a run, a cold/warm pair, every level of a
sweep). Its handlers replace Python's (a ``KeyboardInterrupt`` raised anywhere) and the
default SIGTERM (death, no summary): a signal is noted and the run's main task, when one
is watched, is cancelled. The run then records every request in flight as cut, writes its
summary marked interrupted and returns; a sweep measures no further level. Signals after
the first change nothing (the run is already stopping, within a bounded drain).

A library call that installs its own (``run``, ``run_sweep`` without one given) hands a
SIGTERM on to the handler it replaced once its files are written: a caller's process still
terminates as it would have, only not before the summary exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupt:
    """Notes the first SIGINT/SIGTERM while entered and cancels the watched task."""

    def __init__(self, *, hand_on: frozenset[int] = frozenset()) -> None:
        self.signum: int | None = None
        self.hand_on = hand_on  # signals raised again, to the previous handlers, on exit
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[int, Any] = {}

    @property
    def signal_name(self) -> str | None:
        """``"SIGINT"`` or ``"SIGTERM"`` once one arrived."""
        return None if self.signum is None else signal.Signals(self.signum).name

    def __enter__(self) -> Interrupt:
        if threading.current_thread() is threading.main_thread():  # the only place handlers go
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        installed = bool(self._previous)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if installed and self.signum in self.hand_on:
            signal.raise_signal(self.signum)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            return  # already stopping
        self.signum = signum
        self._cancel()

    def _cancel(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._cancel_watched)

    def _cancel_watched(self) -> None:
        # runs on the loop, so only while the task is suspended: if it is still watched, it
        # is suspended inside the watched block, where the cancellation is handled
        if self._task is not None and not self._task.done():
            self._task.cancel()

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """Inside a coroutine: a signal (also one that came before) cancels this task."""
        self._task, self._loop = asyncio.current_task(), asyncio.get_running_loop()
        try:
            if self.signum is not None:
                self._cancel()
            yield
        finally:
            self._task = self._loop = None

    def trigger(self, signum: int = signal.SIGINT) -> None:
        """As if ``signum`` arrived (tests, and callers that stop a run themselves)."""
        self._on_signal(signum, None)
