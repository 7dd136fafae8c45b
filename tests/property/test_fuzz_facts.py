"""Hostile input, fuzzed: a mutated preflight recording (impossible memory, NaN, bad
versions, a future schema, wrong types, bad encodings) is refused (exit 2, naming the file)
or fails the check that reads it (exit 1); the gate never passes impossible facts, never
runs the command on them, never exits 3.

The mutations and the run are ``benchmarks/fuzz_artifacts.py``'s, the independent reading of
what is impossible (``facts_problem``) ``benchmarks/fuzz_oracles.py``'s."""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from fuzz_support import DrawChooser, load_fuzz_artifacts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servefit.cli.preflight import preflight
from servefit.core.plan import ServeSettings
from servefit.errors import ServefitError
from servefit.preflight import gate
from servefit.preflight.facts import HostFacts
from servefit.preflight.rules import Status

fa = load_fuzz_artifacts()
FOLDER = Path(tempfile.mkdtemp(prefix="servefit-fuzz-facts-"))


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_mutated_facts_are_refused_or_fail_the_gate_unless_possible(data):
    case = fa.facts_case(DrawChooser(data))
    verdict, detail = fa.run_facts_case(case, FOLDER)
    assert verdict in ("clean error", "plausible"), f"{case.description}: {verdict}: {detail}"


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,  # the patches are the same for every example
    ],
)
@given(data=st.data())
def test_the_command_runs_only_on_possible_facts(data, monkeypatch):
    """The same facts standing in for the probes, with a command after ``--``: it is
    executed only when the gate passed, and never on impossible facts."""
    case = fa.facts_case(DrawChooser(data))
    fa.write_case(case, FOLDER)
    ran: list[list[str]] = []

    def execvp(program: str, argv: list[str]) -> None:
        ran.append(argv)
        raise SystemExit(0)

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(
        gate, "collect_facts", lambda *a, **k: gate.load_facts(FOLDER / "facts.json")
    )
    monkeypatch.setattr(gate.os, "execvp", execvp)
    with fa.fuzz.time_limit(fa.TIME_LIMIT_S):
        result = CliRunner().invoke(preflight, [fa.MODEL, "--offline", "--", sys.executable, "-V"])
    assert result.exit_code in (0, 1, 2), (case.description, result.output)
    assert "Traceback" not in result.output and "internal error" not in result.output
    if ran:
        assert result.exit_code == 0 and "PREFLIGHT PASSED" in result.output
        assert fa.facts_problem(case) is None, (case.description, result.output)
    else:
        assert "PREFLIGHT PASSED" not in result.output, case.description


def test_the_unmutated_recording_passes():
    """The harness: unbroken, the facts pass (so each failure is the mutation)."""
    case = fa.ArtifactCase("facts", {"facts.json": fa.facts_json().encode()})
    assert fa.run_facts_case(case, FOLDER) == ("plausible", "")


# -- one regression test per bug the fuzzing found ------------------------------------------


def _judge(edit) -> dict[str, tuple[Status, str]]:
    doc = json.loads(fa.facts_json())
    edit(doc)
    facts = HostFacts.model_validate_json(json.dumps(doc))
    result = gate.run_gate(facts, ServeSettings(), strict=False, allow_hub=False)
    assert not result.passed
    return {c.name: (c.status, c.reason) for c in result.checks}


def _engine(version: str):
    def edit(doc):
        doc["engines"][0]["version"] = version

    return edit


def _gpu(key: str, value):
    def edit(doc):
        doc["nvml"]["gpus"][1][key] = value

    return edit


def _pid(doc):
    doc["nvml"]["gpus"][0]["processes"][0]["pid"] = -101


@pytest.mark.parametrize(
    ("edit", "check", "words"),
    [
        (_engine(""), "engine's PyTorch requirement", "vllm version '' is not a version"),
        (_engine("banana"), "engine's PyTorch requirement", "'banana' is not a version"),
        (_pid, "NVIDIA driver", "process id -101 is negative"),
        (_gpu("pcie_generation", -1), "NVIDIA driver", "GPU 1 reports -1 PCIe generation"),
        (_gpu("nvlink_active_links", -18), "NVIDIA driver", "-18 NVLink active links"),
    ],
    ids=["empty engine version", "engine version banana", "negative pid", "pcie -1", "nvlink"],
)
def test_impossible_facts_the_gate_passed_now_fail_their_check(edit, check, words):
    """These passed the gate before (an engine version nobody can install, a negative pid or
    link count): now the check that reads them fails with the reason."""
    status, reason = _judge(edit)[check]
    assert status is Status.FAIL and "impossible" in reason and words in reason


def test_a_recording_the_gate_refuses_names_the_file(tmp_path):
    path = tmp_path / "facts.json"
    path.write_bytes(fa.facts_json().encode("utf-16"))
    with pytest.raises(ServefitError, match=re.escape(f"--facts {path}")):
        gate.load_facts(path)
