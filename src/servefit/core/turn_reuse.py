"""How much of an agent session's history a turn finds in the prefix cache: the two rules
the single-session table (:mod:`.agent`, where the reasoning is) and the simulation under
load (:mod:`.serving_sim`) share. Apart from :mod:`.agent` so that a plan without turns
does not build the session table's value classes at start-up."""

from __future__ import annotations


def history_block_tokens(
    *,
    block_tokens: int,
    enable_prefix_caching: bool,
    is_hybrid: bool,
    has_hybrid_prefix_caching: bool,
) -> int:
    """The granularity in which a turn reuses its history from the cache; 0: no reuse.

    Prefix caching off: nothing is reused. A hybrid model on a vLLM version without hybrid
    prefix caching: nothing either. Otherwise whole blocks of ``block_tokens`` (for a
    hybrid, its large "align"-mode block)."""
    if not enable_prefix_caching or block_tokens < 1:
        return 0
    if is_hybrid and not has_hybrid_prefix_caching:
        return 0
    return block_tokens


def cached_history_tokens(*, turn: int, prompt_tokens: int, history_tokens: int, block: int) -> int:
    """Tokens of turn ``turn``'s prompt found in the cache: the previous turn's prompt and
    answer (``history_tokens``) in whole ``block``-token blocks, never the prompt's last
    token (vLLM always computes it to sample). Turn 1 and ``block == 0``: none."""
    if turn < 2 or block < 1:
        return 0
    cached = (history_tokens // block) * block
    return max(0, min(cached, prompt_tokens - 1))
