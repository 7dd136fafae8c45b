"""Every streamed chunk that carries a token counts, its text empty or not, as `vllm bench
serve` counts them (vllm/benchmarks/lib/endpoint_request_func.py, v0.32: any chunk with
``choices`` is a token for TTFT and ITL; the trailing usage-only chunk is not; a request's
latency ends at its last token chunk). A detokenizer emits "" for a token that ends inside a
UTF-8 character, so skipping empty chunks loses inter-token gaps and, when the first token
is one of them, moves TTFT later."""

from __future__ import annotations

import json

from aiohttp import web

from servefit.bench.config import BenchConfig
from servefit.bench.null_server import NullServer, NullServerConfig
from servefit.bench.runner import run
from servefit.bench.schedules import Schedule
from servefit.bench.workloads import WorkloadConfig

from .conftest import ServerThread

# the texts of one completion's token chunks, as vLLM streams a word split mid-character:
# the first token and two later ones decode to ""
COMPLETION_TEXTS = ["", "caf", "", "é ", "ok", ""]
# chat: the first chunk is the role-only delta, then the tokens
CHAT_DELTAS = [{"role": "assistant", "content": ""}, {"content": "hi"}, {"content": ""}]


class VllmShapedServer(NullServer):
    """Streams fixed token chunks (some with empty text), then vLLM's usage-only chunk."""

    async def _stream(self, request: web.Request, chunks: list[dict]) -> web.StreamResponse:
        self.requests_total += 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i, choice in enumerate(chunks):
            last = i == len(chunks) - 1
            event = {
                "choices": [{**choice, "index": 0, "finish_reason": "length" if last else None}]
            }
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        usage = {
            "prompt_tokens": 5,
            "completion_tokens": len(chunks),
            "total_tokens": 5 + len(chunks),
        }
        await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, [{"text": t} for t in COMPLETION_TEXTS])

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, [{"delta": d} for d in CHAT_DELTAS])


def _records(tmp_path, endpoint: str) -> list[dict]:
    server = ServerThread(NullServerConfig(), VllmShapedServer(NullServerConfig())).start()
    try:
        cfg = BenchConfig(
            base_urls=(server.url,),
            workload=WorkloadConfig(num_requests=3, input_len=8, output_len=6, endpoint=endpoint),
            schedule=Schedule(concurrency=1),
            model="m",
        )
        run(cfg, api_key=None, out_dir=tmp_path)
    finally:
        server.stop()
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_empty_text_chunks_are_tokens(tmp_path):
    records = _records(tmp_path, "completions")
    assert len(records) == 3
    for r in records:
        assert r["outcome"] == "ok"
        assert len(r["chunk_s"]) == len(COMPLETION_TEXTS)  # 6, not the 3 with text
        assert r["completion_tokens"] == len(COMPLETION_TEXTS)
        assert r["output_chars"] == len("café ok")
        # TTFT from the first chunk (empty text), the end at the last token chunk
        assert r["chunk_s"] == sorted(r["chunk_s"])
        assert r["done_s"] == r["chunk_s"][-1]


def test_chat_role_delta_is_the_first_token_chunk(tmp_path):
    records = _records(tmp_path, "chat")
    for r in records:
        assert r["outcome"] == "ok"
        assert len(r["chunk_s"]) == len(CHAT_DELTAS)
        assert r["done_s"] == r["chunk_s"][-1]
