"""The serving simulation's result: a finished run of
:class:`~servefit.core.serving_sim.Simulation` assembled into a
:class:`~servefit.core.serving_types.LoadResult` -- every completed request timed with the
benchmark's formulas (:mod:`servefit.core.metrics`), throughputs over the run, the dominant
bound, GPU time by phase, and the agent sessions' end-to-end times and per-turn loads."""

from __future__ import annotations

from servefit.core import metrics
from servefit.core.metrics import Stat
from servefit.core.roofline import Bound
from servefit.core.serving_sim import Simulation
from servefit.core.serving_types import LoadResult, RequestTiming, TurnLoad
from servefit.core.workload import Slo


def load_result(sim: Simulation, request_overhead_s: float, slo: Slo | None) -> LoadResult:
    """The finished run ``sim`` as one load level; ``request_overhead_s`` is added to every
    first and last token (HTTP and tokenizing, seen by the client only)."""
    timings = [
        RequestTiming(
            sent_s=r.sent,
            first_token_s=r.first + request_overhead_s,
            finish_s=r.finish + request_overhead_s,
            input_len=r.spec.input_len,
            output_len=r.spec.output_len,
            cached_tokens=r.cached,
            num_preemptions=r.preemptions,
        )
        for r in sim.done
    ]
    start = min(t.sent_s for t in timings)
    end = max(t.finish_s for t in timings)
    duration = max(end - start, 1e-12)
    out_tokens = sum(t.output_len for t in timings)
    in_tokens = sum(t.input_len for t in timings)
    num_sessions = sum(1 for r in sim.done if r.index + 1 == len(r.session.turns))
    goodput = None
    if slo is not None:
        goodput = metrics.goodput_per_s(slo, timings, duration)
    busy = sim.t if sim.t > 0 else 1e-12
    kv_fraction = sim.kv_blocked_s / busy
    parts = dict(sim.by_bound)
    ttft = Stat.of([t.ttft_s for t in timings])
    e2e = Stat.of([t.e2e_s for t in timings])
    bound = (
        Bound.CAPACITY
        if kv_fraction > 0.25 or sim.preemptions
        else Bound(max(parts, key=lambda k: parts[k]))
    )
    return LoadResult(
        concurrency=sim.w.concurrency,
        request_rate_per_s=sim.w.request_rate_per_s,
        num_requests=len(timings),
        duration_s=duration,
        ttft_s=ttft,
        tpot_s=Stat.of([v for t in timings if (v := t.tpot_s) is not None]),
        e2e_s=e2e,
        output_throughput_tok_per_s=out_tokens / duration,
        total_throughput_tok_per_s=(out_tokens + in_tokens) / duration,
        request_throughput_per_s=len(timings) / duration,
        goodput_per_s=goodput,
        mean_batch=sim.batch_time / busy,
        max_batch=sim.max_batch,
        num_preemptions=sim.preemptions,
        kv_blocked_fraction=kv_fraction,
        bound=bound,
        time_by_bound_s=parts,
        busy_s=sim.busy_s,
        prefill_gpu_s=sim.prefill_s,
        decode_gpu_s=sim.busy_s - sim.prefill_s,
        num_input_tokens=in_tokens,
        num_cached_tokens=sum(t.cached_tokens for t in timings),
        num_output_tokens=out_tokens,
        turns=sim.w.turns,
        num_sessions=num_sessions,
        session_throughput_per_s=num_sessions / duration,
        # one turn: every request is a session, and the one turn all requests: the same
        # values as the request stats (Stat.of sorts them), not computed twice
        session_e2e_s=e2e if sim.w.turns == 1 else session_e2e(sim, request_overhead_s),
        by_turn=(
            (
                TurnLoad(
                    turn=1,
                    num_requests=len(timings),
                    mean_input_len=in_tokens / len(timings),
                    mean_cached_tokens=sum(t.cached_tokens for t in timings) / len(timings),
                    ttft_s=ttft,
                    e2e_s=e2e,
                ),
            )
            if sim.w.turns == 1
            else by_turn(sim, timings)
        ),
    )


def session_e2e(sim: Simulation, request_overhead_s: float) -> Stat:
    """Per session: first turn sent -> last turn finished."""
    first_sent: dict[int, float] = {}
    last_finish: dict[int, float] = {}
    for r in sim.done:
        key = id(r.session)
        if r.index == 0:
            first_sent[key] = r.sent
        if r.index + 1 == len(r.session.turns):
            last_finish[key] = r.finish + request_overhead_s
    return Stat.of([last_finish[k] - first_sent[k] for k in last_finish])


def by_turn(sim: Simulation, timings: list[RequestTiming]) -> tuple[TurnLoad, ...]:
    """The completed requests grouped by turn (1-based)."""
    groups: dict[int, list[RequestTiming]] = {}
    for r, t in zip(sim.done, timings, strict=True):
        groups.setdefault(r.index + 1, []).append(t)
    return tuple(
        TurnLoad(
            turn=turn,
            num_requests=len(ts),
            mean_input_len=sum(t.input_len for t in ts) / len(ts),
            mean_cached_tokens=sum(t.cached_tokens for t in ts) / len(ts),
            ttft_s=Stat.of([t.ttft_s for t in ts]),
            e2e_s=Stat.of([t.e2e_s for t in ts]),
        )
        for turn, ts in sorted(groups.items())
    )
