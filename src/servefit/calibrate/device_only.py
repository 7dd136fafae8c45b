"""``servefit calibrate --microbenchmarks-only``: the device's ceilings without a model's steps.

The same microbenchmarks as a model calibration (read and copy bandwidth, matmul FLOP/s per
dtype the device supports, prefill and decode attention, launch overhead), at the model's
shapes when one is given (its projection widths, its attention heads) and at generic ones
otherwise (square matmuls, Llama-3.1-8B's attention). Nothing is built or fitted: the
document's profile is the ceilings over the datasheet (:func:`efficiencies_from_ceilings`),
which ``plan --calibration`` uses as it uses a fitted one. What that can and cannot set is
in :mod:`.profile`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import replace

from servefit import __version__
from servefit.adapters.catalog import efficiency_table
from servefit.calibrate.measure import pick_device
from servefit.calibrate.profile import CalibrationDocument, ProfileSection
from servefit.calibrate.run import (
    Plan,
    datasheet_for,
    measure_ceilings,
    measured_device_spec,
    model_dtype,
    native_dtype,
    sections,
)
from servefit.core.calibration import efficiencies_from_ceilings
from servefit.core.model_spec import ModelSpec
from servefit.core.roofline import peak_flops_per_s
from servefit.errors import CalibrationError


def run_microbenchmarks(
    spec: ModelSpec | None = None,
    *,
    engine: str | None = None,
    device_name: str | None = None,
    gpu_name: str | None = None,
    plan_name: str = "quick",
    command: str = "servefit calibrate --microbenchmarks-only",
    clock: Callable[[], float] | None = None,
) -> CalibrationDocument:
    """A device calibration (``scope`` "device"); ``spec`` only shapes the microbenchmarks."""
    device = pick_device(device_name)
    if spec is not None and device.backend == "cpu" and spec.dtype != "float32":
        spec = replace(spec, dtype="float32")  # as run_calibration: what a CPU runs well
    dtype = model_dtype(spec, device) if spec is not None else native_dtype(device)
    plan = Plan.named(plan_name)
    if clock is not None:
        plan = replace(plan, budget=replace(plan.budget, clock=clock))
    try:
        ceilings = measure_ceilings(device, spec, plan, dtype)
    except RuntimeError as error:  # out of memory, unsupported kernel
        raise CalibrationError(f"microbenchmarks failed on {device.name}: {error}") from None
    datasheet = datasheet_for(device, gpu_name)
    gpu = datasheet or measured_device_spec(device, ceilings)
    engine_profile = efficiency_table().for_gpu(gpu, engine)
    memory, gemm, attention = efficiencies_from_ceilings(
        ceilings,
        datasheet_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
        datasheet_peak_flops_per_s=peak_flops_per_s(
            gpu, dtype, engine_profile.unpublished_flops_per_byte
        ),
        dtype=dtype,
    )
    return CalibrationDocument(
        schema_version=1,
        servefit_version=__version__,
        created_utc=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        command=command,
        model=spec.name if spec is not None else None,
        dtype=dtype,
        plan=plan_name,
        scope="device",
        **sections(device, datasheet, gpu, ceilings),
        points=[],
        profile=ProfileSection(
            gemm_efficiency=gemm,
            attention_efficiency=attention,
            memory_efficiency=memory,
            step_overhead_s=engine_profile.step_overhead_s,  # not measured: the engine's
        ),
        median_error_before=None,
        median_error_after=None,
    )
