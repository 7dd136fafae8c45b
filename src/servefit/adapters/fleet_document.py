"""``servefit recommend --json``: the versioned recommendation document, and the one
paragraph that says why the winner wins (the terminal prints the same words).

``{schema_version, kind: "recommendation", servefit_version, inputs, search_space,
candidates (best first), pareto, why, closest_miss, assumptions}``; every candidate has at
least ``gpu``, ``gpus_per_replica``, ``replicas``, ``usd_per_hour``,
``usd_per_million_output_tokens``, ``meets_slo``, ``vllm_command`` and its layout fields.
New keys are additive.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from servefit import __version__

if TYPE_CHECKING:  # the document reads the outcome's attributes only
    from servefit.app.fleet_types import Candidate, FleetOutcome

SCHEMA_VERSION = 1


def candidate_record(c: Candidate, rank: int) -> dict[str, Any]:
    record = asdict(c)
    record.pop("serve_settings", None)
    record["commands"] = list(c.commands)
    return {"rank": rank, **record, "vllm_command": c.vllm_command}


def why_text(outcome: FleetOutcome) -> str:
    """One paragraph: what wins, by how much, over what, and what binds it."""
    best = outcome.best
    if best is None:
        return f"No fleet meets the SLO within the budget: {outcome.closest_miss}."
    slo = outcome.request.slo
    fleet = (
        f"{best.prefill_replicas} prefill + {best.decode_replicas} decode instances"
        if best.mode == "disaggregated"
        else f"{best.replicas} replica(s)"
    )
    text = (
        f"{best.model} on {best.num_gpus} x {best.gpu} ({best.mode}, {best.layout}, "
        f"weights {best.quantization or 'as checkpoint'}, KV {best.kv_cache_dtype}, "
        f"max-num-seqs {best.max_num_seqs}; {fleet}) serves the load at "
        f"${best.usd_per_million_output_tokens:,.3f} per 1M output tokens "
        f"(${best.usd_per_hour:,.2f}/h)"
    )
    others = [c for c in outcome.candidates[1:] if c.is_recommendable]
    other_gpu = next((c for c in others if c.gpu != best.gpu), None)
    if other_gpu is not None:
        ratio = other_gpu.usd_per_million_output_tokens / best.usd_per_million_output_tokens
        text += (
            f", {ratio - 1:.0%} cheaper than the best other GPU ({other_gpu.num_gpus} x "
            f"{other_gpu.gpu}, {other_gpu.layout}, "
            f"${other_gpu.usd_per_million_output_tokens:,.3f})"
        )
    text += (
        f". Each replica takes {best.per_replica_load:,.2f} "
        f"{'req/s' if outcome.request.workload.request_rate_per_s is not None else 'users'} "
        f"with TTFT {slo.label} {best.ttft_s * 1e3:,.0f} ms and TPOT {slo.label} "
        f"{best.tpot_s * 1e3:,.1f} ms; what binds it: {best.binding}."
    )
    return text


def recommendation_document(outcome: FleetOutcome) -> dict[str, Any]:
    r = outcome.request
    w = r.workload
    counts = outcome.counts
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "recommendation",
        "servefit_version": __version__,
        "inputs": {
            "models": list(r.models),
            "workload": {
                "description": w.describe(),
                "input_len": w.input_len.mean,
                "output_len": w.output_len.mean,
                "range_ratio": w.input_len.range_ratio,
                "request_rate_per_s": w.request_rate_per_s,
                "concurrency": w.concurrency,
                "prefix_len": w.prefix_len,
                "turns": w.turns,
            },
            "slo": {
                "ttft_ms": r.slo.slo.ttft_ms,
                "tpot_ms": r.slo.slo.tpot_ms,
                "percentile": r.slo.percentile,
            },
            "gpus": list(r.gpus) or "all",
            "max_gpus": r.max_gpus,
            "max_usd_per_hour": r.max_usd_per_hour,
            "headroom": r.headroom,
            "gpus_per_node": r.gpus_per_node,
            "disaggregated": r.disaggregated,
            "fp8": r.allow_fp8,
            "success_rate": r.success_rate,
            "success_source": r.success_source or "--success-rate",
            "vllm_version": r.vllm_version,
        },
        "search_space": {
            "gpus_searched": counts.gpus,
            "gpus_skipped": list(counts.gpus_skipped),
            "options": counts.options,
            "pruned_at_capacity": counts.pruned_capacity,
            "pruned_at_single_request_latency": counts.pruned_latency,
            "pruned_by_cost_bound": counts.pruned_bound,
            "simulated_candidates": counts.simulated,
            "simulations": counts.simulations,
        },
        "candidates": [candidate_record(c, i + 1) for i, c in enumerate(outcome.candidates)],
        "pareto": [
            {
                "model": c.model,
                "gpu": c.gpu,
                "mode": c.mode,
                "layout": c.layout,
                "output_tok_per_s_per_gpu": c.output_tok_per_s_per_gpu,
                "decode_tok_per_s_per_user": c.decode_tok_per_s_per_user,
                "usd_per_million_output_tokens": c.usd_per_million_output_tokens,
            }
            for c in outcome.pareto
        ],
        "why": why_text(outcome),
        "closest_miss": outcome.closest_miss or None,
        "assumptions": list(outcome.assumptions),
    }
