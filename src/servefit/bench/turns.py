"""Agent sessions turn by turn: TTFT and cached prompt tokens per turn, and the cold/warm
comparison that shows what the prefix cache saves (``bench --prefix-cache-compare``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from servefit.bench.metrics import distribution, latencies
from servefit.bench.records import Outcome, RequestRecord


class TurnStats(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turn: int
    requests: int
    prompt_tokens_mean: float | None
    cached_tokens_mean: float | None
    ttft_s_mean: float | None
    ttft_s_p50: float | None


class CacheComparison(BaseModel):
    """Per turn: the same agent sessions with the prefix cache defeated (cold) and used (warm)."""

    model_config = ConfigDict(extra="forbid")

    turn: int
    prompt_tokens_mean: float | None
    ttft_cold_s: float | None
    ttft_warm_s: float | None
    ttft_saved_s: float | None
    cached_tokens_warm_mean: float | None


def compare_cache(cold: list[TurnStats], warm: list[TurnStats]) -> list[CacheComparison]:
    by_turn = {t.turn: t for t in cold}
    out = []
    for w in warm:
        c = by_turn.get(w.turn)
        cold_ttft = c.ttft_s_mean if c else None
        out.append(
            CacheComparison(
                turn=w.turn,
                prompt_tokens_mean=w.prompt_tokens_mean,
                ttft_cold_s=cold_ttft,
                ttft_warm_s=w.ttft_s_mean,
                ttft_saved_s=(cold_ttft - w.ttft_s_mean)
                if cold_ttft is not None and w.ttft_s_mean is not None
                else None,
                cached_tokens_warm_mean=w.cached_tokens_mean,
            )
        )
    return out


def turn_stats(records: list[RequestRecord]) -> list[TurnStats]:
    """Per-turn TTFT and cached tokens of agent sessions: the prefix-cache headline."""
    by_turn: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.turn is not None and r.outcome is Outcome.OK and not r.is_warmup:
            by_turn.setdefault(r.turn, []).append(r)
    out = []
    for turn, rs in sorted(by_turn.items()):
        ttfts = [v for r in rs if (v := latencies(r).ttft_s) is not None]
        prompts = [r.prompt_tokens for r in rs if r.prompt_tokens is not None]
        cached = [r.cached_tokens for r in rs if r.cached_tokens is not None]
        d = distribution(ttfts, "per_request")
        out.append(
            TurnStats(
                turn=turn,
                requests=len(rs),
                prompt_tokens_mean=sum(prompts) / len(prompts) if prompts else None,
                cached_tokens_mean=sum(cached) / len(cached) if cached else None,
                ttft_s_mean=d.mean,
                ttft_s_p50=d.p50,
            )
        )
    return out
