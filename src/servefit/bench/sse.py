"""How a streamed answer is read: server-sent events, block by block as they arrive.

The hot path of every request (a chunk per token), so it does the least per chunk: one
clock read per block the socket delivered (every event completed by that block arrived
then), one split of the block into lines, one orjson decode per ``data:`` line, plain
attributes on a slotted state (the validated :class:`~.records.RequestRecord` is built once,
when the request ends). What it counts is ``vllm bench serve``'s rule (docs/metrics.md): a
token chunk is any chunk with ``choices``, its text empty or not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

MAX_LINE_BYTES = 4 * 2**20  # an SSE line (a chunk, the usage) longer than this is malformed


class MalformedStreamError(Exception):
    """The stream is not an OpenAI-compatible SSE stream (or carries a server error)."""


@dataclass(slots=True)
class StreamState:
    """What one request has seen so far: when it left, its answer's headers, its stream."""

    sent_s: float | None = None
    headers_s: float | None = None
    http_status: int | None = None
    ended_s: float | None = None  # the stream's end (read without error), when no token came
    chunk_s: list[float] = field(default_factory=list)  # every token chunk's arrival
    chunk_tokens: list[int] = field(default_factory=list)  # per chunk, when usage says
    output_chars: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    saw_done: bool = False  # data: [DONE]
    saw_finish: bool = False  # a finish_reason, or the final usage-only chunk
    last_completion: int = 0  # usage.completion_tokens so far (continuous usage)

    @property
    def is_finished(self) -> bool:
        return self.saw_done or self.saw_finish

    def take_line(self, raw: bytes, now: float, on_text: Callable[[str], None] | None) -> bool:
        """One SSE line that arrived at ``now``; True at ``data: [DONE]``. Comments, blank
        lines and other fields (event:, id:, retry:) are skipped."""
        line = raw.strip()
        if not line.startswith(b"data:"):
            return False
        data = line[5:].strip()
        if data == b"[DONE]":
            self.saw_done = True
            return True
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise MalformedStreamError(f"not JSON: {data[:80]!r}") from None
        if not isinstance(chunk, dict):
            raise MalformedStreamError(f"not an object: {data[:80]!r}")
        if "error" in chunk:
            raise MalformedStreamError(f"server error in stream: {str(chunk['error'])[:160]}")
        self.take_chunk(chunk, now, on_text)
        return False

    def take_chunk(
        self, chunk: dict[str, Any], now: float, on_text: Callable[[str], None] | None
    ) -> None:
        choices = chunk.get("choices")
        usage = chunk.get("usage")
        if choices:
            # a token chunk, as `vllm bench serve` counts them: every chunk with choices, its
            # text empty or not (a token that ends mid-UTF-8 character decodes to "")
            self.chunk_s.append(now)
            text = ""
            for choice in choices:
                delta = choice.get("delta") or {}
                text += (
                    choice.get("text")
                    or delta.get("content")
                    or delta.get("reasoning_content")
                    or ""
                )
                if choice.get("finish_reason") is not None:
                    self.saw_finish = True
            self.output_chars += len(text)
            if on_text is not None and text:
                on_text(text)
            if usage and usage.get("completion_tokens") is not None:
                completion = _count(usage, "completion_tokens")
                self.chunk_tokens.append(completion - self.last_completion)
                self.last_completion = completion
        if usage:
            self.prompt_tokens = _count(usage, "prompt_tokens")
            self.completion_tokens = _count(usage, "completion_tokens")
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                self.cached_tokens = _count(details, "cached_tokens")
            if not choices:
                self.saw_finish = True  # the final usage-only chunk


def _count(usage: dict[str, Any], key: str) -> Any:
    """A token count from the server's usage: an integer, or absent."""
    value = usage.get(key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise MalformedStreamError(f"usage.{key} is not an integer: {str(value)[:40]}")


async def read_events(
    content: aiohttp.StreamReader,
    state: StreamState,
    clock: Callable[[], float],
    on_text: Callable[[str], None] | None = None,
) -> None:
    """Read ``content`` into ``state`` until ``data: [DONE]`` or the end of the stream.

    By block (``iter_any``: whatever the socket delivered), not line by line: an instant
    server's whole answer is one or two blocks, and each line read would be a call into
    the stream reader. A line cut between two blocks waits for its end."""
    partial: list[bytes] = []  # a line not ended yet, in pieces
    partial_bytes = 0
    async for block in content.iter_any():
        now = clock()
        if b"\n" not in block:
            partial.append(block)
            partial_bytes += len(block)
            if partial_bytes > MAX_LINE_BYTES:
                raise MalformedStreamError(f"a line longer than {MAX_LINE_BYTES} bytes")
            continue
        if partial:
            partial.append(block)
            block = b"".join(partial)
            partial.clear()
        lines = block.split(b"\n")
        tail = lines.pop()  # after the last newline: the start of the next line, or b""
        for line in lines:
            if line and state.take_line(line, now, on_text):  # b"": an event's end
                return
        if tail:
            partial.append(tail)
        partial_bytes = len(tail)
    if partial:  # the last line, without its newline
        state.take_line(b"".join(partial), clock(), on_text)
