"""The roofline: an operator row becomes time, and says what bounds it.

For one row::

    compute_s = FLOPs / (peak FLOP/s of the dtype the kernel really runs in x compute eff.)
    memory_s  = bytes / (memory bandwidth x memory efficiency)
    comm_s    = collectives x latency + bytes on the wire / (link bandwidth x link eff.)
    time_s    = max(compute_s, memory_s) + comm_s

A step is the sum of its rows plus a fixed per-step overhead (scheduling, kernel launches,
sampling) and a per-sequence overhead. The efficiency factors and overheads are named, live
in ``servefit/data/efficiency.toml`` per hardware class and engine with their source, and
appear in every prediction's assumptions.

The kernel's dtype falls back when the hardware lacks the format: FP8 weights on Ampere run
through weight-only kernels in 16-bit (vLLM's Marlin), FP4 without FP4 tensor cores likewise,
int8 without int8 tensor cores too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from functools import lru_cache

from servefit.core.hardware import GpuSpec, hardware_class
from servefit.core.ops import ModelCoeffs, OpCost, OpKind, StepShape, step_ops
from servefit.errors import ConfigError, InvalidArgumentError

# When a device publishes no FLOP/s figure at all, assume this many FLOPs per byte of
# bandwidth (the ridge point of typical accelerators lies between 100 and 300).
UNKNOWN_COMPUTE_FLOPS_PER_BYTE = 100.0


class Bound(StrEnum):
    COMPUTE = "compute"
    MEMORY = "memory bandwidth"
    INTERCONNECT = "interconnect"
    OVERHEAD = "overhead"
    CAPACITY = "KV capacity"


@dataclass(frozen=True, slots=True, kw_only=True)
class EfficiencyProfile:
    """Named efficiency factors of one hardware class under one engine."""

    hardware_class: str
    engine: str
    gemm_efficiency: float  # achieved / peak FLOP/s of large matrix multiplies
    attention_efficiency: float  # achieved / peak FLOP/s of prefill attention kernels
    memory_efficiency: float  # achieved / datasheet bandwidth when streaming weights and KV
    step_overhead_s: float  # fixed cost of one engine step (scheduler, launches, sampling)
    per_seq_overhead_s: float  # added per sequence in the step (bookkeeping, detokenizing)
    request_overhead_s: float  # added once to each request's TTFT (HTTP, tokenizing, queueing)
    collective_latency_s: float  # one tensor-parallel all-reduce of a small message
    interconnect_efficiency: float  # achieved / quoted one-way link bandwidth
    internode_bandwidth_bytes_per_s: float  # per GPU, between nodes (pipeline stages)
    # fixed cost of one MoE layer per step beyond its FLOPs and bytes: the router, top-k,
    # token sorting and permutation kernels, and grouped GEMMs that underfill the GPU
    moe_layer_overhead_s: float = 0.0
    low_bit_memory_efficiency: float = 1.0  # x memory efficiency for < 8-bit weights (dequant)
    low_bit_compute_efficiency: float = 1.0  # x GEMM efficiency of matmuls with < 8-bit
    # weights (dequantized into a 16-bit matmul, or on FP4 tensor cores)
    unpublished_flops_per_byte: float = UNKNOWN_COMPUTE_FLOPS_PER_BYTE  # no FLOP/s published
    # achieved / datasheet bandwidth of the attention kernels reading the KV cache (decode
    # at large batch and long context is mostly this); None: memory_efficiency, the
    # weight-streaming figure that batch-1 decode measures
    kv_memory_efficiency: float | None = None
    # the fixed cost of one speculative draft pass inside a step (input preparation and the
    # draft's sampling between graph replays); None: a whole step's overhead
    draft_pass_overhead_s: float | None = None
    source: str = ""
    is_calibrated: bool = False

    def __post_init__(self) -> None:
        for name in (
            "gemm_efficiency",
            "attention_efficiency",
            "memory_efficiency",
            "interconnect_efficiency",
            "low_bit_memory_efficiency",
            "low_bit_compute_efficiency",
            "kv_memory_efficiency",
        ):
            value = getattr(self, name)
            if value is None and name == "kv_memory_efficiency":
                continue
            if not 0 < value <= 1:
                raise ConfigError(
                    f"efficiency profile {self.hardware_class}/{self.engine}: {name} must be "
                    f"in (0, 1], got {value}"
                )
        for name in (
            "step_overhead_s",
            "per_seq_overhead_s",
            "request_overhead_s",
            "collective_latency_s",
            "moe_layer_overhead_s",
            "draft_pass_overhead_s",
        ):
            if (getattr(self, name) or 0.0) < 0:
                raise ConfigError(
                    f"efficiency profile {self.hardware_class}/{self.engine}: {name} must be >= 0"
                )

    @property
    def label(self) -> str:
        kind = "calibrated" if self.is_calibrated else "datasheet peaks x fitted factors"
        return f"{self.hardware_class}/{self.engine} ({kind})"

    def describe(self) -> tuple[str, ...]:
        return (
            f"efficiency profile {self.hardware_class}/{self.engine}: GEMM "
            f"{self.gemm_efficiency:.0%} of peak, attention {self.attention_efficiency:.0%}, "
            f"memory {self.memory_efficiency:.0%} of bandwidth"
            + (
                f" (KV-cache reads {self.kv_memory_efficiency:.0%})"
                if self.kv_memory_efficiency is not None
                else ""
            )
            + f", {self.step_overhead_s * 1e3:.2f} ms per step + "
            f"{self.per_seq_overhead_s * 1e6:.0f} us per sequence, "
            f"{self.request_overhead_s * 1e3:.1f} ms per request"
            + (f" ({self.source})" if self.source else ""),
        )


def default_engine(gpu: GpuSpec) -> str:
    """vLLM does not run on Apple GPUs; people there use MLX (or llama.cpp)."""
    return "mlx" if gpu.vendor == "apple" else "vllm"


@dataclass(frozen=True, slots=True)
class EfficiencyTable:
    """The efficiency profiles of every hardware class and engine."""

    profiles: tuple[EfficiencyProfile, ...]

    def for_gpu(self, gpu: GpuSpec, engine: str | None = None) -> EfficiencyProfile:
        """The most specific profile: (class, engine), (class, *), (*, engine), (*, *)."""
        cls = hardware_class(gpu)
        eng = (engine or default_engine(gpu)).lower()
        for want_cls, want_eng in ((cls, eng), (cls, "*"), ("*", eng), ("*", "*")):
            for p in self.profiles:
                if p.hardware_class == want_cls and p.engine == want_eng:
                    if want_eng == "*":
                        return replace(p, engine=eng)
                    return p
        engines = sorted({p.engine for p in self.profiles} - {"*"})
        raise InvalidArgumentError(
            f"no efficiency profile for engine {eng!r} on {gpu.name}; known engines: "
            f"{', '.join(engines)}"
        )

    @property
    def engines(self) -> tuple[str, ...]:
        return tuple(sorted({p.engine for p in self.profiles} - {"*"}))


def profile_from_row(row: dict[str, object]) -> EfficiencyProfile:
    known = set(EfficiencyProfile.__dataclass_fields__)
    unknown = sorted(set(row) - known)
    if unknown:
        raise ConfigError(f"efficiency profile row has unknown fields: {unknown}")
    try:
        return EfficiencyProfile(**row)  # type: ignore[arg-type]
    except TypeError as exc:
        raise ConfigError(f"efficiency profile row {row!r}: {exc}") from None


# ---------------------------------------------------------------------------------------
# peaks


_FALLBACK = {
    "fp4": ("fp4", "bf16"),
    "fp8": ("fp8", "bf16"),
    "int8": ("int8", "bf16"),
    "bf16": ("bf16", "fp16", "fp32"),
    "fp16": ("fp16", "bf16", "fp32"),
    "fp32": ("fp32",),
}


def _peak_of(gpu: GpuSpec, dtype: str) -> float | None:
    return {
        "fp4": gpu.fp4_flops_per_s,
        "fp8": gpu.fp8_flops_per_s,
        "int8": gpu.int8_ops_per_s,
        "bf16": gpu.bf16_flops_per_s,
        "fp16": gpu.fp16_flops_per_s,
        "fp32": gpu.fp32_flops_per_s,
    }.get(dtype)


def kernel_dtype(gpu: GpuSpec, dtype: str) -> str:
    """The dtype the matmul really runs in on this device."""
    for candidate in _FALLBACK.get(dtype, ("bf16", "fp16", "fp32")):
        if _peak_of(gpu, candidate):
            return candidate
    return "unknown"


def peak_flops_per_s(
    gpu: GpuSpec, dtype: str, unpublished_flops_per_byte: float = UNKNOWN_COMPUTE_FLOPS_PER_BYTE
) -> float:
    """Dense peak of the kernel's real dtype. A device whose vendor publishes no FLOP/s
    (Apple) gets its bandwidth times the class's fitted FLOPs per byte."""
    real = kernel_dtype(gpu, dtype)
    peak = _peak_of(gpu, real)
    if peak:
        return peak
    return gpu.memory_bandwidth_bytes_per_s * unpublished_flops_per_byte


def link_bandwidth_bytes_per_s(gpu: GpuSpec, link: str, profile: EfficiencyProfile) -> float:
    """One-way bandwidth of the link a collective uses (vendors quote both ways summed)."""
    if link == "inter":
        return profile.internode_bandwidth_bytes_per_s
    both_ways = gpu.interconnect_bandwidth_bytes_per_s or gpu.pcie_bandwidth_bytes_per_s
    if not both_ways:
        both_ways = 64e9  # PCIe 4.0 x16, both ways: the floor for a discrete GPU
    return both_ways / 2


# ---------------------------------------------------------------------------------------
# time


@dataclass(frozen=True, slots=True, kw_only=True)
class OpTime:
    """One cost row's time on a device: compute, memory, interconnect and fixed overhead."""

    op: OpCost
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float  # fixed kernel costs that neither FLOPs nor bytes explain
    kernel_dtype: str

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.comm_s + self.overhead_s

    @property
    def bound(self) -> Bound:
        if self.op.kind is OpKind.COMM:
            return Bound.INTERCONNECT
        return Bound.COMPUTE if self.compute_s >= self.memory_s else Bound.MEMORY


@lru_cache(maxsize=64)
def _peaks(gpu: GpuSpec, unpublished_flops_per_byte: float) -> dict[str, tuple[str, float]]:
    """(kernel dtype, dense peak) for every dtype a row may ask for, once per device."""
    dtypes = {*_FALLBACK, "unknown"}
    return {
        d: (kernel_dtype(gpu, d), peak_flops_per_s(gpu, d, unpublished_flops_per_byte))
        for d in dtypes
    }


def _op_seconds(
    op: OpCost, gpu: GpuSpec, profile: EfficiencyProfile, peak: float
) -> tuple[float, float, float, float]:
    """(compute, memory, comm, overhead) seconds of one row: the roofline's one formula."""
    compute = 0.0
    if op.flops:
        eff = (
            profile.attention_efficiency
            if op.kind in (OpKind.ATTENTION, OpKind.STATE)
            else profile.gemm_efficiency
        )
        if op.is_low_bit:  # 4-bit matmuls: dequantizing kernels or FP4 tensor cores
            eff *= profile.low_bit_compute_efficiency
        compute = op.flops / (peak * eff)
    weight_eff = 1.0
    if op.is_low_bit:  # dequantizing kernels stream packed weights less efficiently
        weight_eff *= profile.low_bit_memory_efficiency
    moved = op.memory_bytes + op.weight_bytes * (1 / weight_eff - 1)
    bandwidth_eff = profile.memory_efficiency
    if op.kind is OpKind.ATTENTION and profile.kv_memory_efficiency is not None:
        bandwidth_eff = profile.kv_memory_efficiency
    memory = moved / (gpu.memory_bandwidth_bytes_per_s * bandwidth_eff)
    comm = 0.0
    if op.kind is OpKind.COMM:
        link = link_bandwidth_bytes_per_s(gpu, op.link, profile)
        latency = profile.collective_latency_s * op.num_collectives
        comm = latency + op.comm_bytes / (link * profile.interconnect_efficiency)
    return compute, memory, comm, op.num_moe_layers * profile.moe_layer_overhead_s


def _peak_for(table: dict[str, tuple[str, float]], gpu: GpuSpec, dtype: str, unpublished: float):
    found = table.get(dtype)
    if found is None:  # a dtype outside the table: computed as the table would
        found = (kernel_dtype(gpu, dtype), peak_flops_per_s(gpu, dtype, unpublished))
    return found


def op_time(op: OpCost, gpu: GpuSpec, profile: EfficiencyProfile) -> OpTime:
    unpublished = profile.unpublished_flops_per_byte
    dtype, peak = _peak_for(_peaks(gpu, unpublished), gpu, op.compute_dtype, unpublished)
    compute, memory, comm, overhead = _op_seconds(op, gpu, profile, peak)
    return OpTime(
        op=op,
        compute_s=compute,
        memory_s=memory,
        comm_s=comm,
        overhead_s=overhead,
        kernel_dtype=dtype,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTime:
    """One step's time on the slowest path through the pipeline, split by what bounds it."""

    time_s: float
    compute_s: float  # time in compute-bound rows
    memory_s: float  # time in bandwidth-bound rows
    comm_s: float
    overhead_s: float

    @property
    def bound(self) -> Bound:
        parts = {
            Bound.COMPUTE: self.compute_s,
            Bound.MEMORY: self.memory_s,
            Bound.INTERCONNECT: self.comm_s,
            Bound.OVERHEAD: self.overhead_s,
        }
        return max(parts, key=lambda b: parts[b])


def step_time(
    m: ModelCoeffs, shape: StepShape, gpu: GpuSpec, profile: EfficiencyProfile
) -> StepTime:
    """Time of one step: pipeline stages run one after another for a given batch
    (no micro-batch overlap is assumed, so PP latency is the sum of its stages)."""
    compute = memory = comm = 0.0
    overhead = profile.step_overhead_s + profile.per_seq_overhead_s * shape.num_seqs
    unpublished = profile.unpublished_flops_per_byte
    peaks = _peaks(gpu, unpublished)
    for stage in range(m.pp):
        for op in step_ops(m, shape, stage):
            peak = _peak_for(peaks, gpu, op.compute_dtype, unpublished)[1]
            op_compute, op_memory, op_comm, op_overhead = _op_seconds(op, gpu, profile, peak)
            overhead += op_overhead
            if op.kind is OpKind.COMM:
                comm += op_comm
            elif op_compute >= op_memory:
                compute += op_compute
            else:
                memory += op_memory
    return StepTime(
        time_s=compute + memory + comm + overhead,
        compute_s=compute,
        memory_s=memory,
        comm_s=comm,
        overhead_s=overhead,
    )
