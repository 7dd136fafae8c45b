"""The GPU side of NVML without a GPU (issue 34): the preflight probe (``_nvml_collect``,
``_nvml_gpu``, ``probe_nvml``) and the bench monitor (``GpuMonitor``, GPM included) against
a fake NVML at the library's own API. The real ``pynvml`` (nvidia-ml-py) module is kept -
its error classes (``NVMLError(code)`` builds the subclass of the code), constants and
ctypes structs - and only its calls into the driver are replaced by an H100 SXM's answers:

- "NVIDIA H100 80GB HBM3", compute capability 9.0, nvidia-smi's 81,559 MiB total;
- driver 570.124.06, CUDA 12080 (NVML's integer: 12.8), 18 NVLinks up, PCIe gen 5 x16;
- a vLLM process of 70 GiB; 97 % GPU and 63 % memory-controller busy, SM clock 1,980 MHz,
  memory 2,619 MHz, 612,345 mW drawn of a 700,000 mW limit (NVML reports milliwatts).

The same paths on a real GPU are ``tests/gpu/test_nvml_real.py`` (the ``gpu`` marker).
"""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pynvml
import pytest

from servefit.errors import MonitorError
from servefit.monitor.nvml import GpuMonitor, read_samples
from servefit.preflight import probes

GIB = 2**30
TOTAL = 81_559 * 2**20
USED = 71 * GIB
VLLM_PID = 4242


class FakeNvml:
    """An H100 SXM as NVML describes it. ``fail_init`` makes nvmlInit raise that code;
    ``gpm`` says whether GPM (Hopper's SM/tensor/DRAM counters) is supported."""

    def __init__(self, *, fail_init: int | None = None, gpm: bool = True) -> None:
        self.fail_init, self.gpm = fail_init, gpm
        self.initialised = 0
        self.gpm_reads = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, getattr(self, name))

    # -- system
    def nvmlInit(self) -> None:
        if self.fail_init is not None:
            raise pynvml.NVMLError(self.fail_init)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.124.06"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12080

    def nvmlSystemGetProcessName(self, pid: int) -> bytes:
        if pid != VLLM_PID:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return b"python3 -m vllm.entrypoints.openai.api_server"

    # -- device
    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        if index != 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return "gpu0"

    def nvmlDeviceGetName(self, handle: str) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetCudaComputeCapability(self, handle: str) -> tuple[int, int]:
        return 9, 0

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:
        return SimpleNamespace(total=TOTAL, used=USED, free=TOTAL - USED)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=VLLM_PID, usedGpuMemory=70 * GIB)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: str) -> list[SimpleNamespace]:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # a headless board

    def nvmlDeviceGetMigMode(self, handle: str) -> tuple[int, int]:
        return 0, 0

    def nvmlDeviceGetNvLinkState(self, handle: str, link: int) -> int:
        if link >= 18:  # an H100 SXM has 18 links; NVML refuses the rest
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: str) -> int:
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: str) -> int:
        return 16

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> SimpleNamespace:
        return SimpleNamespace(gpu=97, memory=63)

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        return {pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 2619}[clock]

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 612_345

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: str) -> int:
        return 700_000

    # -- GPM (Hopper and newer)
    def nvmlGpmQueryDeviceSupport(self, handle: str) -> SimpleNamespace:
        if not self.gpm:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(isSupportedDevice=1)

    def nvmlGpmSampleAlloc(self) -> pynvml.c_nvmlGpmSample_t:
        return pynvml.c_nvmlGpmSample_t()  # the real handle type (the driver fills it)

    def nvmlGpmSampleGet(self, handle: str, sample: pynvml.c_nvmlGpmSample_t) -> None:
        assert isinstance(sample, pynvml.c_nvmlGpmSample_t)

    def nvmlGpmMetricsGet(self, get: pynvml.c_nvmlGpmMetricsGet_t) -> None:
        """Fills the real struct as the driver does: a value per requested metric id."""
        assert get.version == pynvml.NVML_GPM_METRICS_GET_VERSION and get.numMetrics == 3
        values = {
            pynvml.NVML_GPM_METRIC_SM_UTIL: 88.5,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 41.25,
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 72.0,
        }
        for i in range(get.numMetrics):
            get.metrics[i].value = values[get.metrics[i].metricId]
        self.gpm_reads += 1


@pytest.fixture
def h100(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml()
    fake.install(monkeypatch)
    return fake


def _probe_through_json(monkeypatch: pytest.MonkeyPatch):
    """probe_nvml as it runs: the collector's output as JSON, parsed by the caller (the
    subprocess replaced by a call in this process, where the fake is installed)."""
    monkeypatch.setattr(
        probes,
        "_run_json",
        lambda args, timeout_s: (json.loads(json.dumps(probes._nvml_collect())), None),
    )
    return probes.probe_nvml()


def test_the_probe_reads_an_h100_as_nvml_describes_it(h100, monkeypatch):
    facts = _probe_through_json(monkeypatch)
    assert facts.error is None
    assert (facts.driver_version, facts.cuda_driver_version) == ("570.124.06", "12.8")
    [gpu] = facts.gpus
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.compute_capability == "9.0"
    assert gpu.memory_total_bytes == 85_520_809_984  # 81,559 MiB
    assert gpu.memory_free_bytes == TOTAL - USED
    assert gpu.nvlink_active_links == 18  # the links past the 18th refused: not counted
    assert (gpu.pcie_generation, gpu.pcie_width) == (5, 16)
    assert gpu.mig_enabled is False
    # the compute process is listed with its name; the graphics list, unsupported, is empty
    [proc] = gpu.processes
    assert (proc.pid, proc.used_bytes) == (VLLM_PID, 70 * GIB)
    assert proc.name.startswith("python3 -m vllm")
    assert h100.initialised == 0  # initialised once and shut down


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver found (NVML library not found)"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "no NVIDIA driver found (driver not loaded)"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "NVML initialisation failed"),
    ],
)
def test_a_machine_without_a_working_driver_is_one_fact(monkeypatch, code, said):
    FakeNvml(fail_init=code).install(monkeypatch)
    facts = _probe_through_json(monkeypatch)
    assert facts.gpus == [] and facts.error is not None and facts.error.startswith(said)


def test_the_monitor_samples_what_nvml_reports_in_its_units(h100, tmp_path):
    with GpuMonitor(tmp_path / "gpu.jsonl", interval_s=3600) as monitor:
        [sample] = monitor.sample()
    assert (sample.gpu, sample.util_pct, sample.mem_util_pct) == (0, 97.0, 63.0)
    assert (sample.mem_used_bytes, sample.mem_total_bytes) == (USED, TOTAL)
    assert (sample.sm_clock_mhz, sample.mem_clock_mhz) == (1980.0, 2619.0)
    assert sample.power_w == pytest.approx(612.345) and sample.power_limit_w == 700.0  # mW/1e3
    # GPM: the real c_nvmlGpmMetricsGet_t, each value under its metric's name
    assert (sample.sm_active_pct, sample.tensor_active_pct, sample.dram_bw_util_pct) == (
        88.5, 41.25, 72.0,
    )  # fmt: skip
    assert h100.initialised == 0  # shut down on exit


def test_a_device_without_gpm_samples_without_its_counters(monkeypatch, tmp_path):
    FakeNvml(gpm=False).install(monkeypatch)
    with GpuMonitor(tmp_path / "gpu.jsonl", interval_s=3600) as monitor:
        [sample] = monitor.sample()
    assert sample.sm_active_pct is None and sample.util_pct == 97.0


def test_the_monitor_file_reads_back_sample_by_sample(h100, tmp_path):
    path = tmp_path / "gpu.jsonl"
    monitor = GpuMonitor(path, interval_s=0.01)
    written = threading.Event()
    real_sample = monitor.sample

    def counted():
        samples = real_sample()
        if monitor.num_samples >= 2:
            written.set()
        return samples

    monitor.sample = counted  # type: ignore[method-assign]
    with monitor:
        assert written.wait(60)  # an event, not a duration: two samples are on disk
    samples = read_samples(path)
    assert len(samples) == monitor.num_samples >= 2
    assert all(s.power_w == pytest.approx(612.345) for s in samples)
    assert [s.t_s for s in samples] == sorted(s.t_s for s in samples)


def test_the_monitor_on_a_machine_without_nvidia_says_so(monkeypatch, tmp_path):
    FakeNvml(fail_init=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND).install(monkeypatch)
    with pytest.raises(MonitorError, match="--monitor needs an NVIDIA driver"):
        GpuMonitor(tmp_path / "gpu.jsonl")
