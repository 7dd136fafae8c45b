"""Hostile input, fuzzed: a mutated bench run (``summary.json``, ``requests.jsonl``, GPU
samples; plain or ``--prefix-cache-compare``'s cold/warm layout) makes ``servefit report`` a
clean error naming the file (and line) with exit 2, or a report whose numbers are finite and
non-negative; never exit 1 or 3, never a traceback, never a hang.

The mutations, the run and the classes are ``benchmarks/fuzz_artifacts.py``'s; each case
runs in-process through the CLI under its time limit. The plan is made once for all cases
(``plan_once``): the bench folder is what is fuzzed."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
from fuzz_support import DrawChooser, load_fuzz_artifacts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servefit.adapters.report_bench import load_bench, measured_section
from servefit.errors import DatasetError
from servefit.monitor.nvml import read_samples

fa = load_fuzz_artifacts()
FOLDER = Path(tempfile.mkdtemp(prefix="servefit-fuzz-records-"))


@pytest.fixture(scope="module", autouse=True)
def _plan_once():
    with fa.plan_once():
        yield


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_a_mutated_bench_run_is_a_clean_error_or_a_plausible_report(data):
    case = fa.records_case(DrawChooser(data))
    verdict, detail = fa.run_records_case(case, FOLDER)
    assert verdict in ("clean error", "plausible"), f"{case.description}: {verdict}: {detail}"


def test_the_unmutated_runs_make_a_report():
    """The harness: both layouts unbroken are plausible (so each failure is the mutation)."""
    for layout in ("plain", "compare"):
        files = {k: v.encode() for k, v in fa.bench_folder(layout).items()}
        assert fa.run_records_case(fa.ArtifactCase("records", files), FOLDER) == ("plausible", "")


# -- one regression test per bug the fuzzing found ------------------------------------------


def _folder(tmp_path: Path, edit) -> Path:
    files = fa.bench_folder("plain")
    summary = json.loads(files["summary.json"])
    records = [json.loads(line) for line in files["requests.jsonl"].splitlines()]
    edit(summary, records)
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return tmp_path


def _set(section: str, key: str, value):
    def edit(summary, records):
        summary[section][key] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        # NaN throughput: round(NaN) crashed the report (exit 3)
        (_set("summary", "request_throughput_per_s", float("nan")), "request_throughput_per_s"),
        (_set("server_metrics", "preemptions", float("nan")), "server_metrics.preemptions"),
        # 1e308 requests in flight: an int overflow building the decode step (exit 3)
        (_set("summary", "achieved_concurrency", 1e308), "achieved_concurrency"),
        # negative figures were reported as measured
        (_set("summary", "errors", {"HTTP 500": -64}), "summary.errors.HTTP 500: -64"),
        (_set("server_peaks", "kv_cache_usage", float("-inf")), "kv_cache_usage"),
    ],
    ids=["nan throughput", "nan preemptions", "1e308 concurrency", "negative errors", "-inf peak"],
)
def test_a_summary_no_run_writes_is_an_error_naming_the_field(edit, words, tmp_path):
    with pytest.raises(DatasetError, match=r"summary\.json is not a servefit bench summary") as err:
        load_bench(_folder(tmp_path, edit))
    assert words in str(err.value)


def _record(n: int, key: str, value):
    def edit(summary, records):
        records[n][key] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (
            _record(1, "chunk_s", [-1e308, 2.0]),
            "requests.jsonl:2 is not a request record: chunk_s.0",
        ),
        (_record(2, "done_s", 0.5), "requests.jsonl:3 is not a request record: done_s"),
        (
            _record(0, "cached_tokens", -1),
            "requests.jsonl:1 is not a request record: cached_tokens",
        ),
        (_record(3, "output_chars", -1), "requests.jsonl:4 is not a request record: output_chars"),
        (_record(1, "sent_s", float("inf")), "requests.jsonl:2 is not a request record: sent_s"),
    ],
    ids=["chunk before sent", "done before chunks", "negative cache", "negative chars", "inf"],
)
def test_a_record_no_request_leaves_is_an_error_naming_line_and_field(edit, words, tmp_path):
    """Times out of order gave negative TTFT and TPOT in the report; negative counts passed."""
    with pytest.raises(DatasetError, match="is not a request record") as err:
        load_bench(_folder(tmp_path, edit))
    assert words in str(err.value)


def test_a_counter_that_went_down_is_no_preemption_count(tmp_path):
    """A server restarted mid-run: its counter's delta is negative, not -1 preemptions."""
    folder = _folder(tmp_path, _set("server_metrics", "preemptions", -1.0))
    result, records = load_bench(folder)
    assert measured_section(result, records, source="x").preemptions is None


def test_a_gpu_sample_with_a_5000_digit_integer_names_the_line(tmp_path):
    """Python's int-parsing limit raised a ValueError the reader did not catch (exit 3)."""
    lines = fa.bench_folder("plain")["gpu_samples.jsonl"].splitlines()
    lines[2] = lines[2].replace('"gpu": 0', '"gpu": ' + "9" * 5000)
    path = tmp_path / "gpu_samples.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=re.escape(f"{path}:3 is not a GPU sample")):
        read_samples(path)
