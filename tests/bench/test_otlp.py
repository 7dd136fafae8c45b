"""``bench --otlp``: a span per measured request, to a file (OTLP/JSON lines) and to an
OTLP/HTTP receiver, read back with OpenTelemetry's own protobuf types and held to the run's
``requests.jsonl`` (issue 27)."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time

from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from servefit.bench.otlp import otlp_json_ids, traces_url

from .conftest import free_port

SERVEFIT = [sys.executable, "-m", "servefit.cli.main"]


def _bench(url, tmp_path, *flags):
    out = tmp_path / "run"
    before = time.time()
    done = subprocess.run(
        [
            *SERVEFIT,
            "bench",
            url,
            *("--num-requests", "12", "--concurrency", "3", "--input-len", "20"),
            *("--output-len", "8", "--warmup", "2", "--output", str(out)),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    after = time.time()
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    return [r for r in records if not r["is_warmup"]], before, after


def _spans(requests):
    spans = []
    for request in requests:
        for resource in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            assert service["service.name"] == "servefit-bench"
            for scope in resource.scope_spans:
                spans.extend(scope.spans)
    return spans


def _attrs(span):
    out = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = getattr(v, v.WhichOneof("value"))
    return out


def _hold_to_records(spans, records, before, after):
    by_id = {_attrs(s)["servefit.request_id"]: s for s in spans}
    assert sorted(by_id) == sorted(r["request_id"] for r in records)  # warm-ups left out
    for r in records:
        span, attrs = by_id[r["request_id"]], _attrs(by_id[r["request_id"]])
        assert attrs["gen_ai.usage.output_tokens"] == r["completion_tokens"]
        assert attrs["gen_ai.usage.input_tokens"] == r["prompt_tokens"]
        ttft = r["chunk_s"][0] - r["sent_s"]
        assert abs(attrs["servefit.ttft_s"] - ttft) < 1e-9
        # the span runs from the send to the stream's end, on the run's wall clock (to two
        # float64 roundings of a ~1.7e9 s time of day: its last bit is 2.4e-7 s)
        duration_s = (span.end_time_unix_nano - span.start_time_unix_nano) / 1e9
        assert abs(duration_s - (r["done_s"] - r["sent_s"])) < 2e-6
        assert before * 1e9 <= span.start_time_unix_nano <= span.end_time_unix_nano <= after * 1e9
        (event,) = span.events
        assert event.name == "first_token"
        assert span.start_time_unix_nano <= event.time_unix_nano <= span.end_time_unix_nano


def test_a_file_gets_one_span_per_request_in_otlp_json(null_server, tmp_path):
    target = tmp_path / "spans.jsonl"
    records, before, after = _bench(null_server.url, tmp_path, "--otlp", str(target))
    lines = target.read_text().splitlines()
    requests = []
    for line in lines:
        doc = json.loads(line)
        span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16  # OTLP/JSON: hex ids
        requests.append(ParseDict(otlp_json_ids(doc, to_hex=False), ExportTraceServiceRequest()))
    _hold_to_records(_spans(requests), records, before, after)


class _Receiver(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]]

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, *args):
        pass


def test_a_collector_url_gets_otlp_http_protobuf(null_server, tmp_path):
    _Receiver.received = []
    port = free_port()
    server = http.server.HTTPServer(("127.0.0.1", port), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        records, before, after = _bench(
            null_server.url, tmp_path, "--otlp", f"http://127.0.0.1:{port}"
        )
    finally:
        server.shutdown()
    assert _Receiver.received
    assert {path for path, _, _ in _Receiver.received} == {"/v1/traces"}
    assert {kind for _, kind, _ in _Receiver.received} == {"application/x-protobuf"}
    requests = [ExportTraceServiceRequest.FromString(body) for _, _, body in _Receiver.received]
    _hold_to_records(_spans(requests), records, before, after)


def test_the_traces_path_is_added_only_to_a_bare_collector_url():
    assert traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert traces_url("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert traces_url("https://x/otlp/v1/traces") == "https://x/otlp/v1/traces"


def test_an_unwritable_file_is_a_usage_error(null_server, tmp_path):
    done = subprocess.run(
        [
            *SERVEFIT,
            *("bench", null_server.url, "--num-requests", "2", "--concurrency", "1"),
            *("--otlp", str(tmp_path), "--output", str(tmp_path / "run")),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2 and "--otlp" in done.stderr
    assert not (tmp_path / "run" / "requests.jsonl").exists()  # refused before any request
