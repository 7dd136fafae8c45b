"""What this machine serves on: NVIDIA GPUs through NVML (nvidia-ml-py), otherwise the CPU
(vLLM's CPU backend).

The GPU path reads NVML through the preflight probe (a subprocess with a timeout, so a hung
driver is a failed fact); the facts are then matched to the catalog by the names NVML prints
("NVIDIA H100 80GB HBM3"). The CPU path reads what vLLM's CPU worker reads
(``vllm/utils/cpu_resource_utils.py``, ``get_memory_node_info``, 0.32): the NUMA node of the
first CPU this process may run on (``/sys/devices/system/node/nodeN/meminfo``), clamped by
the cgroup memory limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``), with available =
free + file pages + reclaimable slab; ``/proc/meminfo`` where the kernel has no NUMA nodes.
ISA flags come from ``/proc/cpuinfo``.

Every reader is injectable, so the decision logic is tested with fakes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servefit.core.engines.vllm_cpu import cpu_device
from servefit.core.hardware import GpuSpec, normalise_gpu_name
from servefit.errors import InvalidArgumentError, ServefitError
from servefit.preflight.facts import GpuFacts, NvmlFacts
from servefit.units import GIB_BYTES, KIB_BYTES

# The ISA flags vLLM's CPU platform decides on (vllm/platforms/cpu.py)
_ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "asimd", "sve")
_CGROUP_V1_UNLIMITED = 1 << 62
CPU_NAMES = ("cpu", "host", "host-cpu")

ReadText = Callable[[str], str | None]


def read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class DetectedHardware:
    """The device to plan for, how many of them, and what was seen."""

    device: GpuSpec
    num_devices: int
    is_cpu: bool
    description: str  # "2 x NVIDIA H100 80GB HBM3 (NVML, driver 580.95)" / "CPU: ..."
    available_memory_bytes: int | None = None  # host memory free now (CPU only)
    notes: tuple[str, ...] = ()


def gpu_from_nvml(gpu: GpuFacts, catalog_get: Callable[[str], GpuSpec]) -> GpuSpec:
    """The catalog entry of an NVML device name: as printed, without ``NVIDIA``, and without
    the memory type (``NVIDIA H100 80GB HBM3`` -> ``H100 80GB``)."""
    name = gpu.name
    candidates = [name, re.sub(r"^NVIDIA\s+", "", name)]
    candidates.append(re.sub(r"\s+(HBM\w*|GDDR\w*|PCIe|SXM\w*)$", "", candidates[-1]))
    for candidate in dict.fromkeys(candidates):
        try:
            return catalog_get(candidate)
        except ServefitError:
            continue
    raise InvalidArgumentError(
        f"NVML reports a {name!r} ({gpu.memory_total_bytes / GIB_BYTES:.1f} GiB) that is not in "
        "servefit's catalog: name the closest one with --gpu (see `servefit gpus`), or describe "
        "it with --gpu-memory-gib and --gpu-bandwidth-gbps"
    )


def detect_gpus(nvml: NvmlFacts, catalog_get: Callable[[str], GpuSpec]) -> DetectedHardware | None:
    """NVIDIA GPUs when NVML sees any (None otherwise). Mixed models: the first kind, said."""
    if nvml.error or not nvml.gpus:
        return None
    first = nvml.gpus[0]
    same = [g for g in nvml.gpus if normalise_gpu_name(g.name) == normalise_gpu_name(first.name)]
    notes: tuple[str, ...] = ()
    if len(same) < len(nvml.gpus):
        others = sorted({g.name for g in nvml.gpus} - {first.name})
        notes = (f"also present and not planned: {', '.join(others)}",)
    return DetectedHardware(
        device=gpu_from_nvml(first, catalog_get),
        num_devices=len(same),
        is_cpu=False,
        description=f"{len(same)} x {first.name} (NVML, driver {nvml.driver_version})",
        notes=notes,
    )


def _meminfo(text: str) -> dict[str, int]:
    """``MemTotal: 97421888 kB`` (or ``Node 0 MemTotal: ...``) lines as bytes."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^(?:Node \d+ )?(?P<key>[\w()]+):\s+(?P<n>\d+)(?: kB)?", line)
        if m:
            out[m.group("key")] = int(m.group("n")) * KIB_BYTES
    return out


def _int_file(read: ReadText, path: str) -> int | None:
    text = read(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:  # "max": no limit
        return None


def _first_allowed_cpu() -> int:
    try:
        return min(os.sched_getaffinity(0))
    except (AttributeError, ValueError, OSError):
        return 0


def _node_of_cpu(read: ReadText, cpu: int) -> int | None:
    listing = read("/sys/devices/system/node/online")
    if listing is None:
        return None
    for node in _ranges(listing):
        cpus = read(f"/sys/devices/system/node/node{node}/cpulist")
        if cpus is not None and cpu in _ranges(cpus):
            return node
    return 0


def _ranges(text: str) -> list[int]:
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def host_memory(read: ReadText = read_text, cpu: int | None = None) -> tuple[int, int, str]:
    """(total, available, where from) as vLLM's CPU worker sees them."""
    node = _node_of_cpu(read, _first_allowed_cpu() if cpu is None else cpu)
    text = read(f"/sys/devices/system/node/node{node}/meminfo") if node is not None else None
    if text is not None:
        info = _meminfo(text)
        total = info["MemTotal"]
        available = (
            info.get("MemFree", 0)
            + info.get("Active(file)", 0)
            + info.get("Inactive(file)", 0)
            + info.get("SReclaimable", 0)
        )
        source = f"NUMA node {node}"
    else:
        info = _meminfo(read("/proc/meminfo") or "")
        if "MemTotal" not in info:
            raise InvalidArgumentError(
                "cannot read this machine's memory (/proc/meminfo): name the device with --gpu"
            )
        total, available, source = info["MemTotal"], info.get("MemAvailable", 0), "/proc/meminfo"
    limit = _int_file(read, "/sys/fs/cgroup/memory.max")
    usage = _int_file(read, "/sys/fs/cgroup/memory.current") if limit is not None else None
    if limit is None:
        limit = _int_file(read, "/sys/fs/cgroup/memory/memory.limit_in_bytes")
        if limit is not None and limit >= _CGROUP_V1_UNLIMITED:
            limit = None
        if limit is not None:
            usage = _int_file(read, "/sys/fs/cgroup/memory/memory.usage_in_bytes")
    if limit is not None and limit < total:
        total = limit
        available = max(0, min(available, limit - (usage or 0)))
        source += ", cgroup limit"
    return total, available, source


def detect_cpu(read: ReadText = read_text, cpu: int | None = None) -> DetectedHardware:
    """The host CPU as vLLM's CPU backend sees it."""
    info = read("/proc/cpuinfo") or ""
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.MULTILINE)
    flags_line = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", info, re.MULTILINE)
    flags = set(flags_line.group(1).split()) if flags_line else set()
    isa = tuple(f for f in _ISA_FLAGS if f in flags)
    total, available, where = host_memory(read, cpu)
    name = f"CPU ({model.group(1).strip()})" if model else "CPU"
    device = cpu_device(
        name=name,
        memory_bytes=total,
        isa_flags=isa,
        source=f"detected: /proc/cpuinfo, memory of {where}",
    )
    return DetectedHardware(
        device=device,
        num_devices=1,
        is_cpu=True,
        description=f"{name}, {total / GIB_BYTES:.2f} GiB ({where}), "
        f"{available / GIB_BYTES:.2f} GiB available, ISA {' '.join(isa) or 'baseline'}",
        available_memory_bytes=available,
    )


def detect(
    gpu: str | None,
    *,
    nvml: Callable[[], NvmlFacts] | None = None,
    catalog_get: Callable[[str], GpuSpec] | None = None,
    read: ReadText = read_text,
) -> DetectedHardware:
    """``--gpu auto`` (or none): NVIDIA GPUs through NVML, else the CPU. ``--gpu cpu``: the
    CPU. ``--gpu NAME``: that catalog GPU (as many as NVML sees of it, at least one)."""
    if catalog_get is None:
        from servefit.adapters.catalog import gpu_catalog

        catalog_get = gpu_catalog().get
    wanted = (gpu or "auto").strip().lower()
    if wanted in CPU_NAMES:
        return detect_cpu(read)
    if nvml is None:
        from servefit.preflight.probes import probe_nvml

        nvml = probe_nvml
    if wanted == "auto":
        return detect_gpus(nvml(), catalog_get) or detect_cpu(read)
    device = catalog_get(gpu or "")
    return DetectedHardware(
        device=device, num_devices=1, is_cpu=False, description=f"{device.name} (--gpu)"
    )
