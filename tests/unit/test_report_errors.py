"""``servefit report`` on bad files, through the real CLI: each a clear error with exit 2
naming the file (and line, and field), never a traceback; the one documented skip is a
GPU sample cut short at the end of the file (a monitor killed mid-write).

Decisions: ``requests.jsonl`` is read strictly (the summary's figures were computed from
every record, so a record that cannot be read would make the per-request charts disagree
with the summary): a broken line is a ``DatasetError`` naming the line. GPU samples are
checked field by field (an integer GPU index, finite non-negative numbers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servefit.bench.metrics import summarize
from servefit.bench.records import Outcome, RequestRecord
from servefit.bench.runner import SUMMARY_SCHEMA_VERSION, BenchResult, turn_stats

CLI = [sys.executable, "-m", "servefit.cli.main"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
TRACE = Path(__file__).parent.parent / "golden" / "gpu_traces" / "decode_bandwidth_bound.jsonl"
REPORT = ["report", "Qwen/Qwen3-8B", "--gpu", "H100"]


def _report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *REPORT, *args], capture_output=True, text=True, env=ENV, timeout=120
    )


def _clean_error(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert done.stderr.startswith("error ("), done.stderr
    for word in words:
        assert word in done.stderr, (word, done.stderr)


def _bench_dir(root: Path) -> Path:
    """A bench run's folder, written by the code the bench writes it with."""
    records = [
        RequestRecord(
            request_id=i,
            outcome=Outcome.OK,
            scheduled_s=10.0 + i,
            sent_s=10.0 + i,
            headers_s=10.01 + i,
            chunk_s=[10.05 + i + 0.01 * k for k in range(8)],
            done_s=10.2 + i,
            prompt_tokens=100,
            completion_tokens=8,
            max_tokens=8,
        )
        for i in range(4)
    ]
    result = BenchResult(
        schema_version=SUMMARY_SCHEMA_VERSION,
        servefit_version="test",
        config={},
        server={"base_urls": ["http://127.0.0.1:1"]},
        interrupted=False,
        summary=summarize(records),
        turns=turn_stats(records),
        server_metrics={},
        server_latency_s={},
        server_peaks={},
        warnings=[],
    )
    root.mkdir(parents=True)
    (root / "summary.json").write_text(result.model_dump_json(indent=2))
    (root / "requests.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    return root


def test_a_good_bench_run_and_samples_make_a_report(tmp_path):
    """The harness: the same files unbroken are read (so each failure below is the break)."""
    bench = _bench_dir(tmp_path / "bench")
    out = tmp_path / "r.json"
    done = _report(
        "--bench", str(bench), "--gpu-samples", str(TRACE), "--format", "json", "-o", str(out)
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc["measured"]["num_requests"] == 4 and doc["gpu"]


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("missing/dir/r.md", ["cannot write the report", "No such file or directory"]),
        ("a-file/r.md", ["cannot write the report"]),  # a file where a directory should be
        ("/dev/full", ["cannot write the report", "/dev/full"]),  # unwritable, even for root
    ],
)
def test_output_that_cannot_be_written(target, words, tmp_path):
    (tmp_path / "a-file").write_text("x")
    path = target if target.startswith("/") else str(tmp_path / target)
    if target == "/dev/full" and not Path(target).exists():
        pytest.skip("no /dev/full on this system")
    _clean_error(_report("-o", path), *words)


def test_a_broken_line_in_requests_jsonl_names_the_line(tmp_path):
    bench = _bench_dir(tmp_path / "bench")
    lines = (bench / "requests.jsonl").read_text().splitlines()
    lines[1] = lines[1][:30]
    (bench / "requests.jsonl").write_text("\n".join(lines) + "\n")
    _clean_error(_report("--bench", str(bench)), "requests.jsonl:2", "not a request record")


def test_a_record_of_the_wrong_shape_names_the_field(tmp_path):
    bench = _bench_dir(tmp_path / "bench")
    lines = (bench / "requests.jsonl").read_text().splitlines()
    record = json.loads(lines[2])
    record["scheduled_s"] = "soon"
    lines[2] = json.dumps(record)
    (bench / "requests.jsonl").write_text("\n".join(lines) + "\n")
    _clean_error(_report("--bench", str(bench)), "requests.jsonl:3", "scheduled_s")


def test_requests_jsonl_that_is_not_utf8(tmp_path):
    bench = _bench_dir(tmp_path / "bench")
    (bench / "requests.jsonl").write_bytes((bench / "requests.jsonl").read_text().encode("utf-16"))
    _clean_error(_report("--bench", str(bench)), "requests.jsonl", "not UTF-8")


def test_a_bench_folder_without_a_summary(tmp_path):
    bench = _bench_dir(tmp_path / "bench")
    (bench / "summary.json").unlink()
    _clean_error(_report("--bench", str(bench)), "no summary.json")


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("gpu", "x", ["field 'gpu' is 'x', not an integer"]),
        ("gpu", 0.5, ["field 'gpu'", "not an integer"]),
        ("util_pct", "high", ["field 'util_pct'", "not a number"]),
        ("power_w", float("nan"), ["field 'power_w' is nan"]),
        ("mem_used_bytes", -1, ["field 'mem_used_bytes' is -1"]),
    ],
)
def test_a_gpu_sample_of_the_wrong_type_names_line_and_field(field, value, words, tmp_path):
    lines = TRACE.read_text().splitlines()[:5]
    sample = json.loads(lines[2])
    sample[field] = value
    lines[2] = json.dumps(sample)  # NaN is written as JSON's NaN extension, as Python does
    path = tmp_path / "samples.jsonl"
    path.write_text("\n".join(lines) + "\n")
    _clean_error(_report("--gpu-samples", str(path)), f"{path}:3", *words)


def test_a_complete_but_broken_last_sample_is_an_error(tmp_path):
    lines = TRACE.read_text().splitlines()[:5]
    path = tmp_path / "samples.jsonl"
    path.write_text("\n".join([*lines, "{not json}"]) + "\n")
    _clean_error(_report("--gpu-samples", str(path)), f"{path}:6")


def test_a_last_sample_cut_short_is_the_one_documented_skip(tmp_path):
    lines = TRACE.read_text().splitlines()[:5]
    path = tmp_path / "samples.jsonl"
    path.write_text("\n".join(lines) + "\n" + lines[0][:40])  # killed mid-write: no newline
    out = tmp_path / "r.json"
    done = _report("--gpu-samples", str(path), "--format", "json", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["gpu"]["num_samples"] == 5
