"""JSON sections for performance under load (``plan``, ``compare`` and ``cost`` ``--json``).

The load section (one simulated load point: latency stats, throughput, GPU time by phase,
agent sessions by turn), the agent-session section and the performance section that holds
them, with their converters (:func:`load_section`, :func:`performance_section`). Seconds and
tokens per second, as named. The scaling, cost and compare documents that embed them are in
:mod:`servefit.adapters.perf_document`, from which these names stay importable.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any

from servefit.adapters.band_sections import ErrorBandsSection, bands_section
from servefit.adapters.document import FrozenDoc

if TYPE_CHECKING:  # the converters only read attributes: plan --json stays quick to start
    from servefit.core.metrics import Stat
    from servefit.core.perf import PerformancePlan
    from servefit.core.serving import LoadResult


class StatSection(FrozenDoc):
    """A metric's mean and percentiles."""

    mean: float
    p50: float
    p90: float
    p99: float


class TurnLoadSection(FrozenDoc):
    """One turn's latencies under load."""

    turn: int
    num_requests: int
    mean_input_len: float
    mean_cached_tokens: float
    ttft_s: StatSection
    e2e_s: StatSection


class LoadSection(FrozenDoc):
    """The workload under load: latencies, throughput, goodput."""

    concurrency: int | None
    request_rate_per_s: float | None
    num_requests: int
    ttft_s: StatSection
    tpot_s: StatSection
    e2e_s: StatSection
    decode_tok_per_s: float  # per request
    output_throughput_tok_per_s: float
    total_throughput_tok_per_s: float
    request_throughput_per_s: float
    goodput_per_s: float | None
    mean_batch: float
    num_preemptions: int
    kv_blocked_fraction: float
    bound: str
    # GPU time by phase (defaults: documents written before these fields)
    busy_s: float | None = None
    prefill_gpu_s: float | None = None
    decode_gpu_s: float | None = None
    prefill_share: float | None = None
    num_input_tokens: int | None = None
    num_cached_tokens: int | None = None
    num_output_tokens: int | None = None
    # agent sessions (turns > 1); one turn: every request is a session
    turns: int = 1
    num_sessions: int | None = None
    session_throughput_per_s: float | None = None
    session_e2e_s: StatSection | None = None
    by_turn: list[TurnLoadSection] = field(default_factory=list)


class AgentTurnSection(FrozenDoc):
    """One turn of an agent session alone."""

    turn: int
    prompt_tokens: int
    cached_tokens: int
    ttft_cold_s: float
    ttft_cached_s: float
    decode_s: float


class AgentSection(FrozenDoc):
    """An agent session alone, turn by turn."""

    turns: list[AgentTurnSection]
    total_ttft_cold_s: float
    total_ttft_cached_s: float
    gpu_time_saved_s: float
    total_decode_s: float
    reuse_block_tokens: int
    notes: list[str]


class PerformanceSection(FrozenDoc):
    """The performance section of the plan document."""

    engine: str
    efficiency_profile: str
    workload: str
    ttft_s: float  # mean TTFT under the workload's load
    tpot_s: float  # mean time per output token under load
    decode_tok_per_s: float  # per request, under load
    output_throughput_tok_per_s: float  # aggregate, under load
    total_throughput_tok_per_s: float
    request_throughput_per_s: float
    bound: str
    ttft_cold_s: float  # one request alone
    ttft_cached_prefix_s: float | None
    tpot_batch1_s: float
    prefill_bound: str
    decode_bound: str
    decode_bytes_per_token: float  # one batch-1 decode step, bytes read per GPU
    weight_bytes_per_token: float
    kernel_dtypes: list[str]
    load: LoadSection
    curve: list[LoadSection]
    agent: AgentSection | None
    assumptions: list[str]
    session_throughput_per_s: float | None = None  # agent sessions/s under load
    offered_rate_per_s: float | None = None  # the open-loop rate asked for
    sustainable_rate_per_s: float | None = None  # the most requests/s it completes
    # requests/s the queue grows by (0: the server keeps up; None: closed loop)
    queue_growth_per_s: float | None = None
    error_bands: ErrorBandsSection | None = None  # each figure's measured error
    # what --speculative-config buys: the same plan timed without it, and the fastest k
    speculation: dict[str, Any] | None = None


def _stat(s: Stat) -> StatSection:
    return StatSection(mean=s.mean, p50=s.p50, p90=s.p90, p99=s.p99)


def load_section(r: LoadResult) -> LoadSection:
    return LoadSection(
        concurrency=r.concurrency,
        request_rate_per_s=r.request_rate_per_s,
        num_requests=r.num_requests,
        ttft_s=_stat(r.ttft_s),
        tpot_s=_stat(r.tpot_s),
        e2e_s=_stat(r.e2e_s),
        decode_tok_per_s=r.decode_tok_per_s,
        output_throughput_tok_per_s=r.output_throughput_tok_per_s,
        total_throughput_tok_per_s=r.total_throughput_tok_per_s,
        request_throughput_per_s=r.request_throughput_per_s,
        goodput_per_s=r.goodput_per_s,
        mean_batch=r.mean_batch,
        num_preemptions=r.num_preemptions,
        kv_blocked_fraction=r.kv_blocked_fraction,
        bound=r.bound.value,
        busy_s=r.busy_s,
        prefill_gpu_s=r.prefill_gpu_s,
        decode_gpu_s=r.decode_gpu_s,
        prefill_share=r.prefill_share,
        num_input_tokens=r.num_input_tokens,
        num_cached_tokens=r.num_cached_tokens,
        num_output_tokens=r.num_output_tokens,
        turns=r.turns,
        num_sessions=r.num_sessions,
        session_throughput_per_s=r.session_throughput_per_s,
        session_e2e_s=_stat(r.session_e2e_s),
        by_turn=[
            TurnLoadSection(
                turn=t.turn,
                num_requests=t.num_requests,
                mean_input_len=t.mean_input_len,
                mean_cached_tokens=t.mean_cached_tokens,
                ttft_s=_stat(t.ttft_s),
                e2e_s=_stat(t.e2e_s),
            )
            for t in r.by_turn
        ],
    )


def performance_section(p: PerformancePlan) -> PerformanceSection:
    agent = None
    if p.agent is not None:
        a = p.agent
        agent = AgentSection(
            turns=[
                AgentTurnSection(
                    turn=t.turn,
                    prompt_tokens=t.prompt_tokens,
                    cached_tokens=t.cached_tokens,
                    ttft_cold_s=t.ttft_cold_s,
                    ttft_cached_s=t.ttft_cached_s,
                    decode_s=t.decode_s,
                )
                for t in a.turns
            ],
            total_ttft_cold_s=a.total_ttft_cold_s,
            total_ttft_cached_s=a.total_ttft_cached_s,
            gpu_time_saved_s=a.gpu_time_saved_s,
            total_decode_s=a.total_decode_s,
            reuse_block_tokens=a.prefix_reuse_block_tokens,
            notes=list(a.notes),
        )
    return PerformanceSection(
        engine=p.engine,
        efficiency_profile=p.profile.label,
        workload=p.workload.describe(),
        ttft_s=p.ttft_s,
        tpot_s=p.tpot_s,
        decode_tok_per_s=p.decode_tok_per_s,
        output_throughput_tok_per_s=p.output_throughput_tok_per_s,
        total_throughput_tok_per_s=p.load.total_throughput_tok_per_s,
        request_throughput_per_s=p.load.request_throughput_per_s,
        bound=p.bound.value,
        ttft_cold_s=p.ttft_cold_s,
        ttft_cached_prefix_s=p.ttft_cached_s,
        tpot_batch1_s=p.tpot_batch1_s,
        prefill_bound=p.prefill.bound.value,
        decode_bound=p.decode.bound.value,
        decode_bytes_per_token=p.decode_bytes_per_token,
        weight_bytes_per_token=p.weight_bytes_per_token,
        kernel_dtypes=list(p.kernel_dtypes),
        load=load_section(p.load),
        curve=[load_section(c) for c in p.curve],
        agent=agent,
        assumptions=list(p.assumptions),
        speculation=_speculation(p),
        session_throughput_per_s=p.load.session_throughput_per_s,
        offered_rate_per_s=p.offered_rate_per_s,
        sustainable_rate_per_s=p.sustainable_rate_per_s,
        queue_growth_per_s=p.queue_growth_per_s,
        error_bands=bands_section(p.bands),
    )


def _speculation(p: PerformancePlan) -> dict[str, Any] | None:
    g = p.speculation
    if g is None:
        return None
    return {
        "num_speculative_tokens": g.k,
        "expected_tokens_per_step": g.expected_tokens_per_step,
        "tpot_batch1_without_s": g.tpot_batch1_without_s,
        "tpot_without_s": g.tpot_without_s,
        "output_throughput_without_tok_per_s": g.output_throughput_without_tok_per_s,
        "tpot_batch1_by_k_s": {str(k): s for k, s in g.tpot_batch1_by_k_s},
        "best_k_batch1": g.best_k_batch1,
        "best_k_at_load": g.best_k_at_load,
        "mean_batch": g.mean_batch,
    }
