"""The calibration profile: a versioned JSON document, and how plans use it.

``plan``, ``compare`` and ``cost`` take ``--calibration FILE``: the device's *hardware*
factors (GEMM, attention and memory efficiency) come from the file; the *engine's*
overheads (per step, per sequence, per request, per MoE layer) stay those of the engine
profile, because the synthetic step runs plain PyTorch, not the serving engine.

A *device* calibration (``servefit calibrate --microbenchmarks-only``, ``scope`` "device")
has no model steps: its factors are the microbenchmark ceilings over the datasheet (stream
read / bandwidth, the best matmul in the dtype / peak, SDPA / peak) with no common scale
fitted to a model's steps, so they are upper bounds (a real step reaches less than a square
matmul or a stream). On a device without a datasheet (a CPU, Apple MPS, a GPU the catalog
lacks) the measured ceilings *are* the device's bandwidth and peaks and the factors are 1:
plans then run at the ceilings. ``step_overhead_s`` is the engine profile's (not measured).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servefit.adapters.catalog import gpu_catalog
from servefit.adapters.document import FrozenDoc
from servefit.core.hardware import GpuSpec
from servefit.core.hf_values import json_numbers
from servefit.core.roofline import EfficiencyProfile
from servefit.errors import ConfigError, ServefitError


class DeviceSection(FrozenDoc):
    backend: str
    name: str
    catalog_gpu: str | None  # the datasheet used, when the catalog knows the device
    compute_capability: str | None
    memory_bytes: int
    torch_version: str


class DatasheetSection(FrozenDoc):
    source: str
    memory_bandwidth_bytes_per_s: float
    peak_flops_per_s: dict[str, float]


class CeilingsSection(FrozenDoc):
    read_bandwidth_bytes_per_s: float
    copy_bandwidth_bytes_per_s: float
    matmul_flops_per_s: dict[str, float]
    attention_flops_per_s: float  # prefill attention (SDPA, causal)
    decode_attention_bytes_per_s: float  # KV bytes a decode step's attention reads per second
    projection_flops_per_s: dict[str, float]  # the model's gate/up projection at each batch
    launch_overhead_s: float


class PointSection(FrozenDoc):
    label: str
    kind: str
    batch: int
    tokens: int
    context: int
    measured_s: float  # the whole model, extrapolated per layer
    predicted_before_s: float
    predicted_after_s: float
    bound: str
    layers_built: int
    layers_total: int


class ProfileSection(FrozenDoc):
    gemm_efficiency: float
    attention_efficiency: float
    memory_efficiency: float
    step_overhead_s: float


class CalibrationDocument(FrozenDoc):
    schema_version: int
    servefit_version: str
    created_utc: str
    command: str
    model: str | None  # None for a device calibration without a model
    dtype: str
    plan: str
    device: DeviceSection
    datasheet: DatasheetSection
    measured: CeilingsSection
    points: list[PointSection]
    profile: ProfileSection
    median_error_before: float | None  # None without model steps
    median_error_after: float | None
    scope: str = "model"  # "model": fitted to a model's steps; "device": microbenchmarks only


def profile_section(p: EfficiencyProfile) -> ProfileSection:
    return ProfileSection(
        gemm_efficiency=p.gemm_efficiency,
        attention_efficiency=p.attention_efficiency,
        memory_efficiency=p.memory_efficiency,
        step_overhead_s=p.step_overhead_s,
    )


def load_calibration(path: Path) -> CalibrationDocument:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"--calibration {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:  # a binary file, or not UTF-8
        raise ConfigError(
            f"--calibration {path} is not a servefit calibration profile (not UTF-8 text: byte "
            f"0x{error.object[error.start]:02x} at offset {error.start}); make one with "
            "`servefit calibrate --output FILE`"
        ) from None
    try:
        doc = CalibrationDocument.model_validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ConfigError(
            f"--calibration {path} is not a servefit calibration profile ({where}: "
            f"{first['msg']}); make one with `servefit calibrate --output FILE`"
        ) from None
    if doc.schema_version != 1:
        raise ConfigError(f"--calibration {path}: unsupported schema_version {doc.schema_version}")
    problem = calibration_problem(doc)
    if problem:
        raise ConfigError(
            f"--calibration {path} is not a profile a calibration can have measured ({problem}); "
            "make one with `servefit calibrate --output FILE`"
        )
    if doc.device.catalog_gpu is not None:
        try:
            gpu_catalog().get(doc.device.catalog_gpu)
        except ServefitError:
            raise ConfigError(
                f"--calibration {path}: device.catalog_gpu {doc.device.catalog_gpu!r} is not in "
                "servefit's GPU catalog (`servefit gpus` lists it); calibrate again with this "
                "servefit"
            ) from None
    return doc


# figures that are rates of a device that exists: above zero
POSITIVE = ("bandwidth_bytes_per_s", "flops_per_s")
EFFICIENCIES = ("gemm_efficiency", "attention_efficiency", "memory_efficiency")


def calibration_problem(doc: CalibrationDocument) -> str | None:
    """The first figure no calibration measures: not finite, negative, a device rate or size
    of zero, an efficiency outside (0, 1] (each is a measured ceiling over the datasheet's)."""
    for where, value in json_numbers(dataclasses.asdict(doc)):
        if not math.isfinite(value) or value < 0:
            return f"{where}: {value}, not a finite non-negative number"
        names = where.split(".")
        if any(n.endswith(POSITIVE) for n in names) and value == 0:
            return f"{where}: 0, a device has more"
        if names[-1] in EFFICIENCIES and not 0 < value <= 1:
            return f"{where}: {value}, an efficiency is in (0, 1]"
    return None


def calibrated_profile(
    doc: CalibrationDocument, engine: EfficiencyProfile, path: str
) -> EfficiencyProfile:
    """The engine's profile with the device's measured hardware factors."""
    return replace(
        engine,
        gemm_efficiency=doc.profile.gemm_efficiency,
        attention_efficiency=doc.profile.attention_efficiency,
        memory_efficiency=doc.profile.memory_efficiency,
        is_calibrated=True,
        source=f"calibrated: {path} ({doc.device.name}, {doc.created_utc}); engine overheads "
        f"of {engine.hardware_class}/{engine.engine}",
    )


PEAK_FIELDS = {
    "fp32": "fp32_flops_per_s",
    "tf32": "tf32_flops_per_s",
    "bf16": "bf16_flops_per_s",
    "fp16": "fp16_flops_per_s",
    "fp8": "fp8_flops_per_s",
}


def peaks_of(gpu: GpuSpec) -> dict[str, float]:
    """A device's FLOP/s by dtype, for those it has."""
    return {d: v for d, f in PEAK_FIELDS.items() if (v := getattr(gpu, f))}


def measured_device(
    name: str, memory_bytes: int, bandwidth_bytes_per_s: float, peaks: dict[str, float], source: str
) -> GpuSpec:
    """A device without a datasheet: measured ceilings stand in for its peaks."""
    measured: dict[str, Any] = {field: peaks.get(dtype) for dtype, field in PEAK_FIELDS.items()}
    return GpuSpec(
        name=f"{name} (measured)",
        vendor="measured",
        memory_bytes=max(memory_bytes, 1),
        memory_bandwidth_bytes_per_s=bandwidth_bytes_per_s,
        source=source,
        is_custom=True,
        **measured,
    )


def calibrated_device(doc: CalibrationDocument) -> GpuSpec:
    """The catalog GPU the profile was measured on, or its measured ceilings as a device."""
    if doc.device.catalog_gpu:
        return gpu_catalog().get(doc.device.catalog_gpu)
    return measured_device(
        doc.device.name,
        doc.device.memory_bytes,
        doc.datasheet.memory_bandwidth_bytes_per_s,
        doc.datasheet.peak_flops_per_s,
        f"measured by servefit calibrate ({doc.created_utc})",
    )


def check_matches(doc: CalibrationDocument, gpu: GpuSpec) -> None:
    """A profile measured on one device says nothing about another."""
    measured_on = doc.device.catalog_gpu or f"{doc.device.name} (measured)"
    if measured_on != gpu.name:
        raise ConfigError(
            f"--calibration was measured on {measured_on}, not {gpu.name}: calibrate on that "
            "GPU, or drop --gpu to plan for the calibrated device"
        )
