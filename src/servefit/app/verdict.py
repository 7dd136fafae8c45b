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
"""

from __future__ import annotations

from dataclasses import dataclass

from servefit.app.deployment import Deployment, longest_request_tokens
from servefit.core.kv_cache import max_concurrency
from servefit.core.plan import CapacityPlan


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

    @property
    def fits(self) -> bool:
        return self.starts and self.workload_runs is not False and self.meets_target is not False

    @property
    def headline(self) -> str:
        if self.fits:
            return "FITS"
        if not self.starts:
            return "DOES NOT FIT: the engine does not start"
        if self.workload_runs is False:
            return "DOES NOT FIT: the engine starts, the workload does not run as asked"
        return "DOES NOT FIT: the engine starts, the capacity target is missed"


def judge(plan: CapacityPlan, d: Deployment) -> Verdict:
    """The verdict of ``plan`` (planned with ``d.engine_settings()``) for deployment ``d``."""
    r = plan.settings
    engine_name = plan.engine_label
    reasons: list[str] = [p for p in plan.problems if is_startup_problem(p)]
    checks: list[str] = []
    starts = plan.starts

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
                checks.append(
                    f"open loop at {w.request_rate_per_s:g} req/s without a client cap: the "
                    f"KV cache holds {held:,.1f} requests of {tokens:,} tokens; the "
                    "performance section shows whether they queue"
                )
            else:
                running = min(in_flight, r.max_num_seqs)
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
    return Verdict(
        starts=starts,
        workload_runs=workload_runs,
        meets_target=meets_target,
        reasons=tuple(reasons),
        checks=tuple(checks),
        workload_tokens=tokens,
        workload_requests_held=held,
    )
