"""The text bench sends: prompts of an exact token count, made of short common words, and
the request that carries one (shared by the workloads and the trace readers)."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

from servefit.bench.client import Request

# Short, common words: most are one token in BPE vocabularies, so lengths land close to the
# target even before /tokenize refines them.
WORDS = [
    "time",
    "person",
    "year",
    "way",
    "day",
    "thing",
    "man",
    "world",
    "life",
    "hand",
    "part",
    "child",
    "eye",
    "woman",
    "place",
    "work",
    "week",
    "case",
    "point",
    "number",
    "group",
    "problem",
    "fact",
    "be",
    "have",
    "do",
    "say",
    "get",
    "make",
    "go",
    "know",
    "take",
    "see",
    "come",
    "think",
    "look",
    "want",
    "give",
    "use",
    "find",
    "tell",
    "ask",
    "seem",
    "feel",
    "try",
    "leave",
    "call",
    "good",
    "new",
    "first",
    "last",
    "long",
    "great",
    "little",
    "own",
    "other",
    "old",
    "right",
    "big",
    "high",
    "different",
    "small",
    "large",
    "next",
    "early",
    "young",
    "important",
    "few",
    "public",
    "bad",
    "same",
    "able",
    "to",
    "of",
    "in",
    "for",
    "on",
    "with",
    "at",
    "by",
    "from",
    "up",
    "about",
    "into",
    "over",
    "after",
    "under",
    "red",
    "blue",
    "green",
    "light",
    "dark",
    "river",
    "stone",
    "tree",
    "field",
    "cloud",
    "rain",
    "wind",
    "snow",
    "road",
    "city",
    "town",
    "house",
    "door",
    "window",
    "table",
    "chair",
    "book",
    "paper",
    "letter",
    "word",
    "story",
    "song",
    "music",
    "sound",
    "voice",
    "water",
    "fire",
    "earth",
    "air",
    "metal",
    "glass",
    "wood",
    "gold",
    "silver",
    "iron",
    "bread",
    "milk",
    "fruit",
    "apple",
    "salt",
    "sugar",
    "tea",
    "coffee",
    "garden",
]

Tokenizer = Callable[[str], Awaitable[int | None]]
TOKENIZE_CONCURRENCY = 64  # /tokenize round trips in flight while preparing prompts


def random_words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choices(WORDS, k=max(count, 1)))


FILLERS = (" a", " x", " 1", " .", " the", "!")  # units that are usually one token each


async def exact_prompt(
    rng: random.Random, tokens: int, count: Tokenizer | None
) -> tuple[str, int | None]:
    """A prompt of exactly ``tokens`` tokens as the server counts them (its ``/tokenize``,
    special tokens included, as in ``usage.prompt_tokens``): the longest run of random words
    that fits (binary search), topped up with a one-token filler. Without ``/tokenize`` the
    words stand in (~1 token each) and the real count comes from usage (returns None)."""
    words = rng.choices(WORDS, k=tokens)
    if count is None:
        return " ".join(words), None
    measured = await count(" ".join(words))
    if measured is None:
        return " ".join(words), None
    if measured > tokens:  # words cost more than one token each: keep the longest prefix that fits
        lo, hi = 0, len(words)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            counted = await count(" ".join(words[:mid]))
            if counted is not None and counted <= tokens:
                lo = mid
            else:
                hi = mid - 1
        words = words[:lo]
        measured = await count(" ".join(words)) or 0
    text = " ".join(words)
    if measured == tokens:
        return text, measured
    for filler in FILLERS:  # top up the last few tokens
        candidate = text + filler * (tokens - measured)
        if await count(candidate) == tokens:
            return candidate, tokens
    return text, measured


def make_request(
    endpoint: str, ignore_eos: bool, i: int, text: str, output_len: int, planned: int | None
) -> Request:
    """A completions request of ``text`` (or a chat request with it as the user's message)."""
    if endpoint == "chat":
        return Request(
            request_id=i,
            endpoint="chat",
            messages=[{"role": "user", "content": text}],
            max_tokens=output_len,
            ignore_eos=ignore_eos,
            prompt_tokens_planned=planned,
        )
    return Request(
        request_id=i,
        endpoint="completions",
        prompt=text,
        max_tokens=output_len,
        ignore_eos=ignore_eos,
        prompt_tokens_planned=planned,
    )
