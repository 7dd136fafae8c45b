"""A preflight check's outcome (:class:`Check`, with its :class:`Status`) and the GPU
compute capability the rules compare against: shared by the host rules
(:mod:`servefit.preflight.host_rules`) and the model rules
(:mod:`servefit.preflight.model_rules`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from servefit.preflight.facts import GpuFacts, HostFacts


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    name: str
    status: Status
    reason: str
    remedy: str = ""


def cc_tuple(gpu: GpuFacts) -> tuple[int, int]:
    """A GPU's compute capability as (major, minor): "8.9" -> (8, 9). Rules call it only
    once :func:`gpu_facts_usable` holds (the driver check fails otherwise)."""
    cc = gpu.compute_capability_tuple
    if cc is None:
        raise ValueError(f"GPU {gpu.index}: compute capability {gpu.compute_capability!r}")
    return cc


def gpu_facts_usable(facts: HostFacts) -> bool:
    """The driver answered, and nothing it said about its GPUs is impossible; the links
    that read GPU facts are skipped otherwise (the driver check has failed)."""
    return not facts.nvml.error and not facts.nvml.problems()


SKIP_GPU_FACTS = "depends on the driver's GPU facts (failed above)"


def impossible(name: str, whose: str, problems: list[str]) -> Check:
    """A failed check for facts that cannot be true (a damaged or edited recording)."""
    return Check(
        name=name,
        status=Status.FAIL,
        reason=f"{whose} is impossible: " + "; ".join(problems),
        remedy="probe this host again (a recording with these facts was edited or damaged)",
    )
