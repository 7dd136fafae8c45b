"""What one request left behind: raw monotonic timestamps and the server's usage.

Times are seconds since the run started (``time.perf_counter`` based, monotonic). A record
is written to ``requests.jsonl`` as soon as its request ends, whatever way it ended.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

RECORD_SCHEMA_VERSION = 1


class Outcome(StrEnum):
    OK = "ok"  # the stream finished ([DONE] or the final usage)
    ERROR = "error"  # no token came back: HTTP error, refused connection, timeout before output
    INCOMPLETE = "incomplete"  # tokens came back but the stream did not finish (cut, Ctrl-C)


class TokenSource(StrEnum):
    USAGE = "usage"  # the server's usage.completion_tokens
    CHUNKS = "chunks"  # fallback: one token per streamed token chunk (one with choices)


class RequestRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: int
    outcome: Outcome = Outcome.ERROR
    error: str | None = None
    http_status: int | None = None
    endpoint: str = "completions"
    model: str | None = None  # the model name asked for when it is not the run's (an adapter)
    replica: int = 0
    session_id: int | None = None
    turn: int | None = None
    is_warmup: bool = False
    prompt_tokens_planned: int | None = None
    max_tokens: int | None = None
    scheduled_s: float  # when the schedule wanted it sent
    sent_s: float | None = None  # when the client started sending
    headers_s: float | None = None  # response headers received
    chunk_s: list[float] = Field(default_factory=list)  # every SSE chunk with choices
    chunk_tokens: list[int] = Field(default_factory=list)  # tokens per chunk when the server says
    done_s: float | None = None
    prompt_tokens: int | None = None  # server usage
    completion_tokens: int | None = None  # server usage (or chunk count, see token_source)
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    token_source: TokenSource = TokenSource.USAGE
    output_chars: int = 0

    @property
    def first_token_s(self) -> float | None:
        return self.chunk_s[0] if self.chunk_s else None
