"""``servefit calibrate``: measure this machine and fit the performance model to it.

1. pick the device (CUDA, Apple MPS or CPU) and find its datasheet in the catalog (by the
   name the driver reports), or take the measured ceilings as its datasheet;
2. microbenchmarks (:mod:`.measure`): read and copy bandwidth, matmul FLOP/s per dtype the
   device supports at the model's projection shapes, prefill attention, launch overhead;
3. a synthetic stack of the model's layers (:mod:`.synthetic`): prefill and decode steps;
4. the fit (:mod:`servefit.core.calibration`): efficiency factors from the ceilings, a
   fixed step cost and one scale so the predicted steps match the measured ones;
5. a versioned profile (:mod:`.profile`) that ``plan``, ``compare`` and ``cost`` accept
   with ``--calibration FILE``.

``--microbenchmarks-only`` (:mod:`.device_only`) stops after step 2.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace as dataclass_replace
from typing import Any

from servefit import __version__
from servefit.adapters.catalog import efficiency_table, gpu_catalog
from servefit.calibrate.measure import (
    Budget,
    Device,
    import_torch,
    measure_attention,
    measure_bandwidth,
    measure_decode_attention,
    measure_launch_overhead,
    measure_matmul,
    pick_device,
    supported_matmul_dtypes,
)
from servefit.calibrate.profile import (
    PEAK_FIELDS,
    CalibrationDocument,
    CeilingsSection,
    DatasheetSection,
    DeviceSection,
    PointSection,
    measured_device,
    peaks_of,
    profile_section,
)
from servefit.calibrate.synthetic import StepTiming, SyntheticModel, check_supported
from servefit.core.calibration import Ceilings, StepPoint, fit_profile
from servefit.core.hardware import GpuSpec
from servefit.core.model_spec import AttentionSpec, DenseMlpSpec, MlaSpec, ModelSpec, MoeSpec
from servefit.core.ops import StepShape, model_coeffs
from servefit.core.roofline import EfficiencyProfile, peak_flops_per_s, step_time
from servefit.errors import CalibrationError, UnknownGpuError


@dataclass(frozen=True, slots=True)
class Plan:
    """Which steps to measure, and how hard."""

    budget: Budget
    decode_batches: tuple[int, ...]  # also the batch sizes of the projection matmuls
    decode_context: int
    prefill_tokens: tuple[int, ...]
    layers: int

    @classmethod
    def named(cls, name: str, layers: int | None = None) -> Plan:
        plans = {
            "tiny": cls(Budget.named("tiny"), (1, 4), 64, (32, 128), 2),
            "quick": cls(Budget.named("quick"), (1, 8, 64), 1024, (512, 2048), 4),
            "full": cls(Budget.named("full"), (1, 8, 64, 256), 2048, (1024, 4096, 16384, 32768), 8),
        }
        plan = plans[name]
        return cls(
            plan.budget,
            plan.decode_batches,
            plan.decode_context,
            plan.prefill_tokens,
            layers or plan.layers,
        )


def datasheet_for(device: Device, gpu_name: str | None) -> GpuSpec | None:
    name = gpu_name or (device.name.removeprefix("NVIDIA ") if device.backend == "cuda" else None)
    if name is None:
        return None
    try:
        return gpu_catalog().get(name)
    except UnknownGpuError:
        if gpu_name:
            raise
        return None


def model_dtype(spec: ModelSpec, device: Device) -> str:
    if spec.dtype == "float32":
        return "fp32"
    return "fp16" if spec.dtype == "float16" else "bf16"


def native_dtype(device: Device) -> str:
    """What a device without a model is measured in: fp32 on a CPU (without bf16 matrix
    units it emulates bf16 slowly), bf16 where supported, else fp16."""
    if device.backend == "cpu":
        return "fp32"
    return "bf16" if "bf16" in supported_matmul_dtypes(device) else "fp16"


# The attention shape measured when the model has none (or there is no model): Llama-3.1-8B's.
GENERIC_ATTENTION = (32, 8, 128)  # query heads, KV heads, head dim


def attention_shape(spec: ModelSpec | None) -> tuple[int, int, int]:
    """(query heads, KV heads, head dim) of the model's first softmax or MLA layer (MLA
    prefill is expanded: one K per head of ``nope + rope``), or :data:`GENERIC_ATTENTION`."""
    for layer in spec.layers if spec else ():
        if isinstance(layer.mixer, AttentionSpec):
            a = layer.mixer
            return a.num_q_heads, a.num_kv_heads, a.head_dim
        if isinstance(layer.mixer, MlaSpec):
            m = layer.mixer
            return m.num_heads, m.num_heads, m.qk_nope_head_dim + m.qk_rope_head_dim
    return GENERIC_ATTENTION


def measure_ceilings(device: Device, spec: ModelSpec | None, plan: Plan, dtype: str) -> Ceilings:
    """The microbenchmarks, at the model's shapes (square matmuls and a generic attention
    shape without a model); ``dtype`` is the model's (or the device's native one)."""
    read, copy = measure_bandwidth(device, plan.budget)
    matmul: dict[str, float] = {}
    for mm_dtype in supported_matmul_dtypes(device):
        best = 0.0
        for size in plan.budget.matmul_sizes:
            # the model's own projection width at a prefill-sized batch of tokens; a CPU's
            # other dtypes (bf16 without matrix units runs ~100x slower than fp32: minutes at a
            # real model's width) at the budget's square sizes
            at_model = spec is not None and (device.backend != "cpu" or mm_dtype == dtype)
            k = spec.hidden_size if spec is not None and at_model else size
            best = max(best, measure_matmul(device, mm_dtype, size, k, k, plan.budget))
        matmul[mm_dtype] = best
    projections: dict[str, float] = {}
    if spec is not None:
        hidden, width = spec.hidden_size, _projection_width(spec)
        for batch in (*plan.decode_batches, *plan.prefill_tokens):
            key = f"{batch}x{hidden}x{width}"
            projections[key] = measure_matmul(device, dtype, batch, hidden, width, plan.budget)
    heads, kv_heads, head_dim = attention_shape(spec)
    attention = measure_attention(
        device,
        dtype,
        batch=1,
        heads=heads,
        kv_heads=kv_heads,
        q_len=max(plan.prefill_tokens),
        kv_len=max(plan.prefill_tokens),
        head_dim=head_dim,
        budget=plan.budget,
    )
    decode_attention = measure_decode_attention(
        device,
        dtype,
        batch=max(plan.decode_batches),
        heads=heads,
        kv_heads=kv_heads,
        kv_len=plan.decode_context,
        head_dim=head_dim,
        budget=plan.budget,
    )
    return Ceilings(
        decode_attention_bytes_per_s=decode_attention,
        projection_flops_per_s=projections,
        read_bandwidth_bytes_per_s=read,
        copy_bandwidth_bytes_per_s=copy,
        matmul_flops_per_s=matmul,
        attention_flops_per_s=attention,
        launch_overhead_s=measure_launch_overhead(device, plan.budget),
    )


def _projection_width(spec: ModelSpec) -> int:
    """The widest projection of the first layer with an MLP: the fused gate/up."""
    mlp = next((layer.mlp for layer in spec.layers if layer.mlp is not None), None)
    if isinstance(mlp, DenseMlpSpec):
        return mlp.intermediate_size * (2 if mlp.is_gated else 1)
    if isinstance(mlp, MoeSpec):
        return mlp.expert_intermediate_size * (2 if mlp.is_gated else 1)
    return spec.hidden_size


def measure_steps(device: Device, spec: ModelSpec, plan: Plan) -> list[StepTiming]:
    torch = import_torch()
    out: list[StepTiming] = []
    decode = SyntheticModel(
        spec,
        device,
        num_layers=plan.layers,
        max_batch=max(plan.decode_batches),
        max_ctx=plan.decode_context + 1,
    )
    for b in plan.decode_batches:
        out.append(
            decode.time_step(batch=b, tokens=1, context=plan.decode_context, budget=plan.budget)
        )
    del decode
    if device.backend == "cuda":
        torch.cuda.empty_cache()
    prefill = SyntheticModel(
        spec, device, num_layers=plan.layers, max_batch=1, max_ctx=max(plan.prefill_tokens)
    )
    for t in plan.prefill_tokens:
        out.append(prefill.time_step(batch=1, tokens=t, context=0, budget=plan.budget))
    return out


def _shape(t: StepTiming) -> StepShape:
    if t.kind == "decode":
        return StepShape(decode_contexts=(t.context,) * t.batch)
    return StepShape(prefill_chunks=((t.tokens, t.context),) * t.batch)


def measured_device_spec(device: Device, ceilings: Ceilings) -> GpuSpec:
    """A device without a datasheet: its measured ceilings stand in for the peaks."""
    return measured_device(
        device.name,
        device.memory_bytes,
        ceilings.read_bandwidth_bytes_per_s,
        ceilings.matmul_flops_per_s,
        "measured by servefit calibrate",
    )


def scaled(gpu: GpuSpec, factor: float) -> GpuSpec:
    """A measured device whose steps ran faster than its microbenchmarks (cache effects)."""
    peaks: dict[str, Any] = {PEAK_FIELDS[d]: v * factor for d, v in peaks_of(gpu).items()}
    return dataclass_replace(
        gpu,
        memory_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s * factor,
        source=f"{gpu.source}, x {factor:.2f}: the model's steps ran faster than the "
        "microbenchmarks (caches)",
        **peaks,
    )


def sections(
    device: Device, datasheet: GpuSpec | None, gpu: GpuSpec, ceilings: Ceilings
) -> dict[str, Any]:
    """The document's device, datasheet and measured sections."""
    torch = import_torch()
    return {
        "device": DeviceSection(
            backend=device.backend,
            name=device.name,
            catalog_gpu=datasheet.name if datasheet else None,
            compute_capability=device.compute_capability,
            memory_bytes=device.memory_bytes,
            torch_version=str(torch.__version__),
        ),
        "datasheet": DatasheetSection(
            source=gpu.source,
            memory_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
            peak_flops_per_s=peaks_of(gpu),
        ),
        "measured": CeilingsSection(
            read_bandwidth_bytes_per_s=ceilings.read_bandwidth_bytes_per_s,
            copy_bandwidth_bytes_per_s=ceilings.copy_bandwidth_bytes_per_s,
            matmul_flops_per_s=ceilings.matmul_flops_per_s,
            attention_flops_per_s=ceilings.attention_flops_per_s,
            decode_attention_bytes_per_s=ceilings.decode_attention_bytes_per_s,
            projection_flops_per_s=ceilings.projection_flops_per_s,
            launch_overhead_s=ceilings.launch_overhead_s,
        ),
    }


def run_calibration(
    spec: ModelSpec,
    start: EfficiencyProfile | None = None,
    *,
    engine: str | None = None,
    device_name: str | None = None,
    gpu_name: str | None = None,
    plan_name: str = "quick",
    layers: int | None = None,
    command: str = "servefit calibrate",
    clock: Callable[[], float] | None = None,
) -> CalibrationDocument:
    """``clock`` times the CPU and MPS runs (the wall clock when None; see :class:`Budget`)."""
    check_supported(spec)
    device = pick_device(device_name)
    if device.backend == "cpu" and spec.dtype != "float32":
        # CPUs without bf16 matrix units emulate it very slowly: measure what they run well
        spec = dataclass_replace(spec, dtype="float32")
    plan = Plan.named(plan_name, layers)
    if clock is not None:
        plan = dataclass_replace(plan, budget=dataclass_replace(plan.budget, clock=clock))
    dtype = model_dtype(spec, device)
    try:
        ceilings = measure_ceilings(device, spec, plan, dtype)
        timings = measure_steps(device, spec, plan)
    except RuntimeError as error:  # out of memory, unsupported kernel
        raise CalibrationError(
            f"calibration failed on {device.name}: {error} (--layers builds fewer layers; "
            "--microbenchmarks-only measures the device without building the model)"
        ) from None
    datasheet = datasheet_for(device, gpu_name)
    measured_gpu = measured_device_spec(device, ceilings)
    base = datasheet or measured_gpu
    if start is None:  # the engine's profile for this device's class: the starting point
        start = efficiency_table().for_gpu(base, engine)
    m = model_coeffs(spec)

    def predict_s(profile: EfficiencyProfile, shape: StepShape, ceiling_scale: float) -> float:
        gpu = base if ceiling_scale == 1.0 else scaled(base, ceiling_scale)
        return step_time(m, shape, gpu, profile).time_s

    points = [StepPoint(label=t.label, shape=_shape(t), measured_s=t.model_step_s) for t in timings]
    fit = fit_profile(
        start,
        ceilings,
        points,
        predict_s,
        datasheet_bandwidth_bytes_per_s=base.memory_bandwidth_bytes_per_s,
        datasheet_peak_flops_per_s=peak_flops_per_s(base, dtype, start.unpublished_flops_per_byte),
        dtype=dtype,
        can_raise_ceilings=datasheet is None,
    )
    gpu = base if fit.ceiling_scale == 1.0 else scaled(base, fit.ceiling_scale)
    return CalibrationDocument(
        schema_version=1,
        servefit_version=__version__,
        created_utc=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        command=command,
        model=spec.name,
        dtype=dtype,
        plan=plan_name,
        **sections(device, datasheet, gpu, ceilings),
        points=[
            PointSection(
                label=t.label,
                kind=t.kind,
                batch=t.batch,
                tokens=t.tokens,
                context=t.context,
                measured_s=t.model_step_s,
                predicted_before_s=before,
                predicted_after_s=after,
                bound=step_time(m, _shape(t), gpu, fit.profile).bound.value,
                layers_built=t.layers_built,
                layers_total=t.layers_total,
            )
            for t, before, after in zip(timings, fit.before_s, fit.after_s, strict=True)
        ],
        profile=profile_section(fit.profile),
        median_error_before=fit.median_error_before,
        median_error_after=fit.median_error_after,
    )
