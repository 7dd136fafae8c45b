"""The NVML paths on a real NVIDIA GPU (the ``gpu`` marker): what ``tests/unit/test_nvml_paths.py``
checks against a fake NVML, read from the driver itself. Deselected by default (the
``gpu`` marker, pyproject's addopts: CI has no GPU); a session lent one runs ``python -m
pytest -m gpu tests/gpu -s`` there and records the figures in its note. With ``-m gpu`` on a
machine where NVML finds no GPU, each test is skipped saying so."""

from __future__ import annotations

import pytest

from servefit.monitor.nvml import GpuMonitor
from servefit.preflight.probes import probe_nvml

pytestmark = pytest.mark.gpu

FACTS = probe_nvml()
requires_gpu = pytest.mark.skipif(
    FACTS.error is not None or not FACTS.gpus, reason=f"no NVIDIA GPU: {FACTS.error}"
)


@requires_gpu
def test_the_probe_agrees_with_nvml_read_directly():
    import pynvml

    pynvml.nvmlInit()
    try:
        for gpu in FACTS.gpus:
            handle = pynvml.nvmlDeviceGetHandleByIndex(gpu.index)
            assert gpu.memory_total_bytes == pynvml.nvmlDeviceGetMemoryInfo(handle).total
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            assert gpu.compute_capability == f"{major}.{minor}"
    finally:
        pynvml.nvmlShutdown()
    major, _, minor = FACTS.cuda_driver_version.partition(".")
    assert int(major) >= 11 and minor.isdigit()
    shown = ", ".join(f"{g.name} {g.memory_total_bytes / 2**30:.2f} GiB" for g in FACTS.gpus)
    print(f"\n{FACTS.driver_version} CUDA {FACTS.cuda_driver_version}: {shown}")


@requires_gpu
def test_the_monitor_samples_a_real_gpu(tmp_path):
    with GpuMonitor(tmp_path / "gpu.jsonl", interval_s=3600) as monitor:
        samples = monitor.sample()
    assert len(samples) == len(FACTS.gpus)
    for s in samples:
        assert 0 <= s.util_pct <= 100 and 0 <= s.mem_util_pct <= 100
        assert 0 < s.mem_used_bytes <= s.mem_total_bytes
        assert 0 < s.power_w <= s.power_limit_w * 1.5  # a momentary overshoot at most
        assert s.sm_clock_mhz > 0
        print(f"\nGPU {s.gpu}: {s.util_pct:.0f} % busy, {s.power_w:.0f} / {s.power_limit_w:.0f} W, "
              f"SM {s.sm_clock_mhz:.0f} MHz, GPM SM active {s.sm_active_pct}")  # fmt: skip
