"""Economics: what a token, a request and a *successful task* cost on GPUs you rent, and
where self-hosting breaks even with a per-token API.

Inputs are the predicted serving rates of one replica (requests/s at the workload, and how
its GPU time splits between prefill and decode) and prices. With ``r`` requests/s per
replica of ``g`` GPUs at ``p`` $/GPU-hour, used a fraction ``u`` of the time, a prefill
share ``s_p`` of the GPU time and ``n`` requests (turns) per session:

    $/request        = g p / 3600 / (r u)
    $/1M input       = $/request x s_p / input tokens x 1e6
    $/1M output      = $/request x (1 - s_p) / output tokens x 1e6
    $/session        = $/request x n
    $/successful task = $/request x requests per task / success rate
                       (requests per task: n by default, a task being one session)
    GPU-hours/day    = replicas x g x 24, replicas = ceil(requests per day / (86400 r u)), >= 1
    API $/day        = requests per day x (input x $in + output x $out) / 1e6

``s_p`` comes from the continuous-batching simulation (:mod:`servefit.core.serving`): every
simulated step's time is attributed to the prefill and the decode work it does (a mixed
step in proportion to each part's stand-alone roofline time), and ``s_p`` = prefill time /
busy time. Batched decode is cheap per token and a prefill rides along decodes, so the
split follows the load, not one request alone. The cached part of a prompt is not
computed: it costs no prefill, but its tokens still count as input tokens (the per-token
price is over every prompt token, as an API bills them). Tokens: the means per request over
the simulation, a turn's prompt with its whole history. Always-on replicas are billed 24
hours a day whatever the traffic: that is why three requests a day cost far more per token
than a busy agent fleet.

``prefill_s_per_request`` (one prefill alone over the GPU time a request costs) is the
older estimate, kept for callers that have no simulated split; it overstates prefill
under load and reaches 100 % with long cached prompts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servefit.errors import InvalidArgumentError

if TYPE_CHECKING:  # the builder only reads attributes: no import of the simulator here
    from servefit.core.perf import PerformancePlan

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0
HOURS_PER_DAY = 24.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiPrice:
    name: str
    usd_per_million_input_tokens: float
    usd_per_million_output_tokens: float
    source: str = ""

    def __post_init__(self) -> None:
        if self.usd_per_million_input_tokens < 0 or self.usd_per_million_output_tokens < 0:
            raise InvalidArgumentError("API prices must be >= 0")

    def usd_per_request(self, input_tokens: float, output_tokens: float) -> float:
        return (
            input_tokens * self.usd_per_million_input_tokens
            + output_tokens * self.usd_per_million_output_tokens
        ) / 1e6


def _usd(amount: float) -> str:
    """Dollars to three significant figures, without an exponent ($0.000133, $12.3)."""
    if amount <= 0 or not math.isfinite(amount):
        return f"${amount:g}"
    decimals = max(2, 2 - math.floor(math.log10(amount)))
    return f"${amount:,.{decimals}f}"


def check_task_terms(requests_per_task: float | None, success_rate: float) -> None:
    """What a successful task is: ``--requests-per-task`` >= 1, ``--success-rate`` in (0, 1]
    (``cost`` and ``report`` take both)."""
    if not 0 < success_rate <= 1:
        raise InvalidArgumentError(f"--success-rate must be in (0, 1], got {success_rate}")
    if requests_per_task is not None and requests_per_task < 1:
        raise InvalidArgumentError("--requests-per-task must be >= 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class CostInputs:
    usd_per_gpu_hour: float
    num_gpus: int  # GPUs per replica
    request_throughput_per_s: float  # one replica, at the workload
    input_tokens: float  # per request (a turn's whole prompt, cached tokens included)
    output_tokens: float
    # of the replica's GPU time, the prefill part (the simulation's, see cost_inputs_for)
    prefill_share: float | None = None
    # legacy, when prefill_share is None: GPU time of one request's prefill alone
    prefill_s_per_request: float | None = None
    utilization: float = 1.0  # fraction of the time replicas serve at that throughput
    requests_per_task: float = 1.0
    requests_per_session: float = 1.0  # turns of an agent session
    success_rate: float = 1.0
    # where a measured success rate came from (``--success-from``), and its interval
    success_source: str = ""
    success_range: tuple[float, float] | None = None
    requests_per_day: float | None = None
    price_source: str = ""

    def __post_init__(self) -> None:
        if self.usd_per_gpu_hour <= 0:
            raise InvalidArgumentError(
                f"--usd-per-gpu-hour must be positive, got {self.usd_per_gpu_hour}"
            )
        if not 0 < self.utilization <= 1:
            raise InvalidArgumentError(f"--utilization must be in (0, 1], got {self.utilization}")
        check_task_terms(self.requests_per_task, self.success_rate)
        if self.requests_per_session < 1:
            raise InvalidArgumentError("--turns (requests per session) must be >= 1")
        if self.prefill_share is None and self.prefill_s_per_request is None:
            raise InvalidArgumentError("cost needs the prefill share of the GPU time")
        if self.prefill_share is not None and not 0 <= self.prefill_share <= 1:
            raise InvalidArgumentError(f"prefill share must be in [0, 1], got {self.prefill_share}")
        if self.prefill_s_per_request is not None and self.prefill_s_per_request < 0:
            raise InvalidArgumentError("prefill time must be >= 0")
        if self.request_throughput_per_s <= 0:
            raise InvalidArgumentError("the predicted request throughput must be positive")
        if self.requests_per_day is not None and self.requests_per_day < 0:
            raise InvalidArgumentError("--requests-per-day must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class DailyScenario:
    label: str
    requests_per_day: float
    replicas: int
    gpu_hours_per_day: float
    self_hosted_usd_per_day: float
    api_usd_per_day: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CostEstimate:
    usd_per_hour: float  # one replica
    usd_per_request: float
    usd_per_million_input_tokens: float
    usd_per_million_output_tokens: float
    usd_per_million_tokens: float  # input and output together
    usd_per_successful_task: float
    prefill_share: float  # of the GPU time, charged to input tokens
    gpu_hours_per_day: float | None  # for requests_per_day
    break_even_requests_per_day: float | None  # one always-on replica vs the API
    scenarios: tuple[DailyScenario, ...]
    assumptions: tuple[str, ...]
    usd_per_session: float  # requests_per_session requests (= usd_per_request for one turn)
    requests_per_session: float
    decode_share: float  # 1 - prefill_share, charged to output tokens


def replicas_needed(requests_per_day: float, c: CostInputs) -> int:
    per_replica = c.request_throughput_per_s * c.utilization * SECONDS_PER_DAY
    return max(1, math.ceil(requests_per_day / per_replica))


def _scenario(
    label: str, requests_per_day: float, c: CostInputs, api: ApiPrice | None
) -> DailyScenario:
    replicas = replicas_needed(requests_per_day, c)
    gpu_hours = replicas * c.num_gpus * HOURS_PER_DAY
    return DailyScenario(
        label=label,
        requests_per_day=requests_per_day,
        replicas=replicas,
        gpu_hours_per_day=gpu_hours,
        self_hosted_usd_per_day=gpu_hours * c.usd_per_gpu_hour,
        api_usd_per_day=(
            requests_per_day * api.usd_per_request(c.input_tokens, c.output_tokens) if api else None
        ),
    )


def estimate_cost(c: CostInputs, api: ApiPrice | None = None) -> CostEstimate:
    usd_per_hour = c.usd_per_gpu_hour * c.num_gpus
    gpu_s_per_request = 1.0 / (c.request_throughput_per_s * c.utilization)
    usd_per_request = usd_per_hour / SECONDS_PER_HOUR * gpu_s_per_request
    if c.prefill_share is not None:
        prefill_share = c.prefill_share
    else:  # legacy: one prefill alone over the GPU time a request costs
        prefill_s = c.prefill_s_per_request or 0.0
        prefill_share = min(1.0, prefill_s * c.utilization / gpu_s_per_request)
    per_m_in = usd_per_request * prefill_share / c.input_tokens * 1e6 if c.input_tokens else 0.0
    per_m_out = usd_per_request * (1 - prefill_share) / c.output_tokens * 1e6
    per_m_all = usd_per_request / (c.input_tokens + c.output_tokens) * 1e6
    busy_fleet = c.request_throughput_per_s * c.utilization * SECONDS_PER_DAY
    scenarios = [
        _scenario("three requests a day", 3.0, c, api),
        _scenario("one busy replica (an agent fleet)", busy_fleet, c, api),
    ]
    if c.requests_per_day is not None:
        scenarios.insert(1, _scenario("your volume", c.requests_per_day, c, api))
    break_even = None
    if api is not None:
        api_per_request = api.usd_per_request(c.input_tokens, c.output_tokens)
        if api_per_request > 0:
            break_even = usd_per_hour * HOURS_PER_DAY / api_per_request
    assumptions = [
        f"${c.usd_per_gpu_hour:.2f}/GPU-hour"
        + (f" ({c.price_source})" if c.price_source else "")
        + f" x {c.num_gpus} GPU(s) per replica, busy {c.utilization:.0%} of the time",
        (
            f"input tokens are charged the prefill share of the simulated GPU time "
            f"({prefill_share:.0%}), output tokens the decode share ({1 - prefill_share:.0%}); "
            "a prompt's cached tokens cost no prefill"
            if c.prefill_share is not None
            else "input tokens are charged the prefill share of a request's GPU time (one "
            "prefill alone), output tokens the rest"
        ),
        "always-on replicas are billed 24 h/day",
    ]
    if c.requests_per_session > 1:
        assumptions.append(
            f"a session is {c.requests_per_session:g} turns, each re-sending the history; "
            "token counts and $/request are means over all turns"
        )
    per_task = usd_per_request * c.requests_per_task
    if c.success_rate < 1 or c.requests_per_task > 1 or c.success_source:
        assumptions.append(
            f"a task takes {c.requests_per_task:g} request(s) and succeeds "
            f"{c.success_rate:.1%} of the time"
            + (f" ({c.success_source})" if c.success_source else "")
        )
    if c.success_range is not None and c.success_range[0] > 0:
        low, high = c.success_range
        assumptions.append(
            f"over that interval a successful task costs {_usd(per_task / high)} to "
            f"{_usd(per_task / low)}"
        )
    return CostEstimate(
        usd_per_hour=usd_per_hour,
        usd_per_request=usd_per_request,
        usd_per_million_input_tokens=per_m_in,
        usd_per_million_output_tokens=per_m_out,
        usd_per_million_tokens=per_m_all,
        usd_per_successful_task=per_task / c.success_rate,
        prefill_share=prefill_share,
        gpu_hours_per_day=(
            _scenario("", c.requests_per_day, c, None).gpu_hours_per_day
            if c.requests_per_day is not None
            else None
        ),
        break_even_requests_per_day=break_even,
        scenarios=tuple(scenarios),
        assumptions=tuple(assumptions),
        usd_per_session=usd_per_request * c.requests_per_session,
        requests_per_session=c.requests_per_session,
        decode_share=1.0 - prefill_share,
    )


def cost_inputs_for(
    perf: PerformancePlan,
    *,
    num_gpus: int,
    usd_per_gpu_hour: float,
    price_source: str = "",
    utilization: float = 1.0,
    requests_per_task: float | None = None,
    success_rate: float = 1.0,
    requests_per_day: float | None = None,
    success_source: str = "",
    success_range: tuple[float, float] | None = None,
) -> CostInputs:
    """The cost model's inputs from a performance plan at its workload: the simulated
    request throughput, prefill share of the GPU time and mean tokens per request (over
    every turn of a session). A task is one session unless ``requests_per_task`` says
    otherwise (one request when the workload has one turn)."""
    load = perf.load
    num_requests = max(load.num_requests, 1)
    return CostInputs(
        usd_per_gpu_hour=usd_per_gpu_hour,
        num_gpus=num_gpus,
        request_throughput_per_s=load.request_throughput_per_s,
        prefill_share=load.prefill_share,
        input_tokens=load.num_input_tokens / num_requests,
        output_tokens=load.num_output_tokens / num_requests,
        utilization=utilization,
        requests_per_task=float(load.turns) if requests_per_task is None else requests_per_task,
        requests_per_session=float(load.turns),
        success_rate=success_rate,
        success_source=success_source,
        success_range=success_range,
        requests_per_day=requests_per_day,
        price_source=price_source,
    )
