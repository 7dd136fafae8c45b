"""The report's measured section, read from a ``servefit bench --output DIR`` folder:
``summary.json`` and ``requests.jsonl``, or, for a ``--prefix-cache-compare`` run, the
records under ``cold/`` and ``warm/`` (both kept, labelled, for the distributions; the
top-level summary is the warm run's). Also the server's identity (the model it served) and
the mean tokens per request, which the evidence check and the measured economics use."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servefit.adapters.report_document import MeasuredSection, RecordGroup
from servefit.bench.metrics import latencies
from servefit.bench.records import Outcome, RequestRecord
from servefit.bench.runner import BenchResult
from servefit.core.hf_values import json_numbers
from servefit.errors import DatasetError

GROUPS = ("cold", "warm")  # the subfolders of a --prefix-cache-compare run


def _read_records(path: Path, flag: str = "--bench") -> list[RequestRecord]:
    records: list[RequestRecord] = []
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise DatasetError(f"{flag} {path}: cannot be read ({error.strerror})") from None
    except UnicodeDecodeError as error:
        raise DatasetError(
            f"{flag} {path}: not UTF-8 text (byte {error.start}); bench writes UTF-8 JSONL"
        ) from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = RequestRecord.model_validate_json(line)
        except ValueError as error:
            raise DatasetError(
                f"{flag} {path}:{n} is not a request record: {_first_error(error)}"
            ) from None
        problem = record_problem(record)
        if problem:
            raise DatasetError(f"{flag} {path}:{n} is not a request record: {problem}")
        records.append(record)
    return records


# -- what no run writes: the values are read into range-checked figures at this boundary

# numbers a run may write negative: the client's lag behind the schedule (a timer may fire
# early), what the prefix cache saved (warm may be slower than cold), the server's counter
# deltas (a counter restarts with its server); the schedule's own clock
NEGATIVE_OK = frozenset({"client_lag_s", "ttft_from_scheduled_s", "ttft_saved_s", "scheduled_s"})
UNREAD = frozenset({"config", "server", "prediction"})  # free-form, not figures the report uses


def number_problem(doc: dict[str, Any]) -> str | None:
    """The first number no run writes: NaN, an infinity, a negative count, time or rate."""
    for where, value in json_numbers({k: v for k, v in doc.items() if k not in UNREAD}):
        names = set(where.split("."))
        if not math.isfinite(value):
            return f"{where}: {value} is not a finite number"
        if value < 0 and not names & NEGATIVE_OK and not where.startswith("server_metrics."):
            return f"{where}: {value} is negative"
    return None


def record_problem(record: RequestRecord) -> str | None:
    """Why a record cannot be one a request left: a number that is not finite or is
    negative, or its times out of order (sent, headers, every chunk, done: one monotonic
    clock read in that order)."""
    problem = number_problem(record.model_dump())
    if problem:
        return problem
    times = [
        ("sent_s", record.sent_s),
        ("headers_s", record.headers_s),
        *((f"chunk_s.{i}", t) for i, t in enumerate(record.chunk_s)),
        ("done_s", record.done_s),
    ]
    known = [(name, t) for name, t in times if t is not None]
    for (before, a), (after, b) in itertools.pairwise(known):
        if b < a:
            return f"{after}: {b} is before {before} {a} (times go one way)"
    return None


def summary_problem(result: BenchResult) -> str | None:
    """Why a summary cannot be one a run wrote: a figure that is not finite or is negative,
    or more requests in flight on average than the run had (Little's law)."""
    problem = number_problem(result.model_dump())
    if problem:
        return problem
    s = result.summary
    requests = s.successful + s.errored + s.incomplete
    if s.achieved_concurrency > requests * (1 + 1e-9) + 1e-9:
        return (
            f"summary.achieved_concurrency: {s.achieved_concurrency:g} requests in flight on "
            f"average, of {requests} in the run"
        )
    return None


def load_groups(directory: Path) -> dict[str, list[RequestRecord]]:
    """The records of a ``--prefix-cache-compare`` run by its phase (cold, warm); empty for
    a plain run."""
    return {
        name: _read_records(directory / name / "requests.jsonl")
        for name in GROUPS
        if (directory / name / "requests.jsonl").exists()
    }


def load_bench(directory: Path, flag: str = "--bench") -> tuple[BenchResult, list[RequestRecord]]:
    """A ``servefit bench --output DIR`` run: ``summary.json`` and every record of
    ``requests.jsonl`` (a cache comparison's: the warm run's, which the summary describes).
    Strict: the summary's figures come from all the records, so a line that is not a record
    is an error naming the file and line (exit 2), never skipped."""
    summary = directory / "summary.json"
    try:
        result = BenchResult.model_validate_json(summary.read_bytes())
    except OSError as error:
        raise DatasetError(f"{flag} {directory}: no summary.json ({error.strerror})") from None
    except ValueError as error:
        raise DatasetError(
            f"{flag} {summary} is not a servefit bench summary: {_first_error(error)}"
        ) from None
    problem = summary_problem(result)
    if problem:
        raise DatasetError(f"{flag} {summary} is not a servefit bench summary: {problem}")
    path = directory / "requests.jsonl"
    if path.exists():
        return result, _read_records(path, flag)
    for name in reversed(GROUPS):  # warm when it ran, else an interrupted cold run
        if (directory / name / "requests.jsonl").exists():
            return result, _read_records(directory / name / "requests.jsonl", flag)
    return result, []


def _first_error(error: ValueError) -> str:
    """A pydantic error as one line: ``field: message`` of its first problem."""
    if isinstance(error, ValidationError) and error.errors():
        first = error.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}" if where else first["msg"]
    return str(error).splitlines()[0]


def _values(records: list[RequestRecord]) -> tuple[list[float], list[float]]:
    ok = [r for r in records if r.outcome is Outcome.OK and not r.is_warmup]
    per_request = [latencies(r) for r in ok]  # the simulator's formulas (core.metrics)
    return (
        [v.ttft_s for v in per_request if v.ttft_s is not None],
        [v.tpot_s for v in per_request if v.tpot_s is not None],
    )


def _count(delta: float | None) -> float | None:
    """A counter's increase over the run; unknown when it went down (the server restarted
    and its counter with it)."""
    return delta if delta is None or delta >= 0 else None


def measured_section(
    result: BenchResult,
    records: list[RequestRecord],
    source: str,
    groups: dict[str, list[RequestRecord]] | None = None,
) -> MeasuredSection:
    s = result.summary
    ttfts, tpots = _values(records)
    n = s.successful or None
    served = result.server.get("model")
    return MeasuredSection(
        source=source,
        num_requests=s.successful,
        errored=s.errored,
        concurrency=s.achieved_concurrency,
        ttft_s=s.ttft_s.mean,
        ttft_p99_s=s.ttft_s.p99,
        tpot_s=s.tpot_s.mean,
        decode_tok_per_s=1 / s.tpot_s.mean if s.tpot_s.mean else None,
        output_throughput_tok_per_s=s.output_throughput_tok_per_s,
        request_throughput_per_s=s.request_throughput_per_s,
        ttft_values_s=ttfts,
        tpot_values_s=tpots,
        turn_ttft_s=[t.ttft_s_mean for t in result.turns if t.ttft_s_mean is not None],
        kv_usage_max=result.server_peaks.get("kv_cache_usage"),
        waiting_max=result.server_peaks.get("requests_waiting"),
        preemptions=_count(result.server_metrics.get("preemptions")),
        served_model=served if isinstance(served, str) and served else None,
        prompt_tokens_mean=s.prompt_tokens_total / n if n else None,
        output_tokens_mean=s.completion_tokens_total / n if n else None,
        cached_tokens_mean=s.cached_tokens_total / n
        if n and s.cached_tokens_total is not None
        else None,
        groups=[
            RecordGroup(label=label, ttft_values_s=v[0], tpot_values_s=v[1])
            for label, v in ((k, _values(r)) for k, r in (groups or {}).items())
        ],
        spec_mean_acceptance_length=result.server_metrics.get("spec_decode_mean_acceptance_length"),
        spec_acceptance_per_position=_positions(result.server_metrics),
    )


def _positions(metrics: dict[str, float]) -> list[float]:
    prefix = "spec_decode_acceptance_pos_"
    found = {int(k[len(prefix) :]): v for k, v in metrics.items() if k.startswith(prefix)}
    return [found.get(i, 0.0) for i in range(max(found) + 1)] if found else []
