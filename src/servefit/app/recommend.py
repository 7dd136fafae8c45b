"""One recommendation: when a deployment does not fit, the smallest set of changes that makes
it fit, applied *together*, re-planned and verified, with what each change gives up.

The search, cheapest first:

1. the same GPUs, then 2x, 4x, 8x tensor parallelism (valid sizes only); on each, the
   user's KV-cache dtype, then fp8 (16-bit checkpoints only);
2. on each candidate: max-model-len within the model's limit and at least what the
   workload and the target need; if one request of max-model-len does not fit, the longest
   that does (when that still covers the workload); then max-num-seqs lowered to the state
   blocks of hybrids; re-planned until stable;
3. the first candidate whose verdict fits wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from servefit.app.deployment import Deployment, longest_request_tokens
from servefit.app.verdict import Verdict, judge
from servefit.core.plan import TP_CANDIDATES, CapacityPlan, ServeSettings
from servefit.errors import InvalidArgumentError

MAX_MODEL_LEN_STEP = 256  # a raised max-model-len is rounded up to this (a readable number)
MAX_SETTLE_ROUNDS = 4

Planner = Callable[[ServeSettings], CapacityPlan]


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    flag: str
    before: str
    after: str
    gives_up: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Recommendation:
    settings: ServeSettings
    changes: tuple[Change, ...]
    capacity: CapacityPlan
    verdict: Verdict


def _candidates(d: Deployment, plan: CapacityPlan) -> list[ServeSettings]:
    s = d.settings
    kv_options = [s.kv_cache_dtype]
    if s.kv_cache_dtype == "auto" and plan.model.dtype in ("bfloat16", "float16"):
        kv_options.append("fp8")
    tps = [s.tensor_parallel_size] + [t for t in TP_CANDIDATES if t > s.tensor_parallel_size]
    return [
        replace(s, tensor_parallel_size=tp, kv_cache_dtype=kv) for tp in tps for kv in kv_options
    ]


def _needed_len(d: Deployment) -> int:
    needed = longest_request_tokens(d.workload) if d.is_workload_given else 0
    if d.target is not None:
        needed = max(needed, d.target.context_tokens)
    return needed


def _settle(
    d: Deployment, s: ServeSettings, plan_for: Planner, model_max: int | None
) -> tuple[ServeSettings, CapacityPlan] | None:
    """Adjust max-model-len and max-num-seqs on one candidate until the plan is stable."""
    needed = _needed_len(d)
    if model_max and needed > model_max:
        return None
    plan = plan_for(s)
    for _ in range(MAX_SETTLE_ROUNDS):
        r = plan.settings
        changed = s
        if model_max and r.max_model_len > model_max:
            changed = replace(changed, max_model_len=max(needed, model_max))
        elif r.max_model_len < needed:
            top = model_max or needed
            changed = replace(changed, max_model_len=min(top, _round_up(needed)))
        elif plan.max_concurrency < 1 and plan.largest_max_model_len >= max(needed, 1):
            changed = replace(changed, max_model_len=plan.largest_max_model_len)
        limit = plan.mamba_block_limit
        if limit is not None and 0 < limit < r.max_num_seqs:
            changed = replace(changed, max_num_seqs=limit)
        if changed == s:
            return s, plan
        s = changed
        plan = plan_for(s)
    return s, plan


def _round_up(tokens: int) -> int:
    return -(tokens // -MAX_MODEL_LEN_STEP) * MAX_MODEL_LEN_STEP


def recommend(d: Deployment, plan: CapacityPlan, plan_for: Planner) -> Recommendation | None:
    """The first candidate, cheapest first, whose verdict fits; None when none does."""
    model_max = plan.model.max_position_embeddings
    for candidate in _candidates(d, plan):
        try:
            settled = _settle(d, candidate, plan_for, model_max)
        except InvalidArgumentError:  # a TP size the model's heads do not allow
            continue
        if settled is None:
            return None
        s, new_plan = settled
        verdict = judge(new_plan, d.with_settings(s))
        if verdict.fits:
            return Recommendation(
                settings=s,
                changes=_changes(plan, new_plan),
                capacity=new_plan,
                verdict=verdict,
            )
    return None


def _changes(old: CapacityPlan, new: CapacityPlan) -> tuple[Change, ...]:
    a, b = old.settings, new.settings
    out = []
    if b.tensor_parallel_size != a.tensor_parallel_size:
        out.append(
            Change(
                flag="--tensor-parallel-size",
                before=str(a.tensor_parallel_size),
                after=str(b.tensor_parallel_size),
                gives_up=f"{b.num_gpus} GPUs instead of {a.num_gpus}: "
                f"{b.num_gpus / a.num_gpus:g}x the cost per hour",
            )
        )
    if b.kv_cache_dtype != a.kv_cache_dtype:
        out.append(
            Change(
                flag="--kv-cache-dtype",
                before=a.kv_cache_dtype,
                after=b.kv_cache_dtype,
                gives_up="the KV cache in fp8 halves its bytes per token at a small accuracy "
                "risk: check your evals",
            )
        )
    if b.max_model_len != a.max_model_len:
        shorter = b.max_model_len < a.max_model_len
        out.append(
            Change(
                flag="--max-model-len",
                before=f"{a.max_model_len:,}",
                after=f"{b.max_model_len:,}",
                gives_up=(
                    f"requests longer than {b.max_model_len:,} tokens are refused"
                    if shorter
                    else f"each request may hold up to {b.max_model_len:,} tokens"
                ),
            )
        )
    if b.max_num_seqs != a.max_num_seqs:
        out.append(
            Change(
                flag="--max-num-seqs",
                before=str(a.max_num_seqs),
                after=str(b.max_num_seqs),
                gives_up=f"at most {b.max_num_seqs} requests run at once; more wait",
            )
        )
    return tuple(out)
