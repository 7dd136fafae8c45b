"""Hostile input, part two: bench records, preflight facts and calibration profiles, mutated,
read in-process through the CLI, counted per class.

Run: python benchmarks/fuzz_artifacts.py [--cases 2000] [--seed 0] [--kinds records,facts,...]
(one table per kind; exits 0 whatever the counts unless --strict).

Each kind starts from a valid artifact built in-process through servefit's own types, and
mutates it with ``benchmarks/fuzz.py``'s vocabulary (NaN, Infinity, 1e308, 5,000-digit
integers, negative and zero counts, bools, strings, lists, deep nesting; a key deleted or
inserted; the file re-encoded as UTF-16, Latin-1 or with a BOM, truncated, cut mid-byte):

- *records*: a ``servefit bench --output DIR`` folder (``summary.json``, ``requests.jsonl``,
  ``gpu_samples.jsonl``; plain, or the ``--prefix-cache-compare`` layout with ``cold/`` and
  ``warm/``), read by ``servefit report MODEL --bench DIR --format json``;
- *facts*: a preflight recording, judged by ``servefit preflight MODEL --facts FILE --json``;
- *calibration*: a calibration profile, planned with by ``servefit plan --calibration FILE``;
- *eval*: an eval run's ``eval.json``, priced with by ``servefit cost MODEL --success-from DIR``;
- *import*: a ``vllm bench serve --save-result`` file, recorded by ``servefit history import``
  and read back with ``history show 1 --json`` (its measured headline is judged).

Classes (``benchmarks/fuzz.py``'s):

- *clean error*: exit 2, one ``error (...)`` line that names the file (and, for a JSONL
  line, ``file:line``); for facts also exit 1 with the gate failed;
- *plausible*: exit 0 (or 1, a plan that does not fit) and a document whose numbers are
  finite and non-negative, not built from a value known to be impossible (a NaN, a negative
  count, a time going backwards, more free memory than total, a version "banana");
- *implausible*: anything else that exits 0/1/2 (an unclear error, a gate that passed
  impossible facts, a report with a negative TTFT);
- *crash*: exit 3 or any exception;
- *hang*: over the per-case time limit, or out of memory on the way.

The valid artifacts are ``fuzz_artifact_seeds.py``'s, the independent reading of what no run,
host or calibration can have written is ``fuzz_oracles.py``'s. The test suites
(``tests/property/test_fuzz_records.py``, ``test_fuzz_facts.py``, ``test_fuzz_calibration.py``)
draw the same mutations with Hypothesis and hold "clean error or plausible".
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def _sibling(stem: str) -> Any:
    """``benchmarks/<stem>.py`` as ``servefit_<stem>``, once per process (the tests load them
    the same way; ``fuzz.py`` registers itself under its name when it runs this one)."""
    name = f"servefit_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{stem}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


fuzz = _sibling("fuzz")
seeds = _sibling("fuzz_artifact_seeds")
oracles = _sibling("fuzz_oracles")
ArtifactCase = seeds.ArtifactCase
bench_folder, facts_json, calibration_json, eval_json = (
    seeds.bench_folder,
    seeds.facts_json,
    seeds.calibration_json,
    seeds.eval_json,
)
records_problem, facts_problem = oracles.records_problem, oracles.facts_problem
calibration_problem, impossible_numbers = oracles.calibration_problem, oracles.impossible_numbers
eval_problem, import_problem = oracles.eval_problem, oracles.import_problem
MODEL, GPU = seeds.MODEL, seeds.GPU
Chooser = fuzz.Chooser

KINDS = ("records", "facts", "calibration", "eval", "import")
TIME_LIMIT_S = 20.0  # a report ~0.1 s with the plan cached, a calibrated plan ~0.4 s
# a small workload: the simulation is not what is fuzzed, only what the files feed it
WORKLOAD = ["--concurrency", "2", "--num-requests", "8", "--input-len", "64", "--output-len", "8"]
VERSION_WORDS = ("banana", "", "13.x", "9", "99.0", "1.2.3.4.5", "latest", "0.33.0", "v1")


# -- mutating -----------------------------------------------------------------------------


def _paths(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value in a JSON document (containers included)."""
    if path:
        yield path
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _paths(value, (*path, i))


def _raw_for(current: Any, pick: Chooser) -> str:
    """A replacement value as raw JSON text: near the current one, or from the vocabulary."""
    is_number = isinstance(current, int | float) and not isinstance(current, bool)
    if is_number and pick.random() < 0.4:
        factor = pick.choice((2, 0.5, 10, 1000, -1, 0, 1e300))
        scaled = current * factor
        is_int = isinstance(current, int) and math.isfinite(scaled)
        return json.dumps(int(scaled) if is_int else scaled)  # an infinity as Infinity
    if isinstance(current, str) and pick.random() < 0.4:
        return json.dumps(pick.choice((*VERSION_WORDS, current + "x", current.upper())))
    return pick.choice(fuzz.VALUES)


def mutate_json(text: str, pick: Chooser, notes: list[str]) -> str:
    """1-3 value edits (raw text, so NaN and 5,000-digit integers get in), a key deleted or
    inserted, on a JSON document."""
    doc = json.loads(text)
    raws: dict[str, str] = {}
    for _ in range(pick.choice((1, 1, 2, 3))):
        paths = [p for p in _paths(doc) if not any(str(k).startswith("\0") for k in p)]
        if not paths:
            break
        path = pick.choice(paths)
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key, label = path[-1], ".".join(str(k) for k in path)
        action = pick.random()
        if action < 0.12 and isinstance(parent, dict):
            del parent[key]
            notes.append(f"-{label}")
            continue
        if action < 0.2 and isinstance(parent, dict):
            parent[pick.choice(("surprise", "schema_version", "extra_s"))] = 1
            notes.append(f"+key in {'.'.join(str(k) for k in path[:-1]) or 'root'}")
            continue
        raw = _raw_for(parent[key], pick)
        sentinel = f"\0RAW{len(raws)}\0"
        raws[sentinel] = raw
        parent[key] = sentinel
        notes.append(f"{label}={raw[:20]}")
    out = json.dumps(doc, indent=1)
    for sentinel, raw in raws.items():
        out = out.replace(json.dumps(sentinel), raw)
    return out


def mutate_jsonl(text: str, pick: Chooser, notes: list[str]) -> str:
    """A line's values edited, a line broken, cut or duplicated, junk or a blank line added."""
    lines = text.splitlines()
    n = int(pick.random() * len(lines))
    action = pick.random()
    if action < 0.6:
        before = len(notes)
        lines[n] = mutate_json(lines[n], pick, notes).replace("\n", "")
        notes[before:] = [f"line {n + 1}: " + "; ".join(notes[before:])]
    elif action < 0.7:
        lines[n] = lines[n][: int(pick.random() * len(lines[n]))]
        notes.append(f"line {n + 1} cut")
    elif action < 0.8:
        lines.insert(n, pick.choice(("", "   ", "{}", "[]", "null", "not json", fuzz.NESTED)))
        notes.append(f"junk line at {n + 1}")
    elif action < 0.9:
        lines.insert(n, lines[n])
        notes.append(f"line {n + 1} twice")
    else:
        del lines[n]
        notes.append(f"line {n + 1} deleted")
    return "".join(line + "\n" for line in lines)


def encode(text: str, pick: Chooser, notes: list[str]) -> bytes:
    """UTF-8 mostly; else UTF-16/32, a BOM, Latin-1 with an accent, truncated, a bad byte."""
    if pick.random() > 0.15:
        return text.encode()
    encoding = pick.choice((*fuzz.ENCODINGS, "truncated", "empty"))
    notes.append(encoding)
    if encoding in ("latin-1", "cp1252"):
        return re.sub(r'": "', '": "café ', text, count=1).encode(encoding)
    if encoding == "truncated":
        return text.encode()[: int(pick.random() * len(text))]
    if encoding == "empty":
        return b""
    if encoding == "bytes":
        data = text.encode()
        at = int(pick.random() * len(data))
        return data[:at] + pick.choice((b"\xff\xfe", b"\x00", b"\xc3", b"\x80\x80")) + data[at:]
    return text.encode(encoding)


def mutate_files(kind: str, files: dict[str, str], pick: Chooser) -> ArtifactCase:
    """Mutate one or two of ``files`` (or delete one)."""
    case = ArtifactCase(kind, {name: text.encode() for name, text in files.items()})
    notes: list[str] = []
    for _ in range(pick.choice((1, 1, 1, 2))):
        left = sorted(set(files) - set(case.targets))  # a file is mutated once
        if not left:
            break
        name = pick.choice(left)
        case.targets.append(name)
        if len(files) > 1 and pick.random() < 0.05:
            del case.files[name]
            notes.append(f"{name} deleted")
            continue
        before = len(notes)
        text = files[name]
        if name.endswith(".jsonl"):
            text = mutate_jsonl(text, pick, notes)
        else:
            text = mutate_json(text, pick, notes)
        files = {**files, name: text}
        case.files[name] = encode(text, pick, notes)
        notes[before:] = [f"{name}: " + "; ".join(notes[before:])]
    case.description = " | ".join(notes)
    return case


def records_case(pick: Chooser) -> ArtifactCase:
    return mutate_files("records", bench_folder(pick.choice(("plain", "compare"))), pick)


def facts_case(pick: Chooser) -> ArtifactCase:
    return mutate_files("facts", {"facts.json": facts_json()}, pick)


def calibration_case(pick: Chooser) -> ArtifactCase:
    return mutate_files("calibration", {"profile.json": calibration_json()}, pick)


# -- running one case ---------------------------------------------------------------------


def write_case(case: ArtifactCase, folder: Path) -> None:
    import shutil

    for old in folder.iterdir():
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    for name, data in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def run_cli(argv: list[str], limit_s: float) -> tuple[int | str | None, str, str]:
    """``servefit ARGV`` in-process: (exit code or "hang", stdout, stderr)."""
    from servefit.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    try:
        with (
            fuzz.time_limit(limit_s),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            main(argv)
    except SystemExit as done:
        code = done.code
    except fuzz.Hang:
        code = "hang"
    except MemoryError:
        code = "out of memory"
    return code, out.getvalue(), err.getvalue()


def _is_clean_error(err: str, names: list[str]) -> str | None:
    """Why ``err`` is not one clean error line naming one of ``names``; None when it is."""
    if "Traceback" in err or "internal error" in err:
        return "a traceback"
    if not err.startswith("error ("):
        return "not one error line"
    if names and not any(Path(n).name in err for n in names):
        return f"does not name {', '.join(names)}"
    if re.search(r"is not a (request record|GPU sample)", err) and not re.search(
        r"\.jsonl:\d+ ", err
    ):
        return "a line that is not a record, without its number"
    return None


# ---- records


def run_records_case(
    case: ArtifactCase, folder: Path, limit_s: float = TIME_LIMIT_S
) -> tuple[str, str]:
    write_case(case, folder)
    argv = ["report", MODEL, "--gpu", GPU, "--bench", str(folder), "--format", "json"]
    code, out, err = run_cli([*argv, "--no-history", *WORKLOAD], limit_s)
    return judge(code, out, err, case, records_problem(case), ok_codes=(0,))


def judge(
    code: int | str | None,
    out: str,
    err: str,
    case: ArtifactCase,
    problem: str | None,
    *,
    ok_codes: tuple[int, ...],
    gate_failed: Callable[[dict[str, Any]], bool] | None = None,
) -> tuple[str, str]:
    """(class, detail) of one run of the CLI on ``case``."""
    if code in ("hang", "out of memory"):
        return "hang", str(code)
    if code == 2:
        why = _is_clean_error(err, case.targets)
        return (
            ("implausible", f"{why}: {err.strip()[:120]}")
            if why
            else (
                "clean error",
                err.strip()[:120],
            )
        )
    if code not in (0, 1):
        return "crash", f"exit {code}: {err.strip()[-160:]}"
    try:
        doc = json.loads(out)
    except ValueError:
        return "crash", f"exit {code} without a JSON document: {err.strip()[-120:]}"
    if gate_failed is not None and gate_failed(doc):
        return "clean error", "gate failed: " + "; ".join(
            c["reason"][:60] for c in doc.get("checks", []) if c.get("status") == "fail"
        )[:120]
    if code not in ok_codes:
        return "implausible", f"exit {code}"
    bad = impossible_numbers({k: v for k, v in doc.items() if k != "facts"})
    if bad:
        return "implausible", ", ".join(bad[:3])
    if problem:
        return "implausible", f"accepted {problem}"
    return "plausible", ""


# ---- facts


def run_facts_case(
    case: ArtifactCase, folder: Path, limit_s: float = TIME_LIMIT_S
) -> tuple[str, str]:
    write_case(case, folder)
    argv = ["preflight", MODEL, "--facts", str(folder / "facts.json"), "--offline", "--json"]
    code, out, err = run_cli(argv, limit_s)

    def gate_failed(doc: dict[str, Any]) -> bool:
        return code == 1 and doc.get("passed") is False

    return judge(code, out, err, case, facts_problem(case), ok_codes=(0,), gate_failed=gate_failed)


# ---- calibration


def run_calibration_case(
    case: ArtifactCase, folder: Path, limit_s: float = TIME_LIMIT_S
) -> tuple[str, str]:
    write_case(case, folder)
    argv = ["plan", MODEL, "--calibration", str(folder / "profile.json"), "--json", *WORKLOAD]
    code, out, err = run_cli(argv, limit_s)
    return judge(code, out, err, case, calibration_problem(case), ok_codes=(0, 1))


# ---- eval runs


def eval_case(pick: Chooser) -> ArtifactCase:
    return mutate_files("eval", {"eval.json": eval_json()}, pick)


def run_eval_case(
    case: ArtifactCase, folder: Path, limit_s: float = TIME_LIMIT_S
) -> tuple[str, str]:
    write_case(case, folder)
    argv = ["cost", MODEL, "--gpu", GPU, "--success-from", str(folder), "--json", *WORKLOAD]
    code, out, err = run_cli(argv, limit_s)
    return judge(code, out, err, case, eval_problem(case), ok_codes=(0,))


# ---- other tools' result files


def import_case(pick: Chooser) -> ArtifactCase:
    return mutate_files("import", {"result.json": seeds.vllm_bench_json()}, pick)


def run_import_case(
    case: ArtifactCase, folder: Path, limit_s: float = TIME_LIMIT_S
) -> tuple[str, str]:
    write_case(case, folder)
    db = ["history", "--db", str(folder / "history.sqlite")]
    code, out, err = run_cli([*db, "import", str(folder / "result.json")], limit_s)
    if code == 0:  # recorded: what the history now says it measured
        code, out, err = run_cli([*db, "show", "1", "--json"], limit_s)
        if code == 0:
            out = json.dumps({"measured": json.loads(out).get("measured")})
    return judge(code, out, err, case, import_problem(case), ok_codes=(0,))


MAKERS: dict[str, Callable[[Chooser], ArtifactCase]] = {
    "records": records_case,
    "facts": facts_case,
    "calibration": calibration_case,
    "eval": eval_case,
    "import": import_case,
}
RUNNERS: dict[str, Callable[..., tuple[str, str]]] = {
    "records": run_records_case,
    "facts": run_facts_case,
    "calibration": run_calibration_case,
    "eval": run_eval_case,
    "import": run_import_case,
}


@contextlib.contextmanager
def plan_once() -> Iterator[None]:
    """A report plans the same deployment for every records case (the bench folder is what is
    fuzzed): the plan is made once and reused, so a case costs the reading, not the
    simulation."""
    from servefit.app import cost as app_cost
    from servefit.app import report as app_report

    original = app_report.plan_deployment
    cache: dict[str, Any] = {}

    def cached(d: Any, *, resolved: Any = None) -> Any:
        key = repr(d)
        if key not in cache:
            cache[key] = original(d, resolved=resolved)
        return cache[key]

    app_report.plan_deployment = app_cost.plan_deployment = cached  # eval cases price one plan
    try:
        yield
    finally:
        app_report.plan_deployment = app_cost.plan_deployment = original


# -- the run ------------------------------------------------------------------------------


def run(
    num_cases: int,
    seed: int,
    kinds: tuple[str, ...] = KINDS,
    *,
    on_case: Callable[..., None] | None = None,
) -> dict[str, Counter[str]]:
    rng = random.Random(seed)
    counts: dict[str, Counter[str]] = {}
    with tempfile.TemporaryDirectory() as tmp, plan_once():
        folder = Path(tmp)
        for kind in kinds:
            tally: Counter[str] = Counter()
            examples: dict[str, list[str]] = {}
            started = time.perf_counter()
            for i in range(num_cases):
                case = MAKERS[kind](rng)
                verdict, detail = RUNNERS[kind](case, folder)
                tally[verdict] += 1
                examples.setdefault(verdict, []).append(f"{case.description} -> {detail}")
                if on_case:
                    on_case(verdict, kind, case.description, detail)
                if (i + 1) % 500 == 0:
                    elapsed = time.perf_counter() - started
                    print(f"  {i + 1:,} {kind}, {elapsed:.0f} s", file=sys.stderr)
            fuzz._table(kind, tally, examples, num_cases)
            counts[kind] = tally
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000, help="cases per kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"of {', '.join(KINDS)}")
    parser.add_argument("--log", help="write every non-plausible case here (one per line)")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 on a crash, hang or implausible case"
    )
    args = parser.parse_args()
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    log = Path(args.log).open("w") if args.log else None  # noqa: SIM115 - closed below

    def on_case(verdict: str, kind: str, description: str, detail: str) -> None:
        if log is not None and verdict not in ("plausible", "clean error"):
            log.write(f"{verdict}\t{kind}\t{description}\t{detail}\n")
            log.flush()

    fuzz._limit_memory()
    try:
        counts = run(args.cases, args.seed, kinds, on_case=on_case)
    finally:
        if log is not None:
            log.close()
    if args.strict:
        fuzz.exit_on_bad_cases(counts, args.seed)


if __name__ == "__main__":
    main()
