"""Hostile input, fuzzed: every mutated config and every hostile flag is a clean error or a
plausible plan, never another exception, never a hang.

The mutations, the per-case classification and the plausibility rules are
``benchmarks/fuzz.py``'s (one definition for the suite and the 10,000-case run); here
Hypothesis draws them, so a failure shrinks to its smallest mutation. In-process, each case
runs under a time limit derived from a baseline plan measured in the same test.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from fuzz_support import DrawChooser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]


def _load_fuzz() -> Any:
    spec = importlib.util.spec_from_file_location("servefit_fuzz", ROOT / "benchmarks" / "fuzz.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


fuzz = _load_fuzz()
SEEDS = fuzz.seeds()
FOLDER = Path(tempfile.mkdtemp(prefix="servefit-fuzz-"))
fuzz.baselines(SEEDS, FOLDER)


def _limit_s() -> float:
    """A generous per-case limit: 50x the slowest unmutated plan, at least 5 s."""
    slowest = 0.0
    for seed in SEEDS[:8]:
        case = fuzz.ConfigCase(seed.model_id, {"config.json": json.dumps(seed.config).encode()}, "")
        started = time.perf_counter()
        fuzz.run_config_case(case, FOLDER, seed.params_total, limit_s=60)
        slowest = max(slowest, time.perf_counter() - started)
    return max(5.0, 50 * slowest)


LIMIT_S = _limit_s()


@settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_a_mutated_config_is_a_clean_error_or_a_plausible_plan(data):
    seed = data.draw(st.sampled_from(SEEDS), label="seed")
    case = fuzz.mutate(seed, DrawChooser(data))
    verdict, detail = fuzz.run_config_case(case, FOLDER, seed.params_total, limit_s=LIMIT_S)
    assert verdict in ("clean error", "plausible"), (
        f"{seed.model_id}: {case.description}: {verdict}: {detail}"
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hostile_flags_are_a_clean_error_or_a_plausible_plan(data):
    case = fuzz.flag_case(DrawChooser(data))
    verdict, detail = fuzz.run_flag_case(case, limit_s=max(LIMIT_S, 30.0))
    assert verdict in ("clean error", "plausible"), f"{' '.join(case.argv)}: {verdict}: {detail}"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"config.json": '{"model_type": "llama"}'.encode("utf-16")}, "UTF-16"),
        ({"config.json": b'\xef\xbb\xbf{"model_type": "llama"}'}, "byte-order mark"),
        ({"config.json": '{"model_type": "llama", "x": "café"}'.encode("latin-1")}, "not UTF-8"),
        ({"config.json": b"[" * 100_000 + b"]" * 100_000}, "nested too deeply"),
        ({"config.json": b'{"hidden_size": ' + b"9" * 5000 + b"}"}, "5,000 digits"),
    ],
)
def test_undecodable_files_name_the_problem(files, message):
    case = fuzz.ConfigCase("x", dict(files), "")
    verdict, detail = fuzz.run_config_case(case, FOLDER, None, limit_s=LIMIT_S)
    assert verdict == "clean error"
    assert message in detail
