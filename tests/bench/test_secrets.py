"""A server that echoes the request's Authorization header (in an error body, or in an
error event mid-stream) does not put the API key in requests.jsonl or summary.json."""

from __future__ import annotations

import json

from aiohttp import web

from servefit.bench.config import BenchConfig
from servefit.bench.null_server import NullServer, NullServerConfig
from servefit.bench.runner import run
from servefit.bench.schedules import Schedule
from servefit.bench.workloads import WorkloadConfig

from .conftest import ServerThread

KEY = "plain4321value"  # no sk-/hf_ shape, and read from a variable not named like a secret


class EchoingServer(NullServer):
    """Echoes the Authorization header: as a 401 body, or as an error event in the stream."""

    async def completions(self, request: web.Request) -> web.StreamResponse:
        self.requests_total += 1
        header = request.headers.get("Authorization", "")
        body = await request.json()
        if "stream" in body["prompt"]:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            error = {"error": {"message": f"bad header {header}", "key": KEY}}
            await response.write(f"data: {json.dumps(error)}\n\n".encode())
            return response
        return web.Response(status=401, text=f"denied: Authorization: {header} (key {KEY})")


def test_a_server_echoing_the_key_does_not_put_it_in_the_records(tmp_path):
    server = ServerThread(NullServerConfig(), EchoingServer(NullServerConfig())).start()
    dataset = tmp_path / "d.jsonl"
    dataset.write_text('{"prompt": "echo in body"}\n{"prompt": "echo in stream"}\n')
    try:
        cfg = BenchConfig(
            base_urls=(server.url,),
            workload=WorkloadConfig(kind="jsonl", path=str(dataset), output_len=4),
            schedule=Schedule(concurrency=2),
            model="m",
            api_key_env="MY_SERVER_VAR",
        )
        result = run(cfg, api_key=KEY, out_dir=tmp_path / "out")
    finally:
        server.stop()
    assert result.summary.errored == 2
    written = (tmp_path / "out" / "requests.jsonl").read_text()
    errors = sorted(json.loads(line)["error"] for line in written.splitlines())
    assert errors[0].startswith("HTTP 401: denied: Authorization: ***")
    assert errors[1].startswith("malformed SSE: server error in stream:")
    for text in (written, (tmp_path / "out" / "summary.json").read_text()):
        assert KEY not in text
