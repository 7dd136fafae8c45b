"""Agent sessions: every turn re-sends the whole history (A, A B, A B C, ...).

Turn t of a session with a ``P``-token system prefix, ``u`` new tokens per turn and ``o``
output tokens per turn sends a prompt of ``P + t u + (t - 1) o`` tokens. Without prefix
caching the server prefills all of it every turn: total prefill grows as t^2. With prefix
caching the previous turn's prompt and answer are still in the cache (vLLM caches the
generated tokens' full blocks too), so only the new message (and the partial last block)
is prefilled. Decode is untouched by caching: every turn still generates ``o`` tokens one
step at a time, each step reading all weights and the (longer) KV cache.

Hybrid models (linear attention / Mamba) keep a recurrent state, not per-token KV, in most
layers: a cache hit needs the state *at the hit position*. vLLM from 0.20 keeps such states
only at block boundaries ("align" mode, with the hybrid's large block size), so the reusable
prefix is rounded down to that block size; earlier versions disable prefix caching for
hybrids, so every turn is prefilled from scratch.

The two rules (:func:`history_block_tokens`, :func:`cached_history_tokens`, in
:mod:`.turn_reuse`) are shared by the single-session table below and by the simulation
under load (:mod:`.serving`), so a turn reuses the same tokens in both. Eviction: a turn's
history is assumed to still be in the cache when its next turn arrives. vLLM keeps a
finished request's blocks as free but cached (evicted least-recently-used, and only when a
new allocation needs the block); the next turn is sent as soon as the previous one
finishes, so its history is among the most recently used blocks. Under heavy KV pressure a
real server may evict it earlier: then the prediction is optimistic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# `X as X`: re-exported, so ``servefit.core.agent.<name>`` keeps working
from servefit.core.turn_reuse import cached_history_tokens as cached_history_tokens
from servefit.core.turn_reuse import history_block_tokens as history_block_tokens
from servefit.errors import InvalidArgumentError

PrefillTime = Callable[[int, int], float]  # (new tokens, cached tokens) -> seconds
DecodeTime = Callable[[int, int], float]  # (output tokens, context at start) -> seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEstimate:
    """One turn of an agent session alone: prompt, cached history, prefill and decode time."""

    turn: int  # 1-based
    prompt_tokens: int
    cached_tokens: int  # reusable from the cache with prefix caching
    ttft_cold_s: float  # prefill of the whole prompt
    ttft_cached_s: float  # prefill of the uncached tail
    decode_s: float  # output tokens after the first (same with and without caching)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSession:
    """An agent session alone on the server, turn by turn."""

    turns: tuple[TurnEstimate, ...]
    prefix_reuse_block_tokens: int  # the granularity of reuse (0: caching does not apply)
    notes: tuple[str, ...]

    @property
    def total_ttft_cold_s(self) -> float:
        return sum(t.ttft_cold_s for t in self.turns)

    @property
    def total_ttft_cached_s(self) -> float:
        return sum(t.ttft_cached_s for t in self.turns)

    @property
    def gpu_time_saved_s(self) -> float:
        return self.total_ttft_cold_s - self.total_ttft_cached_s

    @property
    def total_decode_s(self) -> float:
        return sum(t.decode_s for t in self.turns)


def plan_agent_session(
    *,
    turns: int,
    prefix_tokens: int,
    message_tokens: int,
    output_tokens: int,
    reuse_block_tokens: int,
    prefill_s: PrefillTime,
    decode_s: DecodeTime,
    is_hybrid: bool,
    has_hybrid_prefix_caching: bool,
    request_overhead_s: float = 0.0,
) -> AgentSession:
    """Per-turn TTFT with and without prefix caching, and the decode time of each turn."""
    if turns < 1 or message_tokens < 1 or output_tokens < 1:
        raise InvalidArgumentError("an agent session needs >= 1 turn, message and output token")
    notes = [
        "decode time is the same with and without prefix caching: caching removes prefill only"
    ]
    block = history_block_tokens(
        block_tokens=reuse_block_tokens,
        enable_prefix_caching=reuse_block_tokens > 0,
        is_hybrid=is_hybrid,
        has_hybrid_prefix_caching=has_hybrid_prefix_caching,
    )
    if is_hybrid and not has_hybrid_prefix_caching:
        notes.append(
            "hybrid model on a vLLM version without hybrid prefix caching: no reuse, every "
            "turn prefills its whole history"
        )
    elif not block:
        notes.append("prefix caching is off: every turn prefills its whole history")
    elif is_hybrid:
        notes.append(
            f"hybrid model: recurrent states are kept only at {block}-token block boundaries "
            "(vLLM 'align' mode), so up to one block per turn is recomputed"
        )
    out = []
    for t in range(1, turns + 1):
        prompt = prefix_tokens + t * message_tokens + (t - 1) * output_tokens
        history = prompt - message_tokens  # everything the previous turn left in the cache
        cached = cached_history_tokens(
            turn=t, prompt_tokens=prompt, history_tokens=history, block=block
        )
        cold = prefill_s(prompt, 0) + request_overhead_s
        warm = prefill_s(prompt - cached, cached) + request_overhead_s
        out.append(
            TurnEstimate(
                turn=t,
                prompt_tokens=prompt,
                cached_tokens=cached,
                ttft_cold_s=cold,
                ttft_cached_s=warm,
                decode_s=decode_s(output_tokens - 1, prompt + 1) if output_tokens > 1 else 0.0,
            )
        )
    return AgentSession(turns=tuple(out), prefix_reuse_block_tokens=block, notes=tuple(notes))
