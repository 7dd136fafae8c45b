"""The stream reader sees what the socket delivered, in blocks of any size: the same events
whether a block holds several of them, half of one, or a line cut anywhere (CRLF included);
every event completed by one block carries that block's arrival time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import aiohttp
import pytest

from servefit.bench.sse import MalformedStreamError, StreamState, read_events

STREAM = (
    b": ping\n\n"
    b'data: {"choices": [{"text": "", "finish_reason": null}]}\n\n'
    b"event: message\n"
    b'data: {"choices": [{"text": "caf\\u00e9", "finish_reason": null}]}\r\n\r\n'
    b'data: {"choices": [{"text": " ok", "finish_reason": "length"}]}\n\n'
    b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3,'
    b' "prompt_tokens_details": {"cached_tokens": 2}}}\n\n'
    b"data: [DONE]\n\n"
)


class Blocks:
    """A response body delivered in the given blocks."""

    def __init__(self, blocks: list[bytes]) -> None:
        self.blocks = blocks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for block in self.blocks:
            yield block


def _read(blocks: list[bytes]) -> tuple[StreamState, list[str]]:
    times = iter(range(1, 1000))
    state, texts = StreamState(), []
    content = cast(aiohttp.StreamReader, Blocks(blocks))
    asyncio.run(read_events(content, state, lambda: float(next(times)), texts.append))
    return state, texts


def _cut(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 2, 7, 64, len(STREAM)])
def test_the_same_events_whatever_the_blocks(size: int) -> None:
    state, texts = _read(_cut(STREAM, size))
    assert len(state.chunk_s) == 3  # the empty-text chunk counts; the usage chunk does not
    assert texts == ["café", " ok"]
    assert state.output_chars == len("café ok")
    assert (state.prompt_tokens, state.completion_tokens, state.cached_tokens) == (5, 3, 2)
    assert state.saw_done and state.is_finished


def test_events_of_one_block_carry_its_arrival_time() -> None:
    first = STREAM.index(b"event:")
    state, _ = _read([STREAM[:first], STREAM[first:]])
    assert state.chunk_s == [1.0, 2.0, 2.0]


def test_a_last_line_without_its_newline_is_read() -> None:
    state, _ = _read([b'data: {"choices": [{"text": "x", "finish_reason": "stop"}]}'])
    assert len(state.chunk_s) == 1 and state.is_finished and not state.saw_done


@pytest.mark.parametrize(
    "line",
    [
        b"data: {not json\n\n",
        b"data: [1, 2]\n\n",
        b'data: {"error": {"message": "overloaded"}}\n\n',
        b'data: {"choices": [], "usage": {"completion_tokens": "many"}}\n\n',
        b'data: {"choices": [{"text": "\xff"}]}\n\n',  # not UTF-8
    ],
)
def test_a_malformed_event_is_a_malformed_stream(line: bytes) -> None:
    with pytest.raises(MalformedStreamError):
        _read([line])


def test_an_endless_line_is_a_malformed_stream(monkeypatch: Any) -> None:
    monkeypatch.setattr("servefit.bench.sse.MAX_LINE_BYTES", 100)
    with pytest.raises(MalformedStreamError, match="longer than"):
        _read([b"data: " + b"x" * 60, b"x" * 60])
