"""How requests leave on schedule: a closed loop of workers, or open-loop arrivals each sent
at its due time (a task created a little early, then a timer sleep and cooperative yields).

Used by the runner in its own process and by each worker process (:mod:`.workers`) on its
share of the requests, so neither imports the other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from servefit.bench.client import Clock, OpenAIClient, Request
from servefit.bench.records import RequestRecord
from servefit.bench.schedules import Schedule
from servefit.errors import DatasetError

DISPATCH_LEAD_S = 0.005  # open loop: a request's task is created this long before it is due
TIMER_SLACK_S = 0.002  # libuv/asyncio timers fire up to ~1 ms late: sleep short, then yield


async def _sleep_near(due: float, clock: Clock) -> None:
    """Wake at ``due`` or up to a timer's lateness after it: a timer sleep, no yields spent
    waiting (for what needs no precision: creating a task that then sleeps precisely)."""
    delay = due - clock()
    if delay > 0:
        await asyncio.sleep(delay)


async def _sleep_until(due: float, clock: Clock) -> None:
    """Wake at ``due`` within a fraction of a millisecond: a timer sleep to just before,
    then cooperative yields (the loop keeps serving streams meanwhile)."""
    delay = due - clock() - TIMER_SLACK_S
    if delay > 0:
        await asyncio.sleep(delay)
    while clock() < due:
        await asyncio.sleep(0)


async def run_flat(
    client: OpenAIClient,
    requests: list[Request],
    schedule: Schedule,
    clock: Clock,
    sink: Callable[[RequestRecord], None],
    deadline_s: float | None,
    offsets: list[float] | None = None,
    start_s: float | None = None,
) -> None:
    """Send ``requests`` as ``schedule`` says (``offsets``/``start_s``: arrival times already
    drawn, when a worker process runs its share of an open-loop schedule)."""
    if not schedule.is_open_loop and offsets is None:
        pending = iter(requests)

        async def worker() -> None:
            for request in pending:
                if deadline_s is not None and clock() >= deadline_s:
                    return
                await client.send(request, scheduled_s=clock(), clock=clock, on_done=sink)

        await asyncio.gather(*(worker() for _ in range(schedule.concurrency or 1)))
        return
    cap = asyncio.Semaphore(schedule.concurrency) if schedule.concurrency else None
    start = clock() if start_s is None else start_s
    tasks = []

    async def one(request: Request, scheduled: float) -> None:
        await _sleep_until(scheduled, clock)  # the task exists already: no start-up delay
        if cap is None:
            await client.send(request, scheduled_s=scheduled, clock=clock, on_done=sink)
            return
        async with cap:  # waiting here shows up as client lag (scheduled vs sent)
            await client.send(request, scheduled_s=scheduled, clock=clock, on_done=sink)

    if offsets is None:
        offsets = arrival_offsets(requests, schedule)
    try:
        for request, offset in zip(requests, offsets, strict=True):
            due = start + offset
            if deadline_s is not None and due >= deadline_s:
                break
            # create each task a little early; only the task waits precisely (yielding until
            # its time: a second waiter yielding would spend a core's share for nothing)
            await _sleep_near(due - DISPATCH_LEAD_S, clock)
            tasks.append(asyncio.create_task(one(request, due)))
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def arrival_offsets(requests: list[Request], schedule: Schedule) -> list[float]:
    if schedule.is_replay:
        if any(r.arrival_s is None for r in requests):
            raise DatasetError("--replay needs a timestamp_s on every line of --dataset")
        return [(r.arrival_s or 0.0) * schedule.time_scale for r in requests]
    return schedule.arrival_offsets_s(len(requests))
