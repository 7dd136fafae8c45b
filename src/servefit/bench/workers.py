"""Client worker processes: one event loop per core when one core cannot drive the load.

The parent prepares every request and draws every arrival time, then hands each worker a
round-robin share (and a share of the concurrency). Workers stream their records back as
they finish; the parent writes them (nothing is held back). All processes share the
parent's clock origin: ``time.perf_counter`` is the system-wide monotonic clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import queue
import signal
from collections.abc import Callable
from typing import Any

from servefit.bench.client import Clock, OpenAIClient, Request
from servefit.bench.config import BenchConfig
from servefit.bench.dispatch import arrival_offsets, run_flat
from servefit.bench.records import RequestRecord
from servefit.bench.schedules import Schedule

DRAIN_TIMEOUT_S = 60.0  # after an interrupt, how long to wait for workers' last records
START_TIMEOUT_S = 120.0  # workers import servefit and connect before the clock starts
START_MARGIN_S = 0.05  # first arrival this long after the last worker is ready
POLL_S = 0.5  # how often the parent's reader thread looks up from an empty queue
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
    deadline_s: float | None,
    out: Any,
) -> None:  # pragma: no cover - runs in a child process (covered by the multi-process tests)
    clock = Clock(origin)

    async def main() -> None:
        client = OpenAIClient(
            list(cfg.base_urls),
            model=model,
            api_key=api_key,
            timeout_s=cfg.timeout_s,
            session_affinity=cfg.session_affinity,
        )
        async with client:
            out.put(_READY)
            await asyncio.get_running_loop().run_in_executor(None, go.wait, START_TIMEOUT_S)
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


async def run_in_processes(
    cfg: BenchConfig,
    model: str | None,
    api_key: str | None,
    requests: list[Request],
    clock: Clock,
    sink: Callable[[RequestRecord], None],
    deadline_s: float | None,
) -> None:
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
    out = context.Queue()
    start = context.Value("d", 0.0)  # the first arrival, on the shared clock
    go = context.Event()
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
                deadline_s,
                out,
            ),
            daemon=True,
        )
        for i in range(n)
    ]
    for process in processes:
        process.start()
    loop = asyncio.get_running_loop()
    remaining = n

    def take(timeout: float | None) -> Any:
        try:
            return out.get(timeout=timeout)
        except queue.Empty:
            return None

    pending: asyncio.Future[Any] | None = None

    async def get(timeout: float) -> Any:
        """The next item, or None after ``timeout``. One get at a time: a get still running
        when the run is interrupted is awaited again by the drain, so the item it takes (a
        worker's last record) is handed on, not lost with a cancelled future."""
        nonlocal pending
        if pending is None:
            pending = loop.run_in_executor(None, take, timeout)
        item = await asyncio.shield(pending)
        pending = None
        return item

    async def drain(timeout: float | None) -> None:
        """Hand records on until every worker is done, or ``timeout`` passes without an item."""
        nonlocal remaining
        quiet_since = loop.time()
        while remaining:
            item = await get(POLL_S)
            if item is None:
                if timeout is not None and loop.time() - quiet_since > timeout:
                    return
                continue
            quiet_since = loop.time()
            if item == _DONE:
                remaining -= 1
            elif item != _READY:
                sink(RequestRecord.model_validate_json(item))

    ready = 0
    try:
        while ready < n:  # every worker imported, connected and waiting
            item = await get(START_TIMEOUT_S)
            if item is None or item == _DONE:
                if item == _DONE:
                    remaining -= 1  # the drain waits for the others only
                break  # a worker died before it was ready: go with the others
            ready += 1
        start.value = clock() + START_MARGIN_S
        go.set()
        await drain(None)
    except asyncio.CancelledError:
        for process in processes:  # pass the interrupt on; they record what was in flight
            if process.is_alive() and process.pid:
                os.kill(process.pid, signal.SIGINT)
        await asyncio.shield(drain(DRAIN_TIMEOUT_S))
        raise
    finally:
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
