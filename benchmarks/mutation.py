"""Mutation testing of the analytical core: plant small wrong changes in a rule (a flipped
comparison, an off-by-one, a dropped argument, a changed constant) and check that a test
fails for each. The tool is mutmut 3 (its mutants are functions switched by a trampoline,
so one pytest process runs many of them, each against only the tests that reach the mutated
function); cosmic-ray reruns the command for every mutant, which a 2-core CI cannot afford.

Run: python benchmarks/mutation.py [--all] [--max-children 2]

- the CI budget (default): the modules and tests in ``[tool.mutmut]`` of ``pyproject.toml``;
- ``--all``: every module of ``src/servefit/core`` against the unit, golden and property
  tests (on a schedule or by hand: it takes far longer).

A run is a copy of the repository in a temporary folder, so the checkout is left as it is.
servefit must be installed as a package (``pip install .``), not editable: an editable install
imports the checkout's unmutated source, and every mutant would look untested.

Each mutant ends killed (a test failed or timed out), survived, or untested (no selected test
reaches its function). A survivor that no test can kill because it does not change what the
code computes is *equivalent*: it is listed in ``tests/mutation/equivalent.toml`` (module,
function, the mutated line, and why), and left out of the kill rate. The run prints a table
per module and the survivors, and exits 1 when the kill rate is under ``MIN_KILL_RATE`` or any
survivor (or untested mutant) is not listed as equivalent; 2 when it cannot run.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENT_FILE = ROOT / "tests" / "mutation" / "equivalent.toml"
MIN_KILL_RATE = 0.90  # of the non-equivalent mutants of the modules run
ALL_TESTS = ["tests/unit", "tests/golden", "tests/property"]
KILLED = {"killed", "timeout", "caught by type check", "segfault"}
# mutmut's names: x_<function>__mutmut_<n>, or xǁ<Class>ǁ<method>__mutmut_<n>
NAME = re.compile(r"^(?P<module>[\w.]+)\.x(?:_|ǁ(?P<cls>\w+)ǁ)(?P<function>\w+?)__mutmut_\d+$")


@dataclass(frozen=True, slots=True)
class Mutant:
    name: str
    module: str
    function: str
    status: str
    line: str  # the mutated line, stripped


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def check_installed() -> None:
    """servefit must import from an installed package, not from this checkout's source."""
    try:
        import servefit
    except ImportError:
        _fail("servefit is not installed in this environment: pip install '.[test]'")
    where = Path(servefit.__file__).resolve()
    if ROOT / "src" in where.parents:
        _fail(
            f"servefit imports from {where.parent} (an editable install): mutmut's mutants "
            "would never be imported; run in an environment with `pip install '.[test]'`"
        )


def config(run_all: bool) -> tuple[list[str], list[str]]:
    """(modules, tests) of the run."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    if run_all:
        core = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "src/servefit/core").rglob("*.py"))
        return [m for m in core if not m.endswith("__init__.py")], ALL_TESTS
    return list(table["source_paths"]), list(table["pytest_add_cli_args_test_selection"])


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def copy_repository(target: Path, modules: list[str], tests: list[str]) -> None:
    """The tracked files, with ``[tool.mutmut]`` naming this run's modules and tests."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / name.decode()
        if source.is_file():
            (target / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name.decode())
    text = (target / "pyproject.toml").read_text()
    head, _, rest = text.partition("\n[tool.mutmut]\n")
    tail = rest[rest.find("\n[") :] if "\n[" in rest else ""
    table = (
        "\n[tool.mutmut]\n"
        f"source_paths = {_toml_list(modules)}\n"
        'also_copy = ["src/servefit", "benchmarks"]\n'
        f"pytest_add_cli_args_test_selection = {_toml_list(tests)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]\n'
    )
    (target / "pyproject.toml").write_text(head + table + tail)


def mutmut(folder: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mutmut", *args], cwd=folder, capture_output=True, text=True
    )
    if check and done.returncode != 0:
        _fail(f"mutmut {' '.join(args)} exited {done.returncode}: {done.stderr[-600:]}")
    return done.stdout


def mutated_line(folder: Path, name: str) -> str:
    diff = mutmut(folder, "show", name)
    added = [
        ln[1:].strip()
        for ln in diff.splitlines()
        if ln.startswith("+") and not ln.startswith("+++")
    ]
    return added[0] if added else ""


def collect(folder: Path) -> list[Mutant]:
    mutants = []
    for row in mutmut(folder, "results", "--all", "true").splitlines():
        name, _, status = row.strip().rpartition(": ")
        match = NAME.match(name)
        if not match:
            continue
        line = "" if status in KILLED else mutated_line(folder, name)
        function = (f"{match['cls']}." if match["cls"] else "") + match["function"]
        mutants.append(Mutant(name, match["module"], function, status, line))
    return mutants


def equivalents() -> list[dict[str, str]]:
    if not EQUIVALENT_FILE.exists():
        return []
    entries = tomllib.loads(EQUIVALENT_FILE.read_text()).get("equivalent", [])
    for entry in entries:
        missing = {"module", "function", "line", "reason"} - set(entry)
        if missing:
            _fail(f"{EQUIVALENT_FILE}: an entry without {', '.join(sorted(missing))}: {entry}")
    return entries


def is_equivalent(m: Mutant, entries: list[dict[str, str]]) -> bool:
    return any(
        (e["module"], e["function"], e["line"]) == (m.module, m.function, m.line) for e in entries
    )


def report(mutants: list[Mutant], entries: list[dict[str, str]]) -> int:
    rows: dict[str, Counter[str]] = {}
    unexplained = []
    for m in mutants:
        tally = rows.setdefault(m.module, Counter())
        tally["mutants"] += 1
        if m.status in KILLED:
            tally["killed"] += 1
        elif m.status in ("survived", "no tests") and is_equivalent(m, entries):
            tally["equivalent"] += 1
        else:
            tally["survived" if m.status == "survived" else "untested"] += 1
            unexplained.append(m)
    print(f"{'module':32} {'mutants':>8} {'killed':>7} {'equiv.':>7} {'survived':>9} "
          f"{'untested':>9} {'kill rate':>10}")  # fmt: skip
    total = Counter()
    for module, t in sorted(rows.items()):
        total.update(t)
        rate = t["killed"] / max(t["mutants"] - t["equivalent"], 1)
        print(f"{module:32} {t['mutants']:>8} {t['killed']:>7} {t['equivalent']:>7} "
              f"{t['survived']:>9} {t['untested']:>9} {rate:>10.1%}")  # fmt: skip
    rate = total["killed"] / max(total["mutants"] - total["equivalent"], 1)
    print(f"{'all':32} {total['mutants']:>8} {total['killed']:>7} {total['equivalent']:>7} "
          f"{total['survived']:>9} {total['untested']:>9} {rate:>10.1%}")  # fmt: skip
    for m in unexplained:
        print(f"  {m.status}: {m.module} {m.function}: {m.line}   [{m.name}]")
    passed = rate >= MIN_KILL_RATE and not unexplained
    print(
        f"kill rate {rate:.1%} (minimum {MIN_KILL_RATE:.0%}); {len(unexplained)} survivor(s) "
        f"neither killed nor listed in {EQUIVALENT_FILE.relative_to(ROOT)}: "
        + ("pass" if passed else "FAIL")
    )
    return 0 if passed else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="every core module (slow)")
    parser.add_argument("--max-children", type=int, default=2, help="mutmut's workers")
    args = parser.parse_args()
    check_installed()
    modules, tests = config(args.all)
    entries = equivalents()
    with tempfile.TemporaryDirectory(prefix="servefit-mutation-") as tmp:
        folder = Path(tmp)
        copy_repository(folder, modules, tests)
        ran = subprocess.run(
            [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children)],
            cwd=folder,
            capture_output=True,
            text=True,
        )
        mutants = collect(folder)
    if not mutants:
        _fail("mutmut made no mutant: is [tool.mutmut] naming modules?")
    if any(m.status == "not checked" for m in mutants):  # the run stopped before the mutants
        _fail(f"mutmut run did not check the mutants (exit {ran.returncode}): {ran.stdout[-800:]}")
    raise SystemExit(report(mutants, entries))


if __name__ == "__main__":
    main()
