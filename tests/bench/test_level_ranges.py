"""Sweep levels as ranges (bench/config.parse_levels): ``START:STOP:xFACTOR`` and
``START:STOP:+STEP``, as the load tools write their rate sweeps."""

from __future__ import annotations

import pytest

from servefit.bench.config import MAX_LEVELS, parse_levels
from servefit.errors import InvalidArgumentError


@pytest.mark.parametrize(
    ("text", "kind", "levels"),
    [
        ("1:64:x2", int, (1, 2, 4, 8, 16, 32, 64)),
        ("1:50:x2", int, (1, 2, 4, 8, 16, 32)),  # the stop is not a step: not included
        ("10:40:+10", int, (10, 20, 30, 40)),
        ("0.5:4:x2", float, (0.5, 1.0, 2.0, 4.0)),
        ("0.1:0.5:+0.1", float, (0.1, 0.2, 0.3, 0.4, 0.5)),  # no float drift past the stop
        ("1,2:8:x2,32", int, (1, 2, 4, 8, 32)),  # ranges and values together; 2 once
        ("1:10:x1.5", int, (1, 2, 3, 5, 8)),  # 1, 1.5, 2.25, 3.4, 5.1, 7.6 rounded, repeats once
        ("4", int, (4,)),
    ],
)
def test_a_range_is_its_levels(text, kind, levels):
    assert parse_levels("--concurrency", text, kind) == levels


@pytest.mark.parametrize("text", ["1:64:x1", "0:4:x2", "8:4:x2", "1:4:*2", "a:b:x2", "1:4:+0"])
def test_a_range_that_cannot_be_a_sweep_is_refused(text):
    with pytest.raises(InvalidArgumentError, match="START:STOP:xFACTOR") as err:
        parse_levels("--request-rate", text, float)
    assert repr(text) in str(err.value)


def test_a_range_of_too_many_levels_is_refused():
    with pytest.raises(InvalidArgumentError, match=f"more than {MAX_LEVELS} levels"):
        parse_levels("--concurrency", "1:1000:+1", int)


def test_a_ramp_and_a_range_sweep_run_through_the_cli(null_server, tmp_path):
    import json
    import subprocess

    from .test_bench_null_server import SERVEFIT

    base = [*SERVEFIT, "bench", null_server.url, "--input-len", "8", "--output-len", "4"]
    ramp_flags = ["--request-rate", "20", "--ramp-to", "80", "--ramp-duration-s", "0.2"]
    ramp = subprocess.run(
        [*base, "--num-requests", "12", *ramp_flags, "--json", "--no-history"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ramp.returncode == 0, ramp.stderr
    summary = json.loads(ramp.stdout)
    assert summary["summary"]["successful"] == 12
    schedule = summary["config"]["schedule"]
    assert (schedule["rate_per_s"], schedule["ramp_to_per_s"], schedule["ramp_s"]) == (20, 80, 0.2)
    sweep_flags = ["--num-requests", "4", "--concurrency", "1:4:x2", "--no-history"]
    sweep = subprocess.run(
        [*base, *sweep_flags, "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sweep.returncode == 0, sweep.stderr
    levels = json.loads((tmp_path / "sweep.json").read_text())["levels"]
    assert [level["concurrency"] for level in levels] == [1, 2, 4]
    refused = subprocess.run(
        [*base, "--request-rate", "1,2", "--ramp-to", "8", "--ramp-duration-s", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "give one rate, not a sweep" in refused.stderr
