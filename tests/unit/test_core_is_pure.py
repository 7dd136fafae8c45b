"""core/ does no I/O: no file, network, environment, clock or unseeded randomness."""

from __future__ import annotations

import ast
import builtins
import socket
from pathlib import Path

import pytest

import servefit.core
from servefit.core.plan import ServeSettings, plan_capacity

CORE = Path(servefit.core.__file__).parent
FORBIDDEN_MODULES = {
    "os",
    "sys",
    "pathlib",
    "io",
    "socket",
    "subprocess",
    "shutil",
    "tempfile",
    "time",
    "datetime",
    "random",
    "urllib",
    "http",
    "requests",
    "httpx",
    "aiohttp",
    "huggingface_hub",
    "importlib",
    "json",
    "tomllib",
    "logging",
    "rich",
    "click",
    "pynvml",
}
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}


def _core_files():
    return sorted(CORE.glob("*.py"))


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: p.name)
def test_core_module_imports_and_calls(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots = {(node.module or "").split(".")[0]}
            if node.module == "random" and {a.name for a in node.names} == {"Random"}:
                roots = set()  # a seeded generator instance is deterministic
        else:
            roots = set()
        assert not roots & FORBIDDEN_MODULES, (
            f"{path.name}:{node.lineno} imports {roots & FORBIDDEN_MODULES}"
        )
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, (
                f"{path.name}:{node.lineno} calls {node.func.id}()"
            )


def test_planning_runs_with_io_disabled(catalog_model, gpu, monkeypatch):
    loaded = catalog_model("Qwen/Qwen3.6-27B-FP8")
    device = gpu("A40")

    def refuse(*args, **kwargs):
        raise AssertionError("core touched the outside world")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(socket, "socket", refuse)
    plan = plan_capacity(
        loaded.spec, device, ServeSettings(max_model_len=32_768), mamba_ssm_dtype="float32"
    )
    assert plan.num_blocks > 0
