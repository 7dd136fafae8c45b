"""Accelerators: the four numbers that decide serving (capacity, bandwidth, compute,
interconnect), and a catalog that finds a GPU by any name people use for it.

The catalog data (``servefit/data/gpus.toml``, every row with its source) is read by
:mod:`servefit.adapters.catalog`; this module only interprets the parsed rows.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from servefit.core import engine
from servefit.errors import ConfigError, InvalidArgumentError, UnknownGpuError


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One accelerator. FLOP/s figures are dense peaks (no 2:4 sparsity); ``None`` means the
    vendor publishes no figure (or the device lacks the format)."""

    name: str
    vendor: str
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float
    architecture: str = ""
    compute_capability: str | None = None
    usable_memory_bytes: int | None = None  # what the driver reports as total (nvidia-smi)
    usable_memory_source: str = ""
    memory_type: str = ""
    fp32_flops_per_s: float | None = None
    tf32_flops_per_s: float | None = None
    bf16_flops_per_s: float | None = None
    fp16_flops_per_s: float | None = None
    # GeForce cards run FP16 / FP8 at twice the rate with FP16 accumulate; the fields above
    # are FP32-accumulate rates (what cuBLAS and vLLM's kernels use), these the others
    fp16_fp16acc_flops_per_s: float | None = None
    fp8_fp16acc_flops_per_s: float | None = None
    fp8_flops_per_s: float | None = None
    int8_ops_per_s: float | None = None
    fp4_flops_per_s: float | None = None
    interconnect: str = ""
    interconnect_bandwidth_bytes_per_s: float | None = None
    pcie_bandwidth_bytes_per_s: float | None = None
    tdp_watts: float | None = None
    is_provisional: bool = False
    source: str = ""
    aliases: tuple[str, ...] = field(default=())
    is_custom: bool = False

    def __post_init__(self) -> None:
        if self.memory_bytes <= 0:
            raise InvalidArgumentError(f"GPU {self.name}: memory must be positive")
        if self.memory_bandwidth_bytes_per_s <= 0:
            raise InvalidArgumentError(f"GPU {self.name}: memory bandwidth must be positive")

    @property
    def cuda_total_bytes(self) -> int:
        """The total vLLM sees (``torch.cuda.mem_get_info``): nvidia-smi's total less what
        the driver keeps, or the marketed size less the same when no reading is known."""
        base = self.usable_memory_bytes or self.memory_bytes
        if self.vendor == "nvidia":
            return base - engine.DRIVER_RESERVED_BYTES
        return base

    @property
    def has_switched_nvlink(self) -> bool:
        """GPUs joined by NVLink through a switch or a full mesh (SXM boards, NVL72), not by
        PCIe or a two-GPU bridge: where NCCL opens many channels and vLLM fuses all-reduce.
        An unknown link (a custom GPU) counts as switched: the larger runtime estimate."""
        link = self.interconnect.lower()
        return not link.startswith(("pcie", "nvlink bridge"))

    @property
    def compute_capability_tuple(self) -> tuple[int, int] | None:
        if not self.compute_capability:
            return None
        major, _, minor = self.compute_capability.partition(".")
        return int(major), int(minor or 0)


_NUMERIC_FIELDS = (
    "memory_bandwidth_bytes_per_s",
    "fp32_flops_per_s",
    "tf32_flops_per_s",
    "bf16_flops_per_s",
    "fp16_flops_per_s",
    "fp16_fp16acc_flops_per_s",
    "fp8_fp16acc_flops_per_s",
    "fp8_flops_per_s",
    "int8_ops_per_s",
    "fp4_flops_per_s",
    "interconnect_bandwidth_bytes_per_s",
    "pcie_bandwidth_bytes_per_s",
    "tdp_watts",
)
_KNOWN_FIELDS = frozenset(
    {
        "name",
        "vendor",
        "architecture",
        "compute_capability",
        "aliases",
        "memory_bytes",
        "usable_memory_bytes",
        "usable_memory_source",
        "memory_type",
        "interconnect",
        "is_provisional",
        "source",
        *_NUMERIC_FIELDS,
    }
)


def gpu_from_row(row: Mapping[str, Any]) -> GpuSpec:
    unknown = sorted(set(row) - _KNOWN_FIELDS)
    if unknown:
        raise ConfigError(f"GPU catalog row {row.get('name')!r} has unknown fields: {unknown}")
    try:
        figures: dict[str, Any] = {k: float(row[k]) for k in _NUMERIC_FIELDS if k in row}
        return GpuSpec(
            name=str(row["name"]),
            vendor=str(row["vendor"]),
            architecture=str(row.get("architecture", "")),
            compute_capability=row.get("compute_capability"),
            aliases=tuple(str(a) for a in row.get("aliases", ())),
            memory_bytes=int(row["memory_bytes"]),
            usable_memory_bytes=row.get("usable_memory_bytes"),
            usable_memory_source=str(row.get("usable_memory_source", "")),
            memory_type=str(row.get("memory_type", "")),
            interconnect=str(row.get("interconnect", "")),
            is_provisional=bool(row.get("is_provisional", False)),
            source=str(row.get("source", "")),
            **figures,
        )
    except KeyError as missing:
        raise ConfigError(f"GPU catalog row {row.get('name')!r} lacks {missing}") from None


def normalise_gpu_name(name: str) -> str:
    """Forgiving key: case, spaces, dashes and underscores do not matter."""
    return re.sub(r"[\s_\-]+", "", name.strip().lower())


@dataclass(frozen=True, slots=True)
class GpuCatalog:
    """The GPU catalog: every device, and an index by normalised name and alias."""

    gpus: tuple[GpuSpec, ...]
    _index: Mapping[str, GpuSpec]

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> GpuCatalog:
        gpus = tuple(gpu_from_row(r) for r in rows)
        index: dict[str, GpuSpec] = {}
        for gpu in gpus:
            for key in (gpu.name, *gpu.aliases):
                norm = normalise_gpu_name(key)
                other = index.get(norm)
                if other is not None and other is not gpu:
                    raise ConfigError(
                        f"GPU catalog: name {key!r} is used by {other.name} and {gpu.name}"
                    )
                index[norm] = gpu
        return cls(gpus, index)

    def get(self, name: str) -> GpuSpec:
        """Look a GPU up by its name or any alias; unknown names get suggestions."""
        gpu = self._index.get(normalise_gpu_name(name))
        if gpu is not None:
            return gpu
        close = difflib.get_close_matches(
            normalise_gpu_name(name), list(self._index), n=8, cutoff=0.5
        )
        names = list(dict.fromkeys(self._index[c].name for c in close))[:4]
        hint = f" Did you mean: {', '.join(names)}?" if names else ""
        raise UnknownGpuError(
            f"unknown GPU {name!r}.{hint} `servefit gpus` lists the catalog; describe another "
            "device with --gpu-memory-gib and --gpu-bandwidth-gbps."
        )

    def __len__(self) -> int:
        return len(self.gpus)


def custom_gpu(
    *,
    memory_bytes: int,
    memory_bandwidth_bytes_per_s: float,
    bf16_flops_per_s: float | None = None,
    name: str = "custom",
    base: GpuSpec | None = None,
) -> GpuSpec:
    """A device described by flags; unspecified figures come from ``base`` when given."""
    return GpuSpec(
        name=name if base is None else f"{base.name} (custom)",
        vendor=base.vendor if base else "custom",
        memory_bytes=memory_bytes,
        usable_memory_bytes=memory_bytes,
        memory_bandwidth_bytes_per_s=memory_bandwidth_bytes_per_s,
        compute_capability=base.compute_capability if base else None,
        bf16_flops_per_s=bf16_flops_per_s
        if bf16_flops_per_s
        else (base.bf16_flops_per_s if base else None),
        source="described by command-line flags",
        is_custom=True,
    )


def hardware_class(gpu: GpuSpec) -> str:
    """The efficiency class of a device: what its memory and software stack look like (the
    efficiency profiles and the error bands are kept per class)."""
    if gpu.vendor == "apple":
        return "apple"
    if gpu.vendor == "amd":
        return "amd"
    if gpu.vendor == "nvidia":
        return "nvidia-hbm" if gpu.memory_type.upper().startswith("HBM") else "nvidia-gddr"
    return "generic"
