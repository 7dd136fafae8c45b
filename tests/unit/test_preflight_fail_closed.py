"""The gate fails closed: every impossible or unparseable fact fails a check with its
reason, and the command after ``--`` is never executed.

Each case takes a sourced golden recording that passes (``healthy_h200``), breaks one
field, and runs ``servefit preflight MODEL -- <a command that creates a file>`` with the
broken facts standing in for what the probes would have read on this host. If the gate
let the command through, the file would exist."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servefit.adapters.catalog import gpu_catalog
from servefit.cli.preflight import preflight
from servefit.core.plan import ServeSettings
from servefit.errors import InvalidArgumentError
from servefit.preflight import gate
from servefit.preflight.facts import HostFacts
from servefit.preflight.rules import Status, judge

RECORDINGS = Path(__file__).parent.parent / "golden" / "preflight"
HEALTHY = json.loads((RECORDINGS / "healthy_h200.json").read_text())
MODEL = HEALTHY["model"]["model"]
SETTINGS = ["--tensor-parallel-size", "2", "--max-model-len", "32768"]


def _gpus(field: str, value: Callable[[dict[str, Any]], Any]) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        for gpu in doc["nvml"]["gpus"]:
            gpu[field] = value(gpu)

    return edit


def _set(*path: str, value: Any) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


# (case, edit of the healthy recording, the failing check, words of its reason)
IMPOSSIBLE = [
    ("total memory 0", _gpus("memory_total_bytes", lambda g: 0), "NVIDIA driver", "0 bytes"),
    (
        "free > total",
        _gpus("memory_free_bytes", lambda g: 2 * g["memory_total_bytes"]),
        "NVIDIA driver",
        "more than its",
    ),
    ("negative used", _gpus("memory_used_bytes", lambda g: -1), "NVIDIA driver", "negative"),
    (
        "compute capability 'x.y'",
        _gpus("compute_capability", lambda g: "x.y"),
        "NVIDIA driver",
        "compute capability 'x.y'",
    ),
    (
        "compute capability '9'",
        _gpus("compute_capability", lambda g: "9"),
        "NVIDIA driver",
        "is not M.m",
    ),
    (
        "driver version 'abc'",
        _set("nvml", "driver_version", value="abc"),
        "NVIDIA driver",
        "driver version 'abc'",
    ),
    (
        "CUDA driver version '13.x'",
        _set("nvml", "cuda_driver_version", value="13.x"),
        "NVIDIA driver",
        "CUDA driver version '13.x'",
    ),
    (
        "torch CUDA version 'banana'",
        _set("torch", "cuda_version", value="banana"),
        "driver supports PyTorch's CUDA",
        "'banana' is not a version",
    ),
    (
        "torch version 'latest'",
        _set("torch", "version", value="latest"),
        "driver supports PyTorch's CUDA",
        "torch version 'latest'",
    ),
    (
        "negative device count",
        _set("torch", "device_count", value=-8),
        "PyTorch sees every GPU",
        "-8 devices",
    ),
    (
        "arch 'sm_??'",
        _set("torch", "arch_list", value=["sm_??"]),
        "PyTorch sees every GPU",
        "sm_??",
    ),
    ("no engine", _set("engines", value=[]), "engine's PyTorch requirement", "no vLLM"),
    (
        "unreadable torch pin",
        _set("engines", value=[{"name": "vllm", "version": "0.33.0", "torch_requirement": "?"}]),
        "engine's PyTorch requirement",
        "unreadable requirement",
    ),
    (
        "negative disk space",
        _set("disk", "free_bytes", value=-1),
        "disk space for the weights",
        "negative",
    ),
]


def _broken(edit: Callable[[dict], None]) -> HostFacts:
    doc = copy.deepcopy(HEALTHY)
    edit(doc)
    return HostFacts.model_validate_json(json.dumps(doc))


def test_the_healthy_recording_passes_so_each_case_breaks_one_thing():
    facts = HostFacts.model_validate(HEALTHY)
    checks = judge(
        facts,
        spec=None,
        settings=ServeSettings(tensor_parallel_size=2),
        catalog=gpu_catalog(),
    )
    assert all(c.status in (Status.PASS, Status.SKIP) for c in checks), checks


@pytest.mark.parametrize(
    ("case", "edit", "check", "words"), IMPOSSIBLE, ids=[c[0] for c in IMPOSSIBLE]
)
def test_impossible_facts_fail_the_check_that_reads_them_and_nothing_runs(
    case, edit, check, words, tmp_path, monkeypatch
):
    facts = _broken(edit)
    trace = tmp_path / "ran"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(gate, "collect_facts", lambda *a, **k: facts)

    def execvp(program: str, argv: list[str]) -> None:  # runs it, as exec would
        subprocess.run(argv, check=True, timeout=60)
        raise SystemExit(0)

    monkeypatch.setattr(gate.os, "execvp", execvp)
    command = [sys.executable, "-c", f"open({str(trace)!r}, 'w').write('ran')"]
    result = CliRunner().invoke(
        preflight, [MODEL, *SETTINGS, "--offline", "--json", "--", *command]
    )
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    failed = {c["name"]: c["reason"] for c in doc["checks"] if c["status"] == "fail"}
    assert check in failed, failed
    assert words in failed[check]
    assert not doc["passed"]
    assert not trace.exists()


def test_the_same_command_runs_when_the_facts_are_healthy(tmp_path, monkeypatch):
    """The harness above can see a command run: without it the cases prove nothing."""
    trace = tmp_path / "ran"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(gate, "collect_facts", lambda *a, **k: _broken(lambda doc: None))

    def execvp(program: str, argv: list[str]) -> None:
        subprocess.run(argv, check=True, timeout=60)
        raise SystemExit(0)

    monkeypatch.setattr(gate.os, "execvp", execvp)
    command = [sys.executable, "-c", f"open({str(trace)!r}, 'w').write('ran')"]
    result = CliRunner().invoke(preflight, [MODEL, *SETTINGS, "--offline", "--", *command])
    assert result.exit_code == 0, result.output
    assert trace.exists()


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (_set("schema_version", value=99), "schema_version"),
        (_gpus("memory_total_bytes", lambda g: "lots"), "memory_total_bytes"),
        (_gpus("memory_total_bytes", lambda g: 1.5e11), "memory_total_bytes"),
        (_set("torch", "is_cuda_available", value="yes"), "is_cuda_available"),
        (_set("nvml", "surprise", value=1), "surprise"),
    ],
    ids=["future schema", "memory as a string", "memory as a float", "bool as text", "extra"],
)
def test_unreadable_recordings_are_input_errors(edit, words, tmp_path):
    doc = copy.deepcopy(HEALTHY)
    edit(doc)
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InvalidArgumentError, match=words):
        gate.load_facts(path)


def test_a_missing_executable_is_an_input_error_after_a_passing_gate(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(gate, "collect_facts", lambda *a, **k: _broken(lambda doc: None))
    result = CliRunner().invoke(
        preflight, [MODEL, *SETTINGS, "--offline", "--", "no-such-program-servefit", "x"]
    )
    assert result.exit_code == 2
    assert "no-such-program-servefit" in result.output and "no such executable" in result.output
    assert "nothing was run" in result.output
    assert "Traceback" not in result.output


def test_an_unwritable_record_is_an_input_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(gate, "collect_facts", lambda *a, **k: _broken(lambda doc: None))
    target = tmp_path / "missing" / "facts.json"
    result = CliRunner().invoke(preflight, [MODEL, "--offline", "--record", str(target)])
    assert result.exit_code == 2
    assert "--record" in result.output and "cannot be written" in result.output
    assert not target.exists()
