"""Hostile input, fuzzed: a mutated calibration profile makes ``servefit plan --calibration``
a clean error naming the file (exit 2) or a plan whose numbers are finite and non-negative,
never one built on an efficiency outside (0, 1] or a NaN ceiling, never exit 3.

The mutations, the run and the classes are ``benchmarks/fuzz_artifacts.py``'s."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
from fuzz_support import DrawChooser, load_fuzz_artifacts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servefit.calibrate.profile import load_calibration
from servefit.errors import ConfigError

fa = load_fuzz_artifacts()
FOLDER = Path(tempfile.mkdtemp(prefix="servefit-fuzz-calibration-"))


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_a_mutated_profile_is_a_clean_error_or_a_plausible_plan(data):
    case = fa.calibration_case(DrawChooser(data))
    verdict, detail = fa.run_calibration_case(case, FOLDER)
    assert verdict in ("clean error", "plausible"), f"{case.description}: {verdict}: {detail}"


def _profile(tmp_path: Path, section: str, key: str, value) -> Path:
    doc = json.loads(fa.calibration_json())
    doc[section][key] = value
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(doc))  # NaN and infinities as JSON's extension, as Python does
    return path


@pytest.mark.parametrize(
    ("section", "key", "value", "words"),
    [
        # these were planned with: the engine profile's error did not name the file
        ("profile", "gemm_efficiency", 7.0, "profile.gemm_efficiency: 7.0, an efficiency is in"),
        ("profile", "memory_efficiency", 0.0, "profile.memory_efficiency: 0.0"),
        # these were accepted: the plan's performance was built on them
        ("profile", "step_overhead_s", float("-inf"), "profile.step_overhead_s: -inf"),
        ("measured", "read_bandwidth_bytes_per_s", float("nan"), "read_bandwidth_bytes_per_s: nan"),
        ("datasheet", "peak_flops_per_s", {"bf16": -64}, "datasheet.peak_flops_per_s.bf16: -64"),
        ("datasheet", "memory_bandwidth_bytes_per_s", 0, "memory_bandwidth_bytes_per_s: 0"),
        ("device", "catalog_gpu", "banana", "device.catalog_gpu 'banana' is not in"),
    ],
)
def test_a_profile_no_calibration_measures_is_an_error_naming_file_and_field(
    section, key, value, words, tmp_path
):
    path = _profile(tmp_path, section, key, value)
    with pytest.raises(ConfigError, match=re.escape(f"--calibration {path}")) as err:
        load_calibration(path)
    assert words in str(err.value)


def test_the_unmutated_profile_plans():
    case = fa.ArtifactCase("calibration", {"profile.json": fa.calibration_json().encode()})
    assert fa.run_calibration_case(case, FOLDER) == ("plausible", "")
