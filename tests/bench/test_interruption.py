"""servefit bench stopped by SIGINT or SIGTERM at every moment of a run, with one client
process and with two: at start-up (nothing sent yet), mid-run (requests in flight) and
between two levels of a sweep. Whatever the moment, every request the server received is
a record (each that did not finish says why), the summary is valid and marked interrupted,
the exit code is 130 (SIGINT) or 143 (SIGTERM), and nothing prints a traceback.

Each moment is an event the test waits for, never a delay: the null server (in a thread of
this process) counts the requests it received, holds ``/v1/models`` from a given call on
(a run, a worker, the next level connecting) and streams ``__HANG__`` prompts without end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from servefit.bench.null_server import NullServer, NullServerConfig

from .conftest import ServerThread
from .test_bench_null_server import (
    QUICK,
    SERVEFIT,
    SLOTS,
    held_dataset,
    jsonl,
    num_records,
    wait_until,
)

STOP_GUARD_S = 30.0  # against a hang only (a stop takes well under 2 s; the fixed bug: 122 s)
HOLD_S = 60.0  # a held /v1/models answers after this: long past any test's signal


class GatedNullServer(NullServer):
    """The null server, holding every ``/v1/models`` call from the ``hold_from``-th on: a
    run (or a worker, or a sweep's next level) is then connecting, and has sent nothing."""

    def __init__(self, hold_from: int) -> None:
        super().__init__(NullServerConfig())
        self.hold_from = hold_from
        self.models_calls = 0

    async def models(self, request: web.Request) -> web.Response:
        self.models_calls += 1
        if self.models_calls >= self.hold_from:
            await asyncio.sleep(HOLD_S)
        return await super().models(request)


def gated_server(hold_from: int) -> Iterator[ServerThread]:
    thread = ServerThread(NullServerConfig(), GatedNullServer(hold_from)).start()
    try:
        yield thread
    finally:
        thread.stop()


def start_bench(url: str, tmp_path: Path, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*SERVEFIT, "bench", url, "--workload", "jsonl", *flags, "--output", str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own session: what it leaves behind is found by its id
    )


def session_members(sid: int) -> list[str]:
    """The processes still alive in session ``sid`` (Linux: /proc/PID/stat's 6th field), as
    "pid command line"; [] where /proc is not there. A run that ended reaped every child:
    its workers and multiprocessing's resource tracker included."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rpartition(")")[2].split()
            # after the command: state, ppid, pgrp, session; a zombie is already dead
            if int(fields[3]) == sid and fields[0] != "Z":
                cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
                members.append(f"{stat.parent.name} {cmdline.decode(errors='replace')}")
    return members


def until(proc: subprocess.Popen, condition, what: str) -> None:
    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"bench ended before {what}: {proc.communicate()[1]}")
        return condition()

    try:
        wait_until(ready, what)
    except BaseException:
        proc.kill()
        raise


# Each moment: (the /v1/models call held from, flags, the event to signal at) per number of
# client processes. Calls: the run connects (1), then each worker (workers > 1); a sweep's
# next level connects again.
def at_start_up(workers: int) -> tuple[int, list[str]]:
    # one process: the run itself connecting; two: the workers connecting, after the run
    return (1 if workers == 1 else 2), ["--concurrency", str(SLOTS)]


def mid_run(workers: int) -> tuple[int, list[str]]:
    return 10**9, ["--concurrency", str(SLOTS)]  # nothing held


def between_levels(workers: int) -> tuple[int, list[str]]:
    # level one (SLOTS / 2 clients: one process, or two of one slot each) sends the quick
    # prompts and ends; level two is held connecting, before it sends anything
    first = 1 + (workers if workers > 1 else 0)
    return first + 1, ["--concurrency", f"{SLOTS // 2},{SLOTS}"]


MOMENTS = {"start-up": at_start_up, "mid-run": mid_run, "between-levels": between_levels}
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("moment", list(MOMENTS))
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_interruption_matrix(tmp_path, signum, moment, workers):
    hold_from, flags = MOMENTS[moment](workers)
    sweep = moment == "between-levels"
    gen = gated_server(hold_from)
    server = next(gen)
    null = server.server
    try:
        if sweep:  # every line answered at once: level one ends by itself
            dataset = tmp_path / "quick.jsonl"
            dataset.write_text(
                "\n".join(json.dumps({"prompt": f"quick {i}", "max_tokens": 4}) for i in range(4))
            )
        else:  # QUICK answered, then held prompts, more than the slots
            dataset = held_dataset(tmp_path / "held.jsonl", SLOTS + 2)
        proc = start_bench(
            server.url, tmp_path, "--dataset", str(dataset), "--workers", str(workers), *flags
        )
        if moment == "mid-run":
            until(
                proc,
                lambda: num_records(tmp_path / "out") >= QUICK and null.running == SLOTS,
                f"{QUICK} records and {SLOTS} held requests in flight",
            )
        else:
            held = hold_from + (workers - 1 if moment == "start-up" and workers > 1 else 0)
            until(proc, lambda: null.models_calls >= held, f"/v1/models call {held} held")
        sent_at_signal = null.requests_total
        t0 = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=STOP_GUARD_S)
        stop_s = time.monotonic() - t0  # shown with -s, not asserted (see STOP_GUARD_S)
        sent = null.requests_total
    finally:
        if proc.poll() is None:
            proc.kill()
        gen.close()

    assert sent == sent_at_signal  # nothing left after the signal
    assert proc.returncode == EXIT_CODES[signum], err
    assert session_members(proc.pid) == []  # every worker reaped before the run exited
    assert "Traceback" not in err, err
    out = tmp_path / "out"
    if sweep:
        doc = json.loads((out / "sweep.json").read_text())
        assert doc["interrupted"] is True and doc["interrupt_signal"] == signum.name
        first, second = doc["levels"]  # level one whole, level two cut before it sent anything
        assert first["result"]["interrupted"] is False
        assert second["result"]["interrupted"] is True
        rows = [r for lv in (f"c{SLOTS // 2}", f"c{SLOTS}") for r in jsonl_or_empty(out / lv)]
        summaries = [lv["result"]["summary"] for lv in doc["levels"]]
        assert sent == QUICK
    else:
        doc = json.loads((out / "summary.json").read_text())
        assert doc["interrupted"] is True and doc["interrupt_signal"] == signum.name
        rows = jsonl_or_empty(out)
        summaries = [doc["summary"]]
        assert sent == (0 if moment == "start-up" else QUICK + SLOTS)
    # every request the server received is a record; each one cut says why
    assert len(rows) == sent
    cut = [r for r in rows if r["outcome"] != "ok"]
    assert len(cut) == (SLOTS if moment == "mid-run" else 0)
    assert all(r["error"].startswith(("cancelled", "stream ended")) for r in cut)
    assert sum(s["successful"] + s["errored"] + s["incomplete"] for s in summaries) == sent
    print(f"{signum.name} {moment} x{workers}: sent {sent} recorded {len(rows)} "
          f"exit {proc.returncode} stopped in {stop_s:.2f} s")  # fmt: skip


def jsonl_or_empty(directory: Path) -> list[dict]:
    return jsonl(directory) if (directory / "requests.jsonl").exists() else []


def spawned_workers(pid: int) -> int:
    """How many client worker processes ``pid`` has started (Linux: /proc)."""
    found = 0
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in children.read_text().split():
            with contextlib.suppress(OSError):
                if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                    found += 1
    return found


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_a_signal_to_the_whole_group_while_workers_start(tmp_path, signum):
    # Ctrl-C at a terminal signals every process of the group: the workers too, maybe still
    # importing (the KeyboardInterrupt traceback and the 122 s wait of issue 17). The signal
    # comes once both workers exist, before either has connected or after (held there).
    gen = gated_server(hold_from=2)
    server = next(gen)
    try:
        dataset = held_dataset(tmp_path / "held.jsonl", SLOTS)
        proc = subprocess.Popen(
            [
                *SERVEFIT, "bench", server.url, "--workload", "jsonl", "--dataset", str(dataset),
                "--concurrency", str(SLOTS), "--workers", "2", "--output", str(tmp_path / "out"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, as a shell job
        )  # fmt: skip
        until(proc, lambda: spawned_workers(proc.pid) >= 2, "two worker processes")
        os.killpg(proc.pid, signum)
        _, err = proc.communicate(timeout=STOP_GUARD_S)
        sent = server.server.requests_total
        left = session_members(proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
        gen.close()
    assert proc.returncode == EXIT_CODES[signum], err
    assert left == []  # every worker reaped before the run exited
    assert "Traceback" not in err, err
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert doc["interrupted"] is True and doc["summary"]["successful"] == 0
    assert sent == 0 == len(jsonl_or_empty(tmp_path / "out"))


def test_a_library_run_hands_sigterm_on_to_the_callers_handler_once_done():
    from servefit.bench.interrupt import Interrupt
    from servefit.bench.runner import HANDED_ON

    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with Interrupt(hand_on=HANDED_ON) as stop:
            signal.raise_signal(signal.SIGTERM)
            assert stop.signal_name == "SIGTERM" and seen == []  # the run's, while it lasts
        assert seen == [signal.SIGTERM]  # then the caller's
        with Interrupt(hand_on=HANDED_ON) as stop:
            signal.raise_signal(signal.SIGINT)  # SIGINT only ends the run
        assert stop.signal_name == "SIGINT" and seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
