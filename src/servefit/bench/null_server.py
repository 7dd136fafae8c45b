"""``servefit null-server``: an OpenAI-compatible server that answers instantly or with a
configured TTFT and inter-token delay, to measure the client's own ceiling and to test the
benchmark's metric formulas against known timings.

Tokens are whitespace-separated words: ``/tokenize`` and ``usage.prompt_tokens`` count them.
Fault injection for tests: a prompt containing ``__HTTP_429__``, ``__HTTP_500__``,
``__DISCONNECT__`` (cut the stream after a few tokens), ``__MALFORMED__`` (a non-JSON
``data:`` line) or ``__HANG__`` (stop sending without closing) triggers that fault.

Answers for evals: with ``answers`` (``--answers TASKS``, an eval task file) a prompt that is
one of the file's items is answered with that item's reference answer, word by word; any
other prompt gets the usual ``tok`` words. So one null server answers a task set right and
another (without the file, or with part of it) wrong, at known timings.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

MODEL_ID = "servefit-null"
TTFT_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
)
HANG_S = 30.0  # __HANG__: stop sending (long enough for any client timeout in tests)


@dataclass(frozen=True, slots=True, kw_only=True)
class NullServerConfig:
    ttft_s: float = 0.0
    itl_s: float = 0.0
    output_len: int = 16  # used when the request sets no max_tokens
    honor_max_tokens: bool = True
    max_concurrency: int | None = None  # more requests than this wait their turn (a capacity)
    answers: Mapping[str, str] = field(default_factory=dict)  # prompt -> the answer's text


def _prompt_text(body: dict[str, Any]) -> str:
    if "messages" in body:
        return " ".join(str(m.get("content", "")) for m in body["messages"])
    prompt = body.get("prompt", "")
    return " ".join(prompt) if isinstance(prompt, list) else str(prompt)


class NullServer:
    def __init__(self, config: NullServerConfig) -> None:
        self.config = config
        self.requests_total = 0
        self.models_asked: Counter[str] = Counter()  # requests by the model name asked for
        self.tokens_total = 0
        self._slots = asyncio.Semaphore(config.max_concurrency) if config.max_concurrency else None
        self.running = 0
        self.ttft_buckets = [0] * (len(TTFT_BUCKETS_S) + 1)  # the last is +Inf
        self.ttft_sum_s = 0.0
        self.app = web.Application()
        self.app.add_routes(
            [
                web.get("/v1/models", self.models),
                web.post("/v1/completions", self.completions),
                web.post("/v1/chat/completions", self.chat),
                web.post("/tokenize", self.tokenize),
                web.get("/metrics", self.metrics),
                web.get("/health", self.health),
            ]
        )

    async def health(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        words = _prompt_text(body).split()
        return web.json_response(
            {"count": len(words), "tokens": list(range(len(words))), "max_model_len": 1 << 20}
        )

    async def metrics(self, _: web.Request) -> web.Response:
        label = f'model_name="{MODEL_ID}"'
        lines = [
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{label}}} {self.tokens_total}",
            f"vllm:request_success_total{{{label}}} {self.requests_total}",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{label}}} {self.running}",
            "# TYPE vllm:time_to_first_token_seconds histogram",
        ]
        cumulative = 0
        for bound, count in zip((*TTFT_BUCKETS_S, float("inf")), self.ttft_buckets, strict=True):
            cumulative += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            lines.append(
                f'vllm:time_to_first_token_seconds_bucket{{{label},le="{le}"}} {cumulative}'
            )
        lines.append(f"vllm:time_to_first_token_seconds_count{{{label}}} {cumulative}")
        lines.append(f"vllm:time_to_first_token_seconds_sum{{{label}}} {self.ttft_sum_s}")
        return web.Response(text="\n".join(lines) + "\n")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, chat=True)

    async def _answer(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        arrived = time.perf_counter()
        if self._slots is None:
            return await self._generate(request, chat=chat, arrived=arrived)
        async with self._slots:  # queued requests wait here, as in a server at capacity
            return await self._generate(request, chat=chat, arrived=arrived)

    def _observe_ttft(self, seconds: float) -> None:
        self.ttft_sum_s += seconds
        for i, bound in enumerate(TTFT_BUCKETS_S):
            if seconds <= bound:
                self.ttft_buckets[i] += 1
                return
        self.ttft_buckets[-1] += 1

    async def _generate(
        self, request: web.Request, *, chat: bool, arrived: float
    ) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
        prompt = _prompt_text(body)
        if "__HTTP_429__" in prompt:
            return web.json_response({"error": {"message": "rate limited"}}, status=429)
        if "__HTTP_500__" in prompt:
            return web.json_response({"error": {"message": "internal error"}}, status=500)
        n = (
            int(body.get("max_tokens") or self.config.output_len)
            if self.config.honor_max_tokens
            else self.config.output_len
        )
        prompt_tokens = len(prompt.split())
        answer = self.config.answers.get(prompt)
        pieces = [" tok"] * n if answer is None else [f" {w}" for w in answer.split()][:n]
        n = len(pieces)
        self.requests_total += 1
        self.models_asked[str(body.get("model"))] += 1
        if not body.get("stream"):
            await asyncio.sleep(self.config.ttft_s + self.config.itl_s * max(n - 1, 0))
            self.tokens_total += n
            text = "".join(pieces)
            choice: dict[str, Any] = {
                "index": 0,
                "finish_reason": "length" if answer is None else "stop",
            }
            choice.update(
                {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
            )
            return web.json_response(
                {
                    "id": "null",
                    "object": "chat.completion" if chat else "text_completion",
                    "model": MODEL_ID,
                    "choices": [choice],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": n,
                        "total_tokens": prompt_tokens + n,
                    },
                }
            )
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        created = int(time.time())
        kind = "chat.completion.chunk" if chat else "text_completion"

        async def send(payload: dict[str, Any] | str) -> None:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            await response.write(f"data: {data}\n\n".encode())

        def chunk(text: str, finish: str | None) -> dict[str, Any]:
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            choice.update({"delta": {"content": text}} if chat else {"text": text})
            return {
                "id": "null",
                "object": kind,
                "created": created,
                "model": MODEL_ID,
                "choices": [choice],
            }

        if self.config.ttft_s:
            await asyncio.sleep(self.config.ttft_s)
        self.running += 1
        try:
            await self._stream_tokens(pieces, prompt, send, chunk, request, arrived)
        except _DisconnectedError:
            return response
        finally:
            self.running -= 1
        self.tokens_total += n
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": n,
                "total_tokens": prompt_tokens + n,
            }
            await send(
                {
                    "id": "null",
                    "object": kind,
                    "created": created,
                    "model": MODEL_ID,
                    "choices": [],
                    "usage": usage,
                }
            )
        await send("[DONE]")
        await response.write_eof()
        return response

    async def _stream_tokens(
        self,
        pieces: list[str],
        prompt: str,
        send: Any,
        chunk: Any,
        request: web.Request,
        arrived: float,
    ) -> None:
        n = len(pieces)
        for i, piece in enumerate(pieces):
            if i and self.config.itl_s:
                await asyncio.sleep(self.config.itl_s)
            if "__DISCONNECT__" in prompt and i == min(3, n - 1):
                request.transport.close()  # type: ignore[union-attr]
                raise _DisconnectedError
            if "__MALFORMED__" in prompt and i == min(2, n - 1):
                await send("{this is not json")
                continue
            if "__HANG__" in prompt and i == min(2, n - 1):
                await asyncio.sleep(HANG_S)
            await send(chunk(piece, "length" if i == n - 1 else None))
            if i == 0:
                self._observe_ttft(time.perf_counter() - arrived)


class _DisconnectedError(Exception):
    """The fault-injected disconnect: stop writing to a closed connection."""


def serve(host: str, port: int, config: NullServerConfig) -> None:
    """Run until interrupted."""
    web.run_app(NullServer(config).app, host=host, port=port, print=None, access_log=None)
