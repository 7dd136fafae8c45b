"""Join when x what x how, and lose nothing.

Every finished request is appended to ``requests.jsonl`` (and flushed) the moment it ends;
``summary.json`` embeds the full configuration, the servefit version and the server's
identity. SIGINT or SIGTERM at any moment (see :mod:`.interrupt`), a server that dies
mid-run, timeouts and HTTP errors all end in a valid summary with successful / errored /
incomplete counted apart: every request sent is a record, an interrupted run says so and
by which signal. A server that does not answer before the first request is a
:class:`servefit.errors.ServerError` (nothing was sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
from pydantic import BaseModel, ConfigDict

from servefit import __version__
from servefit.adapters.redact import redact_text
from servefit.bench import server_metrics
from servefit.bench.client import Clock, OpenAIClient, Request
from servefit.bench.config import BenchConfig, local_token_counter
from servefit.bench.dispatch import run_flat
from servefit.bench.interrupt import Interrupt
from servefit.bench.metrics import Summary, summarize
from servefit.bench.output import ResultWriter, write_document
from servefit.bench.records import Outcome, RequestRecord
from servefit.bench.schedules import Schedule
from servefit.bench.turns import CacheComparison, TurnStats, compare_cache, turn_stats
from servefit.bench.workers import run_in_processes
from servefit.bench.workloads import build_requests, build_sessions

SUMMARY_SCHEMA_VERSION = 1
# a run with its own Interrupt: SIGTERM goes on to the caller's handler once the files are
# written (it terminated the process before, and still does); SIGINT ends the run only
HANDED_ON = frozenset({signal.SIGTERM})


class BenchResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int
    servefit_version: str
    config: dict[str, Any]
    server: dict[str, Any]
    interrupted: bool
    interrupt_signal: str | None = None  # "SIGINT" or "SIGTERM" when a signal stopped the run
    summary: Summary
    turns: list[TurnStats]
    server_metrics: dict[str, float]
    server_latency_s: dict[str, dict[str, float]]  # server-side percentiles over the run
    server_peaks: dict[str, float]  # highest gauge values sampled during the run
    warnings: list[str]
    prefix_cache_comparison: list[CacheComparison] | None = None
    prediction: dict[str, Any] | None = None  # servefit plan's capacity for this workload
    started_unix_s: float | None = None  # the wall clock when the run's clock started

    @property
    def failed_fraction(self) -> float:
        """Measured requests that failed (errored or cut) over all measured requests."""
        s = self.summary
        total = s.successful + s.errored + s.incomplete
        return (s.errored + s.incomplete) / total if total else 0.0

    def is_passing(self, max_error_rate: float = 0.0) -> bool:
        """Ran to the end, served requests, and failed no more than ``max_error_rate``."""
        return (
            not self.interrupted
            and self.summary.successful > 0
            and self.failed_fraction <= max_error_rate
        )


SAMPLE_INTERVAL_S = 1.0  # /metrics while the run goes on


@dataclass(slots=True)
class Scrape:
    counters: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, dict[float, float]] = field(default_factory=dict)
    raw: dict[str, float] = field(default_factory=dict)


async def _metrics_text(client: OpenAIClient) -> str | None:
    try:
        async with client.session.get(f"{client.base_urls[0]}/metrics") as resp:
            if resp.status != 200:
                return None
            return await resp.text()
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        return None


async def _scrape(client: OpenAIClient) -> Scrape:
    """Every counter and histogram, before and after the run (parsed once)."""
    text = await _metrics_text(client)
    if text is None:
        return Scrape()
    parsed = list(server_metrics.samples(text))
    raw = server_metrics.sums(parsed)
    return Scrape(
        counters=server_metrics.normalise(raw) | server_metrics.per_position(parsed),
        histograms=server_metrics.histograms(parsed),
        raw=raw,
    )


async def _sample(
    client: OpenAIClient, clock: Clock, directory: Path | None, peaks: dict[str, float]
) -> None:
    """Gauges about once a second, appended to server_metrics.jsonl as they come. Only the
    gauges' lines are parsed: this runs on the event loop that sends the requests."""
    handle = (directory / "server_metrics.jsonl").open("a", encoding="utf-8") if directory else None
    try:
        while True:
            await asyncio.sleep(SAMPLE_INTERVAL_S)
            text = await _metrics_text(client)
            gauges = server_metrics.parse_gauges(text) if text is not None else {}
            for name, value in gauges.items():
                peaks[name] = max(peaks.get(name, value), value)
            if handle is not None and gauges:
                handle.write(json.dumps({"t_s": round(clock(), 3), **gauges}) + "\n")
                handle.flush()
    finally:
        if handle is not None:
            handle.close()


async def _run_agents(
    client: OpenAIClient,
    cfg: BenchConfig,
    clock: Clock,
    sink: Callable[[RequestRecord], None],
    count: Any,
) -> None:
    num_sessions = cfg.workload.num_requests
    sessions = await build_sessions(cfg.workload, count, num_sessions)
    ids = itertools.count()
    cap = asyncio.Semaphore(cfg.schedule.concurrency or num_sessions)

    async def run_session(session: Any) -> None:
        async with cap:
            for turn in range(cfg.workload.turns):
                parts: list[str] = []
                record = await client.send(
                    session.request(turn, next(ids)),
                    scheduled_s=clock(),
                    clock=clock,
                    on_text=parts.append,
                    on_done=sink,
                )
                if record.outcome is not Outcome.OK:
                    return  # a broken conversation cannot go on
                session.answer("".join(parts))
                if cfg.workload.think_time_s:
                    await asyncio.sleep(cfg.workload.think_time_s)

    await asyncio.gather(*(run_session(s) for s in sessions))


CLIENT_LAG_WARN_S = 0.005  # p99 client lag above this: the client, not the server, set the pace


def client_bound_warnings(summary: Summary, schedule: Schedule) -> list[str]:
    """Say when the numbers describe the client more than the server."""
    out = []
    lag = summary.client_lag_s.p99
    if (
        lag is not None
        and lag > CLIENT_LAG_WARN_S
        and schedule.is_open_loop
        and not schedule.concurrency
    ):
        out.append(
            f"p99 client lag {lag * 1000:.1f} ms: requests left late; the client may be the "
            "bottleneck (measure its ceiling with benchmarks/client_overhead.py against "
            "servefit null-server)"
        )
    if (
        not schedule.is_open_loop
        and schedule.concurrency
        and summary.successful > 10 * schedule.concurrency
        and summary.achieved_concurrency < 0.5 * schedule.concurrency
    ):
        out.append(
            f"achieved concurrency {summary.achieved_concurrency:.1f} of "
            f"{schedule.concurrency}: the client could not keep every slot busy (client-bound run)"
        )
    return out


async def run_bench(
    cfg: BenchConfig,
    *,
    api_key: str | None,
    out_dir: Path | None,
    listener: Callable[[RequestRecord], None] | None = None,
    interrupt: Interrupt | None = None,
) -> BenchResult:
    """Run one benchmark; returns a result once the server answered, also when interrupted
    (``interrupt`` cancels it: a signal, or :meth:`Interrupt.trigger`) or when the server
    dies mid-run (raises ServerError if it never answered)."""
    interrupt = interrupt or Interrupt()
    # an unwritable --output: nothing sent
    writer: ResultWriter[RequestRecord] = ResultWriter(out_dir, listener)
    clock = Clock()
    interrupted = False
    warnings: list[str] = []
    server: dict[str, Any] = {"base_urls": list(cfg.base_urls)}
    before = after = Scrape()
    peaks: dict[str, float] = {}
    sampler: asyncio.Task[None] | None = None
    client = OpenAIClient(
        list(cfg.base_urls),
        model=cfg.model,
        api_key=api_key,
        timeout_s=cfg.timeout_s,
        session_affinity=cfg.session_affinity,
        credentials=cfg.credentials,
    )
    try:
        with interrupt.watch():
            try:
                async with client:
                    await client.connect()  # unreachable: ServerError, nothing sent
                    server["model"] = client.model
                    before = await _scrape(client)
                    if before.counters:
                        sampler = asyncio.create_task(_sample(client, clock, out_dir, peaks))
                    await _send_all(client, cfg, api_key, clock, writer)
                    if sampler is not None:
                        sampler.cancel()
                    after = await _scrape(client)
            except (asyncio.CancelledError, KeyboardInterrupt):
                interrupted = True
            except aiohttp.ClientError as exc:
                warnings.append(f"server unreachable: {type(exc).__name__}: {exc}")
            except (ValueError, KeyError) as exc:
                warnings.append(f"server answered unexpectedly: {exc}")
    finally:
        writer.close()
        if sampler is not None:
            sampler.cancel()
    if interrupted:
        warnings.append("interrupted: requests in flight were recorded as cut (incomplete/errored)")
    summary = summarize(writer.records, cfg.slo)
    warnings.extend(client_bound_warnings(summary, cfg.schedule))
    result = BenchResult(
        schema_version=SUMMARY_SCHEMA_VERSION,
        servefit_version=__version__,
        config=_config_dict(cfg),
        server=server,
        interrupted=interrupted,
        interrupt_signal=interrupt.signal_name if interrupted else None,
        summary=summary,
        turns=turn_stats(writer.records),
        server_metrics=server_metrics.deltas(before.counters, after.counters)
        if before.counters and after.counters
        else {},
        server_latency_s=server_metrics.latency_percentiles(
            before.histograms, after.histograms, before.raw, after.raw
        ),
        server_peaks=peaks,
        warnings=[redact_text(w, secrets=[api_key] if api_key else ()) for w in warnings],
        started_unix_s=clock.origin_unix_s,
    )
    if out_dir is not None:
        write_document(out_dir, "summary.json", result)
    writer.check()
    return result


async def _send_all(
    client: OpenAIClient,
    cfg: BenchConfig,
    api_key: str | None,
    clock: Clock,
    writer: Callable[[RequestRecord], None],
) -> None:
    """The warm-up, then the measured requests (agent sessions, one process or workers)."""
    count = local_token_counter(cfg.tokenizer_path) if cfg.tokenizer_path else client.tokenize_count
    if cfg.workload.kind == "agent":
        await _run_agents(client, cfg, clock, writer, count)
        return
    requests = with_adapters(await build_requests(cfg.workload, count), cfg.lora_modules)
    warm = [
        Request(**{**_fields(r), "request_id": -1 - i, "is_warmup": True})
        for i, r in enumerate(requests[: cfg.warmup_requests])
    ]
    if warm:
        await run_flat(client, warm, Schedule(concurrency=min(len(warm), 8)), clock, writer, None)
    deadline = clock() + cfg.duration_s if cfg.duration_s else None
    if cfg.workers > 1:
        await run_in_processes(cfg, client.model, api_key, requests, clock, writer, deadline)
    else:
        await run_flat(client, requests, cfg.schedule, clock, writer, deadline)


def with_adapters(requests: list[Request], names: tuple[str, ...]) -> list[Request]:
    """Each request sent to a LoRA adapter in turn, by its name in the ``model`` field (as
    vLLM serves adapters: ``vllm serve --lora-modules name=path``)."""
    if not names:
        return requests
    return [
        Request(**{**_fields(r), "extra": {**r.extra, "model": names[i % len(names)]}})
        for i, r in enumerate(requests)
    ]


def _fields(request: Request) -> dict[str, Any]:
    return {name: getattr(request, name) for name in Request.__dataclass_fields__}


def _config_dict(cfg: BenchConfig) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(cfg), default=str))  # the SLO in ms, as given


def run(
    cfg: BenchConfig,
    *,
    api_key: str | None,
    out_dir: Path | None,
    listener: Callable[[RequestRecord], None] | None = None,
    interrupt: Interrupt | None = None,
) -> BenchResult:
    """Synchronous entry point (uvloop when available). SIGINT and SIGTERM stop the run
    (its own :class:`Interrupt` unless one spanning more runs is given)."""
    loop_factory = None
    with contextlib.suppress(ImportError):
        import uvloop

        loop_factory = uvloop.new_event_loop
    with _interrupt(interrupt) as stop, asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(
            run_bench(cfg, api_key=api_key, out_dir=out_dir, listener=listener, interrupt=stop)
        )


@contextlib.contextmanager
def _interrupt(given: Interrupt | None) -> Iterator[Interrupt]:
    if given is not None:
        yield given
        return
    with Interrupt(hand_on=HANDED_ON) as own:
        yield own


def run_cache_comparison(
    cfg: BenchConfig,
    *,
    api_key: str | None,
    out_dir: Path | None,
    interrupt: Interrupt | None = None,
) -> BenchResult:
    """Agent sessions twice with the same seed: cache-busted (cold), then as they are (warm).
    Reports the TTFT the prefix cache saves per turn; decode time is untouched by it. An
    interrupted cold run is the result (no warm run follows it)."""
    with _interrupt(interrupt) as stop:
        cold = run(
            replace(cfg, workload=replace(cfg.workload, cache_bust=True)),
            api_key=api_key,
            out_dir=out_dir / "cold" if out_dir else None,
            interrupt=stop,
        )
        if cold.interrupted:
            result = cold
        else:
            warm = run(
                cfg, api_key=api_key, out_dir=out_dir / "warm" if out_dir else None, interrupt=stop
            )
            result = warm.model_copy(
                update={
                    "prefix_cache_comparison": compare_cache(cold.turns, warm.turns),
                    "warnings": [*cold.warnings, *warm.warnings],
                }
            )
    if out_dir is not None:
        write_document(out_dir, "summary.json", result)
    return result


def measure(
    cfg: BenchConfig,
    *,
    api_key: str | None,
    out_dir: Path | None,
    is_cache_comparison: bool = False,
    listener: Callable[[RequestRecord], None] | None = None,
    prediction: dict[str, Any] | None = None,
    interrupt: Interrupt | None = None,
) -> BenchResult:
    """One measured run (or the cold/warm pair of a cache comparison), with what ``plan``
    predicted for it written into the same summary."""
    if is_cache_comparison:
        result = run_cache_comparison(cfg, api_key=api_key, out_dir=out_dir, interrupt=interrupt)
    else:
        result = run(cfg, api_key=api_key, out_dir=out_dir, listener=listener, interrupt=interrupt)
    if prediction is not None:
        result = result.model_copy(update={"prediction": prediction})
        if out_dir is not None:
            write_document(out_dir, "summary.json", result)
    return result
