"""A fleet under SLOs: the pure arithmetic of ``servefit recommend``.

One *candidate* is a serving layout of one GPU type (GPUs per replica, TP x PP, weight and
KV formats, ``--max-num-seqs``). The search (:mod:`servefit.app.fleet`) plans it, simulates
it and hands the numbers to the functions here:

- :func:`slo_ratio`: how far one simulated load is from the SLO at the percentile
  (``max(TTFT_pN / limit, TPOT_pN / limit)``; <= 1 meets);
- :func:`search_replicas`: the fewest replicas that carry the load within the SLO (one
  replica simulated at its share, the count bisected);
- :func:`decode_batch_limit`: the largest decode batch whose step fits the TPOT limit;
- :func:`replicas_for`: ``ceil(rate x (1 + headroom) / per-replica rate)`` (the bound's count);
- :func:`fleet_cost`: $/hour, $/1M output tokens and $/task of the fleet at the offered rate;
- :func:`pareto_front`: throughput per GPU against per-user decode rate.

Costs here charge *all* the fleet's GPU time to the output tokens it delivers at the
offered rate (the way "tokens per dollar" comparisons are made), unlike ``servefit cost``,
which splits one replica's GPU time between input and output tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from servefit.core.cost import SECONDS_PER_HOUR
from servefit.core.metrics import Slo, Stat
from servefit.errors import InvalidArgumentError

PERCENTILES = (50, 90, 95, 99)  # the percentiles a simulated Stat carries
DEFAULT_HEADROOM = 0.10  # replicas are sized for 10 % more than the offered rate

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetSlo:
    """The SLO a fleet is held to: TTFT and TPOT limits at one percentile of requests."""

    slo: Slo
    percentile: int = 90

    def __post_init__(self) -> None:
        if self.percentile not in PERCENTILES:
            raise InvalidArgumentError(
                f"--slo-percentile must be one of {', '.join(map(str, PERCENTILES))}, "
                f"got {self.percentile}"
            )
        if self.slo.ttft_s is None and self.slo.tpot_s is None:
            raise InvalidArgumentError(
                "recommend needs an SLO to size the fleet: give --slo-ttft-ms and/or --slo-tpot-ms"
            )
        for name, limit in (("ttft", self.slo.ttft_ms), ("tpot", self.slo.tpot_ms)):
            if limit is not None and limit <= 0:
                raise InvalidArgumentError(f"--slo-{name}-ms must be positive, got {limit}")

    @property
    def label(self) -> str:
        return f"p{self.percentile}"


def stat_at(stat: Stat, percentile: int) -> float:
    """The value of a simulated metric at one of :data:`PERCENTILES`."""
    return {50: stat.p50, 90: stat.p90, 95: stat.p95, 99: stat.p99}[percentile]


@dataclass(frozen=True, slots=True, kw_only=True)
class SloCheck:
    """TTFT and TPOT at the percentile against their limits."""

    ttft_s: float
    tpot_s: float
    ttft_ratio: float  # ttft_s / limit (0 without a limit)
    tpot_ratio: float

    @property
    def ratio(self) -> float:
        return max(self.ttft_ratio, self.tpot_ratio)

    @property
    def meets(self) -> bool:
        return self.ratio <= 1.0

    @property
    def binding(self) -> str:
        """The limit closest to (or furthest past) its bound: ``TTFT`` or ``TPOT``."""
        return "TTFT" if self.ttft_ratio >= self.tpot_ratio else "TPOT"


def slo_ratio(ttft: Stat, tpot: Stat, slo: FleetSlo) -> SloCheck:
    """TTFT and TPOT at the SLO's percentile, each over its limit."""
    ttft_s = stat_at(ttft, slo.percentile)
    tpot_s = stat_at(tpot, slo.percentile)
    limit_ttft, limit_tpot = slo.slo.ttft_s, slo.slo.tpot_s
    return SloCheck(
        ttft_s=ttft_s,
        tpot_s=tpot_s,
        ttft_ratio=ttft_s / limit_ttft if limit_ttft else 0.0,
        tpot_ratio=tpot_s / limit_tpot if limit_tpot else 0.0,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaSearch:
    """The fewest replicas that carry the load within the SLO, each at its share
    (``load / replicas``), and the check at that share (or, when no count up to the limit
    does, the check at the most replicas tried: the closest miss)."""

    replicas: int  # 0: not even ``most`` replicas meet the SLO
    share: float  # the load one replica takes at that count
    check: SloCheck
    num_simulations: int


def search_replicas(
    check_at: Callable[[float], SloCheck],
    *,
    load: float,
    fewest: int,
    most: int,
    guess: int | None = None,
) -> ReplicaSearch:
    """The smallest replica count ``k`` in ``[fewest, most]`` at which one replica meets the
    SLO under ``load / k`` (the check is taken to be monotone: less load per replica never
    raises the latencies). ``guess`` (default ``fewest``) is tried first; from there the
    count steps down (halving the distance to ``fewest``) while it meets, or up (doubling)
    while it misses, then a bisection between the last miss and the first meet."""
    if load <= 0:
        raise InvalidArgumentError("the replica search needs a positive load")
    fewest = max(1, fewest)
    most = max(fewest, most)
    runs = 0
    checks: dict[int, SloCheck] = {}

    def meets(k: int) -> bool:
        nonlocal runs
        if k not in checks:
            checks[k] = check_at(load / k)
            runs += 1
        return checks[k].meets

    first = min(most, max(fewest, guess or fewest))
    if meets(first):
        missed, met = fewest - 1, first
        while met > fewest:  # step down while it still meets
            lower = max(fewest, met - max(1, (met - fewest + 1) // 2))
            if not meets(lower):
                missed = lower
                break
            met = lower
    else:
        missed, met = first, first
        while not meets(met):
            if met >= most:
                return ReplicaSearch(
                    replicas=0, share=load / met, check=checks[met], num_simulations=runs
                )
            missed, met = met, min(most, met * 2)
    while met - missed > 1:
        mid = (met + missed) // 2
        if meets(mid):
            met = mid
        else:
            missed = mid
    return ReplicaSearch(replicas=met, share=load / met, check=checks[met], num_simulations=runs)


def decode_batch_limit(step_s: Callable[[int], float], *, tpot_limit_s: float, most: int) -> int:
    """The largest batch ``b <= most`` whose decode step takes at most ``tpot_limit_s``
    (0 when not even one request decodes that fast). ``step_s`` grows with the batch."""
    if most < 1 or step_s(1) > tpot_limit_s:
        return 0
    low, high = 1, most
    while low < high:
        mid = (low + high + 1) // 2
        if step_s(mid) <= tpot_limit_s:
            low = mid
        else:
            high = mid - 1
    return low


def replicas_for(rate_per_s: float, per_replica_per_s: float, headroom: float) -> int:
    """Replicas that carry ``rate x (1 + headroom)``, each taking ``per_replica_per_s``."""
    if per_replica_per_s <= 0:
        raise InvalidArgumentError("a replica that takes no load cannot be counted")
    if headroom < 0:
        raise InvalidArgumentError(f"--headroom must be >= 0, got {headroom}")
    # a hair under an integer (float noise) is that integer
    return max(1, math.ceil(rate_per_s * (1 + headroom) / per_replica_per_s - 1e-9))


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetCost:
    """What a fleet costs at the offered rate."""

    usd_per_hour: float
    usd_per_million_output_tokens: float
    usd_per_task: float


def fleet_cost(
    *,
    num_gpus: int,
    usd_per_gpu_hour: float,
    rate_per_s: float,
    output_tokens_per_request: float,
    requests_per_task: float = 1.0,
    success_rate: float = 1.0,
) -> FleetCost:
    """The fleet's cost at the offered rate (requests/s; with agent sessions, turns/s):

    $/hour = GPUs x $/GPU-hour
    $/1M output tokens = $/hour / (rate x output tokens x 3600) x 1e6
    $/successful task = $/hour / 3600 / rate x requests per task / success rate
    """
    if rate_per_s <= 0 or output_tokens_per_request <= 0:
        raise InvalidArgumentError("a fleet's cost needs a positive rate and output length")
    usd_per_hour = num_gpus * usd_per_gpu_hour
    usd_per_request = usd_per_hour / SECONDS_PER_HOUR / rate_per_s
    return FleetCost(
        usd_per_hour=usd_per_hour,
        usd_per_million_output_tokens=usd_per_request / output_tokens_per_request * 1e6,
        usd_per_task=usd_per_request * requests_per_task / success_rate,
    )


def pareto_front(
    items: Sequence[T], x: Callable[[T], float], y: Callable[[T], float]
) -> tuple[T, ...]:
    """The items no other item beats on both ``x`` and ``y`` (both maximised), by ``x``
    descending."""
    ordered = sorted(items, key=lambda i: (-x(i), -y(i)))
    front: list[T] = []
    best_y = -math.inf
    for item in ordered:
        if y(item) > best_y:
            front.append(item)
            best_y = y(item)
    return tuple(front)
