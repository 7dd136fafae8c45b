"""One recommendation: when a deployment does not fit, the smallest set of changes that makes
it fit, applied *together*, re-planned and verified, with what each change gives up.

The search, cheapest first (the user's own flags are changed before GPUs are added):

1. the same GPUs, then 2x, 4x, 8x tensor parallelism (valid sizes only); on each, the
   user's flags, then ``--gpu-memory-utilization`` raised to :data:`RAISED_UTILIZATION`
   (when the budget is the user's or vLLM's default below it, and no
   ``--kv-cache-memory-bytes`` bypasses it), then fp8 KV cache (16-bit checkpoints only),
   then both; each at the full context first, then (same order) at a shorter one;
2. on each candidate: max-model-len within the model's limit and at least what the
   workload and the target need; if one request of max-model-len does not fit (and the
   candidate may shorten it), the longest that does (when that still covers the workload);
   then max-num-seqs lowered to the state blocks of hybrids; re-planned until stable;
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
# servefit's choice for a raised budget: leaves 5% of the device (4 GiB of an 80 GB card) to
# the CUDA context, NCCL and allocator fragmentation outside vLLM's accounting
RAISED_UTILIZATION = 0.95
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


def _candidates(d: Deployment, plan: CapacityPlan) -> list[tuple[ServeSettings, bool]]:
    """Each candidate's settings, and whether its context may be shortened: on each GPU
    count, every budget and KV option at full context first, then with a shorter one."""
    options = _options(d, plan)
    by_gpus: dict[int, list[ServeSettings]] = {}
    for option in options:
        gpus = option.tensor_parallel_size * option.pipeline_parallel_size
        by_gpus.setdefault(gpus, []).append(option)
    return [(o, shorten) for group in by_gpus.values() for shorten in (False, True) for o in group]


def _splits_by_layers(plan: CapacityPlan) -> bool:
    """llama.cpp spreads a model over more GPUs by layers (-pp), never by TP, and its KV
    cache has no fp8 type."""
    return plan.engine == "llama.cpp"


def _options(d: Deployment, plan: CapacityPlan) -> list[ServeSettings]:
    s = d.settings
    by_layers = _splits_by_layers(plan)
    kv_options = [s.kv_cache_dtype]
    if s.kv_cache_dtype == "auto" and plan.model.dtype in ("bfloat16", "float16") and not by_layers:
        kv_options.append("fp8")
    utilizations: list[float | None] = [s.gpu_memory_utilization]
    budget = plan.settings.gpu_memory_utilization  # the user's, or vLLM's default
    if s.kv_cache_memory_bytes is None and budget < RAISED_UTILIZATION:
        utilizations.append(RAISED_UTILIZATION)
    # per GPU count: the flags as given, the larger budget, fp8 KV, both (cheapest first)
    same_gpus = [(u, kv) for kv in kv_options for u in utilizations]
    same_gpus.sort(key=lambda option: (option[1] != s.kv_cache_dtype, option[0] is not None))
    # more GPUs: llama.cpp splits its layers over them (-pp), vLLM shards (-tp)
    axis = "pipeline_parallel_size" if by_layers else "tensor_parallel_size"
    now = getattr(s, axis)
    counts = [now] + [n for n in TP_CANDIDATES if n > now]
    return [
        replace(s, **{axis: n}, kv_cache_dtype=kv, gpu_memory_utilization=u)
        for n in counts
        for u, kv in same_gpus
    ]


def _needed_len(d: Deployment) -> int:
    needed = longest_request_tokens(d.workload) if d.is_workload_given else 0
    if d.target is not None:
        needed = max(needed, d.target.context_tokens)
    return needed


def _settle(
    d: Deployment,
    s: ServeSettings,
    plan_for: Planner,
    model_max: int | None,
    *,
    may_shorten: bool = True,
) -> tuple[ServeSettings, CapacityPlan] | None:
    """Adjust max-model-len (shorter only where ``may_shorten``) and max-num-seqs on one
    candidate until the plan is stable."""
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
        elif (
            may_shorten
            and (plan.max_concurrency < 1 or _reserves_too_much(plan))
            and plan.largest_max_model_len >= max(needed, 1)
        ):
            changed = replace(changed, max_model_len=plan.largest_max_model_len)
        limit = plan.mamba_block_limit
        if limit is not None and 0 < limit < r.max_num_seqs:
            changed = replace(changed, max_num_seqs=limit)
        if changed == s:
            return s, plan
        s = changed
        plan = plan_for(s)
    return s, plan


def _reserves_too_much(plan: CapacityPlan) -> bool:
    """An engine that reserves its KV cells at start (llama-server) holds its slots exactly,
    so a context too long shows as the cells not fitting, not as a concurrency below 1."""
    return plan.reserved_kv_cache_bytes is not None and not plan.starts


def _round_up(tokens: int) -> int:
    return -(tokens // -MAX_MODEL_LEN_STEP) * MAX_MODEL_LEN_STEP


def recommend(d: Deployment, plan: CapacityPlan, plan_for: Planner) -> Recommendation | None:
    """The first candidate, cheapest first, whose verdict fits; None when none does."""
    model_max = plan.model.max_position_embeddings
    for candidate, may_shorten in _candidates(d, plan):
        try:
            settled = _settle(d, candidate, plan_for, model_max, may_shorten=may_shorten)
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
    for flag, name, how in (
        ("--tensor-parallel-size", "tensor_parallel_size", ""),
        ("--pipeline-parallel-size", "pipeline_parallel_size", ", the layers split over them"),
    ):
        if getattr(b, name) != getattr(a, name):
            out.append(
                Change(
                    flag=flag,
                    before=str(getattr(a, name)),
                    after=str(getattr(b, name)),
                    gives_up=f"{b.num_gpus} GPUs instead of {a.num_gpus}{how}: "
                    f"{b.num_gpus / a.num_gpus:g}x the cost per hour",
                )
            )
    if b.gpu_memory_utilization != a.gpu_memory_utilization:
        out.append(
            Change(
                flag="--gpu-memory-utilization",
                before=f"{a.gpu_memory_utilization:g}",
                after=f"{b.gpu_memory_utilization:g}",
                gives_up=f"vLLM takes {b.gpu_memory_utilization:.0%} of each GPU: "
                "nothing else may run on it, and less is left for memory outside vLLM's "
                "accounting",
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
