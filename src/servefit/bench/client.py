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
import base64
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from servefit.adapters.redact import REDACTED, redact_text
from servefit.bench.records import Outcome, RequestRecord, TokenSource
from servefit.bench.sse import MalformedStreamError, StreamState, read_events
from servefit.errors import InvalidArgumentError, ServerError

# the first call, before any request: a server that does not answer this fast is not there
PROBE_TIMEOUT = aiohttp.ClientTimeout(total=30)
READ_BUFFER_BYTES = 4 * 2**20  # the stream reader buffers this much before pausing the socket
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
        # the wall clock at the origin: where a span or a report needs times of day
        self.origin_unix_s = time.time() - (time.perf_counter() - self.origin)

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
        credentials: str | None = None,
    ) -> None:
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.model = model
        self._headers = {"Content-Type": "application/json"}
        self._secrets = [api_key] if api_key else []
        if api_key and credentials:
            raise InvalidArgumentError(
                "the server URL carries user-info and an API key is set: HTTP sends one "
                "Authorization header; give one of them"
            )
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        elif credentials:  # the URL's user-info, as HTTP Basic authentication
            token = base64.b64encode(credentials.encode("utf-8")).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"
            password = credentials.partition(":")[2]
            self._secrets += [token, password] if password else [token]
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

    def _body(self, request: Request) -> bytes:
        """The request body (the session sends it as application/json): orjson, or the
        standard library for what orjson refuses (a lone surrogate in a dataset's text)."""
        payload = self._payload(request)
        try:
            return orjson.dumps(payload)
        except orjson.JSONEncodeError:
            return json.dumps(payload).encode()

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
        state = StreamState()
        error: str | None = None
        finished = False
        try:
            state.sent_s = clock()
            async with self.session.post(
                self.base_urls[replica] + path, data=self._body(request)
            ) as resp:
                state.headers_s = clock()
                status = state.http_status = resp.status
                if status != 200:
                    body = await resp.content.read(ERROR_BODY_READ_BYTES)
                    text = self._redact(body.decode("utf-8", errors="replace")).strip()
                    error = f"HTTP {status}: {text[:ERROR_BODY_CHARS]}"
                else:
                    await self._read_stream(resp, request, state, clock, on_text)
                    finished = state.is_finished
                    if not state.chunk_s:
                        state.ended_s = clock()
        except asyncio.CancelledError:
            error = "cancelled: the run was interrupted"
            raise
        except TimeoutError:
            error = f"timeout: no data for {self._timeout.sock_read:.0f} s"
        except aiohttp.ClientConnectorError as exc:
            error = f"connection failed: {exc.os_error or exc}"
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            error = f"disconnected mid-stream: {type(exc).__name__}"
        except aiohttp.ClientError as exc:
            error = f"client error: {type(exc).__name__}: {exc}"
        except MalformedStreamError as exc:
            error = f"malformed SSE: {exc}"
        finally:
            record = self._record(request, replica, scheduled_s, state, finished, error)
            if on_done is not None:
                on_done(record)
        return record

    def _record(
        self,
        request: Request,
        replica: int,
        scheduled_s: float,
        state: StreamState,
        finished: bool,
        error: str | None,
    ) -> RequestRecord:
        """The request's record, validated once, when it has ended (whichever way)."""
        chunk_s = state.chunk_s
        if finished:
            outcome, error = Outcome.OK, None
        elif chunk_s:
            outcome, error = Outcome.INCOMPLETE, error or "stream ended without [DONE]"
        else:
            outcome, error = Outcome.ERROR, error or "stream ended without output"
        completion, source = state.completion_tokens, TokenSource.USAGE
        if completion is None and chunk_s:
            completion = sum(state.chunk_tokens) or len(chunk_s)
            source = TokenSource.CHUNKS
        return RequestRecord(
            request_id=request.request_id,
            outcome=outcome,
            # whatever the server or the OS said, no secret
            error=None if error is None else self._redact(error),
            http_status=state.http_status,
            endpoint=request.endpoint,
            model=request.extra.get("model"),
            replica=replica,
            session_id=request.session_id,
            turn=request.turn,
            is_warmup=request.is_warmup,
            prompt_tokens_planned=request.prompt_tokens_planned,
            max_tokens=request.max_tokens,
            scheduled_s=scheduled_s,
            sent_s=state.sent_s,
            headers_s=state.headers_s,
            chunk_s=chunk_s,
            chunk_tokens=state.chunk_tokens,
            # the request ends with its last token chunk (vLLM bench's latency), not with
            # the trailing usage chunk or [DONE]; when no token came, when the stream ended
            done_s=chunk_s[-1] if chunk_s else state.ended_s,
            prompt_tokens=state.prompt_tokens,
            completion_tokens=completion,
            cached_tokens=state.cached_tokens,
            token_source=source,
            output_chars=state.output_chars,
        )

    async def _read_stream(
        self,
        resp: aiohttp.ClientResponse,
        request: Request,
        state: StreamState,
        clock: Clock,
        on_text: Callable[[str], None] | None,
    ) -> None:
        await read_events(resp.content, state, clock, on_text)


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
