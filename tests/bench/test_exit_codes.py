"""What bench's exit code says: 1 when more than --max-error-rate of the requests failed
(default: any), 2 for an --output it cannot write (before anything is sent); never a
traceback."""

from __future__ import annotations

import json
import subprocess

import pytest

from .test_bench_null_server import SERVEFIT


def bench_cli(url: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SERVEFIT, "bench", url, "--concurrency", "4", *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("max_error_rate", "code"),
    [(None, 1), ("0.5", 1), ("0.8", 0)],
    ids=["default-none", "half", "four-fifths"],
)
def test_max_error_rate(instant_server, tmp_path, max_error_rate, code):
    # 40 of 50 requests fail (HTTP 500): a failed fraction of 0.8
    lines = [{"prompt": "fine words"}] * 10 + [{"prompt": "x __HTTP_500__"}] * 40
    dataset = tmp_path / "d.jsonl"
    dataset.write_text("\n".join(json.dumps(line) for line in lines))
    flags = ["--workload", "jsonl", "--dataset", str(dataset), "--output-len", "2", "--json"]
    if max_error_rate is not None:
        flags += ["--max-error-rate", max_error_rate]
    done = bench_cli(instant_server.url, *flags)
    assert done.returncode == code, done.stderr
    s = json.loads(done.stdout)["summary"]
    assert (s["successful"], s["errored"]) == (10, 40)
    assert json.loads(done.stdout)["config"]["max_error_rate"] == float(max_error_rate or 0)


def test_an_unwritable_output_is_an_input_error_before_anything_is_sent(instant_server, tmp_path):
    (tmp_path / "a-file").write_text("")
    before = instant_server.server.requests_total
    done = bench_cli(
        instant_server.url, "--num-requests", "2", "--output", str(tmp_path / "a-file" / "run")
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error (invalid argument): --output {tmp_path}/a-file/run:")
    assert "cannot write there" in done.stderr and "Traceback" not in done.stderr
    assert instant_server.server.requests_total == before  # nothing sent
