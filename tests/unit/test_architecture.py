"""The shape of the package: every module imports, no two modules import each other (even
through others, even inside a function or under TYPE_CHECKING), and no module grows past
what one reader can hold."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import servefit

SRC = Path(servefit.__file__).parent
MAX_MODULE_LINES = 450
# Modules over the limit when the limit came in (their owners were restructuring them at
# the time), each to be split by whoever owns it next; drop an entry once it fits.
OVER_THE_LIMIT: set[str] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imported(name: str, path: Path) -> set[str]:
    """The servefit modules ``name`` imports anywhere in its source. ``from pkg import sub``
    counts the submodule, not the package (importing a submodule always runs its package's
    ``__init__``, which is not a dependency between the two)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                targets.add(sub if sub in MODULES else module)
    found = set()
    for target in targets:
        while target and target not in MODULES:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    return {name: _imported(name, path) for name, path in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_function_level_imports():
    # the cycle that was broken: runner imported workers, workers imported runner inside
    # functions; both now import the send loop from bench.dispatch
    graph = import_graph()
    assert "servefit.bench.dispatch" in graph["servefit.bench.workers"]
    assert "servefit.bench.dispatch" in graph["servefit.bench.runner"]
    assert "servefit.bench.runner" not in graph["servefit.bench.workers"]
    # imported only inside a function (the CLI's lazy imports) and only for type checking
    assert "servefit.bench.search" in graph["servefit.cli.bench"]
    assert "servefit.bench.config" in graph["servefit.app.bench"]


def test_no_import_cycle_among_servefit_modules():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_imports(name):
    importlib.import_module(name)


def test_no_module_is_longer_than_the_limit():
    lengths = {
        name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()
    }
    offenders = sorted(
        f"{name} ({n} lines)"
        for name, n in lengths.items()
        if n > MAX_MODULE_LINES and name not in OVER_THE_LIMIT
    )
    assert not offenders, f"modules over {MAX_MODULE_LINES} lines: " + ", ".join(offenders)
    assert set(MODULES) >= OVER_THE_LIMIT, "OVER_THE_LIMIT names a module that is gone"


def test_the_layers_hold_as_import_linter_contracts():
    """ARCHITECTURE.md's layers, as ``[tool.importlinter]`` in pyproject.toml: no module
    imports a layer above its own, function-level and TYPE_CHECKING imports included (the
    known debts are listed there by name)."""
    import shutil
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    script = Path(sys.executable).with_name("lint-imports")
    command = [str(script)] if script.exists() else [shutil.which("lint-imports") or "lint-imports"]
    done = subprocess.run(
        [*command, "--config", str(root / "pyproject.toml")],
        capture_output=True, text=True, cwd=root, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 kept, 0 broken" in done.stdout
