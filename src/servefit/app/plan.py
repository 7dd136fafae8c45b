"""``plan_deployment``: the verdict, the memory, the performance and the one recommendation
for a deployment. Every command that plans (plan, compare, cost, report, bench --plan-model)
goes through here, so each gives the same answer for the same deployment."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from servefit.app.deployment import Deployment
from servefit.app.resolve import Resolved, resolve, settled
from servefit.app.verdict import Verdict, judge
from servefit.core.error_band import PredictionBands, bands_for
from servefit.core.plan import CapacityPlan, ServeSettings
from servefit.errors import InvalidArgumentError

if TYPE_CHECKING:  # imported only when a plan predicts speed / does not fit (cold start)
    from servefit.app.recommend import Recommendation
    from servefit.core.perf import PerformancePlan
    from servefit.core.roofline import EfficiencyProfile
    from servefit.core.speculative import Speculation


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanOutcome:
    """A planned deployment: capacity, verdict, launch command, performance and recommendation."""

    deployment: Deployment
    resolved: Resolved
    capacity: CapacityPlan
    verdict: Verdict
    command_args: tuple[str, ...]  # the launch command of exactly this deployment
    performance: PerformancePlan | None
    performance_note: str  # why there is no performance section, when there is none
    recommendation: Recommendation | None  # only when the deployment does not fit
    recommendation_args: tuple[str, ...]
    # the measured error of each figure on this hardware and engine (benchmarks/fidelity/)
    bands: PredictionBands = field(default_factory=PredictionBands)

    @property
    def fits(self) -> bool:
        return self.verdict.fits

    @property
    def vllm_command(self) -> str:
        return shlex.join(self.command_args)

    @property
    def recommended_command(self) -> str | None:
        return shlex.join(self.recommendation_args) if self.recommendation_args else None


def capacity_for(
    resolved: Resolved, settings: ServeSettings, *, with_suggestions: bool = True
) -> CapacityPlan:
    """The engine's capacity plan of these settings on the resolved model and GPU (with
    the draft checkpoint the settings' ``--speculative-config`` names); without
    suggestions, the plan does not re-plan other flags to say what would fit instead."""
    if settings.speculative is not None:
        by_sglang = settings.speculative.sglang_algorithm is not None
        engine = resolved.engine.name
        if by_sglang and engine != "sglang":
            raise InvalidArgumentError(
                "--speculative-algorithm is SGLang's flag: plan it with --engine sglang"
            )
        if not by_sglang and engine == "sglang":
            raise InvalidArgumentError(
                "--speculative-config is vLLM's flag; under --engine sglang, SGLang speculates "
                "with --speculative-algorithm EAGLE|EAGLE3|NEXTN|STANDALONE and "
                "--speculative-draft-model-path"
            )
        if not by_sglang and engine not in ("vllm", "vllm-cpu"):
            raise InvalidArgumentError(
                f"--speculative-config is vLLM's flag; servefit does not plan {engine}'s "
                "speculative decoding: plan it with --engine vllm, or leave the flag out"
            )
        if settings.draft is None:
            settings = replace(settings, draft=resolved.draft)
    return resolved.engine.plan(
        resolved.loaded.spec,
        resolved.gpu,
        settings,
        mamba_ssm_dtype=resolved.loaded.mamba_ssm_dtype,
        with_suggestions=with_suggestions,
    )


def judged(
    resolved: Resolved, d: Deployment, *, with_suggestions: bool = True
) -> tuple[CapacityPlan, PredictionBands, Verdict]:
    """The capacity of ``d``, the measured error bands of its group, and its verdict (the
    model's own limits with where they come from): what every plan of a deployment starts
    from (``plan``, ``fit``)."""
    plan = capacity_for(resolved, d.engine_settings(), with_suggestions=with_suggestions)
    bands = prediction_bands(resolved, plan, d)
    verdict = with_limit_sources(judge(plan, d, bands.kv_cache_tokens), resolved)
    return plan, bands, verdict


def launch_args(resolved: Resolved, plan: CapacityPlan, asked: ServeSettings) -> list[str]:
    """The command that launches ``plan`` with every flag the user set (and the flags
    servefit does not model, verbatim)."""
    args = resolved.engine.launch_args(resolved.model_id, plan, asked)
    return [*args, *resolved.deployment.extra_args]


def predict(
    resolved: Resolved, plan: CapacityPlan, d: Deployment, bands: PredictionBands | None = None
) -> tuple[PerformancePlan | None, str]:
    """The performance of the deployment's workload, or why there is none; it carries the
    measured error of each of its figures for this deployment's group."""
    if not plan.starts:
        return None, "the engine does not start with these settings"
    if plan.host_layers:
        return None, (
            f"{plan.host_layers} layers run from host memory (-ngl): servefit does not time "
            "the CPU's share of a step; the GPUs' memory above is exact"
        )
    from servefit.core.perf import plan_performance

    try:
        profile = resolved.profile(d.engine or plan.engine)
        encoder = _encoder_note(resolved, plan, d, profile)
        if encoder is not None:  # each request's images run the vision encoder first
            profile = replace(profile, request_overhead_s=profile.request_overhead_s + encoder[0])
        r = plan.settings
        perf = plan_performance(
            plan,
            d.workload,
            profile,
            slo=d.slo,
            ep=r.expert_parallel_size,
            speculation=speculation_of(resolved, plan, d),
        )
        perf = replace(perf, bands=bands or prediction_bands(resolved, plan, d))
        if encoder is not None:
            perf = replace(perf, assumptions=(*perf.assumptions, encoder[1]))
        return perf, ""
    except InvalidArgumentError as error:
        if d.is_workload_given:
            return None, str(error)
        return None, f"the default workload does not run here ({error}); describe yours"


def _encoder_note(
    resolved: Resolved, plan: CapacityPlan, d: Deployment, profile: EfficiencyProfile
) -> tuple[float, str] | None:
    """The vision encoder's time per request and the plan's note on the images, or None."""
    load = d.image_load
    if load is None:
        return None
    from servefit.core.roofline import peak_flops_per_s

    peak = peak_flops_per_s(plan.gpu, plan.model.dtype, profile.unpublished_flops_per_byte)
    tp = plan.settings.tensor_parallel_size
    seconds = load.encoder_flops_per_request / (peak * profile.gemm_efficiency * tp)
    return seconds, (
        f"images: {load.note}; {load.tokens_per_request:,} tokens a request join its prompt, "
        f"and the vision encoder's {load.encoder_flops_per_request / 1e12:.2f} TFLOP a request "
        f"({seconds * 1e3:.1f} ms at the GEMM efficiency, over {tp} GPU(s)) is added to its "
        "TTFT (its contention with other requests' steps is not simulated)"
    )


def speculation_of(resolved: Resolved, plan: CapacityPlan, d: Deployment) -> Speculation | None:
    """What the speed model needs of the plan's ``--speculative-config``: the acceptance
    (``--acceptance-rate`` or the method's published figure) and the drafter's network."""
    sc = plan.settings.speculative
    if sc is None:
        if d.acceptance_rate is not None or d.acceptance_from is not None:
            raise InvalidArgumentError(
                "--acceptance-rate and --acceptance-from need --speculative-config (the "
                "drafts they are the acceptance of)"
            )
        return None
    from servefit.adapters.acceptance import acceptance_for
    from servefit.core import drafter
    from servefit.core.speculative import Speculation

    if d.acceptance_rate is not None and d.acceptance_from is not None:
        raise InvalidArgumentError("give --acceptance-rate or --acceptance-from, not both")
    acceptance = resolved.measured_acceptance or acceptance_for(sc.method, sc.k, d.acceptance_rate)
    return Speculation(
        config=sc,
        acceptance=acceptance,
        draft=drafter.timing_spec(resolved.loaded.spec, sc, resolved.draft),
    )


def plan_deployment(
    d: Deployment, *, with_performance: bool = True, resolved: Resolved | None = None
) -> PlanOutcome:
    """Plan ``d``: capacity, verdict, performance and (when it does not fit) the one
    recommendation, re-planned and verified."""
    if resolved is None:
        resolved = resolve(d)
        d = resolved.deployment  # as resolved (an Ollama model at its num_ctx)
    else:  # a deployment planned on a model resolved for another (compare, layouts)
        d = settled(d, resolved.loaded)
    plan, bands, verdict = judged(resolved, d)
    perf, note = (None, "not asked for (--no-performance)")
    if with_performance:
        perf, note = predict(resolved, plan, d, bands)
    rec = None
    rec_args: tuple[str, ...] = ()
    if not verdict.fits:
        from servefit.app.recommend import recommend

        rec = recommend(
            d, plan, lambda s: capacity_for(resolved, d.with_settings(s).engine_settings())
        )
        if rec is not None:
            rec_args = tuple(launch_args(resolved, rec.capacity, rec.settings))
    return PlanOutcome(
        deployment=d,
        resolved=resolved,
        capacity=plan,
        verdict=verdict,
        command_args=tuple(launch_args(resolved, plan, d.settings)),
        performance=perf,
        performance_note=note,
        recommendation=rec,
        recommendation_args=rec_args,
        bands=bands,
    )


def prediction_bands(resolved: Resolved, plan: CapacityPlan, d: Deployment) -> PredictionBands:
    """The fidelity corpus's measured error for each figure of this plan's group."""
    from servefit.adapters.error_bands import error_bands
    from servefit.core.hardware import hardware_class

    engine = d.engine or plan.engine
    return bands_for(error_bands(), hardware_class(resolved.gpu), engine, d.workload.concurrency)


def with_limit_sources(verdict: Verdict, resolved: Resolved) -> Verdict:
    """Name where the model's own limits come from (a catalog entry, a config file, the Hub)
    beside the reason that cites one, so a user who ran a sibling checkpoint with a longer
    context sees which file set the limit."""
    loaded = resolved.loaded
    where = {
        "catalog": f"the bundled entry for {resolved.model_id} ({loaded.source})",
        "path": f"the config file {loaded.source}",
        "hub": f"the config.json of {loaded.source}",
        "ollama": f"the GGUF header of {loaded.source}",
    }.get(loaded.origin, "the uploaded config")
    reasons = tuple(
        f"{r} (max_position_embeddings from {where})" if "max_position_embeddings" in r else r
        for r in verdict.reasons
    )
    return replace(verdict, reasons=reasons) if reasons != verdict.reasons else verdict
