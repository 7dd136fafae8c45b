"""Data parallelism: ``--data-parallel-size N`` runs N engine ranks of TP x PP GPUs each.

Each rank has its own scheduler, KV cache and ``max_num_seqs``; a load balancer (vLLM's own
front end, or one in front of separate servers) spreads the requests over them. For a dense
model the ranks are independent replicas. For a MoE model in one engine they are not: vLLM
spreads the routed experts over all TP x DP GPUs (:func:`servefit.core.weights.moe_ranks`)
and the ranks step together, each MoE layer running every rank's tokens
(:mod:`servefit.core.ops`). Either way a plan times one rank under its share of the load
(:func:`rank_workload`) and reports the deployment as the N ranks together
(:func:`all_ranks`): the counts and throughputs N times one rank's, the latencies one
rank's.
"""

from __future__ import annotations

from dataclasses import replace

from servefit.core.serving_types import LoadResult
from servefit.core.workload import Workload


def rank_workload(w: Workload, dp: int) -> Workload:
    """One rank's share of the load: the requests spread evenly over ``dp`` ranks (a
    closed loop's concurrency rounded up: the busiest rank's)."""
    if dp == 1:
        return w
    concurrency = None if w.concurrency is None else max(1, -(-w.concurrency // dp))
    rate = None if w.request_rate_per_s is None else w.request_rate_per_s / dp
    count = None if w.num_requests is None else max(1, -(-w.num_requests // dp))
    if w.requests:  # a trace: every dp-th of its requests (the first rank's, the busiest)
        return replace(
            w, concurrency=concurrency, request_rate_per_s=rate, requests=w.requests[::dp]
        )
    return replace(w, concurrency=concurrency, request_rate_per_s=rate, num_requests=count)


def ranks_factor(w: Workload, dp: int) -> float:
    """How many of :func:`rank_workload`'s rank the deployment amounts to: ``dp`` for an
    open loop, the concurrency asked over one rank's for a closed loop (10 requests on 8
    ranks: 2 on the busiest, 5 such ranks' worth)."""
    if dp == 1:
        return 1.0
    rank = rank_workload(w, dp)
    if w.concurrency is None or rank.concurrency is None:
        return float(dp)
    return w.concurrency / rank.concurrency


def all_ranks(load: LoadResult, asked: Workload, dp: int) -> LoadResult:
    """The deployment's figures from one rank's (:func:`rank_workload` of ``asked``): the
    requests, tokens and throughputs :func:`ranks_factor` times one rank's at the busiest
    rank's latencies; the shares of GPU time (prefill, decode, busy) stay those of one
    rank, which every rank repeats."""
    if dp == 1:
        return load
    f = ranks_factor(asked, dp)
    return replace(
        load,
        concurrency=asked.concurrency,
        request_rate_per_s=asked.request_rate_per_s,
        num_requests=round(load.num_requests * f),
        output_throughput_tok_per_s=load.output_throughput_tok_per_s * f,
        total_throughput_tok_per_s=load.total_throughput_tok_per_s * f,
        request_throughput_per_s=load.request_throughput_per_s * f,
        goodput_per_s=None if load.goodput_per_s is None else load.goodput_per_s * f,
        num_preemptions=round(load.num_preemptions * f),
        num_input_tokens=round(load.num_input_tokens * f),
        num_cached_tokens=round(load.num_cached_tokens * f),
        num_output_tokens=round(load.num_output_tokens * f),
        num_sessions=round(load.num_sessions * f),
        session_throughput_per_s=load.session_throughput_per_s * f,
    )
