"""``cost``: $/hour, $/1M tokens, $/successful task of a deployment at its predicted
throughput, and the break-even against a per-token API."""

from __future__ import annotations

from dataclasses import dataclass

from servefit.adapters.catalog import api_price, gpu_price
from servefit.app.deployment import Deployment
from servefit.app.plan import PlanOutcome, plan_deployment
from servefit.core.cost import (
    ApiPrice,
    CostEstimate,
    CostInputs,
    cost_inputs_for,
    estimate_cost,
)
from servefit.core.perf import PerformancePlan
from servefit.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True, kw_only=True)
class CostRequest:
    usd_per_gpu_hour: float | None = None  # None: the catalog's price for the GPU
    utilization: float = 1.0
    requests_per_task: float | None = None  # None: one session (its turns' requests)
    success_rate: float = 1.0
    success_source: str = ""  # a measured rate's origin (``--success-from``)
    success_range: tuple[float, float] | None = None  # and its interval
    requests_per_day: float | None = None
    api_name: str | None = None
    api_usd_per_million_input: float | None = None
    api_usd_per_million_output: float | None = None

    def api(self) -> ApiPrice | None:
        if (
            self.api_usd_per_million_input is not None
            or self.api_usd_per_million_output is not None
        ):
            return ApiPrice(
                name="the given API price",
                usd_per_million_input_tokens=self.api_usd_per_million_input or 0.0,
                usd_per_million_output_tokens=self.api_usd_per_million_output or 0.0,
            )
        return api_price(self.api_name) if self.api_name else None


@dataclass(frozen=True, slots=True, kw_only=True)
class CostOutcome:
    plan: PlanOutcome
    performance: PerformancePlan | None  # None: the deployment does not run (see plan)
    estimate: CostEstimate | None
    usd_per_gpu_hour: float
    price_source: str
    api: ApiPrice | None


def gpu_hour_price(gpu_name: str, given: float | None) -> tuple[float, str]:
    if given is not None:
        return given, "--usd-per-gpu-hour"
    price = gpu_price(gpu_name)
    if price is None:
        raise InvalidArgumentError(f"no catalog price for {gpu_name}: pass --usd-per-gpu-hour")
    return price


def cost_inputs(
    perf: PerformancePlan,
    num_gpus: int,
    usd_per_gpu_hour: float,
    price_source: str,
    req: CostRequest | None = None,
) -> CostInputs:
    """The cost model's inputs from a performance plan at its workload (GPU time split by
    phase from the simulation; a task is one agent session unless said otherwise)."""
    req = req or CostRequest()
    return cost_inputs_for(
        perf,
        num_gpus=num_gpus,
        usd_per_gpu_hour=usd_per_gpu_hour,
        price_source=price_source,
        utilization=req.utilization,
        requests_per_task=req.requests_per_task,
        success_rate=req.success_rate,
        requests_per_day=req.requests_per_day,
        success_source=req.success_source,
        success_range=req.success_range,
    )


def estimate_deployment_cost(d: Deployment, req: CostRequest) -> CostOutcome:
    """The deployment's cost at its predicted throughput; without a prediction (it does not
    start, or its workload does not run) the outcome has no estimate and the plan says why."""
    outcome = plan_deployment(d)
    perf = outcome.performance
    usd, source = gpu_hour_price(outcome.resolved.gpu.name, req.usd_per_gpu_hour)
    api = req.api()
    if perf is None:
        return CostOutcome(
            plan=outcome,
            performance=None,
            estimate=None,
            usd_per_gpu_hour=usd,
            price_source=source,
            api=api,
        )
    inputs = cost_inputs(perf, outcome.capacity.settings.num_gpus, usd, source, req)
    return CostOutcome(
        plan=outcome,
        performance=perf,
        estimate=estimate_cost(inputs, api),
        usd_per_gpu_hour=usd,
        price_source=source,
        api=api,
    )
