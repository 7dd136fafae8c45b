"""bench --repeat and bench compare against real null servers of known timings: the
intervals hold the known delays, and the gate fails a server slowed by 20 % and passes an
identical one."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from servefit.bench.null_server import NullServerConfig

from .conftest import ServerThread
from .test_bench_null_server import loop_lateness_s, slack_s

SERVEFIT = [sys.executable, "-m", "servefit.cli.main"]
ITL_S = 0.020  # a delay well above a timer's lateness: a 20 % slowdown is 4 ms a token
SLOWED_ITL_S = 0.024


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[ServerThread, ServerThread]]:
    base = ServerThread(NullServerConfig(ttft_s=0.01, itl_s=ITL_S, output_len=10)).start()
    slow = ServerThread(NullServerConfig(ttft_s=0.01, itl_s=SLOWED_ITL_S, output_len=10)).start()
    yield base, slow
    base.stop()
    slow.stop()


def _bench(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [*SERVEFIT, "bench", url, "--num-requests", "16", "--input-len", "16"]
    argv += ["--output-len", "10", "--concurrency", "4", "--output", str(out), "--no-history"]
    return subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=300)


def _compare(a: Path, b: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [*SERVEFIT, "bench", "compare", str(a), str(b), "--json", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def runs(servers, tmp_path_factory) -> dict[str, Path]:
    base, slow = servers
    root = tmp_path_factory.mktemp("compare")
    out = {name: root / name for name in ("a", "a_again", "slowed")}
    for name, server in (("a", base), ("a_again", base), ("slowed", slow)):
        done = _bench(server.url, out[name], "--repeat", "3")
        assert done.returncode == 0, done.stderr
    return out


def test_repeats_keep_every_run_and_bound_the_known_delay(runs):
    folder = runs["a"]
    doc = json.loads((folder / "repeats.json").read_text())
    assert doc["repeats_asked"] == 3 and len(doc["runs"]) == 3 and not doc["interrupted"]
    for k in (1, 2, 3):  # each repeat is a whole run: its records and its summary
        lines = (folder / f"repeat-{k}" / "requests.jsonl").read_text().splitlines()
        assert len(lines) == 16
        assert (
            json.loads((folder / f"repeat-{k}" / "summary.json").read_text())["summary"][
                "successful"
            ]
            == 16
        )
    tpot = {f["name"]: f for f in doc["figures"]}["tpot_p50_s"]
    assert len(tpot["values"]) == 3
    assert tpot["low"] <= tpot["mean"] <= tpot["high"]
    assert min(tpot["values"]) <= tpot["mean"] <= max(tpot["values"])
    # the server sleeps at least ITL_S a token; above it, what a timer's lateness on this
    # machine right now adds (the same bound the single-run accuracy test uses)
    assert tpot["low"] >= ITL_S and tpot["high"] <= ITL_S + slack_s(0.003, loop_lateness_s())


def test_an_identical_server_passes_the_gate(runs):
    done = _compare(runs["a"], runs["a_again"], "--max-regression", "tpot_p50=5%,throughput=10%")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert not doc["is_regression"] and doc["runs"] == [3, 3] and doc["requests"] == [48, 48]
    tpot = {f["name"]: f for f in doc["figures"]}["tpot_p50"]
    assert tpot["change_low"] < 0.05  # what the noise allows stays under the gate


def test_a_server_slowed_by_20_percent_fails_the_gate(runs):
    done = _compare(runs["a"], runs["slowed"], "--max-regression", "tpot_p50=5%")
    assert done.returncode == 1, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    tpot = {f["name"]: f for f in doc["figures"]}["tpot_p50"]
    assert tpot["verdict"] == "REGRESSION"
    # 4 ms more a token on top of what the baseline measured (20 ms and this machine's timer
    # lateness, which both servers add): the change is 4 ms over the baseline's TPOT
    expected = (SLOWED_ITL_S - ITL_S) / tpot["baseline"]
    assert tpot["change"] == pytest.approx(expected, abs=0.03)
    assert 0.05 < tpot["change_low"] <= tpot["change"]
    # no gate: reported, exit 0; the slower server also delivers fewer tokens a second
    report = _compare(runs["a"], runs["slowed"])
    assert report.returncode == 0
    figures = {f["name"]: f for f in json.loads(report.stdout)["figures"]}
    throughput = figures["output_throughput"]
    assert throughput["change"] < 0
    # over 3 runs a side the interval holds the runs' own spread: on a busy machine one slow
    # run can widen it past 0, and then (only then) the verdict is "within noise"
    if throughput["change_low"] <= 0 <= throughput["change_high"]:
        assert throughput["verdict"] == "within noise"
    else:
        assert throughput["verdict"] == "worse"


def test_one_run_a_side_compares_throughput_without_an_interval(servers, tmp_path):
    base, _ = servers
    for name in ("x", "y"):
        assert _bench(base.url, tmp_path / name).returncode == 0
    done = _compare(tmp_path / "x", tmp_path / "y")
    assert done.returncode == 0, done.stderr
    figures = {f["name"]: f for f in json.loads(done.stdout)["figures"]}
    assert figures["output_throughput"]["change_low"] is None
    assert figures["tpot_p50"]["change_low"] is not None  # latencies: over the requests


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-regression", "tpot=10%"], "FIGURE one of"),
        (["--max-regression", "tpot_p50=fast"], "is not a percentage"),
    ],
)
def test_bad_gates_exit_2_naming_the_fix(runs, args, message):
    done = _compare(runs["a"], runs["a_again"], *args)
    assert done.returncode == 2 and message in done.stderr


def test_a_folder_that_is_not_a_run_exits_2(tmp_path):
    (tmp_path / "empty").mkdir()
    done = _compare(tmp_path / "empty", tmp_path / "empty")
    assert done.returncode == 2 and "no summary.json" in done.stderr
