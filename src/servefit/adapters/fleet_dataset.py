"""``recommend --dataset FILE``: a workload's lengths from a JSONL file of requests, one
JSON object a line with token counts: ``input_len`` (or ``prompt_tokens``) and
``output_len`` (or ``output_tokens``, ``max_tokens``), or a recorded trace bench reads
(BurstGPT or Azure CSV, Mooncake JSONL: :mod:`servefit.bench.traces`, the one reader of
them). The fleet search simulates the
means, spread uniformly over the widest deviation seen (capped below 1, the simulator's
``--range-ratio``): a summary of the file, not a replay of it."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from servefit.errors import DatasetError

INPUT_KEYS = ("input_len", "prompt_tokens")
OUTPUT_KEYS = ("output_len", "output_tokens", "max_tokens")
MAX_RANGE_RATIO = 0.95


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetLengths:
    """The mean prompt and output tokens of a dataset and the spread around them."""

    input_len: int
    output_len: int
    range_ratio: float
    num_requests: int


def _count(item: dict[str, object], keys: tuple[str, ...], where: str) -> int:
    for key in keys:
        if key in item:
            value = item[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DatasetError(f"{where}: {key} must be a positive integer, got {value!r}")
            return value
    raise DatasetError(f"{where}: needs one of {', '.join(keys)} (token counts)")


LENGTH_TRACES = ("burstgpt", "azure", "mooncake")  # traces that record token counts


def read_dataset_lengths(path: Path, kind: str = "jsonl") -> DatasetLengths:
    """The lengths of a JSONL of token counts, or of a trace of ``kind``."""
    requests = read_dataset_requests(path, kind)
    return _summary([r[0] for r in requests], [r[1] for r in requests])


def read_dataset_requests(
    path: Path, kind: str = "jsonl"
) -> tuple[tuple[int, int, float | None], ...]:
    """Each request of the file as (prompt tokens, output tokens, arrival s or None), in
    the file's order: what ``plan --dataset`` simulates, the requests bench sends."""
    if kind in LENGTH_TRACES:
        from servefit.bench.traces import read_trace

        return tuple(
            (max(i.input_tokens or 1, 1), max(i.output_tokens or 1, 1), i.arrival_s)
            for i in read_trace(kind, path)
        )
    if kind != "jsonl":
        raise DatasetError(
            f"--dataset-format {kind}: the lengths come from a JSONL of token counts or a "
            f"trace that records them ({', '.join(LENGTH_TRACES)})"
        )
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"--dataset {path}: cannot be read ({exc})") from None
    inputs: list[int] = []
    outputs: list[int] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"--dataset {path}, line {number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            raise DatasetError(f"{where}: not JSON") from None
        if not isinstance(item, dict):
            raise DatasetError(f"{where}: not a JSON object")
        inputs.append(_count(item, INPUT_KEYS, where))
        outputs.append(_count(item, OUTPUT_KEYS, where))
    if not inputs:
        raise DatasetError(f"--dataset {path} holds no request")
    return tuple((i, o, None) for i, o in zip(inputs, outputs, strict=True))


def _summary(inputs: list[int], outputs: list[int]) -> DatasetLengths:
    mean_in = max(1, round(sum(inputs) / len(inputs)))
    mean_out = max(1, round(sum(outputs) / len(outputs)))
    spread = max(
        max(abs(v - mean_in) for v in inputs) / mean_in,
        max(abs(v - mean_out) for v in outputs) / mean_out,
    )
    return DatasetLengths(
        input_len=mean_in,
        output_len=mean_out,
        range_ratio=min(MAX_RANGE_RATIO, math.floor(spread * 100) / 100),
        num_requests=len(inputs),
    )
