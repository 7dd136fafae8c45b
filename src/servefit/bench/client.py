"""How to send: a streaming OpenAI-compatible client on aiohttp.

One pooled session for the whole run (no per-request connection set-up), read buffers
sized for long contexts, raw monotonic timestamps for every stage of a request, and no
exception escapes a request: every way a request can end becomes a :class:`RequestRecord`.
The API key comes from an environment variable and is never written anywhere: what a
record keeps of a server's error (a body that may echo the request's headers) goes through
:func:`servefit.adapters.redact.redact_text`, with the key itself among the secrets.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from servefit.adapters.redact import REDACTED, redact_text
from servefit.bench.records import Outcome, RequestRecord, TokenSource
from servefit.errors import ServerError

# the first call, before any request: a server that does not answer this fast is not there
PROBE_TIMEOUT = aiohttp.ClientTimeout(total=30)
READ_BUFFER_BYTES = 4 * 2**20  # SSE lines of long outputs (and usage) fit comfortably
ERROR_BODY_CHARS = 300  # of an error body, kept in the record (after redaction)
ERROR_BODY_READ_BYTES = 64 * 2**10  # read this much of it: a secret cut in two is not found


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """What to send (built by a workload)."""

    request_id: int
    endpoint: str = "completions"  # or "chat"
    prompt: str | None = None
    messages: list[dict[str, str]] | None = None
    max_tokens: int | None = None
    ignore_eos: bool = False
    prompt_tokens_planned: int | None = None
    session_id: int | None = None
    turn: int | None = None
    is_warmup: bool = False
    arrival_s: float | None = None  # trace replay: when to send, from the start of the run
    extra: dict[str, Any] = field(default_factory=dict)


class Clock:
    """Seconds since the run started, monotonic."""

    def __init__(self, origin: float | None = None) -> None:
        # perf_counter is the system-wide monotonic clock on Linux and macOS, so worker
        # processes given the parent's origin share its timeline
        self.origin = time.perf_counter() if origin is None else origin

    def __call__(self) -> float:
        return time.perf_counter() - self.origin


class OpenAIClient:
    """Streams completions from one or more replicas (round robin, or by session)."""

    def __init__(
        self,
        base_urls: list[str],
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        session_affinity: bool = False,
        continuous_usage: bool = False,
    ) -> None:
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.model = model
        self._headers = {"Content-Type": "application/json"}
        self._secrets = [api_key] if api_key else []
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=timeout_s)
        self._affinity = session_affinity
        self._continuous_usage = continuous_usage
        self._next = itertools.cycle(range(len(self.base_urls)))
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> OpenAIClient:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=60)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            read_bufsize=READ_BUFFER_BYTES,
            headers=self._headers,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use OpenAIClient as an async context manager")
        return self._session

    async def connect(self) -> None:
        """Check that every replica answers HTTP and, when no model was given, take the first
        one ``/v1/models`` lists. A server that cannot be reached, or lists no model when
        one is needed, is a :class:`ServerError` naming its URL (nothing was sent yet)."""
        for index, base in enumerate(self.base_urls):
            url = f"{base}/v1/models"
            try:
                async with self.session.get(url, timeout=PROBE_TIMEOUT) as resp:
                    if index == 0 and self.model is None:
                        self.model = await _first_model(resp, url)
            except TimeoutError:
                raise ServerError(
                    f"{base} did not answer {url} within {PROBE_TIMEOUT.total:.0f} s"
                ) from None
            except aiohttp.ClientConnectorError as exc:
                reason = exc.os_error.strerror if exc.os_error.strerror else str(exc.os_error)
                raise ServerError(
                    f"cannot reach {base} ({reason}): is the server running, and is this its "
                    "address and port?"
                ) from None
            except aiohttp.ClientError as exc:
                raise ServerError(f"{base}: {type(exc).__name__}: {exc}") from None

    async def tokenize_count(self, text: str) -> int | None:
        """Token count from the server's ``/tokenize`` (vLLM, SGLang), or None."""
        try:
            async with self.session.post(
                f"{self.base_urls[0]}/tokenize", json={"model": self.model, "prompt": text}
            ) as resp:
                if resp.status != 200:
                    return None
                body = await resp.json()
        except (aiohttp.ClientError, json.JSONDecodeError):
            return None
        count = body.get("count")
        return int(count) if isinstance(count, int) else len(body.get("tokens") or []) or None

    def _redact(self, text: str) -> str:
        """``text`` without secrets: the API key wherever it appears (whatever its shape or
        length), Authorization/Bearer values, secret environment values, key shapes."""
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return redact_text(text, secrets=self._secrets)

    def _replica(self, request: Request) -> int:
        if self._affinity and request.session_id is not None:
            return request.session_id % len(self.base_urls)
        return next(self._next)

    def _payload(self, request: Request) -> dict[str, Any]:
        options: dict[str, Any] = {"include_usage": True}
        if self._continuous_usage:
            options["continuous_usage_stats"] = True
        payload: dict[str, Any] = {"model": self.model, "stream": True, "stream_options": options}
        if request.endpoint == "chat":
            payload["messages"] = request.messages
        else:
            payload["prompt"] = request.prompt
        if request.max_tokens is not None:
            payload["max_tokens"] = request.max_tokens
        if request.ignore_eos:
            payload["ignore_eos"] = True
            if request.max_tokens is not None:
                payload["min_tokens"] = request.max_tokens
        payload.update(request.extra)
        return payload

    async def send(
        self,
        request: Request,
        *,
        scheduled_s: float,
        clock: Clock,
        on_text: Callable[[str], None] | None = None,
        on_done: Callable[[RequestRecord], None] | None = None,
    ) -> RequestRecord:
        """Send one request and stream the answer. A failed request is a record, never an
        exception; on cancellation the record is still handed to ``on_done`` (marked
        incomplete or errored) before the cancellation propagates."""
        replica = self._replica(request)
        path = "/v1/chat/completions" if request.endpoint == "chat" else "/v1/completions"
        record = RequestRecord(
            request_id=request.request_id,
            endpoint=request.endpoint,
            replica=replica,
            session_id=request.session_id,
            turn=request.turn,
            is_warmup=request.is_warmup,
            prompt_tokens_planned=request.prompt_tokens_planned,
            max_tokens=request.max_tokens,
            scheduled_s=scheduled_s,
        )
        finished = False
        try:
            record.sent_s = clock()
            async with self.session.post(
                self.base_urls[replica] + path, json=self._payload(request)
            ) as resp:
                record.headers_s = clock()
                record.http_status = resp.status
                if resp.status != 200:
                    body = await resp.content.read(ERROR_BODY_READ_BYTES)
                    text = self._redact(body.decode("utf-8", errors="replace")).strip()
                    record.error = f"HTTP {resp.status}: {text[:ERROR_BODY_CHARS]}"
                    return record
                finished = await self._read_stream(resp, record, clock, on_text)
        except asyncio.CancelledError:
            record.error = "cancelled: the run was interrupted"
            raise
        except TimeoutError:
            record.error = f"timeout: no data for {self._timeout.sock_read:.0f} s"
        except aiohttp.ClientConnectorError as exc:
            record.error = f"connection failed: {exc.os_error or exc}"
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            record.error = f"disconnected mid-stream: {type(exc).__name__}"
        except aiohttp.ClientError as exc:
            record.error = f"client error: {type(exc).__name__}: {exc}"
        except _MalformedStreamError as exc:
            record.error = f"malformed SSE: {exc}"
        finally:
            if finished:
                record.outcome = Outcome.OK
                record.error = None
            elif record.chunk_s:
                record.outcome = Outcome.INCOMPLETE
                record.error = record.error or "stream ended without [DONE]"
            else:
                record.outcome = Outcome.ERROR
                record.error = record.error or "stream ended without output"
            if record.error is not None:  # whatever the server or the OS said, no secret
                record.error = self._redact(record.error)
            if record.done_s is None and record.chunk_s:
                record.done_s = record.chunk_s[-1]
            if record.completion_tokens is None and record.chunk_s:
                record.completion_tokens = sum(record.chunk_tokens) or len(record.chunk_s)
                record.token_source = TokenSource.CHUNKS
            if on_done is not None:
                on_done(record)
        return record

    async def _read_stream(
        self,
        resp: aiohttp.ClientResponse,
        record: RequestRecord,
        clock: Clock,
        on_text: Callable[[str], None] | None,
    ) -> bool:
        saw_done = saw_finish = False
        last_completion = 0
        async for raw in resp.content:
            line = raw.strip()
            if not line or line.startswith(b":"):
                continue
            if not line.startswith(b"data:"):
                continue  # event:/id:/retry: fields
            data = line[5:].strip()
            if data == b"[DONE]":
                saw_done = True
                break
            now = clock()
            try:
                chunk = json.loads(data)
            except json.JSONDecodeError:
                raise _MalformedStreamError(f"not JSON: {data[:80]!r}") from None
            if not isinstance(chunk, dict):
                raise _MalformedStreamError(f"not an object: {data[:80]!r}")
            if "error" in chunk:
                raise _MalformedStreamError(f"server error in stream: {str(chunk['error'])[:160]}")
            text = ""
            choices = chunk.get("choices") or []
            for choice in choices:
                delta = choice.get("delta") or {}
                text += (
                    choice.get("text")
                    or delta.get("content")
                    or delta.get("reasoning_content")
                    or ""
                )
                saw_finish = saw_finish or choice.get("finish_reason") is not None
            usage = chunk.get("usage")
            if choices:
                # a token chunk, as `vllm bench serve` counts them: every chunk with choices,
                # its text empty or not (a token that ends mid-UTF-8 character decodes to "")
                record.chunk_s.append(now)
                record.output_chars += len(text)
                if on_text is not None and text:
                    on_text(text)
                if usage and usage.get("completion_tokens") is not None:
                    record.chunk_tokens.append(int(usage["completion_tokens"]) - last_completion)
                    last_completion = int(usage["completion_tokens"])
            if usage:
                record.prompt_tokens = usage.get("prompt_tokens")
                record.completion_tokens = usage.get("completion_tokens")
                details = usage.get("prompt_tokens_details") or {}
                if details.get("cached_tokens") is not None:
                    record.cached_tokens = int(details["cached_tokens"])
                if not chunk.get("choices"):
                    saw_finish = True  # the final usage-only chunk
        # the request ends with its last token chunk (vLLM bench's latency), not with the
        # trailing usage chunk or [DONE]
        record.done_s = record.chunk_s[-1] if record.chunk_s else clock()
        return saw_done or saw_finish


async def _first_model(resp: aiohttp.ClientResponse, url: str) -> str:
    if resp.status != 200:
        raise ServerError(
            f"{url} answered HTTP {resp.status}: is this an OpenAI-compatible server? "
            "(with --model NAME servefit does not need the list)"
        )
    try:
        body = await resp.json(content_type=None)
        return str(body["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise ServerError(
            f"{url} lists no model (expected {{'data': [{{'id': ...}}]}}): pass --model NAME"
        ) from None


class _MalformedStreamError(Exception):
    pass
