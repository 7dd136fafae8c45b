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
- *calibration*: a calibration profile, planned with by ``servefit plan --calibration FILE``.

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

The test suites (``tests/property/test_fuzz_records.py``, ``test_fuzz_facts.py``) draw the
same mutations with Hypothesis and hold "clean error or plausible".
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import itertools
import json
import math
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _load_fuzz() -> Any:
    """``benchmarks/fuzz.py``, once per process (the tests load it under the same name)."""
    name = "servefit_fuzz"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("fuzz.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


fuzz = _load_fuzz()
Chooser = fuzz.Chooser

KINDS = ("records", "facts", "calibration")
TIME_LIMIT_S = 20.0  # a report ~0.1 s with the plan cached, a calibrated plan ~0.4 s
MODEL = "Qwen/Qwen3-0.6B"
GPU = "H100"
# a small workload: the simulation is not what is fuzzed, only what the files feed it
WORKLOAD = ["--concurrency", "2", "--num-requests", "8", "--input-len", "64", "--output-len", "8"]
# numbers that may be negative: monotonic clocks (their origin is arbitrary) and the plan's
# headroom (negative when it does not fit)
NEGATIVE_OK = frozenset({"t_s", "wall_s", *fuzz.NEGATIVE_OK})
VERSION_WORDS = ("banana", "", "13.x", "9", "99.0", "1.2.3.4.5", "latest", "0.33.0", "v1")


# -- a case -----------------------------------------------------------------------------


@dataclass
class ArtifactCase:
    """One mutated artifact: its files (relative path -> bytes) and what was done."""

    kind: str
    files: dict[str, bytes]
    description: str = ""
    targets: list[str] = field(default_factory=list)  # the files mutated


# -- the valid artifacts ------------------------------------------------------------------


def _records(first_id: int, num: int) -> list[Any]:
    from servefit.bench.records import Outcome, RequestRecord

    return [
        RequestRecord(
            request_id=first_id + i,
            outcome=Outcome.OK,
            session_id=i % 2,
            turn=i // 2,
            scheduled_s=1.0 + i,
            sent_s=1.0 + i,
            headers_s=1.01 + i,
            chunk_s=[1.05 + i + 0.01 * k for k in range(8)],
            done_s=1.2 + i,
            prompt_tokens=100,
            completion_tokens=8,
            cached_tokens=32 if i else 0,
            max_tokens=8,
        )
        for i in range(num)
    ]


def _summary_json(records: list[Any], cold: list[Any] | None = None) -> str:
    from servefit.bench.metrics import summarize
    from servefit.bench.runner import SUMMARY_SCHEMA_VERSION, BenchResult, turn_stats
    from servefit.bench.turns import compare_cache

    result = BenchResult(
        schema_version=SUMMARY_SCHEMA_VERSION,
        servefit_version="fuzz",
        config={"concurrency": 2},
        server={"base_urls": ["http://127.0.0.1:1"], "model": MODEL},
        interrupted=False,
        summary=summarize(records),
        turns=turn_stats(records),
        server_metrics={"preemptions": 0.0},
        server_latency_s={"ttft": {"p50": 0.05}},
        server_peaks={"kv_cache_usage": 0.4, "requests_waiting": 1.0},
        warnings=[],
        prefix_cache_comparison=compare_cache(turn_stats(cold), turn_stats(records))
        if cold
        else None,
    )
    return result.model_dump_json(indent=1)


def _samples_jsonl() -> str:
    from dataclasses import asdict

    from servefit.monitor.nvml import GpuSample

    lines = []
    for i in range(6):
        sample = GpuSample(
            t_s=1.0 + 0.1 * i,
            wall_s=1.7e9 + 0.1 * i,
            gpu=0,
            util_pct=90.0,
            mem_util_pct=60.0,
            mem_used_bytes=70 * 2**30,
            mem_total_bytes=80 * 2**30,
            sm_clock_mhz=1980.0,
            mem_clock_mhz=2619.0,
            power_w=500.0,
            power_limit_w=700.0,
            sm_active_pct=50.0,
        )
        lines.append(json.dumps(asdict(sample)))
    return "".join(line + "\n" for line in lines)


@functools.cache
def bench_folder(layout: str) -> dict[str, str]:
    """A bench run's files as ``servefit bench`` writes them: ``plain`` or ``compare``
    (``--prefix-cache-compare``: cold/ and warm/, the top-level summary the warm run's)."""
    samples = _samples_jsonl()

    def jsonl(records: list[Any]) -> str:
        return "".join(r.model_dump_json() + "\n" for r in records)

    if layout == "plain":
        records = _records(0, 4)
        return {
            "summary.json": _summary_json(records),
            "requests.jsonl": jsonl(records),
            "gpu_samples.jsonl": samples,
        }
    cold, warm = _records(0, 4), _records(4, 4)
    return {
        "summary.json": _summary_json(warm, cold),
        "cold/requests.jsonl": jsonl(cold),
        "cold/summary.json": _summary_json(cold),
        "warm/requests.jsonl": jsonl(warm),
        "warm/summary.json": _summary_json(warm),
        "gpu_samples.jsonl": samples,
    }


@functools.cache
def facts_json() -> str:
    """A recording of a healthy host (2 x H100, driver 580, CUDA 13.0, torch 2.13, vLLM)."""
    from servefit.preflight.facts import (
        DiskFacts,
        EngineFacts,
        GpuFacts,
        GpuProcess,
        HostFacts,
        ModelFacts,
        NvmlFacts,
        TorchFacts,
    )

    total = 85_520_809_984  # nvidia-smi's 81559 MiB of an H100 SXM
    gpus = [
        GpuFacts(
            index=i,
            name="NVIDIA H100 80GB HBM3",
            compute_capability="9.0",
            memory_total_bytes=total,
            memory_free_bytes=total - 2**29,
            memory_used_bytes=2**29,
            processes=[GpuProcess(pid=100 + i, used_bytes=2**28, name="python")],
            mig_enabled=False,
            nvlink_active_links=18,
            pcie_generation=5,
            pcie_width=16,
        )
        for i in range(2)
    ]
    facts = HostFacts(
        servefit_version="fuzz",
        provenance="built by benchmarks/fuzz_artifacts.py",
        nvml=NvmlFacts(driver_version="580.95.05", cuda_driver_version="13.0", gpus=gpus),
        torch=TorchFacts(
            python="python3",
            is_installed=True,
            version="2.13.0+cu130",
            cuda_version="13.0",
            is_cuda_available=True,
            device_count=2,
            arch_list=["sm_80", "sm_90", "compute_90"],
        ),
        engines=[EngineFacts(name="vllm", version="0.33.0", torch_requirement="torch==2.13.0")],
        model=ModelFacts(model=MODEL, origin="catalog"),
        disk=DiskFacts(path_kind="Hugging Face cache", free_bytes=500 * 2**30),
    )
    return facts.model_dump_json(indent=1)


@functools.cache
def calibration_json() -> str:
    """A device calibration of an H100 as ``servefit calibrate`` writes one."""
    from servefit.adapters.catalog import gpu_catalog
    from servefit.calibrate.profile import (
        CalibrationDocument,
        CeilingsSection,
        DatasheetSection,
        DeviceSection,
        PointSection,
        ProfileSection,
        peaks_of,
    )

    gpu = gpu_catalog().get(GPU)
    doc = CalibrationDocument(
        schema_version=1,
        servefit_version="fuzz",
        created_utc="2026-01-01T00:00:00Z",
        command="servefit calibrate",
        model=MODEL,
        dtype="bf16",
        plan="fuzz",
        device=DeviceSection(
            backend="cuda",
            name=gpu.name,
            catalog_gpu=gpu.name,
            compute_capability="9.0",
            memory_bytes=gpu.memory_bytes,
            torch_version="2.13.0",
        ),
        datasheet=DatasheetSection(
            source=gpu.source,
            memory_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
            peak_flops_per_s=peaks_of(gpu),
        ),
        measured=CeilingsSection(
            read_bandwidth_bytes_per_s=2.9e12,
            copy_bandwidth_bytes_per_s=2.7e12,
            matmul_flops_per_s={"bf16": 7.0e14},
            attention_flops_per_s=4.0e14,
            decode_attention_bytes_per_s=2.5e12,
            projection_flops_per_s={"1": 1e13, "64": 4e14},
            launch_overhead_s=5e-6,
        ),
        points=[
            PointSection(
                label="decode b1",
                kind="decode",
                batch=1,
                tokens=1,
                context=512,
                measured_s=0.004,
                predicted_before_s=0.003,
                predicted_after_s=0.004,
                bound="memory",
                layers_built=2,
                layers_total=28,
            )
        ],
        profile=ProfileSection(
            gemm_efficiency=0.7,
            attention_efficiency=0.5,
            memory_efficiency=0.85,
            step_overhead_s=0.003,
        ),
        median_error_before=0.3,
        median_error_after=0.05,
    )
    return doc.model_dump_json(indent=1)


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


def _numbers(doc: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _numbers(value, str(key))
    elif isinstance(doc, list):
        for value in doc:
            yield from _numbers(value, path)
    elif isinstance(doc, int | float) and not isinstance(doc, bool):
        yield path, doc


def impossible_numbers(doc: Any) -> list[str]:
    """NaN, infinities and negative numbers (but on monotonic clocks and headroom)."""
    return [
        f"{name}={value}"
        for name, value in _numbers(doc)
        if not math.isfinite(value) or (value < 0 and name not in NEGATIVE_OK)
    ]


def _parse(data: bytes) -> Any:
    """A file as Python's json reads it (NaN allowed), or None."""
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return None


# ---- records


RECORD_TIMES = ("sent_s", "headers_s")
# summary figures a run may write negative: the client's lag behind the schedule, the time a
# warm prefix cache saved (or lost), a server counter's delta across its restart
SUMMARY_NEGATIVE = frozenset(
    {"client_lag_s", "ttft_from_scheduled_s", "ttft_saved_s", "server_metrics"}
)


def _dotted(doc: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _dotted(value, f"{where}.{key}")
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _dotted(value, f"{where}.{i}")
    elif isinstance(doc, int | float) and not isinstance(doc, bool):
        yield where.lstrip("."), doc


def _record_problem(raw: Any) -> str | None:
    """Is a decoded record line impossible (times going backwards, tokens negative)?"""
    if not isinstance(raw, dict):
        return None
    bad = impossible_numbers({k: v for k, v in raw.items() if k != "scheduled_s"})
    if bad:
        return bad[0]
    times: list[Any] = [raw.get(k) for k in RECORD_TIMES]
    chunks = raw.get("chunk_s")
    times += chunks if isinstance(chunks, list) else []
    times.append(raw.get("done_s"))
    ordered = [t for t in times if isinstance(t, int | float) and not isinstance(t, bool)]
    if any(b < a for a, b in itertools.pairwise(ordered)):
        return "times go backwards"
    return None


def records_problem(case: ArtifactCase) -> str | None:
    """A value in the mutated files that no run can have written: the report must refuse."""
    for name, data in case.files.items():
        if name not in case.targets:
            continue
        if name.endswith("summary.json"):
            doc = _parse(data) if name == "summary.json" else None  # cold/, warm/: unread
            if isinstance(doc, dict):
                for where, value in _dotted(doc):
                    parts = set(where.split("."))
                    if parts & {"config", "server", "prediction"}:
                        continue  # free-form, not figures
                    if not math.isfinite(value) or (value < 0 and not parts & SUMMARY_NEGATIVE):
                        return f"{name}: {where}={value}"
            continue
        text = data.decode("utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            try:
                raw = json.loads(line)
            except (ValueError, RecursionError):
                continue
            problem = _record_problem(raw) if "requests" in name else None
            if "samples" in name and isinstance(raw, dict):
                bad = impossible_numbers(raw)
                problem = bad[0] if bad else None
            if problem:
                return f"{name}:{n}: {problem}"
    return None


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

NUMERIC_VERSION = re.compile(r"^\d{1,4}(\.\d{1,4}){0,3}$")
COMPUTE_CAPABILITY = re.compile(r"^[1-9]\d?\.\d{1,2}$")
TORCH_ARCH = re.compile(r"^(sm|compute)_\d{2,4}[a-z]?$")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _gpu_problem(g: dict[str, Any]) -> str | None:
    total, free, used = (
        g.get(k) for k in ("memory_total_bytes", "memory_free_bytes", "memory_used_bytes")
    )
    if not all(_is_int(v) for v in (total, free, used)):
        return None  # refused as a type
    if total <= 0 or free < 0 or used < 0 or free + used > total:
        return f"memory total {total}, free {free}, used {used}"
    if not COMPUTE_CAPABILITY.match(str(g.get("compute_capability"))):
        return f"compute capability {g.get('compute_capability')!r}"
    for key in ("index", "nvlink_active_links", "pcie_generation", "pcie_width"):
        if _is_int(g.get(key)) and g[key] < 0:
            return f"{key} {g[key]}"
    for p in _list(g.get("processes")):
        if isinstance(p, dict):
            if _is_int(p.get("pid")) and p["pid"] < 0:
                return f"pid {p['pid']}"
            if _is_int(p.get("used_bytes")) and not 0 <= p["used_bytes"] <= total:
                return f"process holds {p['used_bytes']} of {total}"
    return None


def facts_problem(case: ArtifactCase) -> str | None:
    """Facts no host can report (an independent reading of the recording): the gate must
    fail or refuse them."""
    from packaging.version import InvalidVersion, Version

    doc = _parse(case.files.get("facts.json", b""))
    if not isinstance(doc, dict):
        return None
    nvml, torch = doc.get("nvml"), doc.get("torch")
    if isinstance(nvml, dict):
        for key in ("driver_version", "cuda_driver_version"):
            value = nvml.get(key)
            if isinstance(value, str) and not NUMERIC_VERSION.match(value):
                return f"{key} {value!r}"
        gpus = [g for g in _list(nvml.get("gpus")) if isinstance(g, dict)]
        indices = [g.get("index") for g in gpus]
        if len(set(map(repr, indices))) != len(indices):
            return f"GPU indices {indices}"
        for g in gpus:
            problem = _gpu_problem(g)
            if problem:
                return problem
    if isinstance(torch, dict):
        version, cuda = torch.get("version"), torch.get("cuda_version")
        if isinstance(cuda, str) and not NUMERIC_VERSION.match(cuda):
            return f"torch CUDA {cuda!r}"
        if isinstance(version, str):
            try:
                Version(version)
            except InvalidVersion:
                return f"torch version {version!r}"
        count = torch.get("device_count")
        if _is_int(count) and (count < 0 or (torch.get("is_cuda_available") is True and not count)):
            return f"device count {count}"
        arch = torch.get("arch_list")
        if isinstance(arch, list) and any(
            isinstance(a, str) and not TORCH_ARCH.match(a) for a in arch
        ):
            return f"arch list {arch}"
    for engine in _list(doc.get("engines")):
        if isinstance(engine, dict) and isinstance(engine.get("version"), str):
            try:
                Version(engine["version"])
            except InvalidVersion:
                return f"engine version {engine['version']!r}"
    for section, keys in (
        ("disk", ("free_bytes",)),
        ("model", ("weights_bytes_on_disk", "checkpoint_bytes")),
    ):
        part = doc.get(section)
        if isinstance(part, dict):
            for key in keys:
                if _is_int(part.get(key)) and part[key] < 0:
                    return f"{section}.{key} {part[key]}"
    return None


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


def calibration_problem(case: ArtifactCase) -> str | None:
    """A profile no calibration can have measured: efficiencies outside (0, 1], ceilings or
    overheads that are not finite and positive."""
    doc = _parse(case.files.get("profile.json", b""))
    if not isinstance(doc, dict):
        return None
    profile = doc.get("profile")
    if isinstance(profile, dict):
        for key in ("gemm_efficiency", "attention_efficiency", "memory_efficiency"):
            value = profile.get(key)
            is_number = isinstance(value, int | float) and not isinstance(value, bool)
            if is_number and not (math.isfinite(value) and 0 < value <= 1):
                return f"profile.{key} {value}"
    sheet = doc.get("datasheet")
    if isinstance(sheet, dict):
        bandwidth = sheet.get("memory_bandwidth_bytes_per_s")
        if isinstance(bandwidth, int | float) and not (math.isfinite(bandwidth) and bandwidth > 0):
            return f"datasheet bandwidth {bandwidth}"
    bad = impossible_numbers(doc)
    return bad[0] if bad else None


def run_calibration_case(
    case: ArtifactCase, folder: Path, limit_s: float = TIME_LIMIT_S
) -> tuple[str, str]:
    write_case(case, folder)
    argv = ["plan", MODEL, "--calibration", str(folder / "profile.json"), "--json", *WORKLOAD]
    code, out, err = run_cli(argv, limit_s)
    return judge(code, out, err, case, calibration_problem(case), ok_codes=(0, 1))


MAKERS: dict[str, Callable[[Chooser], ArtifactCase]] = {
    "records": records_case,
    "facts": facts_case,
    "calibration": calibration_case,
}
RUNNERS: dict[str, Callable[..., tuple[str, str]]] = {
    "records": run_records_case,
    "facts": run_facts_case,
    "calibration": run_calibration_case,
}


@contextlib.contextmanager
def plan_once() -> Iterator[None]:
    """A report plans the same deployment for every records case (the bench folder is what is
    fuzzed): the plan is made once and reused, so a case costs the reading, not the
    simulation."""
    from servefit.app import report as app_report

    original = app_report.plan_deployment
    cache: dict[str, Any] = {}

    def cached(d: Any, *, resolved: Any = None) -> Any:
        key = repr(d)
        if key not in cache:
            cache[key] = original(d, resolved=resolved)
        return cache[key]

    app_report.plan_deployment = cached
    try:
        yield
    finally:
        app_report.plan_deployment = original


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
    bad = {
        f"{kind} {verdict}": n
        for kind, tally in counts.items()
        for verdict, n in tally.items()
        if verdict not in ("plausible", "clean error") and n
    }
    if args.strict and bad:
        print(f"\nstrict: {bad} (rerun with --seed {args.seed} --log FILE for the cases)")
        sys.exit(1)


if __name__ == "__main__":
    main()
