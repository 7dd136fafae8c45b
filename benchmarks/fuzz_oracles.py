"""What no run, host or calibration can have written: an independent reading of a mutated
artifact (``benchmarks/fuzz_artifacts.py``'s cases), so a servefit that accepted it is
caught. A value these find must be refused (exit 2) or fail the gate (exit 1); one they do
not find may be accepted."""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
from collections.abc import Iterator
from typing import Any

# numbers that may be negative: monotonic clocks (their origin is arbitrary) and a plan's
# headroom (negative when it does not fit); fuzz_artifacts.py loads fuzz.py first
NEGATIVE_OK = frozenset({"t_s", "wall_s", *sys.modules["servefit_fuzz"].NEGATIVE_OK})


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


def records_problem(case: Any) -> str | None:
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


def facts_problem(case: Any) -> str | None:
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


def calibration_problem(case: Any) -> str | None:
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


# ---- eval runs


def _accuracy_problem(where: str, section: Any) -> str | None:
    if not isinstance(section, dict):
        return None
    counts = [section.get(k) for k in ("scored", "correct", "failed")]
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
        return None  # a type error: the document reader refuses it
    scored, correct, _ = counts
    if min(counts) < 0 or correct > scored:
        return f"{where} counts {counts}"
    accuracy, low, high = (section.get(k) for k in ("accuracy", "low", "high"))
    numbers = [v for v in (accuracy, low, high) if isinstance(v, int | float)]
    if any(not math.isfinite(v) for v in numbers):
        return f"{where} figures {accuracy}, {low}, {high}"
    if scored and isinstance(accuracy, int | float) and abs(accuracy - correct / scored) > 1e-6:
        return f"{where} accuracy {accuracy} of {correct}/{scored}"
    if len(numbers) == 3 and not 0 <= low <= accuracy <= high <= 1:
        return f"{where} interval {low}-{high} around {accuracy}"
    return None


def eval_problem(case: Any) -> str | None:
    """An ``eval.json`` no run can have written: counts that do not add up, an accuracy that is
    not correct / scored, an interval outside [0, 1] or not around it."""
    doc = _parse(case.files.get("eval.json", b""))
    if not isinstance(doc, dict):
        return None
    tasks = doc.get("tasks") if isinstance(doc.get("tasks"), list) else []
    for index, task in enumerate(tasks):
        problem = _accuracy_problem(f"tasks[{index}]", task)
        if problem:
            return problem
    overall = doc.get("overall")
    problem = _accuracy_problem("overall", overall)
    if problem:
        return problem
    if isinstance(overall, dict) and all(isinstance(t, dict) for t in tasks):
        for key in ("scored", "correct"):
            parts = [t.get(key) for t in tasks]
            if all(isinstance(p, int) for p in parts) and overall.get(key) != sum(parts):
                return f"overall {key} is not the tasks' sum"
    bad = impossible_numbers(doc)
    return bad[0] if bad else None


# ---- other tools' result files


HEADLINE_KEYS = ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms")


def import_problem(case: Any) -> str | None:
    """A result file whose figures no run can have measured: a headline figure that is not
    a finite non-negative number, no request completed, a TTFT that is not one."""
    doc = _parse(case.files.get("result.json", b""))
    if not isinstance(doc, dict):
        return None
    for key in HEADLINE_KEYS:
        value = doc.get(key)
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        if is_number and (not math.isfinite(value) or value < 0):
            return f"{key}={value}"
    completed = doc.get("completed")
    if isinstance(completed, int | float) and not isinstance(completed, bool) and completed <= 0:
        return f"completed={completed}"
    ttfts = doc.get("ttfts")
    if isinstance(ttfts, list):
        for t in ttfts:
            if (
                isinstance(t, int | float)
                and not isinstance(t, bool)
                and (not math.isfinite(t) or t < 0)
            ):
                return f"ttfts has {t}"
    return None
