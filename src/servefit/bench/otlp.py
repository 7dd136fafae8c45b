"""``bench --otlp TARGET``: one OpenTelemetry span per measured request of a run.

Each span covers a request from the moment it was sent to the end of its stream, with a
``first_token`` event, named and attributed as OpenTelemetry's GenAI conventions have it
(``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` /
``output_tokens``, ``gen_ai.request.max_tokens``) plus servefit's own figures of the request
(``servefit.ttft_s``, ``servefit.tpot_s``, ``servefit.e2e_s``: :func:`servefit.bench.metrics
.latencies`, the summary's definitions). A failed request's span has an error status.

The spans are built from the run's records once it ended (the client's timing is not
touched) with the OpenTelemetry SDK, on the wall clock of the run's start, and exported:

- to a URL (``http://collector:4318``): OTLP over HTTP, protobuf (the SDK's
  ``OTLPSpanExporter``; ``/v1/traces`` is appended to a URL without a path);
- to a file: OTLP/JSON, one ``ExportTraceServiceRequest`` a line, as the OpenTelemetry
  Collector's file exporter writes them (trace and span ids in hex), for its
  ``otlpjsonfile`` receiver or any OTLP reader.

The SDK is an optional part: ``pip install 'servefit[otel]'``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from servefit.bench.metrics import latencies
from servefit.bench.records import Outcome, RequestRecord
from servefit.errors import InvalidArgumentError

SERVICE_NAME = "servefit-bench"
_NS = 1_000_000_000
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _sdk() -> Any:
    try:
        from opentelemetry.sdk import trace
    except ImportError:
        raise InvalidArgumentError(
            "--otlp needs the OpenTelemetry SDK: pip install 'servefit[otel]'"
        ) from None
    return trace


def check_target(target: str) -> None:
    """Before anything is sent: the SDK is there, and a file target can be written."""
    _sdk()
    if not is_url(target):
        _JsonLinesExporter(Path(target)).shutdown()


def is_url(target: str) -> bool:
    return urlsplit(target).scheme in ("http", "https")


def traces_url(target: str) -> str:
    """The OTLP/HTTP traces endpoint of a collector URL (``/v1/traces`` when none is given)."""
    parts = urlsplit(target)
    return target if parts.path not in ("", "/") else target.rstrip("/") + "/v1/traces"


def _exporter(target: str) -> Any:
    if is_url(target):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=traces_url(target))
    return _JsonLinesExporter(Path(target))


class _JsonLinesExporter:
    """OTLP/JSON lines (the Collector's file exporter format) appended to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._file = path.open("a", encoding="utf-8")
        except OSError as exc:
            raise InvalidArgumentError(
                f"--otlp {path}: cannot be written ({exc.strerror})"
            ) from None

    def export(self, spans: Sequence[Any]) -> Any:
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.trace.export import SpanExportResult

        message = MessageToDict(encode_spans(spans))
        self._file.write(json.dumps(otlp_json_ids(message, to_hex=True)) + "\n")
        self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._file.close()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self._file.flush()
        return True


def otlp_json_ids(node: Any, *, to_hex: bool) -> Any:
    """Trace and span ids between protobuf's JSON mapping (base64) and OTLP/JSON's (hex)."""
    if isinstance(node, list):
        return [otlp_json_ids(item, to_hex=to_hex) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in _ID_FIELDS and isinstance(value, str):
            raw = base64.b64decode(value) if to_hex else bytes.fromhex(value)
            out[key] = raw.hex() if to_hex else base64.b64encode(raw).decode()
        else:
            out[key] = otlp_json_ids(value, to_hex=to_hex)
    return out


def export_spans(
    records: Sequence[RequestRecord],
    *,
    started_unix_s: float,
    model: str | None,
    target: str,
    servefit_version: str,
) -> int:
    """Export a span per measured request (warm-up requests are left out); the number sent."""
    trace = _sdk()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import SpanKind, Status, StatusCode

    resource = Resource.create({"service.name": SERVICE_NAME, "service.version": servefit_version})
    provider = trace.TracerProvider(resource=resource)
    exporter = _exporter(target)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("servefit.bench", servefit_version)
    sent = 0
    for r in records:
        if r.is_warmup:
            continue
        start = r.sent_s if r.sent_s is not None else r.scheduled_s
        end = next(
            (t for t in (r.done_s, r.chunk_s[-1] if r.chunk_s else None, r.headers_s) if t),
            start,
        )
        operation = "chat" if r.endpoint == "chat" else "text_completion"
        span = tracer.start_span(
            f"{operation} {model}" if model else operation,
            kind=SpanKind.CLIENT,
            start_time=int((started_unix_s + start) * _NS),
            attributes=_attributes(r, operation, model),
        )
        if r.first_token_s is not None:
            span.add_event("first_token", timestamp=int((started_unix_s + r.first_token_s) * _NS))
        if r.outcome is not Outcome.OK:
            span.set_status(Status(StatusCode.ERROR, r.error or r.outcome.value))
        span.end(end_time=int((started_unix_s + max(end, start)) * _NS))
        sent += 1
    provider.force_flush()
    provider.shutdown()
    return sent


def _attributes(r: RequestRecord, operation: str, model: str | None) -> dict[str, Any]:
    lat = latencies(r)
    values: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": r.max_tokens,
        "gen_ai.usage.input_tokens": r.prompt_tokens,
        "gen_ai.usage.output_tokens": r.completion_tokens,
        "http.response.status_code": r.http_status,
        "servefit.request_id": r.request_id,
        "servefit.outcome": r.outcome.value,
        "servefit.replica": r.replica,
        "servefit.ttft_s": lat.ttft_s,
        "servefit.tpot_s": lat.tpot_s,
        "servefit.e2e_s": lat.e2e_s,
        "servefit.cached_tokens": r.cached_tokens,
    }
    return {k: v for k, v in values.items() if v is not None}
