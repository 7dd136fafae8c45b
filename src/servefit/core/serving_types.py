"""The values of the serving simulation (:mod:`servefit.core.serving`): the server's limits
going in (:class:`ServingLimits`, and the step timer and block count it is given), each
completed request's timing, and what one load level comes to (:class:`LoadResult`, with one
:class:`TurnLoad` per agent turn)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servefit.core import metrics
from servefit.core.metrics import Stat
from servefit.core.ops import StepShape
from servefit.core.roofline import Bound, StepTime
from servefit.errors import InvalidArgumentError

StepTimer = Callable[[StepShape], StepTime]
BlocksFor = Callable[[int], int]  # KV blocks one request holds at a given length


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingLimits:
    """The scheduler's limits: max seqs, batched tokens, KV blocks, block size, prefix caching."""

    max_num_seqs: int
    max_num_batched_tokens: int
    num_kv_blocks: int
    block_size: int  # tokens of prefix reusable per cache block
    enable_prefix_caching: bool = True
    # a session's history is reused in blocks of this many tokens (0: not at all; see
    # servefit.core.agent.history_block_tokens); None: block_size when caching is on
    history_block_tokens: int | None = None
    # Of each running request's output still to come, the share whose KV blocks admission
    # keeps free (the engine's rule, servefit.core.engine_scheduling): 0 admits on the blocks
    # of the scheduled tokens alone and preempts when decodes outgrow the cache (vLLM); 1
    # reserves prompt + all output at admission, so nothing is ever preempted (TensorRT-LLM's
    # GUARANTEED_NO_EVICT).
    reserved_output_fraction: float = 0.0

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise InvalidArgumentError("max_num_seqs and max_num_batched_tokens must be >= 1")
        if not 0.0 <= self.reserved_output_fraction <= 1.0:
            raise InvalidArgumentError("reserved_output_fraction must be in [0, 1]")
        if self.history_block_tokens is not None and self.history_block_tokens < 0:
            raise InvalidArgumentError("history_block_tokens must be >= 0")

    @property
    def history_reuse_block_tokens(self) -> int:
        """The granularity of a session's history reuse; 0: every turn prefills it all."""
        if self.history_block_tokens is not None:
            return self.history_block_tokens
        return self.block_size if self.enable_prefix_caching else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestTiming:
    """One simulated request's timestamps."""

    sent_s: float
    first_token_s: float
    finish_s: float
    input_len: int
    output_len: int
    cached_tokens: int
    num_preemptions: int

    # the formulas the benchmark measures with (servefit.core.metrics)
    @property
    def ttft_s(self) -> float:
        return metrics.ttft_s(sent_s=self.sent_s, first_token_s=self.first_token_s)

    @property
    def e2e_s(self) -> float:
        return metrics.e2e_s(sent_s=self.sent_s, done_s=self.finish_s)

    @property
    def tpot_s(self) -> float | None:
        return metrics.tpot_s(
            first_token_s=self.first_token_s, done_s=self.finish_s, output_tokens=self.output_len
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnLoad:
    """The requests of one turn of the sessions (all requests when turns == 1)."""

    turn: int  # 1-based
    num_requests: int
    mean_input_len: float  # the whole prompt, history included
    mean_cached_tokens: float  # of which found in the prefix cache
    ttft_s: Stat
    e2e_s: Stat


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadResult:
    """One simulated benchmark: the workload at one load level."""

    concurrency: int | None
    request_rate_per_s: float | None
    num_requests: int
    duration_s: float
    ttft_s: Stat
    tpot_s: Stat
    e2e_s: Stat
    output_throughput_tok_per_s: float
    total_throughput_tok_per_s: float
    request_throughput_per_s: float
    goodput_per_s: float | None
    mean_batch: float  # running requests per step, time-weighted
    max_batch: int
    num_preemptions: int
    kv_blocked_fraction: float  # of the time, requests waited for KV cache
    bound: Bound
    time_by_bound_s: dict[str, float]
    busy_s: float  # time with a step running: the duration less idle gaps
    prefill_gpu_s: float  # of busy_s, prefill work (core.serving's docstring rule)
    decode_gpu_s: float  # of busy_s, decode work
    num_input_tokens: int  # all prompts (every turn's history included)
    num_cached_tokens: int  # of which found in the prefix cache
    num_output_tokens: int
    turns: int  # per session; 1: every request is a session of its own
    num_sessions: int
    session_throughput_per_s: float  # sessions / duration
    session_e2e_s: Stat  # first turn sent -> last turn finished
    by_turn: tuple[TurnLoad, ...]  # one entry per turn

    @property
    def decode_tok_per_s(self) -> float:
        """Per request: the inverse of the mean time per output token."""
        return 1.0 / self.tpot_s.mean if self.tpot_s.mean else 0.0

    @property
    def prefill_share(self) -> float:
        """Of the busy GPU time, the prefill part (0 when nothing ran)."""
        busy = self.prefill_gpu_s + self.decode_gpu_s
        return self.prefill_gpu_s / busy if busy > 0 else 0.0
