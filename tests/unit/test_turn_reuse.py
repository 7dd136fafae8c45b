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
