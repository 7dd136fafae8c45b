"""Published performance measurements, and servefit's prediction of each.

A measurement file (``benchmarks/fidelity/speed.json`` is one) lists what someone
measured -- model, weights, GPU and layout, engine, workload, the metric and its value --
with the source and a quote. :func:`predict` runs the planner and the performance model on
the same description, so the same file validates the model (``benchmarks/perf_validation.py``)
and lets a user check it against their own numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servefit.adapters.catalog import efficiency_table, find_catalog_model, gpu_catalog
from servefit.core.engines import VllmAccountedEngine, get_engine
from servefit.core.hardware import GpuSpec
from servefit.core.hf_config import spec_from_hf_config
from servefit.core.model_spec import ModelSpec
from servefit.core.op_coeffs import ModelCoeffs
from servefit.core.ops import model_coeffs
from servefit.core.perf import prefill_time_s, simulate_load
from servefit.core.plan import CapacityPlan, ServeSettings, plan_capacity
from servefit.core.quant import WeightFormat, mlx_affine, nvfp4, uniform_quant
from servefit.core.quant_formats import GGUF_MXFP4_MOE
from servefit.core.quant_spec import gguf_quant
from servefit.core.roofline import EfficiencyProfile
from servefit.core.speculative import Acceptance, DraftNetwork, Speculation
from servefit.core.workload import LengthDist, Workload
from servefit.errors import ConfigError

Metric = Literal[
    "output_throughput_tok_per_s",
    "total_throughput_tok_per_s",
    "decode_tok_per_s_per_request",
    "tpot_s",
    "itl_s",
    "ttft_s",
    "prefill_tok_per_s",
]

# GGUF files, as llama.cpp writes them (servefit.core.quant_spec.gguf_quant)
GGUF_WEIGHTS = ("q4_0", "q8_0", "q4_k_m", "q5_k_m", "q6_k", "f16", GGUF_MXFP4_MOE)
# Whole-model weight formats for checkpoints that are not in a vLLM-style config (MLX
# exports, vendor FP4 exports).
WEIGHT_FORMATS: dict[str, WeightFormat] = {
    "mlx-4bit": mlx_affine(4, 64),
    "mlx-6bit": mlx_affine(6, 64),
    "mlx-8bit": mlx_affine(8, 64),
    "nvfp4": nvfp4(),
}


class MeasuredWorkload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_len: int = Field(ge=1)
    output_len: int = Field(ge=1)
    concurrency: int | None = Field(default=None, ge=1)
    request_rate_per_s: float | None = Field(default=None, gt=0)
    num_requests: int | None = Field(default=None, ge=1)
    range_ratio: float = 0.0


class MeasuredSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float | None = None
    # TensorRT-LLM's KV pool: this share of the memory free after loading (its default 0.9)
    kv_cache_free_gpu_memory_fraction: float | None = Field(default=None, gt=0, le=1)
    quantization: str | None = None  # vLLM --quantization (fp8 at load time)
    weights: str | None = None  # a GGUF type of GGUF_WEIGHTS or a format of WEIGHT_FORMATS
    enable_prefix_caching: bool = True
    # speculative decoding: vLLM's --speculative-config object, the draft checkpoint's
    # config.json (an EAGLE head or a draft model) when it has one, and the acceptance the
    # source measured (per position, or the mean acceptance length)
    speculative_config: dict[str, Any] | None = None
    draft_config: dict[str, Any] | None = None
    acceptance_per_position: list[float] | None = None
    mean_acceptance_length: float | None = None


class Measurement(BaseModel):
    """One published number with everything needed to reproduce the prediction."""

    model_config = ConfigDict(extra="forbid")

    id: str
    source_url: str
    source_title: str
    source_date: str
    quote: str
    model: str  # a servefit catalog id
    model_as_published: str
    gpu: str
    tp: int = 1
    pp: int = 1
    ep: int = 1
    replicas: int = 1  # the value covers this many identical data-parallel replicas
    engine: str
    engine_version: str
    settings: MeasuredSettings = Field(default_factory=MeasuredSettings)
    workload: MeasuredWorkload
    metric: Metric
    value: float = Field(gt=0)
    regime: str  # e.g. "batch-1 decode", "prefill", "saturated", "moderate load"
    notes: str = ""
    outlier_reason: str = ""  # why servefit misses this one by far (kept in the statistics)
    # whether data/efficiency.toml's factors were fitted with this measurement in sight; a
    # fresh one (false) judges the model out of sample in benchmarks/fidelity.py
    fitted: bool = True


class MeasurementFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1]
    description: str
    measurements: list[Measurement]


def load_measurements(path: Path) -> list[Measurement]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read measurements {path}: {exc}") from None
    return MeasurementFile.model_validate(raw).measurements


def _spec(m: Measurement) -> ModelSpec:
    entry = find_catalog_model(m.model)
    if entry is None:
        raise ConfigError(f"measurement {m.id}: {m.model} is not in servefit's model catalog")
    spec = spec_from_hf_config(entry.config, name=m.model, hf_quant_config=entry.hf_quant_config)
    weights = m.settings.weights
    if weights in GGUF_WEIGHTS:
        spec = replace(spec, quant=gguf_quant(weights))
    elif weights:
        fmt = WEIGHT_FORMATS.get(weights)
        if fmt is None:
            raise ConfigError(
                f"measurement {m.id}: unknown weights {weights!r}; known: "
                f"{', '.join((*GGUF_WEIGHTS, *WEIGHT_FORMATS))}"
            )
        spec = replace(spec, quant=uniform_quant(fmt, method=weights))
    return spec


def profile_for(m: Measurement) -> EfficiencyProfile:
    gpu = gpu_catalog().get(m.gpu)
    return efficiency_table().for_gpu(gpu, m.engine)


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedMeasurement:
    """What a prediction of ``measurement`` needs that no efficiency factor changes: the
    model, the capacity plan and the operator coefficients (a fit reuses them across the
    thousands of profiles it tries)."""

    measurement: Measurement
    gpu: GpuSpec
    plan: CapacityPlan
    coeffs: ModelCoeffs
    speculation: Speculation | None = None


def _plan(m: Measurement, spec: ModelSpec, gpu: GpuSpec, settings: ServeSettings) -> CapacityPlan:
    """The measured engine's plan: its own KV pool rule (TensorRT-LLM) and its name, which
    picks its admission rule in the simulation (servefit.core.engine_scheduling)."""
    engine = get_engine(m.engine)
    fraction = m.settings.kv_cache_free_gpu_memory_fraction
    if fraction is not None:
        if not isinstance(engine, VllmAccountedEngine) or engine.free_memory_fraction is None:
            raise ConfigError(
                f"measurement {m.id}: kv_cache_free_gpu_memory_fraction is TensorRT-LLM's "
                f"setting; {m.engine} sizes its KV cache otherwise"
            )
        engine = replace(engine, free_memory_fraction=fraction)
    if isinstance(engine, VllmAccountedEngine):
        return engine.plan(spec, gpu, settings, with_suggestions=False)
    # llama.cpp and MLX measurements are planned with vLLM's accounting, under their name
    return replace(plan_capacity(spec, gpu, settings, with_suggestions=False), engine=m.engine)


def prepare(m: Measurement) -> PreparedMeasurement:
    """Parse the model and plan the measured setup once (no efficiency factor enters)."""
    gpu = gpu_catalog().get(m.gpu)
    spec = _spec(m)
    w = m.workload
    s = m.settings
    longest = int((w.input_len + w.output_len) * (1 + w.range_ratio)) + 16
    settings = ServeSettings(
        tensor_parallel_size=m.tp,
        pipeline_parallel_size=m.pp,
        max_model_len=s.max_model_len or longest,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        gpu_memory_utilization=s.gpu_memory_utilization,
        kv_cache_dtype=s.kv_cache_dtype,
        quantization=s.quantization,
        enable_prefix_caching=s.enable_prefix_caching,
    )
    speculation = None
    if s.speculative_config is not None:
        settings, speculation = _speculative(m, spec, settings)
    plan = _plan(m, spec, gpu, settings)
    if not plan.starts:
        raise ConfigError(f"measurement {m.id}: the setup does not fit: {plan.problems}")
    coeffs = model_coeffs(
        plan.model, tp=m.tp, pp=m.pp, ep=m.ep, kv_cache_dtype=plan.settings.kv_cache_dtype
    )
    return PreparedMeasurement(
        measurement=m, gpu=gpu, plan=plan, coeffs=coeffs, speculation=speculation
    )


def _speculative(
    m: Measurement, spec: ModelSpec, settings: ServeSettings
) -> tuple[ServeSettings, Speculation]:
    """The measured run's speculation: its config, its draft checkpoint, the acceptance the
    source measured (a speed figure is predicted given the measured acceptance)."""
    from servefit.adapters.speculative_config import read_speculative_config
    from servefit.core import drafter

    s = m.settings
    assert s.speculative_config is not None
    sc = read_speculative_config(s.speculative_config)
    draft = None
    if s.draft_config is not None:
        draft_spec = spec_from_hf_config(s.draft_config, name=sc.model or "draft")
        size = s.draft_config.get("draft_vocab_size")
        draft = DraftNetwork(
            spec=draft_spec, draft_vocab_size=size if isinstance(size, int) else None
        )
    source = f"measured in {m.id}"
    if s.acceptance_per_position:
        acceptance = Acceptance(per_position=tuple(s.acceptance_per_position), source=source)
    elif s.mean_acceptance_length is not None:
        acceptance = Acceptance.from_mean_length(s.mean_acceptance_length, sc.k, source=source)
    else:
        raise ConfigError(f"measurement {m.id}: a speculative run needs its measured acceptance")
    speculation = Speculation(
        config=sc, acceptance=acceptance, draft=drafter.timing_spec(spec, sc, draft)
    )
    return replace(settings, speculative=sc, draft=draft), speculation


def predict(
    m: Measurement, profile: EfficiencyProfile | None = None, *, max_requests: int | None = None
) -> float:
    """servefit's prediction of ``m.metric`` for the measured setup (``max_requests`` caps
    the simulated requests: faster, for fitting)."""
    return predict_prepared(prepare(m), profile, max_requests=max_requests)


def predict_prepared(
    prepared: PreparedMeasurement,
    profile: EfficiencyProfile | None = None,
    *,
    max_requests: int | None = None,
) -> float:
    """Like :func:`predict`, for a measurement that :func:`prepare` has planned."""
    m, gpu, plan, coeffs = prepared.measurement, prepared.gpu, prepared.plan, prepared.coeffs
    profile = profile or efficiency_table().for_gpu(gpu, m.engine)
    w = m.workload
    if m.metric == "prefill_tok_per_s":
        chunk = plan.settings.max_num_batched_tokens
        seconds = prefill_time_s(coeffs, gpu, profile, w.input_len, 0, chunk)
        return w.input_len / seconds
    concurrency = w.concurrency
    if concurrency is None and w.request_rate_per_s is None:
        concurrency = w.num_requests  # everything sent at once (offline throughput runs)
        if max_requests and concurrency is not None:
            concurrency = min(concurrency, max_requests)
    workload = Workload(
        input_len=LengthDist(mean=w.input_len, range_ratio=w.range_ratio),
        output_len=LengthDist(mean=w.output_len, range_ratio=w.range_ratio),
        concurrency=concurrency,
        request_rate_per_s=w.request_rate_per_s,
        num_requests=(
            min(w.num_requests, max_requests) if w.num_requests and max_requests else w.num_requests
        ),
    )
    result = simulate_load(plan, coeffs, profile, workload, speculation=prepared.speculation)
    if m.metric == "output_throughput_tok_per_s":
        return result.output_throughput_tok_per_s * m.replicas
    if m.metric == "total_throughput_tok_per_s":
        return result.total_throughput_tok_per_s * m.replicas
    if m.metric in ("tpot_s", "itl_s"):
        return result.tpot_s.mean
    if m.metric == "decode_tok_per_s_per_request":
        return 1.0 / result.tpot_s.mean
    return result.ttft_s.mean
