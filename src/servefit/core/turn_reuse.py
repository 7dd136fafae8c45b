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
    token. vLLM must compute that token to sample, and a hit is whole blocks, so a prompt
    that is all history recomputes its whole last block (v0.32.0
    vllm/v1/core/kv_cache_manager.py ``get_computed_blocks``: ``max_cache_hit_length =
    request.num_tokens - 1``, "can trigger recomputation of an entire block ... block-size
    aligned"). A 32-token prompt whose 32 tokens are cached in 16-token blocks finds 16.
    Turn 1 and ``block == 0``: none."""
    if turn < 2 or block < 1:
        return 0
    hit_limit = max(0, min(history_tokens, prompt_tokens - 1))
    return (hit_limit // block) * block
