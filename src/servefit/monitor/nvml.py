"""GPU monitor: NVML sampled at ~10 Hz while a benchmark runs, written as it comes.

Each sample (one JSON line per GPU per tick, appended and flushed at once: a Ctrl-C loses
nothing already sampled) holds the wall-clock and monotonic time, utilisation (kernels
running; memory controller busy), memory used, SM and memory clocks, power and its limit,
and on Hopper and newer the GPM metrics NVML offers: SM activity, tensor-core activity and
DRAM bandwidth utilisation (each a percentage of the interval). The bench joins samples to
its request timeline by the monotonic clock.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from servefit.errors import DatasetError, InvalidArgumentError, MonitorError

DEFAULT_INTERVAL_S = 0.1


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSample:
    t_s: float  # time.monotonic(), comparable with the bench's request timestamps
    wall_s: float
    gpu: int
    util_pct: float  # kernels running, % of the interval (nvidia-smi "GPU-Util")
    mem_util_pct: float  # memory controller busy, % (nvidia-smi "Memory-Util")
    mem_used_bytes: int
    mem_total_bytes: int
    sm_clock_mhz: float
    mem_clock_mhz: float
    power_w: float
    power_limit_w: float
    sm_active_pct: float | None = None  # GPM (Hopper and newer)
    tensor_active_pct: float | None = None
    dram_bw_util_pct: float | None = None


def _nvml() -> Any:
    try:
        import pynvml
    except ImportError:  # pragma: no cover - a declared dependency
        raise MonitorError("nvidia-ml-py is not installed") from None
    return pynvml


class _Gpm:
    """NVML's GPM metrics for one device: two samples an interval apart give percentages."""

    METRICS = ("sm_active_pct", "tensor_active_pct", "dram_bw_util_pct")

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle
        self.ids = (
            nvml.NVML_GPM_METRIC_SM_UTIL,
            nvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
            nvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
        )
        self.previous = nvml.nvmlGpmSampleAlloc()
        self.current = nvml.nvmlGpmSampleAlloc()
        nvml.nvmlGpmSampleGet(handle, self.previous)

    @classmethod
    def open(cls, nvml: Any, handle: Any) -> _Gpm | None:
        try:
            support = nvml.nvmlGpmQueryDeviceSupport(handle)
            if not support.isSupportedDevice:
                return None
            return cls(nvml, handle)
        except (nvml.NVMLError, AttributeError):
            return None

    def read(self) -> dict[str, float]:
        nvml = self.nvml
        nvml.nvmlGpmSampleGet(self.handle, self.current)
        get = nvml.c_nvmlGpmMetricsGet_t()
        get.version = nvml.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(self.ids)
        get.sample1, get.sample2 = self.previous, self.current
        for i, metric in enumerate(self.ids):
            get.metrics[i].metricId = metric
        nvml.nvmlGpmMetricsGet(get)
        self.previous, self.current = self.current, self.previous
        return {name: float(get.metrics[i].value) for i, name in enumerate(self.METRICS)}


class GpuMonitor:
    """Samples every GPU NVML sees (or ``gpus``) into ``path`` on a background thread."""

    def __init__(
        self, path: Path, *, interval_s: float = DEFAULT_INTERVAL_S, gpus: list[int] | None = None
    ) -> None:
        if interval_s <= 0:
            raise InvalidArgumentError("--monitor-interval-s must be positive")
        self.path, self.interval_s = path, interval_s
        nvml = _nvml()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            raise MonitorError(
                f"--monitor needs an NVIDIA driver (NVML: {error}); run without it on this machine"
            ) from None
        self.nvml = nvml
        count = nvml.nvmlDeviceGetCount()
        self.indices = gpus if gpus is not None else list(range(count))
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
        self.gpm = [_Gpm.open(nvml, h) for h in self.handles]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="servefit-gpu-monitor", daemon=True)
        self.num_samples = 0

    def sample(self) -> list[GpuSample]:
        nvml, out = self.nvml, []
        now, wall = time.monotonic(), time.time()
        for index, handle, gpm in zip(self.indices, self.handles, self.gpm, strict=True):
            util = nvml.nvmlDeviceGetUtilizationRates(handle)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            extra = gpm.read() if gpm is not None else {}
            out.append(
                GpuSample(
                    t_s=now,
                    wall_s=wall,
                    gpu=index,
                    util_pct=float(util.gpu),
                    mem_util_pct=float(util.memory),
                    mem_used_bytes=int(mem.used),
                    mem_total_bytes=int(mem.total),
                    sm_clock_mhz=float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
                    mem_clock_mhz=float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
                    power_w=nvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
                    power_limit_w=nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3,
                    **extra,
                )
            )
        return out

    def _run(self) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            while not self._stop.is_set():
                for s in self.sample():
                    f.write(json.dumps(asdict(s)) + "\n")
                    self.num_samples += 1
                f.flush()
                self._stop.wait(self.interval_s)

    def __enter__(self) -> GpuMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()


def read_samples(path: Path) -> list[GpuSample]:
    """Samples from a monitor file, each checked (an integer GPU index, finite numbers).

    A line that is not a sample is an error naming the file, the line and the field (exit
    2). The one skip: a last line cut short (no newline at its end, not JSON), which is what
    a monitor killed while writing leaves; complete lines are never skipped."""
    return list(_iter_samples(path))


def _iter_samples(path: Path) -> Iterator[GpuSample]:
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise DatasetError(f"cannot read GPU samples {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise DatasetError(
            f"GPU samples {path}: not UTF-8 text (byte {error.start}); the monitor writes UTF-8"
        ) from None
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except (ValueError, RecursionError) as error:  # not JSON; an integer of 5,000 digits
            is_cut = isinstance(error, json.JSONDecodeError) and n == len(lines)
            if is_cut and not text.endswith("\n"):
                return  # the monitor was killed while writing its last line
            raise DatasetError(f"{path}:{n} is not a GPU sample: {error}") from None
        problem = _sample_problem(raw)
        if problem:
            raise DatasetError(f"{path}:{n} is not a GPU sample: {problem}")
        yield GpuSample(**raw)


_SAMPLE_FIELDS = {f.name: str(f.type) for f in fields(GpuSample)}


def _sample_problem(raw: Any) -> str | None:
    """Why a decoded line cannot be a :class:`GpuSample`, or None."""
    if not isinstance(raw, dict):
        return f"a JSON object is expected, not {type(raw).__name__}"
    unknown = sorted(set(raw) - set(_SAMPLE_FIELDS))
    if unknown:
        return f"unknown field(s) {unknown}"
    for name, kind in _SAMPLE_FIELDS.items():
        if name not in raw:
            if "None" in kind:
                continue
            return f"field {name!r} is missing"
        value = raw[name]
        if value is None and "None" in kind:
            continue
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        if kind == "int" and not (isinstance(value, int) and not isinstance(value, bool)):
            return f"field {name!r} is {value!r}, not an integer"
        if not is_number:
            return f"field {name!r} is {value!r}, not a number"
        if not math.isfinite(value) or (value < 0 and name not in ("t_s", "wall_s")):
            return f"field {name!r} is {value!r}: a finite, non-negative number is expected"
    return None
