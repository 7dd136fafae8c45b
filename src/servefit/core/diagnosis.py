"""Bottleneck diagnosis: predictions + measurements + GPU samples -> what bounds a phase or
load level, the evidence, and the remedy (the seed's primer on reading a GPU while it
serves). Pure: every input is a number; the adapters gather them.

Rules, in order (several may hold at once):

- **capacity-bound**: preemptions, or requests waiting while the KV cache is nearly full
  ("OOM at high concurrency = KV budget, not weights: check max_num_seqs");
- **underutilised**: the GPU idles between steps (low utilisation, nothing waiting): the
  client, the scheduler or too little concurrency limits it;
- **bandwidth-bound decode**: decode reaches >= 50 % of the memory-bandwidth roofline, or
  the memory controller is busy while the tensor cores are not ("100 % memory, low
  compute = memory-bound decode: add batch, not FLOPs");
- **compute-bound prefill**: prefill reaches >= 35 % of the compute roofline or the tensor
  cores are busy ("prefill slow but decode fine = compute-bound prefill");
- **interconnect-bound**: tensor-parallel all-reduces take >= 25 % of a step;
- **slower than predicted** (measured > 1.5 x predicted) with clocks below their
  maximum or power at its limit: throttling; otherwise a setting to check.

Remedies are worded for the GPU planned: fp8 (weights, compute, KV cache) only where the
GPU has fp8 tensor cores (NVIDIA compute capability >= 8.9, or a catalog fp8 peak on other
vendors), with that GPU's own fp8 / 16-bit ratio. A measurement that cannot be the planned
deployment never reaches these rules (:mod:`servefit.core.evidence`); a roofline fraction
that overshoots 100 % within the measurement tolerance reads "at the roofline".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from servefit.core.hardware import GpuSpec

DECODE_BANDWIDTH_FRACTION = 0.5
PREFILL_COMPUTE_FRACTION = 0.35
IDLE_UTIL_PCT = 60.0
BUSY_MEMORY_PCT = 70.0
IDLE_TENSOR_PCT = 40.0
BUSY_TENSOR_PCT = 50.0
KV_FULL = 0.9
COMM_SHARE = 0.25
SLOWER_THAN_PREDICTED = 1.5
POWER_AT_LIMIT = 0.95


class Verdict(StrEnum):
    CAPACITY = "capacity-bound"
    UNDERUTILISED = "underutilised"
    BANDWIDTH = "bandwidth-bound"
    COMPUTE = "compute-bound"
    INTERCONNECT = "interconnect-bound"
    SLOWER = "slower than predicted"
    AS_PREDICTED = "as predicted"
    MISMATCH = "not this model on this GPU"  # the evidence check (core.evidence)


@dataclass(frozen=True, slots=True, kw_only=True)
class Observations:
    """What was measured; None where nothing was."""

    concurrency: float | None = None  # achieved requests in flight
    ttft_s: float | None = None
    tpot_s: float | None = None
    decode_bandwidth_fraction: float | None = None  # bytes per step / TPOT / datasheet BW
    prefill_compute_fraction: float | None = None  # prefill FLOPs / TTFT / datasheet peak
    kv_usage_max: float | None = None  # server /metrics, 0..1
    waiting_mean: float | None = None  # server /metrics: requests queued
    num_preemptions: int | None = None
    gpu_util_pct: float | None = None  # GPU samples, means over the run
    mem_util_pct: float | None = None
    tensor_active_pct: float | None = None
    power_fraction: float | None = None  # power / limit
    clock_fraction: float | None = None  # SM clock / its maximum in the run


@dataclass(frozen=True, slots=True, kw_only=True)
class Expectations:
    """What the performance model predicted for the same load."""

    ttft_s: float
    tpot_s: float
    comm_share: float  # of a decode step
    tensor_parallel_size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    verdict: Verdict
    phase: str  # "decode", "prefill", "load"
    evidence: str
    remedy: str


def has_fp8_tensor_cores(gpu: GpuSpec) -> bool:
    """fp8 matmuls in hardware: NVIDIA from compute capability 8.9 (Ada, Hopper, Blackwell);
    other vendors when the catalog publishes an fp8 peak (MI300X)."""
    if not gpu.fp8_flops_per_s:
        return False
    cc = gpu.compute_capability_tuple
    return cc >= (8, 9) if gpu.vendor == "nvidia" and cc is not None else True


def _fp8_speedup(gpu: GpuSpec) -> str:
    base = gpu.bf16_flops_per_s or gpu.fp16_flops_per_s
    if gpu.fp8_flops_per_s and base:
        return f"{gpu.fp8_flops_per_s / base:.1f}x the 16-bit tensor throughput on {gpu.name}"
    return f"fp8 tensor cores on {gpu.name}"


def _roofline(fraction: float) -> str:
    """A roofline fraction as the diagnosis states it: never above 100 % (the evidence check
    lets up to 10 % over pass as measurement noise: that is "at the roofline")."""
    return "at" if fraction >= 1 else f"at {fraction:.0%} of"


def _weight_quant(gpu: GpuSpec | None) -> str:
    if gpu is None or has_fp8_tensor_cores(gpu):
        return "quantize weights (fp8, int4) and the KV cache (fp8)"
    return f"quantize weights to int8 or int4 (AWQ, GPTQ: {gpu.name} has no fp8 tensor cores)"


def _kv_remedy(gpu: GpuSpec | None) -> str:
    if gpu is None or has_fp8_tensor_cores(gpu):
        return "use --kv-cache-dtype fp8, "
    return ""


def _prefill_remedy(gpu: GpuSpec | None) -> str:
    fp8 = ""
    if gpu is None:
        fp8 = "fp8 where the GPU has fp8 tensor cores, "
    elif has_fp8_tensor_cores(gpu):
        fp8 = f"fp8 ({_fp8_speedup(gpu)}), "
    return (
        "compute-bound prefill: prefix caching for shared prefixes and agent histories, "
        f"{fp8}shorter prompts, or more GPUs (tensor parallel) for long prompts"
    )


def diagnose(
    o: Observations, e: Expectations | None = None, *, gpu: GpuSpec | None = None
) -> tuple[Finding, ...]:
    """The findings, each remedy worded for ``gpu`` (None: generic wording)."""
    out: list[Finding] = []
    if (o.num_preemptions or 0) > 0 or (
        (o.waiting_mean or 0) > 0.5 and (o.kv_usage_max or 0) >= KV_FULL
    ):
        out.append(
            Finding(
                verdict=Verdict.CAPACITY,
                phase="load",
                evidence=f"{o.num_preemptions or 0} preemptions; KV cache up to "
                f"{(o.kv_usage_max or 0):.0%} full with {(o.waiting_mean or 0):.1f} requests "
                "waiting on average",
                remedy="the KV budget, not the weights, limits concurrency: cap --max-model-len "
                f"(or the context), check --max-num-seqs, {_kv_remedy(gpu)}or add GPUs "
                "(tensor parallel) or replicas",
            )
        )
    idle = o.gpu_util_pct is not None and o.gpu_util_pct < IDLE_UTIL_PCT
    if idle and (o.waiting_mean or 0) < 0.5:
        out.append(
            Finding(
                verdict=Verdict.UNDERUTILISED,
                phase="load",
                evidence=f"GPU busy {o.gpu_util_pct:.0f} % of the time with nothing waiting"
                + (f" at {o.concurrency:.1f} requests in flight" if o.concurrency else ""),
                remedy="the GPU waits on the client or the scheduler: raise concurrency (batching "
                "is nearly free while decode is bandwidth-bound), check the client's lag, keep "
                "async scheduling and CUDA graphs on",
            )
        )
    memory_busy = (
        o.mem_util_pct is not None
        and o.mem_util_pct >= BUSY_MEMORY_PCT
        and (o.tensor_active_pct is None or o.tensor_active_pct < IDLE_TENSOR_PCT)
    )
    if (o.decode_bandwidth_fraction or 0) >= DECODE_BANDWIDTH_FRACTION or memory_busy:
        parts = []
        if o.decode_bandwidth_fraction is not None:
            parts.append(
                f"decode runs {_roofline(o.decode_bandwidth_fraction)} the bandwidth roofline"
            )
        if memory_busy:
            parts.append(
                f"memory controller busy {o.mem_util_pct:.0f} %"
                + (
                    f", tensor cores {o.tensor_active_pct:.0f} %"
                    if o.tensor_active_pct is not None
                    else ""
                )
            )
        out.append(
            Finding(
                verdict=Verdict.BANDWIDTH,
                phase="decode",
                evidence="; ".join(parts),
                remedy="memory-bound decode: add batch (more concurrency), not FLOPs; "
                f"{_weight_quant(gpu)}; a faster-memory GPU or an MoE with fewer active bytes "
                "per token",
            )
        )
    tensor_busy = o.tensor_active_pct is not None and o.tensor_active_pct >= BUSY_TENSOR_PCT
    if (o.prefill_compute_fraction or 0) >= PREFILL_COMPUTE_FRACTION or tensor_busy:
        evidence = []
        if o.prefill_compute_fraction is not None:
            evidence.append(
                f"prefill runs {_roofline(o.prefill_compute_fraction)} the compute roofline"
            )
        if tensor_busy:
            evidence.append(f"tensor cores active {o.tensor_active_pct:.0f} %")
        out.append(
            Finding(
                verdict=Verdict.COMPUTE,
                phase="prefill",
                evidence="; ".join(evidence),
                remedy=_prefill_remedy(gpu),
            )
        )
    if e is not None and e.tensor_parallel_size > 1 and e.comm_share >= COMM_SHARE:
        out.append(
            Finding(
                verdict=Verdict.INTERCONNECT,
                phase="decode",
                evidence=f"all-reduces are {e.comm_share:.0%} of a decode step at TP "
                f"{e.tensor_parallel_size}",
                remedy="fewer tensor-parallel ranks and more data-parallel replicas, or GPUs "
                "joined by NVLink rather than PCIe",
            )
        )
    if e is not None and o.tpot_s is not None and o.tpot_s > SLOWER_THAN_PREDICTED * e.tpot_s:
        throttled = (o.power_fraction or 0) >= POWER_AT_LIMIT or (
            o.clock_fraction is not None and o.clock_fraction < 0.9
        )
        out.append(
            Finding(
                verdict=Verdict.SLOWER,
                phase="decode",
                evidence=f"time per output token {o.tpot_s * 1e3:.1f} ms vs "
                f"{e.tpot_s * 1e3:.1f} ms "
                "predicted" + (", power at its limit or clocks down" if throttled else ""),
                remedy="power or thermal throttling: check cooling and the power cap"
                if throttled
                else "check --enforce-eager (no CUDA graphs), the attention backend, and that "
                "the engine version matches the one modelled",
            )
        )
    if not out:
        out.append(
            Finding(
                verdict=Verdict.AS_PREDICTED,
                phase="load",
                evidence="no bound stands out in the measurements",
                remedy="nothing to fix: compare layouts with `servefit plan --num-gpus` for more",
            )
        )
    return tuple(out)
