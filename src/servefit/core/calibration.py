"""Calibration: measured ceilings and step times -> efficiency factors that reproduce them.

Given the datasheet of the device (or, for a device without one, its measured ceilings),
microbenchmark ceilings and a set of measured engine steps (a synthetic stack of the
model's layers), the fit is:

1. ``memory_efficiency`` = measured read bandwidth / datasheet bandwidth;
2. ``gemm_efficiency`` = best measured matmul FLOP/s in the model's dtype / datasheet peak;
3. ``attention_efficiency`` = measured prefill attention FLOP/s / datasheet peak;
4. ``step_overhead_s`` and one common scale on the three efficiencies, fitted together:
   measured ~ overhead + scale x (roofline time without overhead), by weighted least
   squares on relative errors (scaling every efficiency scales every roofline time).

All inputs are numbers; the measuring happens in :mod:`servefit.calibrate`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from servefit.core.ops import StepShape
from servefit.core.roofline import EfficiencyProfile
from servefit.errors import InvalidArgumentError

MAX_EFFICIENCY = 1.0
MIN_EFFICIENCY = 0.02


@dataclass(frozen=True, slots=True, kw_only=True)
class StepPoint:
    label: str
    shape: StepShape
    measured_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Ceilings:
    """What the microbenchmarks reached."""

    read_bandwidth_bytes_per_s: float
    copy_bandwidth_bytes_per_s: float
    matmul_flops_per_s: dict[str, float]  # by dtype: bf16, fp16, fp32, tf32, fp8
    attention_flops_per_s: float  # prefill (causal, q_len = kv_len)
    launch_overhead_s: float
    decode_attention_bytes_per_s: float = 0.0  # one query per sequence over a KV cache
    projection_flops_per_s: dict[str, float] = field(default_factory=dict)  # "MxKxN" -> FLOP/s


@dataclass(frozen=True, slots=True, kw_only=True)
class FitResult:
    profile: EfficiencyProfile
    ceiling_scale: float  # > 1 when a device without a datasheet ran faster than its ceilings
    before_s: tuple[float, ...]  # predictions with the starting profile
    after_s: tuple[float, ...]  # predictions with the fitted profile
    measured_s: tuple[float, ...]

    @property
    def median_error_before(self) -> float:
        return _median_abs_rel(self.before_s, self.measured_s)

    @property
    def median_error_after(self) -> float:
        return _median_abs_rel(self.after_s, self.measured_s)


def _median_abs_rel(predicted: Sequence[float], measured: Sequence[float]) -> float:
    errors = sorted(abs(p - m) / m for p, m in zip(predicted, measured, strict=True))
    if not errors:
        return 0.0
    mid = len(errors) // 2
    return errors[mid] if len(errors) % 2 else (errors[mid - 1] + errors[mid]) / 2


def _clamp(value: float) -> float:
    return min(MAX_EFFICIENCY, max(MIN_EFFICIENCY, value))


def _fit_affine(bare: Sequence[float], measured: Sequence[float]) -> tuple[float, float]:
    """(overhead >= 0, scale > 0) minimising sum(((overhead + scale x bare - m) / m)^2).
    Scaling every efficiency by 1 / scale scales every roofline time by scale, so the
    prediction is affine in the two unknowns."""
    w2 = [1.0 / (m * m) for m in measured]
    s1 = sum(w2)
    sb = sum(w * b for w, b in zip(w2, bare, strict=True))
    sbb = sum(w * b * b for w, b in zip(w2, bare, strict=True))
    sm = sum(w * m for w, m in zip(w2, measured, strict=True))
    sbm = sum(w * b * m for w, b, m in zip(w2, bare, measured, strict=True))
    det = s1 * sbb - sb * sb
    if det > 0:
        overhead = (sbb * sm - sb * sbm) / det
        scale = (s1 * sbm - sb * sm) / det
        if overhead >= 0 and scale > 0:
            return overhead, scale
    scale = sbm / sbb if sbb > 0 else 1.0  # no intercept
    return 0.0, scale if scale > 0 else 1.0


def efficiencies_from_ceilings(
    ceilings: Ceilings,
    *,
    datasheet_bandwidth_bytes_per_s: float,
    datasheet_peak_flops_per_s: float,
    dtype: str,
) -> tuple[float, float, float]:
    """(memory, gemm, attention) efficiency: measured ceiling over datasheet."""
    if datasheet_bandwidth_bytes_per_s <= 0 or datasheet_peak_flops_per_s <= 0:
        raise InvalidArgumentError("datasheet bandwidth and peak must be positive")
    matmul = ceilings.matmul_flops_per_s.get(dtype) or max(ceilings.matmul_flops_per_s.values())
    return (
        _clamp(ceilings.read_bandwidth_bytes_per_s / datasheet_bandwidth_bytes_per_s),
        _clamp(matmul / datasheet_peak_flops_per_s),
        _clamp(ceilings.attention_flops_per_s / datasheet_peak_flops_per_s),
    )


Predict = Callable[[EfficiencyProfile, StepShape, float], float]  # (profile, step, ceiling scale)


def fit_profile(
    start: EfficiencyProfile,
    ceilings: Ceilings,
    points: Sequence[StepPoint],
    predict_s: Predict,
    *,
    datasheet_bandwidth_bytes_per_s: float,
    datasheet_peak_flops_per_s: float,
    dtype: str,
    can_raise_ceilings: bool = False,
) -> FitResult:
    """Fit the efficiency factors of ``start`` to the ceilings and the step points.

    ``predict_s(profile, shape, ceiling_scale)`` times a step on the device whose bandwidth
    and peaks are multiplied by ``ceiling_scale``. With a datasheet no efficiency may exceed
    1. Without one (``can_raise_ceilings``: measured ceilings stand in for the peaks) the
    model's steps may run faster than the microbenchmarks (small weights stay in cache):
    then the ceilings are raised instead; only ceiling x efficiency matters."""
    if not points:
        raise InvalidArgumentError("calibration needs at least one measured step")
    memory, gemm, attention = efficiencies_from_ceilings(
        ceilings,
        datasheet_bandwidth_bytes_per_s=datasheet_bandwidth_bytes_per_s,
        datasheet_peak_flops_per_s=datasheet_peak_flops_per_s,
        dtype=dtype,
    )
    measured = tuple(p.measured_s for p in points)
    before = tuple(predict_s(start, p.shape, 1.0) for p in points)
    profile = replace(
        start,
        memory_efficiency=memory,
        gemm_efficiency=gemm,
        attention_efficiency=attention,
        step_overhead_s=0.0,
        per_seq_overhead_s=0.0,
        is_calibrated=True,
    )
    # 4. measured ~ overhead + scale x roofline: weighted least squares on relative errors
    bare = [predict_s(profile, p.shape, 1.0) for p in points]
    overhead, scale = _fit_affine(bare, measured)
    wanted = (memory / scale, gemm / scale, attention / scale)
    ceiling_scale = max(1.0, *wanted) if can_raise_ceilings else 1.0
    profile = replace(
        profile,
        step_overhead_s=overhead,
        memory_efficiency=_clamp(wanted[0] / ceiling_scale),
        gemm_efficiency=_clamp(wanted[1] / ceiling_scale),
        attention_efficiency=_clamp(wanted[2] / ceiling_scale),
    )
    after = tuple(predict_s(profile, p.shape, ceiling_scale) for p in points)
    return FitResult(
        profile=profile,
        ceiling_scale=ceiling_scale,
        before_s=before,
        after_s=after,
        measured_s=measured,
    )
