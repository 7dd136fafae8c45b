"""The one verdict every command gives, and its exit code.

A deployment **fits** when

1. the engine starts with these settings (weights, activations and runtime leave room for
   at least one request of max-model-len, the state-block limit holds, max-model-len is
   within the model's), and
2. the workload runs, when the user described one: each request (a session's whole history
   for agents) is within max-model-len, and the requests the engine would run at once
   (the workload's concurrency, at most max-num-seqs) fit in the KV cache at their own
   length, and
3. the explicit capacity target holds, when one is asked for (``--context N`` with
   ``--target-concurrency M``).

Without a workload or a target, capacity at max-model-len is reported, not judged.

Every verdict also carries its margin (:mod:`servefit.core.margin`): how far the tightest of
those comparisons is from the edge, against the measured error of the KV-cache figure on the
deployment's hardware. Inside that error the headline says *at the edge*, with the flags that
would take the plan out of it; the exit code still follows the prediction (0 fits, 1 not).
"""

from __future__ import annotations

from dataclasses import dataclass

from servefit.app.deployment import Deployment, longest_request_tokens
from servefit.core.error_band import ErrorBand
from servefit.core.kv_cache import max_concurrency
from servefit.core.margin import Constraint, Margin, tightest_margin
from servefit.core.plan import CapacityPlan
from servefit.units import GIB_BYTES


def is_startup_problem(problem: str) -> bool:
    """Engines word what stops them as "<engine> would not start: ..." (vLLM, llama-server)
    or "mlx-lm would not fit in ...: ..."; suggestions and target misses are worded
    otherwise."""
    head, sep, _ = problem.partition(": ")
    return bool(sep) and " would not " in head


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The one verdict: does the engine start, does the workload run, does the target
    hold, and why."""

    starts: bool
    workload_runs: bool | None  # None: no workload described, nothing judged
    meets_target: bool | None  # None: no --context target asked for
    reasons: tuple[str, ...]  # why it does not fit (empty when it fits)
    checks: tuple[str, ...]  # what was checked and held, in words
    workload_tokens: int  # the longest request of the workload (0 when not judged)
    workload_requests_held: float  # requests of the workload's length the KV cache holds
    margin: Margin | None = None  # how far from the edge (None: no KV cache to measure it on)
    # the prediction is closer to the edge than its measured error, and nothing but that
    # capacity comparison decides it
    is_at_edge: bool = False
    edge_advice: tuple[str, ...] = ()  # flags that take an at-the-edge plan out of its band

    @property
    def fits(self) -> bool:
        return self.starts and self.workload_runs is not False and self.meets_target is not False

    @property
    def headline(self) -> str:
        if self.fits:
            if self.is_at_edge:
                return "AT THE EDGE: predicted to fit, by less than servefit's measured error"
            return "FITS"
        if self.is_at_edge:
            return "AT THE EDGE: predicted not to fit, by less than servefit's measured error"
        if not self.starts:
            return "DOES NOT FIT: the engine does not start"
        if self.workload_runs is False:
            return "DOES NOT FIT: the engine starts, the workload does not run as asked"
        return "DOES NOT FIT: the engine starts, the capacity target is missed"


def judge(plan: CapacityPlan, d: Deployment, kv_band: ErrorBand | None = None) -> Verdict:
    """The verdict of ``plan`` (planned with ``d.engine_settings()``) for deployment ``d``;
    ``kv_band`` is the measured error of the KV-cache figure on this hardware (the margin is
    judged against it)."""
    r = plan.settings
    engine_name = plan.engine_label
    reasons: list[str] = [p for p in plan.problems if is_startup_problem(p)]
    checks: list[str] = []
    starts = plan.starts
    constraints: list[Constraint] = []
    loads = plan.memory.weights_bytes <= plan.memory.total_bytes
    reserved = plan.reserved_kv_cache_bytes
    if reserved and loads:  # llama-server allocates every cell at start
        constraints.append(
            Constraint(
                what=(
                    f"the {r.max_num_seqs * r.max_model_len:,} KV cells -c reserves at start "
                    f"({plan.engine_label}'s start check)"
                ),
                held=max(plan.memory.kv_cache_bytes, 0) / reserved,
                needed=1,
            )
        )
    elif plan.layout.groups and loads:
        constraints.append(
            Constraint(
                what=(
                    f"one request of --max-model-len {r.max_model_len:,} tokens "
                    "(vLLM's start check)"
                ),
                held=plan.max_concurrency,
                needed=1,
            )
        )

    workload_runs: bool | None = None
    tokens, held = 0, 0.0
    if d.is_workload_given:
        w = d.workload
        tokens = longest_request_tokens(w)
        runs = True
        what = "a session's whole history" if w.turns > 1 else "input + output"
        if tokens > r.max_model_len:
            runs = False
            reasons.append(
                f"the workload's requests reach {tokens:,} tokens ({what}) but --max-model-len "
                f"is {r.max_model_len:,}: {engine_name} rejects longer requests"
            )
        elif starts and plan.layout.groups:
            held = max_concurrency(plan.layout, plan.num_blocks, tokens, r.max_num_batched_tokens)
            in_flight = w.concurrency
            if in_flight is None:
                load = (
                    "the trace replayed at its arrival times"
                    if w.request_rate_per_s is None
                    else f"open loop at {w.request_rate_per_s:g} req/s"
                )
                checks.append(
                    f"{load} without a client cap: the "
                    f"KV cache holds {held:,.1f} requests of {tokens:,} tokens; the "
                    "performance section shows whether they queue"
                )
            else:
                running = min(in_flight, r.max_num_seqs)
                constraints.append(
                    Constraint(
                        what=f"the workload's {running} requests in flight of {tokens:,} tokens",
                        held=held,
                        needed=running,
                    )
                )
                if held < running:
                    runs = False
                    reasons.append(
                        f"the KV cache holds {held:,.2f} requests of {tokens:,} tokens at once, "
                        f"not the workload's {running} in flight: the rest queue or are "
                        "preempted"
                    )
                else:
                    checks.append(
                        f"the workload's {running} requests in flight of {tokens:,} tokens fit "
                        f"in the KV cache (it holds {held:,.1f})"
                    )
                if in_flight > r.max_num_seqs:
                    checks.append(
                        f"{in_flight} requests in flight exceed --max-num-seqs {r.max_num_seqs}: "
                        f"{engine_name} runs {r.max_num_seqs} at once, the rest wait"
                    )
        workload_runs = runs

    meets_target: bool | None = None
    if d.target is not None:
        t = d.target
        meets_target = True
        if starts and plan.layout.groups and t.context_tokens <= r.max_model_len:
            constraints.append(
                Constraint(
                    what=f"{t.concurrency} requests of {t.context_tokens:,} tokens (the target)",
                    held=plan.concurrency_at_context,
                    needed=t.concurrency,
                )
            )
        if t.context_tokens > r.max_model_len:
            meets_target = False
            reasons.append(
                f"--context {t.context_tokens:,} exceeds --max-model-len {r.max_model_len:,}: "
                f"{engine_name} rejects longer requests"
            )
        elif starts and plan.concurrency_at_context < t.concurrency:
            meets_target = False
            reasons.append(
                f"the KV cache holds {plan.concurrency_at_context:,.2f} requests of "
                f"{t.context_tokens:,} tokens at once, not the {t.concurrency} asked for "
                "(--target-concurrency)"
            )
        elif starts:
            checks.append(
                f"target: {t.concurrency} requests of {t.context_tokens:,} tokens at once "
                f"(the KV cache holds {plan.concurrency_at_context:,.1f})"
            )
    # the tokens the KV memory holds: vLLM's cache size, or for an engine that reserves its
    # cells up front, those cells scaled to the memory left for them
    capacity_tokens = plan.kv_cache_tokens
    if reserved:
        capacity_tokens = int(capacity_tokens * max(plan.memory.kv_cache_bytes, 0) / reserved)
    margin = tightest_margin(constraints, plan.memory.kv_cache_bytes, capacity_tokens, kv_band)
    # a plan that does not fit is at the edge only when its reasons are its capacity
    # comparisons falling short (not a hard rule such as a context beyond max-model-len)
    short = sum(1 for c in constraints if c.held < c.needed)
    at_edge = margin is not None and margin.is_at_edge and len(reasons) <= short
    return Verdict(
        starts=starts,
        workload_runs=workload_runs,
        meets_target=meets_target,
        reasons=tuple(reasons),
        checks=tuple(checks),
        workload_tokens=tokens,
        workload_requests_held=held,
        margin=margin,
        is_at_edge=at_edge,
        edge_advice=edge_advice(plan, margin) if margin is not None and at_edge else (),
    )


def edge_advice(plan: CapacityPlan, margin: Margin) -> tuple[str, ...]:
    """The flags that give the tightest constraint a margin of the band's p90: more KV memory
    (``--gpu-memory-utilization``) or, for the start check, a shorter ``--max-model-len``."""
    assert margin.band is not None
    c, r, memory = margin.constraint, plan.settings, plan.memory
    spare = margin.band.p90_rel
    # the KV cache must hold needed / (1 - spare) requests: it grows with its memory
    wanted_bytes = margin.kv_cache_bytes * c.needed / ((1 - spare) * c.held)
    extra_bytes = max(0.0, wanted_bytes - margin.kv_cache_bytes)
    advice = []
    utilization = r.gpu_memory_utilization + extra_bytes / memory.total_bytes
    if utilization <= 0.98:
        advice.append(
            f"--gpu-memory-utilization {_ceil_to(utilization, 0.01):.2f} "
            f"({extra_bytes / GIB_BYTES:,.2f} GiB more KV cache)"
        )
    if c.needed == 1 and "max-model-len" in c.what:
        shorter = int(r.max_model_len * c.held * (1 - spare)) // 256 * 256
        if 0 < shorter < r.max_model_len:
            advice.append(f"--max-model-len {shorter:,}")
    return tuple(advice)


def _ceil_to(value: float, step: float) -> float:
    return -(-value // step) * step
