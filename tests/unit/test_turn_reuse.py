"""The prefix-cache hit of an agent turn, pinned to vLLM's rule (v0.32.0
vllm/v1/core/kv_cache_manager.py get_computed_blocks): a hit is whole blocks within
``num_tokens - 1``, so the prompt's last token is always computed, and with it its block
when the whole prompt was cached."""

from __future__ import annotations

import pytest

from servefit.core.turn_reuse import cached_history_tokens


@pytest.mark.parametrize(
    ("prompt", "history", "block", "cached"),
    [
        (32, 32, 16, 16),  # all cached: the last block (with the last token) is recomputed
        (33, 32, 16, 32),  # one new token: both history blocks hit
        (100, 64, 16, 64),  # a new message after 4 whole blocks
        (100, 70, 16, 64),  # a partial block of history is not a hit
        (17, 40, 16, 16),  # history longer than the prompt: still below its last token
        (16, 16, 16, 0),  # one block, all cached: recomputed whole
        (1, 1, 16, 0),
    ],
)
def test_a_turn_hits_whole_blocks_below_its_last_token(prompt, history, block, cached):
    assert cached_history_tokens(turn=2, prompt_tokens=prompt, history_tokens=history,
                                 block=block) == cached  # fmt: skip


def test_the_first_turn_and_no_caching_hit_nothing():
    assert cached_history_tokens(turn=1, prompt_tokens=100, history_tokens=64, block=16) == 0
    assert cached_history_tokens(turn=3, prompt_tokens=100, history_tokens=64, block=0) == 0


@pytest.mark.parametrize(
    ("prefix_caching", "block", "hybrid", "hybrid_caching", "granularity"),
    [
        (False, 16, False, True, 0),  # prefix caching off: nothing is reused
        (True, 16, False, False, 16),  # a dense model needs no hybrid prefix caching
        (True, 0, False, True, 0),  # no block: no reuse
        (True, 1, False, True, 1),  # one-token blocks reuse token by token
        (True, 784, True, False, 0),  # a hybrid on a release without hybrid prefix caching
        (True, 784, True, True, 784),  # a hybrid with it: its align-mode block
    ],
)
def test_history_is_reused_in_whole_blocks_only_where_the_engine_caches(
    prefix_caching, block, hybrid, hybrid_caching, granularity
):
    from servefit.core.turn_reuse import history_block_tokens

    assert (
        history_block_tokens(
            block_tokens=block,
            enable_prefix_caching=prefix_caching,
            is_hybrid=hybrid,
            has_hybrid_prefix_caching=hybrid_caching,
        )
        == granularity
    )


def test_one_token_blocks_hit_all_but_the_last_token():
    # block 1: every history token below the prompt's last one is a hit
    assert cached_history_tokens(turn=2, prompt_tokens=10, history_tokens=5, block=1) == 5
    assert cached_history_tokens(turn=2, prompt_tokens=10, history_tokens=12, block=1) == 9
    # a one-token prompt computes its only token: nothing is a hit
    assert cached_history_tokens(turn=2, prompt_tokens=1, history_tokens=1, block=1) == 0
