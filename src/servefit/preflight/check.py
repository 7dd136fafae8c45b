"""A preflight check's outcome (:class:`Check`, with its :class:`Status`) and the GPU
compute capability the rules compare against: shared by the host rules
(:mod:`servefit.preflight.host_rules`) and the model rules
(:mod:`servefit.preflight.model_rules`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from servefit.preflight.facts import GpuFacts


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
    """A GPU's compute capability as (major, minor): "8.9" -> (8, 9)."""
    major, _, minor = gpu.compute_capability.partition(".")
    return int(major), int(minor or 0)
