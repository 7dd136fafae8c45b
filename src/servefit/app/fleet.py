"""``recommend``: which GPUs, how many, which layout and how many replicas serve a workload
within its SLO at the lowest cost -- a search over the GPU catalog.

For each model and each GPU (every catalog GPU with a price, or ``gpus``), every option of
:mod:`servefit.app.fleet_search` is planned and screened; the survivors are simulated
(:func:`servefit.core.perf.simulate_load`, continuous batching with queueing) in the order
of their cost's lower bound, each for the fewest replicas at which one replica, at its
share of the load, meets the SLO at the percentile
(:func:`servefit.core.fleet.search_replicas`). Disaggregated prefill/decode pools are sized
by :mod:`servefit.app.fleet_disagg`. Fleets are ranked by $/hour for the offered load (at a
fixed rate the order of $/1M output tokens), those meeting the SLO and the budget first.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from servefit.adapters.catalog import efficiency_table
from servefit.adapters.model_source import load_model
from servefit.app.deployment import longest_request_tokens
from servefit.app.fleet_disagg import evaluate_pools, plan_pools
from servefit.app.fleet_search import (
    MIXED_STEP_ALLOWANCE,
    Dropped,
    Screened,
    Shape,
    options_for,
    screen,
)
from servefit.app.fleet_types import (
    Candidate,
    Evaluator,
    FleetOutcome,
    FleetRequest,
    SearchCounts,
    catalog_gpus,
    slo_ratio_values,
    within_budget,
)
from servefit.core.engines import default_engine_name
from servefit.core.fleet import (
    FleetSlo,
    SloCheck,
    fleet_cost,
    pareto_front,
    replicas_for,
    search_replicas,
)
from servefit.core.hardware import GpuSpec
from servefit.core.serving import LoadResult
from servefit.core.vllm_command import vllm_serve_args
from servefit.core.workload import MAX_CONCURRENCY
from servefit.errors import ServefitError

MAX_REPLICAS = 4096

__all__ = ["Candidate", "FleetOutcome", "FleetRequest", "SearchCounts", "recommend_fleet"]


def _upper_load(request: FleetRequest, s: Screened) -> float:
    """The most load one replica could take: requests/s (sessions/s) from the rate bound,
    or for a closed loop the users that bound keeps busy within the SLO (Little's law:
    users = requests/s x time per request, at most TTFT + output x TPOT)."""
    w = request.workload
    if w.request_rate_per_s is not None:
        return s.rate_upper_per_s / max(1, w.turns)
    ttft_s, tpot_s = request.slo.slo.ttft_s, request.slo.slo.tpot_s
    if ttft_s is None or tpot_s is None:
        return float(MAX_CONCURRENCY)
    per_request_s = ttft_s + w.output_len.mean * tpot_s
    return min(float(MAX_CONCURRENCY), max(1.0, s.rate_upper_per_s * per_request_s))


def evaluate(
    request: FleetRequest, model_id: str, s: Screened, price: float, source: str, ev: Evaluator
) -> Candidate:
    """The fewest replicas that carry the load within the SLO; the fleet sized and priced."""
    seen: dict[float, LoadResult] = {}
    offered = request.offered_load
    load = offered * (1 + request.headroom)
    fewest = replicas_for(offered, _upper_load(request, s), request.headroom)
    found = search_replicas(
        lambda share: ev.check_at(s, share, seen),
        load=load,
        fewest=fewest,
        most=_most_replicas(request, s, fewest),
        guess=replicas_for(
            offered, _upper_load(request, s) / MIXED_STEP_ALLOWANCE, request.headroom
        ),
    )
    per_replica = found.share
    replicas = found.replicas
    o = s.option
    meets = replicas > 0
    at = seen[per_replica]
    rate = _offered_rate(request, ev, s, replicas, at)
    num_gpus = max(1, replicas) * o.num_gpus
    cost = fleet_cost(
        num_gpus=num_gpus,
        usd_per_gpu_hour=price,
        rate_per_s=rate,
        output_tokens_per_request=request.workload.output_len.mean,
        requests_per_task=request.workload.turns,
        success_rate=request.success_rate,
    )
    return Candidate(
        model=model_id,
        gpu=o.gpu.name,
        mode="aggregated",
        layout=o.layout,
        tensor_parallel_size=o.tp,
        pipeline_parallel_size=o.pp,
        expert_parallel=o.ep,
        speculative_config=o.speculative.given_json if o.speculative else None,
        quantization=o.quantization,
        kv_cache_dtype=o.kv_cache_dtype,
        max_num_seqs=s.plan.settings.max_num_seqs,
        gpus_per_replica=o.num_gpus,
        replicas=replicas,
        num_gpus=num_gpus,
        per_replica_load=per_replica,
        ttft_s=found.check.ttft_s,
        tpot_s=found.check.tpot_s,
        kv_concurrency=s.kv_concurrency,
        output_tok_per_s_per_gpu=at.output_throughput_tok_per_s / o.num_gpus,
        decode_tok_per_s_per_user=at.decode_tok_per_s,
        usd_per_gpu_hour=price,
        price_source=source,
        usd_per_hour=cost.usd_per_hour,
        usd_per_million_output_tokens=cost.usd_per_million_output_tokens,
        usd_per_task=cost.usd_per_task,
        meets_slo=meets,
        within_budget=within_budget(request, num_gpus, cost.usd_per_hour),
        binding=_binding(found.check, s),
        miss="" if meets else _miss_text(found.check, request.slo),
        commands=(_command(model_id, s),),
        serve_settings=s.settings,
    )


def _most_replicas(request: FleetRequest, s: Screened, fewest: int) -> int:
    """The most replicas worth trying: the GPU budget's, else 64 times the bound's count."""
    if request.max_gpus is not None:
        return max(fewest, request.max_gpus // s.option.num_gpus)
    return min(MAX_REPLICAS, 64 * fewest)


def _offered_rate(
    request: FleetRequest, ev: Evaluator, s: Screened, replicas: int, at: LoadResult
) -> float:
    """Requests/s the fleet serves: the offered rate, or for a closed loop the throughput
    of its replicas at their share of the users."""
    w = request.workload
    if w.request_rate_per_s is not None:
        return w.request_rate_per_s * max(1, w.turns)
    if replicas < 1:
        return at.request_throughput_per_s
    share = ev.load_at(s, math.ceil((w.concurrency or 1) / replicas))
    return share.request_throughput_per_s * replicas


def _binding(check: SloCheck, s: Screened) -> str:
    if s.decode_batch < s.kv_concurrency and check.tpot_ratio >= check.ttft_ratio:
        return f"TPOT (seqs {s.decode_batch})"
    if s.kv_concurrency <= s.decode_batch:
        return f"KV ({s.kv_concurrency} reqs)"
    return check.binding


def _miss_text(check: SloCheck, slo: FleetSlo) -> str:
    return (
        f"{check.binding} {slo.label} {check.ratio:.2f}x its limit at the lowest load tried "
        f"(TTFT {check.ttft_s * 1e3:,.0f} ms, TPOT {check.tpot_s * 1e3:,.1f} ms)"
    )


def _command(model_id: str, s: Screened) -> str:
    args = vllm_serve_args(model_id, s.plan, s.settings, enable_expert_parallel=s.option.ep)
    return shlex.join(args)


@dataclass(slots=True)
class _Search:
    """What the search has found so far (a working accumulator, not a value)."""

    request: FleetRequest
    ev: Evaluator
    counts: SearchCounts = field(default_factory=SearchCounts)
    skipped: list[str] = field(default_factory=list)
    misses: list[tuple[float, str]] = field(default_factory=list)
    # (cost bound $/h, order, the fewest GPUs the bound implies, what simulates it)
    pending: list[tuple[float, int, int, Callable[[], Candidate | None]]] = field(
        default_factory=list
    )
    candidates: list[Candidate] = field(default_factory=list)
    over_budget_usd_per_hour: float = math.inf  # the lowest bound pruned by the budget
    largest_refused: tuple[int, str] = (0, "")  # the most memory that did not start
    over_gpu_budget: float = math.inf  # the fewest GPUs an option pruned by --max-gpus needs

    def count(self, **more: int) -> None:
        self.counts = replace(
            self.counts, **{k: getattr(self.counts, k) + v for k, v in more.items()}
        )

    def add(self, bound: float, price: float, run: Callable[[], Candidate | None]) -> None:
        self.pending.append((bound, len(self.pending), round(bound / price), run))

    def screen_model(self, model: str, gpus: list[tuple[GpuSpec, float | None, str]]) -> None:
        """Stages 1-4 of :mod:`.fleet_search` for every option of every GPU; survivors queue
        with their cost bound (aggregated, and the disaggregated pools per GPU)."""
        request = self.request
        loaded = load_model(model, allow_hub=request.allow_hub)
        spec = loaded.spec
        shape = Shape.of(request.workload, longest_request_tokens(request.workload))
        largest = request.max_gpus or 2 * request.gpus_per_node
        acceptance = None
        if request.speculative is not None:
            from servefit.adapters.acceptance import acceptance_for

            sc = request.speculative
            acceptance = acceptance_for(sc.method, sc.k, request.acceptance_rate)
        for gpu, price, source in gpus:
            if price is None:
                self.skipped.append(f"{gpu.name}: no price in the catalog")
                continue
            if default_engine_name(gpu, spec) != "vllm":
                self.skipped.append(f"{gpu.name}: not served by vLLM")
                continue
            self.count(gpus=1)
            profile = efficiency_table().for_gpu(gpu, "vllm")
            survivors: list[Screened] = []
            for option in options_for(
                spec,
                gpu,
                max_gpus_per_replica=largest,
                gpus_per_node=request.gpus_per_node,
                allow_fp8=request.allow_fp8,
                speculative=request.speculative,
            ):
                self.count(options=1)
                got = screen(
                    spec,
                    option,
                    shape,
                    profile,
                    ttft_limit_s=request.slo.slo.ttft_s,
                    tpot_limit_s=request.slo.slo.tpot_s,
                    vllm_version=request.vllm_version,
                    mamba_ssm_dtype=loaded.mamba_ssm_dtype,
                    acceptance=acceptance,
                )
                if isinstance(got, Dropped):
                    self.drop(spec.name, got)
                    continue
                survivors.append(got)
                self.add(
                    _cost_bound(request, got, price),
                    price,
                    partial(evaluate, request, spec.name, got, price, source, self.ev),
                )
            if survivors and request.disaggregated:
                pools = plan_pools(request, spec.name, survivors, price, source)
                if pools is not None:
                    self.count(options=1)  # the P/D pools of this GPU: one more option
                    self.add(
                        pools.bound_usd_per_hour, price, partial(evaluate_pools, pools, self.ev)
                    )

    def drop(self, model_id: str, d: Dropped) -> None:
        if d.stage == "capacity":
            self.count(pruned_capacity=1)
            memory = d.option.gpu.memory_bytes * d.option.num_gpus
            if memory > self.largest_refused[0]:
                where = f"{model_id} on {d.option.num_gpus} x {d.option.gpu.name}"
                self.largest_refused = (memory, f"{where} {d.option.layout}: {d.reason}")
            return
        self.count(pruned_latency=1)
        where = f"{model_id} on {d.option.gpu.name} {d.option.layout}"
        self.misses.append((d.ratio, f"{where}: {d.reason}"))

    def run_pending(self) -> None:
        """Simulate in the order of the cost bound; stop simulating what cannot enter the
        ``top`` cheapest fleets found."""
        top = self.request.top
        budget = self.request.max_usd_per_hour
        max_gpus = self.request.max_gpus
        for bound, _, fewest_gpus, run in sorted(self.pending, key=lambda item: item[:2]):
            if max_gpus is not None and fewest_gpus > max_gpus:
                self.count(pruned_bound=1)  # needs more GPUs than the budget at its bound
                self.over_gpu_budget = min(self.over_gpu_budget, fewest_gpus)
                continue
            if budget is not None and bound > budget:
                self.count(pruned_bound=1)  # even its cost's lower bound is over the budget
                self.over_budget_usd_per_hour = min(self.over_budget_usd_per_hour, bound)
                continue
            best = sorted(c.usd_per_hour for c in self.candidates if c.is_recommendable)
            if len(best) >= top and bound > best[top - 1]:
                self.count(pruned_bound=1)
                continue
            try:
                cand = run()
            except ServefitError as error:
                self.misses.append((math.inf, str(error)))
                continue
            if cand is None:
                continue
            self.count(simulated=1)
            self.candidates.append(cand)
            if not cand.meets_slo:
                ratio = slo_ratio_values(cand.ttft_s, cand.tpot_s, self.request.slo)
                self.misses.append(
                    (ratio, f"{cand.model} on {cand.gpu} {cand.layout}: {cand.miss}")
                )


def recommend_fleet(request: FleetRequest) -> FleetOutcome:
    """Search every model x GPU x option; rank the fleets."""
    gpus = catalog_gpus(request.gpus)
    search = _Search(request=request, ev=Evaluator(request))
    for model in request.models:
        search.screen_model(model, gpus)
    search.run_pending()
    ranked = sorted(search.candidates, key=_rank_key)
    counts = replace(
        search.counts,
        gpus_skipped=tuple(dict.fromkeys(search.skipped)),
        simulations=search.ev.num_simulations,
    )
    meeting = [c for c in ranked if c.meets_slo]
    closest = ""
    if not any(c.is_recommendable for c in ranked):
        closest = _closest(search.misses, ranked, search.over_budget_usd_per_hour)
        if not search.candidates and math.isfinite(search.over_gpu_budget):
            closest = (
                f"the GPU budget binds: the fleets that start need at least "
                f"{search.over_gpu_budget:.0f} GPUs at this rate (--max-gpus {request.max_gpus})"
            )
        elif not search.misses and search.largest_refused[1]:
            closest += f"; the most memory tried: {search.largest_refused[1]}"
    return FleetOutcome(
        request=request,
        candidates=tuple(ranked),
        pareto=pareto_front(
            meeting, lambda c: c.output_tok_per_s_per_gpu, lambda c: c.decode_tok_per_s_per_user
        ),
        counts=counts,
        closest_miss=closest,
        assumptions=ASSUMPTIONS,
    )


ASSUMPTIONS = (
    "one efficiency profile per hardware class (servefit's performance model); vLLM "
    "V1 continuous batching with chunked prefill, Poisson arrivals",
    "a replica lives within one node (8 GPUs unless --gpus-per-node); pipeline stages "
    "only across nodes",
    "online fp8 weights and fp8 KV cache only on GPUs with FP8 tensor cores "
    "(compute capability >= 8.9)",
    "$/1M output tokens charges all the fleet's GPU time to the output tokens at the "
    "offered rate; on-demand catalog prices",
)


def _cost_bound(request: FleetRequest, s: Screened, price: float) -> float:
    """$/hour of the fleet if a replica took its load's upper bound: a lower bound."""
    upper = _upper_load(request, s)
    replicas = replicas_for(request.offered_load, upper, request.headroom)
    return replicas * s.option.num_gpus * price


def _rank_key(c: Candidate) -> tuple[int, float, float, int]:
    """Recommendable first, then the fleet's $/hour for the offered load (at a fixed rate
    the same order as $/1M output tokens; for a closed loop of users, what serving them
    costs), then $/1M output tokens, then fewer GPUs."""
    return (
        0 if c.is_recommendable else 1 if c.meets_slo else 2,
        c.usd_per_hour if c.meets_slo else math.inf,
        c.usd_per_million_output_tokens,
        c.num_gpus,
    )


def _closest(
    misses: list[tuple[float, str]], ranked: list[Candidate], over_budget_bound: float
) -> str:
    over_budget = [c for c in ranked if c.meets_slo and not c.within_budget]
    if over_budget:
        c = over_budget[0]
        return (
            f"the budget binds: the cheapest fleet meeting the SLO needs {c.num_gpus} x "
            f"{c.gpu} at ${c.usd_per_hour:,.2f}/h"
        )
    if math.isfinite(over_budget_bound):
        return (
            f"the budget binds: no fleet can cost less than ${over_budget_bound:,.2f}/h "
            "at this rate (the cost's lower bound of the cheapest option)"
        )
    if not misses:
        return (
            "no option in the search starts the model (raise --max-gpus, or name GPUs with "
            "more memory)"
        )
    ratio, text = min(misses, key=lambda m: m[0])
    return f"closest miss: {text}" + (f" ({ratio:.2f}x the limit)" if math.isfinite(ratio) else "")
