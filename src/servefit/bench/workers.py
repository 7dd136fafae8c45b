"""Client worker processes: one event loop per core when one core cannot drive the load.

The parent prepares every request and draws every arrival time, then hands each worker a
round-robin share (and a share of the concurrency). Workers stream their records back as
they finish; the parent writes them (nothing is held back). All processes share the
parent's clock origin: ``time.perf_counter`` is the system-wide monotonic clock.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import multiprocessing
import os
import queue
import signal
from collections.abc import Callable, Iterator
from typing import Any

from servefit.bench.client import Clock, OpenAIClient, Request
from servefit.bench.config import BenchConfig
from servefit.bench.dispatch import arrival_offsets, run_flat
from servefit.bench.records import RequestRecord
from servefit.bench.schedules import Schedule
from servefit.errors import ServerError

DRAIN_TIMEOUT_S = 1.5  # after an interrupt: workers' last records, then they are killed
START_TIMEOUT_S = 120.0  # workers import servefit and connect before the clock starts
START_MARGIN_S = 0.05  # first arrival this long after the last worker is ready
POLL_S = 0.1  # how often the parent looks up from an empty queue (worker exits, deadlines)
JOIN_TIMEOUT_S = 5.0  # a worker that said it is done exits (flushes its queue) within this
EXIT_GRACE_S = 0.3  # interrupted: how long workers get to exit after the drain, all together
_DONE = "__servefit_worker_done__"
_READY = "__servefit_worker_ready__"


def split_concurrency(total: int, workers: int) -> list[int]:
    """``total`` slots over ``workers`` processes, as evenly as possible (none empty)."""
    base, extra = divmod(total, workers)
    return [
        base + (1 if i < extra else 0) for i in range(workers) if base + (1 if i < extra else 0)
    ]


def _worker(
    index: int,
    cfg: BenchConfig,
    model: str,
    api_key: str | None,
    requests: list[Request],
    offsets: list[float] | None,
    concurrency: int | None,
    origin: float,
    start: Any,
    go: Any,
    stop: Any,
    deadline_s: float | None,
    out: Any,
) -> None:  # pragma: no cover - runs in a child process (covered by the multi-process tests)
    # Started with SIGINT blocked (see _children_ignore_sigint): a Ctrl-C at the terminal
    # reaches the whole process group, but only the parent decides; it says so with SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    clock = Clock(origin)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is not None:  # from here on, SIGTERM cuts the requests in flight, recorded
            with contextlib.suppress(NotImplementedError):  # (no such handler on Windows)
                loop.add_signal_handler(signal.SIGTERM, task.cancel)
        client = OpenAIClient(
            list(cfg.base_urls),
            model=model,
            api_key=api_key,
            timeout_s=cfg.timeout_s,
            session_affinity=cfg.session_affinity,
            credentials=cfg.credentials,
        )
        async with client:
            with contextlib.suppress(ServerError):  # then its requests record the failure
                await client.connect()  # the pool's connections open before the clock starts
            out.put(_READY)
            await loop.run_in_executor(None, go.wait, START_TIMEOUT_S)
            if stop.is_set():
                return  # interrupted before the start: nothing to send
            schedule = Schedule(
                concurrency=concurrency,
                rate_per_s=cfg.schedule.rate_per_s,
                is_replay=cfg.schedule.is_replay,
            )
            await run_flat(
                client,
                requests,
                schedule,
                clock,
                lambda r: out.put(r.model_dump_json()),
                deadline_s,
                offsets=offsets,
                start_s=start.value,
            )

    loop_factory = None
    with contextlib.suppress(ImportError):
        import uvloop

        loop_factory = uvloop.new_event_loop
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    finally:
        out.put(_DONE)


def _reap_resource_tracker() -> None:
    """multiprocessing's resource tracker (a child of this process, started for the workers'
    queue and events) exits only after this process has, so it outlived every run with
    workers by a second or two. At exit, once the run's queue and events are gone, it is
    stopped and waited for: nothing the run started outlives it."""
    from multiprocessing import resource_tracker

    stop = getattr(getattr(resource_tracker, "_resource_tracker", None), "_stop", None)
    if stop is None:  # pragma: no cover - a Python without it: the tracker exits by itself
        return
    gc.collect()  # the run's semaphores unregister as they are freed
    with contextlib.suppress(OSError, ChildProcessError):
        stop()


_REAPING: list[bool] = []  # the exit hook, registered once per process


@contextlib.contextmanager
def _children_ignore_sigint() -> Iterator[None]:
    """Start processes with SIGINT blocked (a spawned child inherits the mask), so a Ctrl-C
    while one imports is not a KeyboardInterrupt traceback; the child then ignores SIGINT
    for good. The parent's own SIGINT waits meanwhile (or reaches another thread), never lost."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


async def run_in_processes(
    cfg: BenchConfig,
    model: str | None,
    api_key: str | None,
    requests: list[Request],
    clock: Clock,
    sink: Callable[[RequestRecord], None],
    deadline_s: float | None,
) -> None:
    """Deal ``requests`` to ``cfg.workers`` processes and hand their records to ``sink``.
    Cancelled (an interrupt): workers not started send nothing, running ones are told with
    SIGTERM and cut their requests in flight; every record they send is handed on, within
    DRAIN_TIMEOUT_S, before the cancellation goes on."""
    schedule = cfg.schedule
    n = cfg.workers
    open_loop = schedule.is_open_loop
    offsets = arrival_offsets(requests, schedule) if open_loop else None
    if open_loop:
        caps: list[int | None] = (
            list(split_concurrency(schedule.concurrency, n)) if schedule.concurrency else [None] * n
        )
    else:
        caps = list(split_concurrency(schedule.concurrency or 1, n))
    n = len(caps)
    context = multiprocessing.get_context("spawn")
    if not _REAPING:
        atexit.register(_reap_resource_tracker)
        _REAPING.append(True)
    out = context.Queue()
    start = context.Value("d", 0.0)  # the first arrival, on the shared clock
    go, stop = context.Event(), context.Event()
    processes = [
        context.Process(
            target=_worker,
            args=(
                i,
                cfg,
                model or "",
                api_key,
                requests[i::n],
                offsets[i::n] if offsets else None,
                caps[i],
                clock.origin,
                start,
                go,
                stop,
                deadline_s,
                out,
            ),
            daemon=True,
        )
        for i in range(n)
    ]
    loop = asyncio.get_running_loop()
    counts = {_READY: 0, _DONE: 0}
    pending: asyncio.Future[Any] | None = None

    def take() -> Any:
        try:
            return out.get(timeout=POLL_S)
        except queue.Empty:
            return None

    async def get() -> Any:
        """The next item, or None after POLL_S. One get at a time: a get still running when
        the run is interrupted is awaited again by the drain, so the item it takes (a
        worker's last record) is handed on, not lost with a cancelled future."""
        nonlocal pending
        if pending is None:
            pending = loop.run_in_executor(None, take)
        item = await asyncio.shield(pending)
        pending = None
        return item

    async def collect(until: Callable[[], bool], timeout_s: float | None) -> None:
        """Hand records on until ``until()``, or every worker has exited and the queue is
        empty, or ``timeout_s`` passes."""
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while not until():
            exited = not any(p.is_alive() for p in processes)
            item = await get()
            if item in counts:
                counts[item] += 1
            elif item is not None:
                sink(RequestRecord.model_validate_json(item))
            elif exited:
                return  # all had exited before that empty read: nothing more can come
            elif deadline is not None and loop.time() > deadline:
                return

    interrupted = False
    try:
        with _children_ignore_sigint():
            for process in processes:
                process.start()
        # every worker imported, connected and waiting (one that died is not waited for)
        await collect(
            lambda: counts[_READY] >= sum(p.is_alive() for p in processes), START_TIMEOUT_S
        )
        start.value = clock() + START_MARGIN_S
        go.set()
        await collect(lambda: counts[_DONE] >= n, None)
    except asyncio.CancelledError:
        interrupted = True
        stop.set()  # a worker not yet sending sends nothing
        go.set()
        for process in processes:  # SIGTERM: imports die, running workers cut and record
            if process.is_alive() and process.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        await asyncio.shield(collect(lambda: counts[_DONE] >= n, DRAIN_TIMEOUT_S))
        raise
    finally:  # interrupted: whatever has not exited by now is killed (its records are in)
        ends = loop.time() + (EXIT_GRACE_S if interrupted else JOIN_TIMEOUT_S)
        for process in processes:
            if process.pid is None:
                continue  # never started
            process.join(timeout=max(0.0, ends - loop.time()))
            if process.is_alive():
                process.kill()
                process.join(timeout=JOIN_TIMEOUT_S)
