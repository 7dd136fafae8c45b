"""The report's measured section, read from a ``servefit bench --output DIR`` folder:
``summary.json`` and ``requests.jsonl``, or, for a ``--prefix-cache-compare`` run, the
records under ``cold/`` and ``warm/`` (both kept, labelled, for the distributions; the
top-level summary is the warm run's). Also the server's identity (the model it served) and
the mean tokens per request, which the evidence check and the measured economics use."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from servefit.adapters.report_document import MeasuredSection, RecordGroup
from servefit.bench.metrics import latencies
from servefit.bench.records import Outcome, RequestRecord
from servefit.bench.runner import BenchResult
from servefit.errors import DatasetError

GROUPS = ("cold", "warm")  # the subfolders of a --prefix-cache-compare run


def _read_records(path: Path) -> list[RequestRecord]:
    records: list[RequestRecord] = []
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise DatasetError(f"--bench {path}: cannot be read ({error.strerror})") from None
    except UnicodeDecodeError as error:
        raise DatasetError(
            f"--bench {path}: not UTF-8 text (byte {error.start}); bench writes UTF-8 JSONL"
        ) from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(RequestRecord.model_validate_json(line))
        except ValueError as error:
            raise DatasetError(
                f"--bench {path}:{n} is not a request record: {_first_error(error)}"
            ) from None
    return records


def load_groups(directory: Path) -> dict[str, list[RequestRecord]]:
    """The records of a ``--prefix-cache-compare`` run by its phase (cold, warm); empty for
    a plain run."""
    return {
        name: _read_records(directory / name / "requests.jsonl")
        for name in GROUPS
        if (directory / name / "requests.jsonl").exists()
    }


def load_bench(directory: Path) -> tuple[BenchResult, list[RequestRecord]]:
    """A ``servefit bench --output DIR`` run: ``summary.json`` and every record of
    ``requests.jsonl`` (a cache comparison's: the warm run's, which the summary describes).
    Strict: the summary's figures come from all the records, so a line that is not a record
    is an error naming the file and line (exit 2), never skipped."""
    summary = directory / "summary.json"
    try:
        result = BenchResult.model_validate_json(summary.read_bytes())
    except OSError as error:
        raise DatasetError(f"--bench {directory}: no summary.json ({error.strerror})") from None
    except ValueError as error:
        raise DatasetError(
            f"--bench {summary} is not a servefit bench summary: {_first_error(error)}"
        ) from None
    path = directory / "requests.jsonl"
    if path.exists():
        return result, _read_records(path)
    for name in reversed(GROUPS):  # warm when it ran, else an interrupted cold run
        if (directory / name / "requests.jsonl").exists():
            return result, _read_records(directory / name / "requests.jsonl")
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
        preemptions=result.server_metrics.get("preemptions"),
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
    )
