"""Scaling a deployment out: the best TP x PP x DP (+ EP) layout of N GPUs for its workload,
with the launch commands carrying every flag of the deployment (and its calibration)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from servefit.app.deployment import Deployment
from servefit.app.resolve import Resolved
from servefit.core.ops import model_coeffs
from servefit.core.perf import simulate_load
from servefit.core.plan import CapacityPlan
from servefit.core.scaling import (
    OBJECTIVES,
    LayoutResult,
    choose_layout,
    layout_commands,
    plan_scaling,
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
            d.settings, tensor_parallel_size=layout.tp, pipeline_parallel_size=layout.pp
        )
        serve = vllm_serve_args(
            resolved.model_id,
            best.plan,
            asked,
            extra_args=d.extra_args,
            enable_expert_parallel=layout.ep,
        )
        commands = layout_commands(
            resolved.model_id, layout, request.gpus_per_node, serve_args=serve
        )
    return ScalingOutcome(request=request, layouts=results, best=best, commands=commands)
