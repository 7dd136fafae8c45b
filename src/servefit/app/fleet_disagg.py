"""Disaggregated prefill/decode fleets (xPyD) for ``recommend``: a pool of prefill
instances and a pool of decode instances of one GPU type, joined by vLLM's KV-transfer
connector (``--kv-transfer-config``, NixlConnector with ``kv_role`` ``kv_both``, as in vLLM's
NixlConnector usage guide).

- One option (layout, formats, ``--max-num-seqs``) for both pools, so one ``vllm serve``
  line serves both roles: the option whose pools need the fewest GPUs by their bounds.
- Prefill pool: the fewest instances whose TTFT at the percentile stays within the TTFT
  limit less the KV transfer, each simulated at its share of the rate with one output
  token per request (queueing included).
- KV transfer: the prompt's KV bytes on one GPU over one GPU's link (NVLink/PCIe within a
  node, the profile's inter-node figure when the pools span nodes), one way
  (:func:`servefit.core.roofline.link_bandwidth_bytes_per_s`).
- Decode pool: instances at the option's decode batch (the largest batch within the TPOT
  limit and the KV cache at the workload's whole length); a decode instance runs no
  prefill, so its TPOT is that batch's decode step (no queueing is simulated there).

Only for an open-loop rate of single-turn requests with a TTFT limit (agent sessions reuse
their history on the instance that holds it, which a P/D split does not model).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

from servefit.app.deploy import kv_transfer_config
from servefit.app.fleet_search import Screened
from servefit.app.fleet_types import (
    Candidate,
    Evaluator,
    FleetRequest,
    sim_requests,
    slo_ratio_values,
    within_budget,
)
from servefit.core.fleet import (
    FleetSlo,
    SloCheck,
    fleet_cost,
    replicas_for,
    search_replicas,
    slo_ratio,
)
from servefit.core.metrics import Slo
from servefit.core.perf import simulate_load
from servefit.core.roofline import link_bandwidth_bytes_per_s
from servefit.core.vllm_command import vllm_serve_args
from servefit.core.workload import LengthDist

PREFILL_BOUND_ALLOWANCE = 1.2  # the prefill-only rate bound: full chunks, a little slack


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolPlan:
    """The two pools of one GPU type before the prefill pool is simulated."""

    request: FleetRequest
    model_id: str
    prefill: Screened
    decode: Screened
    num_decode: int
    transfer_s: float
    prefill_slo: FleetSlo  # the TTFT limit less the KV transfer
    price: float
    source: str
    fewest_prefill: int  # from the prefill rate's upper bound

    @property
    def bound_usd_per_hour(self) -> float:
        gpus = (
            self.fewest_prefill * self.prefill.option.num_gpus
            + self.num_decode * self.decode.option.num_gpus
        )
        return gpus * self.price


def plan_pools(
    request: FleetRequest, model_id: str, options: list[Screened], price: float, source: str
) -> PoolPlan | None:
    """The pools' options, the decode count, the KV transfer and the prefill TTFT budget;
    None when the fleet is not one a P/D split serves (see the module docstring) or the
    transfer alone spends the TTFT limit."""
    w = request.workload
    slo = request.slo
    if w.request_rate_per_s is None or w.turns > 1 or slo.slo.ttft_s is None:
        return None
    rate = w.request_rate_per_s

    def fewest_prefill(o: Screened) -> int:
        upper = PREFILL_BOUND_ALLOWANCE * o.prefill_tok_per_s / max(1, w.input_len.mean)
        return replicas_for(rate, upper, request.headroom)

    def pool_gpus(o: Screened) -> int:
        decode = replicas_for(rate, o.decode_rate_per_s, request.headroom)
        return (fewest_prefill(o) + decode) * o.option.num_gpus

    # one option for both pools (one vllm serve line, two roles), the fewest GPUs by bound
    p = d = min(options, key=lambda o: (pool_gpus(o), o.option.num_gpus))
    num_decode = replicas_for(rate, d.decode_rate_per_s, request.headroom)
    pool_gpus_bound = pool_gpus(p)
    link = "intra" if pool_gpus_bound <= request.gpus_per_node else "inter"
    bandwidth = link_bandwidth_bytes_per_s(p.option.gpu, link, p.profile)
    transfer_s = p.plan.kv_bytes_per_token * w.input_len.mean / bandwidth
    budget_ms = (slo.slo.ttft_s - transfer_s) * 1e3
    if budget_ms <= 0:
        return None
    return PoolPlan(
        request=request,
        model_id=model_id,
        prefill=p,
        decode=d,
        num_decode=num_decode,
        transfer_s=transfer_s,
        prefill_slo=FleetSlo(slo=Slo(ttft_ms=budget_ms), percentile=slo.percentile),
        price=price,
        source=source,
        fewest_prefill=fewest_prefill(p),
    )


def evaluate_pools(pools: PoolPlan, ev: Evaluator) -> Candidate:
    """The fewest prefill instances within the TTFT budget (simulated, one output token per
    request); the fleet priced."""
    request, p, d = pools.request, pools.prefill, pools.decode
    w = request.workload
    rate = w.request_rate_per_s or 0.0
    prefill_w = replace(w, output_len=LengthDist(mean=1))

    def check(load: float) -> SloCheck:
        ev.num_simulations += 1
        n = sim_requests(p.plan.settings.max_num_seqs)
        sim_w = replace(prefill_w, request_rate_per_s=load, concurrency=None, num_requests=n)
        result = simulate_load(p.plan, p.coeffs, p.profile, sim_w)
        return slo_ratio(result.ttft_s, result.tpot_s, pools.prefill_slo)

    found = search_replicas(
        check,
        load=rate * (1 + request.headroom),
        fewest=pools.fewest_prefill,
        most=64 * pools.fewest_prefill,
    )
    num_prefill = max(1, found.replicas)
    num_gpus = num_prefill * p.option.num_gpus + pools.num_decode * d.option.num_gpus
    cost = fleet_cost(
        num_gpus=num_gpus,
        usd_per_gpu_hour=pools.price,
        rate_per_s=rate,
        output_tokens_per_request=w.output_len.mean,
        success_rate=request.success_rate,
    )
    ttft_s = found.check.ttft_s + pools.transfer_s
    tpot_s = d.decode_batch_s
    meets = found.replicas > 0 and slo_ratio_values(ttft_s, tpot_s, request.slo) <= 1.0
    o = d.option
    return Candidate(
        model=pools.model_id,
        gpu=o.gpu.name,
        mode="disaggregated",
        layout=f"{num_prefill}P{pools.num_decode}D {o.layout}",
        tensor_parallel_size=o.tp,
        pipeline_parallel_size=o.pp,
        expert_parallel=o.ep,
        speculative_config=o.speculative.given_json if o.speculative else None,
        quantization=o.quantization,
        kv_cache_dtype=o.kv_cache_dtype,
        max_num_seqs=d.plan.settings.max_num_seqs,
        gpus_per_replica=o.num_gpus,
        replicas=num_prefill + pools.num_decode,
        prefill_replicas=num_prefill,
        decode_replicas=pools.num_decode,
        num_gpus=num_gpus,
        per_replica_load=min(found.share, d.decode_rate_per_s),
        ttft_s=ttft_s,
        tpot_s=tpot_s,
        kv_concurrency=d.kv_concurrency,
        output_tok_per_s_per_gpu=rate * w.output_len.mean / num_gpus,
        decode_tok_per_s_per_user=1.0 / tpot_s,
        kv_transfer_s=pools.transfer_s,
        usd_per_gpu_hour=pools.price,
        price_source=pools.source,
        usd_per_hour=cost.usd_per_hour,
        usd_per_million_output_tokens=cost.usd_per_million_output_tokens,
        usd_per_task=cost.usd_per_task,
        meets_slo=meets,
        within_budget=within_budget(request, num_gpus, cost.usd_per_hour),
        binding=f"TTFT (+{pools.transfer_s * 1e3:,.1f} ms KV)",
        miss="" if meets else f"prefill pool: TTFT {ttft_s * 1e3:,.0f} ms",
        commands=_commands(pools.model_id, p, d, num_prefill, pools.num_decode),
        serve_settings=d.settings,
    )


def _commands(
    model_id: str, p: Screened, d: Screened, num_prefill: int, num_decode: int
) -> tuple[str, ...]:
    """One ``vllm serve`` line for both roles (``kv_both``: the proxy picks the role)."""
    extra = ("--kv-transfer-config", kv_transfer_config())
    serve = vllm_serve_args(
        model_id, d.plan, d.settings, extra_args=extra, enable_expert_parallel=d.option.ep
    )
    return (
        shlex.join(serve),
        f"# x {num_prefill} prefill + {num_decode} decode instances, behind a prefill/decode "
        "proxy that sends each request to a prefill, then a decode instance (vLLM's "
        "disaggregated-serving examples, llm-d)",
    )
