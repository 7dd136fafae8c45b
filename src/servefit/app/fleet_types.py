"""The values of ``recommend``'s fleet search: what is asked (:class:`FleetRequest`), one
ranked fleet (:class:`Candidate`), what the search did (:class:`SearchCounts`) and its
answer (:class:`FleetOutcome`), with the simulation runner both fleet kinds share."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from servefit.adapters.catalog import gpu_catalog, gpu_price
from servefit.app.fleet_search import Screened
from servefit.core.engine import DEFAULT_VLLM_VERSION
from servefit.core.fleet import DEFAULT_HEADROOM, FleetSlo, SloCheck, slo_ratio
from servefit.core.hardware import GpuSpec
from servefit.core.perf import simulate_load
from servefit.core.plan import ServeSettings
from servefit.core.serving import LoadResult
from servefit.core.speculative import SpeculativeConfig
from servefit.core.workload import Workload
from servefit.errors import InvalidArgumentError

SIM_MIN_REQUESTS = 96  # requests per simulated load level: a few per slot, for the queue
SIM_MAX_REQUESTS = 256
SIM_REQUESTS_PER_SLOT = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetRequest:
    """What ``recommend`` is asked: models, the offered workload, the SLO, the GPUs and
    budget to search within."""

    models: tuple[str, ...]
    workload: Workload  # the offered load: request_rate_per_s, or concurrency (closed loop)
    slo: FleetSlo
    gpus: tuple[str, ...] = ()  # empty: every catalog GPU with a price
    max_gpus: int | None = None  # the fleet's GPU budget (also caps GPUs per replica)
    max_usd_per_hour: float | None = None
    headroom: float = DEFAULT_HEADROOM
    gpus_per_node: int = 8
    disaggregated: bool = True
    success_rate: float = 1.0  # of tasks: $/successful task = $/task / success rate
    success_source: str = ""  # a measured rate's origin (``--success-from``)
    allow_fp8: bool = True  # online fp8 weights and fp8 KV where the GPU has FP8 tensor cores
    top: int = 5  # fleets simulated in full before the cost bound prunes the rest
    allow_hub: bool = True
    vllm_version: str = DEFAULT_VLLM_VERSION
    # tried with and without on every option (n-gram, suffix or the checkpoint's MTP layers),
    # at --acceptance-rate or the method's published acceptance
    speculative: SpeculativeConfig | None = None
    acceptance_rate: float | None = None

    def __post_init__(self) -> None:
        sc = self.speculative
        if sc is not None and sc.method.needs_draft_config:
            raise InvalidArgumentError(
                f"recommend --speculative-config: the {sc.method.value} method needs its draft "
                "checkpoint's config for every model searched; recommend tries n-gram, suffix "
                "and the checkpoint's own MTP layers (plan a draft with servefit plan)"
            )
        if self.acceptance_rate is not None and sc is None:
            raise InvalidArgumentError("--acceptance-rate needs --speculative-config")
        if not self.models:
            raise InvalidArgumentError("name at least one MODEL")
        if self.max_gpus is not None and self.max_gpus < 1:
            raise InvalidArgumentError(f"--max-gpus must be >= 1, got {self.max_gpus}")
        if self.max_usd_per_hour is not None and not self.max_usd_per_hour > 0:
            raise InvalidArgumentError("--max-usd-per-hour must be positive")
        if not 0 <= self.headroom < 10:
            raise InvalidArgumentError(f"--headroom must be in [0, 10), got {self.headroom}")
        if self.gpus_per_node < 1:
            raise InvalidArgumentError("--gpus-per-node must be >= 1")
        if not 0 < self.success_rate <= 1:
            raise InvalidArgumentError(f"--success-rate must be in (0, 1], got {self.success_rate}")
        if self.top < 1:
            raise InvalidArgumentError("--top must be >= 1")

    @property
    def offered_load(self) -> float:
        """Requests/s (sessions/s with turns), or users in flight for a closed loop."""
        w = self.workload
        return w.request_rate_per_s if w.request_rate_per_s is not None else w.concurrency or 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One fleet: a layout of one GPU type, its replica count, what it costs, the latencies
    at the load each replica takes, and the commands that start it."""

    model: str
    gpu: str
    mode: str  # "aggregated" or "disaggregated"
    layout: str  # TP/PP/EP of one replica (disaggregated: "prefill ... / decode ...")
    tensor_parallel_size: int
    pipeline_parallel_size: int
    expert_parallel: bool
    quantization: str | None
    kv_cache_dtype: str
    max_num_seqs: int
    gpus_per_replica: int
    speculative_config: str | None = None  # the --speculative-config the fleet runs with
    replicas: int  # aggregated: replicas; disaggregated: prefill + decode instances
    prefill_replicas: int = 0
    decode_replicas: int = 0
    num_gpus: int
    per_replica_load: float  # requests/s (or users) one replica takes within the SLO
    ttft_s: float  # at the SLO's percentile, at the per-replica load
    tpot_s: float
    kv_concurrency: int
    output_tok_per_s_per_gpu: float
    decode_tok_per_s_per_user: float
    kv_transfer_s: float = 0.0
    usd_per_gpu_hour: float
    price_source: str
    usd_per_hour: float
    usd_per_million_output_tokens: float
    usd_per_task: float
    meets_slo: bool
    within_budget: bool
    binding: str  # the constraint that binds at the per-replica load
    miss: str = ""  # when it does not meet the SLO: by how much
    commands: tuple[str, ...] = ()
    serve_settings: ServeSettings | None = None  # vLLM's flags of one replica (for --emit)

    @property
    def vllm_command(self) -> str:
        """The first ``vllm serve`` line (a disaggregated fleet's decode instance)."""
        return next((c for c in self.commands if not c.startswith("#")), "")

    @property
    def is_recommendable(self) -> bool:
        return self.meets_slo and self.within_budget


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchCounts:
    """How big the search was and where it was pruned."""

    gpus: int = 0
    gpus_skipped: tuple[str, ...] = ()  # "GPU: why"
    options: int = 0
    pruned_capacity: int = 0
    pruned_latency: int = 0
    pruned_bound: int = 0
    simulated: int = 0
    simulations: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetOutcome:
    """The ranked fleets (best first), the Pareto front and, when none is recommendable,
    the constraint that binds."""

    request: FleetRequest
    candidates: tuple[Candidate, ...]  # best first
    pareto: tuple[Candidate, ...]
    counts: SearchCounts
    closest_miss: str = ""  # when nothing meets the SLO: which constraint, by how much
    assumptions: tuple[str, ...] = field(default=())

    @property
    def best(self) -> Candidate | None:
        first = self.candidates[0] if self.candidates else None
        return first if first is not None and first.is_recommendable else None


def sim_requests(slots: int) -> int:
    """Requests one simulated load level runs: a few per running slot, within bounds."""
    return min(SIM_MAX_REQUESTS, max(SIM_MIN_REQUESTS, SIM_REQUESTS_PER_SLOT * slots))


def sim_workload(w: Workload, load: float, slots: int) -> Workload:
    """One replica's workload at ``load`` (requests/s, or users for a closed loop), with
    enough requests for a queue to build when the load is too high."""
    n = w.num_requests or sim_requests(slots)  # --num-requests: per load level
    n = max(1, n // max(1, w.turns)) * max(1, w.turns)
    if w.request_rate_per_s is not None:
        return replace(w, request_rate_per_s=load, concurrency=None, num_requests=n)
    return replace(w, concurrency=max(1, round(load)), request_rate_per_s=None, num_requests=n)


def catalog_gpus(names: tuple[str, ...]) -> list[tuple[GpuSpec, float | None, str]]:
    """The GPUs to search with their price: the named ones (an unknown name is an input
    error), or every catalog GPU."""
    catalog = gpu_catalog()
    gpus = [catalog.get(n) for n in names] if names else list(catalog.gpus)
    out = []
    for gpu in dict.fromkeys(gpus):
        price = gpu_price(gpu.name)
        if names and price is None:
            raise InvalidArgumentError(
                f"--gpus {gpu.name}: the price catalog has no $/GPU-hour for it, so its fleets "
                "cannot be ranked by cost; name GPUs that have a price, or leave --gpus out to "
                "search every priced GPU"
            )
        out.append((gpu, price[0] if price else None, price[1] if price else ""))
    return out


class Evaluator:
    """Simulates screened options; remembers every load it ran."""

    def __init__(self, request: FleetRequest) -> None:
        self.request = request
        self.num_simulations = 0

    def load_at(self, s: Screened, load: float) -> LoadResult:
        self.num_simulations += 1
        w = sim_workload(self.request.workload, load, s.plan.settings.max_num_seqs)
        return simulate_load(s.plan, s.coeffs, s.profile, w, speculation=s.speculation)

    def check_at(self, s: Screened, load: float, seen: dict[float, LoadResult]) -> SloCheck:
        result = self.load_at(s, load)
        seen[load] = result
        return slo_ratio(result.ttft_s, result.tpot_s, self.request.slo)


def within_budget(request: FleetRequest, num_gpus: int, usd_per_hour: float) -> bool:
    if request.max_gpus is not None and num_gpus > request.max_gpus:
        return False
    return request.max_usd_per_hour is None or usd_per_hour <= request.max_usd_per_hour


def slo_ratio_values(ttft_s: float, tpot_s: float, slo: FleetSlo) -> float:
    ttft = ttft_s / slo.slo.ttft_s if slo.slo.ttft_s else 0.0
    tpot = tpot_s / slo.slo.tpot_s if slo.slo.tpot_s else 0.0
    return max(ttft, tpot)
