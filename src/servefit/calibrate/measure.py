"""Microbenchmarks with PyTorch (CUDA, Apple MPS or CPU): the ceilings a device reaches.

Timing rules: device events on CUDA, synchronisation elsewhere; warm-up runs first; the
median of repeats; inputs rotate over several buffers larger than the caches so caches do
not flatter bandwidth; data is random, never zeros (sparsity-aware hardware and compressed
memory would flatter zeros too).

PyTorch is an optional extra (``pip install 'servefit[calibrate]'``); importing this module
without it raises a clear error.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servefit.errors import CalibrationError, InvalidArgumentError


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise CalibrationError(
            "servefit calibrate needs PyTorch: pip install 'servefit[calibrate]' "
            "(or any torch build for your device)"
        ) from None
    return torch


@dataclass(frozen=True, slots=True)
class Device:
    torch_device: Any
    backend: str  # cuda, mps, cpu
    name: str
    compute_capability: str | None
    memory_bytes: int

    def sync(self) -> None:
        torch = import_torch()
        if self.backend == "cuda":
            torch.cuda.synchronize(self.torch_device)
        elif self.backend == "mps":
            torch.mps.synchronize()


def pick_device(requested: str | None = None) -> Device:
    """``cuda``, ``mps`` or ``cpu``; the best available when None."""
    torch = import_torch()
    backend = requested
    if backend is None:
        if torch.cuda.is_available():
            backend = "cuda"
        elif getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            backend = "mps"
        else:
            backend = "cpu"
    if backend == "cuda":
        if not torch.cuda.is_available():
            raise CalibrationError("--device cuda: PyTorch sees no CUDA device")
        props = torch.cuda.get_device_properties(0)
        return Device(
            torch_device=torch.device("cuda", 0),
            backend="cuda",
            name=props.name,
            compute_capability=f"{props.major}.{props.minor}",
            memory_bytes=int(props.total_memory),
        )
    if backend == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise CalibrationError("--device mps: this PyTorch has no Apple MPS device")
        return Device(torch.device("mps"), "mps", "Apple GPU (MPS)", None, 0)
    if backend == "cpu":
        import os

        pages = os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
        size = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 0
        return Device(torch.device("cpu"), "cpu", "CPU", None, int(pages * size))
    raise InvalidArgumentError(f"--device must be cuda, mps or cpu, got {requested!r}")


def time_s(
    fn: Callable[[int], object],
    device: Device,
    *,
    warmup: int,
    repeats: int,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Median seconds of ``fn(i)`` (``i`` rotates inputs), after ``warmup`` calls; ``clock``
    times CPU and MPS runs (CUDA uses device events)."""
    torch = import_torch()
    for i in range(warmup):
        fn(i)
    device.sync()
    samples = []
    for i in range(repeats):
        if device.backend == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(warmup + i)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = clock()
            fn(warmup + i)
            device.sync()
            samples.append(clock() - t0)
    return statistics.median(samples)


def _dtype(name: str) -> Any:
    torch = import_torch()
    return {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "fp8": getattr(torch, "float8_e4m3fn", None),
    }[name]


@dataclass(frozen=True, slots=True)
class Budget:
    """How big and how often: ``quick`` for a one-minute run, ``tiny`` for tests; and which
    clock times CPU and MPS runs (the wall clock; a test on a shared CPU passes a per-thread
    CPU clock, so that other processes' load is not counted as this device's time)."""

    buffer_bytes: int
    rotate: int
    warmup: int
    repeats: int
    matmul_sizes: tuple[int, ...]
    clock: Callable[[], float] = time.perf_counter

    @classmethod
    def named(cls, name: str) -> Budget:
        return {
            "tiny": cls(64 * 2**20, 2, 2, 5, (128, 256)),
            "quick": cls(1 << 30, 3, 3, 10, (2048, 4096, 8192)),
            "full": cls(2 << 30, 4, 5, 20, (2048, 4096, 8192, 16384)),
        }[name]


def measure_bandwidth(device: Device, budget: Budget) -> tuple[float, float]:
    """(read-only, copy) bytes per second. A copy moves its size twice (read + write)."""
    torch = import_torch()
    n = budget.buffer_bytes // 4
    bufs = [torch.rand(n, device=device.torch_device) + 0.5 for _ in range(budget.rotate)]
    outs = [torch.empty_like(b) for b in bufs]
    r = budget.rotate
    read = time_s(
        lambda i: bufs[i % r].sum(),
        device,
        warmup=budget.warmup,
        repeats=budget.repeats,
        clock=budget.clock,
    )
    copy = time_s(
        lambda i: outs[i % r].copy_(bufs[(i + 1) % r]),
        device,
        warmup=budget.warmup,
        repeats=budget.repeats,
        clock=budget.clock,
    )
    size = n * 4
    return size / read, 2 * size / copy


def supported_matmul_dtypes(device: Device) -> tuple[str, ...]:
    if device.backend == "cpu":
        return ("fp32", "bf16")
    if device.backend == "mps":
        return ("fp32", "fp16", "bf16")
    major, minor = (int(x) for x in (device.compute_capability or "0.0").split("."))
    out = ["fp32", "fp16"]
    if major >= 8:
        out += ["tf32", "bf16"]
    if (major, minor) >= (8, 9) and _dtype("fp8") is not None:
        out.append("fp8")
    return tuple(out)


def measure_matmul(device: Device, dtype: str, m: int, k: int, n: int, budget: Budget) -> float:
    """FLOP/s of an (m x k) @ (k x n) product in ``dtype``."""
    torch = import_torch()
    dev = device.torch_device
    r = budget.rotate
    if dtype == "fp8":
        a = [(torch.randn(m, k, device=dev) * 0.5).to(_dtype("fp8")) for _ in range(r)]
        b = [(torch.randn(n, k, device=dev) * 0.5).to(_dtype("fp8")).t() for _ in range(r)]
        one = torch.ones((), device=dev)

        def run(i: int) -> object:
            return torch._scaled_mm(
                a[i % r], b[i % r], scale_a=one, scale_b=one, out_dtype=torch.bfloat16
            )

    else:
        if device.backend == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        t = _dtype(dtype)
        a = [torch.randn(m, k, device=dev, dtype=t) for _ in range(r)]
        b = [torch.randn(k, n, device=dev, dtype=t) for _ in range(r)]

        def run(i: int) -> object:
            return a[i % r] @ b[i % r]

    seconds = time_s(run, device, warmup=budget.warmup, repeats=budget.repeats, clock=budget.clock)
    if device.backend == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    return 2.0 * m * k * n / seconds


def _sdpa_s(
    device: Device,
    dtype: str,
    budget: Budget,
    *,
    batch: int,
    heads: int,
    kv_heads: int,
    q_len: int,
    kv_len: int,
    head_dim: int,
) -> tuple[float, int]:
    """(median seconds, bytes per element) of ``scaled_dot_product_attention``, causal when
    the queries are the keys (a prefill), over rotating random inputs."""
    torch = import_torch()
    import torch.nn.functional as F  # noqa: N812

    t, dev, r = _dtype(dtype), device.torch_device, budget.rotate
    q = [torch.randn(batch, heads, q_len, head_dim, device=dev, dtype=t) for _ in range(r)]
    k = [torch.randn(batch, kv_heads, kv_len, head_dim, device=dev, dtype=t) for _ in range(r)]
    v = [torch.randn(batch, kv_heads, kv_len, head_dim, device=dev, dtype=t) for _ in range(r)]
    causal = q_len == kv_len and q_len > 1

    def run(i: int) -> object:
        return F.scaled_dot_product_attention(
            q[i % r], k[i % r], v[i % r], is_causal=causal, enable_gqa=kv_heads != heads
        )

    seconds = time_s(run, device, warmup=budget.warmup, repeats=budget.repeats, clock=budget.clock)
    return seconds, k[0].element_size()


def measure_attention(
    device: Device,
    dtype: str,
    *,
    batch: int,
    heads: int,
    kv_heads: int,
    q_len: int,
    kv_len: int,
    head_dim: int,
    budget: Budget,
) -> float:
    """FLOP/s of ``scaled_dot_product_attention`` (causal when q_len == kv_len)."""
    seconds, _ = _sdpa_s(
        device,
        dtype,
        budget,
        batch=batch,
        heads=heads,
        kv_heads=kv_heads,
        q_len=q_len,
        kv_len=kv_len,
        head_dim=head_dim,
    )
    causal = q_len == kv_len and q_len > 1
    pairs = q_len * (kv_len - q_len) + q_len * (q_len + 1) / 2 if causal else q_len * kv_len
    return 4.0 * batch * heads * head_dim * pairs / seconds


def measure_decode_attention(
    device: Device,
    dtype: str,
    *,
    batch: int,
    heads: int,
    kv_heads: int,
    kv_len: int,
    head_dim: int,
    budget: Budget,
) -> float:
    """Bytes per second of KV cache a decode step's attention reads (one query per sequence)."""
    seconds, element_bytes = _sdpa_s(
        device,
        dtype,
        budget,
        batch=batch,
        heads=heads,
        kv_heads=kv_heads,
        q_len=1,
        kv_len=kv_len,
        head_dim=head_dim,
    )
    return 2 * batch * kv_heads * kv_len * head_dim * element_bytes / seconds


def measure_launch_overhead(device: Device, budget: Budget) -> float:
    """Seconds per tiny kernel, launched back to back (median over 100-kernel bursts)."""
    torch = import_torch()
    x = torch.rand(1, device=device.torch_device) + 1.0
    burst = 100

    def run(_: int) -> object:
        for _ in range(burst):
            x.mul_(1.0000001)
        return x

    seconds = time_s(run, device, warmup=budget.warmup, repeats=budget.repeats, clock=budget.clock)
    return seconds / burst
