"""Result files of other load tools, read into servefit's run history beside its own runs.

``vllm-bench``: the JSON ``vllm bench serve --save-result`` writes (vLLM 0.32's
``vllm/benchmarks/serve.py``): ``model_id``, ``completed``, ``failed``, ``duration``,
``output_throughput`` (tok/s), ``request_throughput``, and per metric ``mean_<m>_ms``,
``median_<m>_ms``, ``p<q>_<m>_ms`` (ttft, tpot, itl, e2el; the percentiles its
``--metric-percentiles`` asked for); with ``--save-detailed`` also each request's ``ttfts``
(seconds), from which a p90 TTFT is computed when the file has no ``p90_ttft_ms``.
The per-request lists are not kept in the history (``generated_texts`` can be large); the
summary figures are.

A file that is not one (not JSON, a figure missing, not a finite non-negative number) is a
:class:`DatasetError` naming the file and the key.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefit.core.stats import percentile
from servefit.errors import DatasetError

FORMATS = ("vllm-bench",)
PER_REQUEST_KEYS = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
)
MAX_FILE_BYTES = 512 * 2**20


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportedRun:
    """What another tool measured, as the history keeps it."""

    tool: str
    model: str
    summary: dict[str, Any]  # the file's figures, without its per-request lists
    output_tok_per_s: float
    ttft_mean_s: float
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    tpot_mean_s: float | None


def _load(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise DatasetError(f"{path}: larger than 512 MiB, not a result file")
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read ({exc.strerror})") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DatasetError(f"{path}: not a JSON result file ({type(exc).__name__})") from None
    if not isinstance(doc, dict):
        raise DatasetError(f"{path}: a result file is a JSON object")
    return doc


def _figure(path: Path, doc: dict[str, Any], key: str, *, required: bool = True) -> float | None:
    value = doc.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DatasetError(
            f"{path}: {key!r} is {value!r}, not a number (is this a vllm bench serve "
            "--save-result file?)"
        )
    if not math.isfinite(value) or value < 0:
        raise DatasetError(f"{path}: {key!r} is {value}, not a finite non-negative number")
    return float(value)


def _finite(value: Any) -> Any:
    """A value the history can store as JSON: NaN and infinities (which Python's json reads)
    as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _ms(value: float | None) -> float | None:
    return None if value is None else value / 1000


def read_vllm_bench(path: Path) -> ImportedRun:
    doc = _load(path)
    model = doc.get("model_id")
    if not isinstance(model, str) or not model:
        raise DatasetError(f"{path}: no 'model_id': not a vllm bench serve --save-result file")
    completed = _figure(path, doc, "completed")
    if not completed:
        raise DatasetError(f"{path}: 'completed' is 0: the run served no request")
    p90 = _ms(_figure(path, doc, "p90_ttft_ms", required=False))
    ttfts = doc.get("ttfts")
    if p90 is None and isinstance(ttfts, list) and ttfts:
        values = [_figure(path, {"ttfts[]": t}, "ttfts[]") for t in ttfts if t]
        kept = sorted(v for v in values if v is not None)
        p90 = percentile(kept, 90) if kept else None
    throughput = _figure(path, doc, "output_throughput")
    ttft = _figure(path, doc, "mean_ttft_ms")
    assert throughput is not None and ttft is not None  # required figures
    return ImportedRun(
        tool="vllm bench serve",
        model=model,
        summary={k: _finite(v) for k, v in doc.items() if k not in PER_REQUEST_KEYS},
        output_tok_per_s=throughput,
        ttft_mean_s=ttft / 1000,
        ttft_p50_s=_ms(_figure(path, doc, "median_ttft_ms", required=False)),
        ttft_p90_s=p90,
        tpot_mean_s=_ms(_figure(path, doc, "mean_tpot_ms", required=False)),
    )


def read_result(path: Path, fmt: str) -> ImportedRun:
    if fmt != "vllm-bench":
        raise DatasetError(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    return read_vllm_bench(path)
