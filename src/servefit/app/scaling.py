"""Scaling a deployment out: the best TP x PP x DP (+ EP) layout of N GPUs for its workload,
with the launch commands carrying every flag of the deployment (and its calibration), and
the plan of one replica of that layout: the one verdict a ``--num-gpus`` run gives."""

from __future__ import annotations

from dataclasses import dataclass, replace

from servefit.app.deployment import Deployment
from servefit.app.plan import PlanOutcome, plan_deployment
from servefit.app.resolve import Resolved, resolve
from servefit.core.ops import model_coeffs
from servefit.core.perf import simulate_load
from servefit.core.plan import CapacityPlan
from servefit.core.scaling import (
    OBJECTIVES,
    LayoutResult,
    choose_layout,
    layout_commands,
    plan_scaling,
    replica_workload,
)
from servefit.core.serving import LoadResult
from servefit.core.vllm_command import vllm_serve_args
from servefit.core.workload import Workload
from servefit.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingRequest:
    num_gpus: int
    gpus_per_node: int = 8
    objective: str = "throughput"

    def __post_init__(self) -> None:
        if self.num_gpus < 1:
            raise InvalidArgumentError(f"--num-gpus must be >= 1, got {self.num_gpus}")
        if self.gpus_per_node < 1:
            raise InvalidArgumentError(f"--gpus-per-node must be >= 1, got {self.gpus_per_node}")
        if self.objective not in OBJECTIVES:
            raise InvalidArgumentError(f"--objective must be one of {', '.join(OBJECTIVES)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingOutcome:
    request: ScalingRequest
    layouts: tuple[LayoutResult, ...]
    best: LayoutResult | None
    commands: tuple[str, ...]


def plan_deployment_scaling(
    d: Deployment, resolved: Resolved, request: ScalingRequest
) -> ScalingOutcome:
    profile = resolved.profile()

    def simulate(plan: CapacityPlan, w: Workload, ep: int) -> LoadResult:
        r = plan.settings
        m = model_coeffs(
            plan.model,
            tp=r.tensor_parallel_size,
            pp=r.pipeline_parallel_size,
            ep=ep,
            kv_cache_dtype=r.kv_cache_dtype,
            dp=r.data_parallel_size,
        )
        return simulate_load(plan, m, profile, w, d.slo)

    results = plan_scaling(
        resolved.loaded.spec,
        resolved.gpu,
        d.settings,
        d.workload,
        simulate,
        num_gpus=request.num_gpus,
        gpus_per_node=request.gpus_per_node,
        mamba_ssm_dtype=resolved.loaded.mamba_ssm_dtype,
    )
    best = choose_layout(results, request.objective, d.slo)
    commands: tuple[str, ...] = ()
    if best is not None and best.plan is not None:
        layout = best.layout
        asked = replace(
            d.settings,
            tensor_parallel_size=layout.tp,
            pipeline_parallel_size=layout.pp,
            data_parallel_size=layout.dp if layout.one_engine else 1,
            enable_expert_parallel=layout.ep,
        )
        serve = vllm_serve_args(
            resolved.model_id,
            best.plan,
            asked,
            extra_args=d.extra_args,
            enable_expert_parallel=layout.ep,
        )
        commands = layout_commands(
            resolved.model_id,
            layout,
            request.gpus_per_node,
            serve_args=serve,
            is_moe=resolved.loaded.spec.is_moe,
        )
    return ScalingOutcome(request=request, layouts=results, best=best, commands=commands)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChosenLayout:
    """A ``--num-gpus`` run: the layouts tried, and the plan of one replica of the best (its
    TP, PP and ``--enable-expert-parallel``, its share of the workload), or of the one engine
    whose ranks are the layout's DP (the whole workload), which is the run's verdict. Where
    no layout serves the workload, the plan is of the flags as given."""

    outcome: PlanOutcome
    scaling: ScalingOutcome
    replicas: int  # the servers the chosen layout runs: its DP, 1 for one engine or none

    @property
    def is_chosen(self) -> bool:
        return self.scaling.best is not None and self.scaling.best.plan is not None


def plan_on_gpus(
    d: Deployment, request: ScalingRequest, *, with_performance: bool = True
) -> ChosenLayout:
    """The best layout of ``request.num_gpus`` for ``d``'s workload, planned as one replica."""
    resolved = resolve(d)
    scaling = plan_deployment_scaling(d, resolved, request)
    best = scaling.best
    if best is None or best.plan is None:
        outcome = plan_deployment(d, with_performance=with_performance, resolved=resolved)
        return ChosenLayout(outcome=outcome, scaling=scaling, replicas=1)
    layout = best.layout
    servers = 1 if layout.one_engine else layout.dp
    replica = replace(
        d,
        settings=replace(
            d.settings,
            tensor_parallel_size=layout.tp,
            pipeline_parallel_size=layout.pp,
            data_parallel_size=layout.dp if layout.one_engine else 1,
            enable_expert_parallel=layout.ep,
        ),
        workload=replica_workload(d.workload, servers),
        extra_args=tuple(a for a in d.extra_args if a != "--enable-expert-parallel"),
    )
    outcome = plan_deployment(replica, with_performance=with_performance, resolved=resolved)
    return ChosenLayout(outcome=outcome, scaling=scaling, replicas=servers)
