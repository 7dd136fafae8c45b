"""How long a vLLM replica takes from container start to ``/health`` answering 200, and the
startup-probe budget sized from it.

The estimate is an upper-leaning sum of three stages, each with its assumption stated:

1. **download** (first start only, an empty model cache): the checkpoint over the network
   at :data:`DOWNLOAD_BYTES_PER_S`; each node of a multi-node replica downloads it whole
   (every rank opens the safetensors files it holds slices of);
2. **read**: the checkpoint from the cache volume into host memory at
   :data:`READ_BYTES_PER_S`, per node;
3. **warm-up**: ``torch.compile`` and CUDA-graph capture (:data:`WARMUP_S`), or the
   profiling run alone with ``--enforce-eager`` (:data:`EAGER_WARMUP_S`).

The startup probe must outlast the slowest start, so its budget is the estimate times
:data:`SAFETY_FACTOR`; a probe that gives up early restarts the container mid-download,
which is the crash loop an operator most often meets with large models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servefit.units import GB_BYTES

# A 1 Gbit/s link to the Hub or a mirror: the conservative end of what a cloud node gets
# (an assumption, stated in the manifests' README; faster links only shorten the start).
DOWNLOAD_BYTES_PER_S = 0.125 * GB_BYTES
# A network-attached volume (cloud block storage, NFS) at ~1 GB/s; local NVMe reads 2-7 GB/s.
READ_BYTES_PER_S = 1.0 * GB_BYTES
# torch.compile (vLLM logs "torch.compile takes N s in total": 20-60 s for 8B-70B models)
# plus CUDA-graph capture ("Graph capturing finished in N secs": 5-30 s) plus the
# profiling run; rounded up.
WARMUP_S = 120.0
EAGER_WARMUP_S = 30.0  # no compilation, no graphs: the profiling run and KV allocation
SAFETY_FACTOR = 1.5
PROBE_PERIOD_S = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadTimeEstimate:
    download_s: float
    read_s: float
    warmup_s: float

    def __post_init__(self) -> None:
        for name in ("download_s", "read_s", "warmup_s"):
            value = getattr(self, name)
            if not (0 <= value < math.inf):
                raise ValueError(f"{name} must be a finite non-negative number, got {value}")

    @property
    def total_s(self) -> float:
        """A first start: download, read, warm up."""
        return self.download_s + self.read_s + self.warmup_s

    @property
    def cached_s(self) -> float:
        """A restart with the model already in the cache volume."""
        return self.read_s + self.warmup_s


def estimate_load_time(checkpoint_bytes: float, *, enforce_eager: bool = False) -> LoadTimeEstimate:
    """The predicted start of one replica whose checkpoint is ``checkpoint_bytes``."""
    if not (0 < checkpoint_bytes < math.inf):
        raise ValueError(f"checkpoint_bytes must be positive and finite, got {checkpoint_bytes}")
    return LoadTimeEstimate(
        download_s=checkpoint_bytes / DOWNLOAD_BYTES_PER_S,
        read_s=checkpoint_bytes / READ_BYTES_PER_S,
        warmup_s=EAGER_WARMUP_S if enforce_eager else WARMUP_S,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StartupProbe:
    period_s: int
    failure_threshold: int

    @property
    def budget_s(self) -> int:
        """How long Kubernetes waits before it restarts a container that has not started."""
        return self.period_s * self.failure_threshold


def startup_probe_for(
    predicted_load_s: float,
    *,
    safety_factor: float = SAFETY_FACTOR,
    period_s: int = PROBE_PERIOD_S,
) -> StartupProbe:
    """failureThreshold x periodSeconds >= predicted_load_s x safety_factor."""
    if not (0 <= predicted_load_s < math.inf):
        raise ValueError(f"predicted_load_s must be finite and >= 0, got {predicted_load_s}")
    if safety_factor < 1 or period_s < 1:
        raise ValueError("the safety factor must be >= 1 and the probe period >= 1 s")
    needed_s = predicted_load_s * safety_factor
    return StartupProbe(period_s=period_s, failure_threshold=max(1, math.ceil(needed_s / period_s)))
