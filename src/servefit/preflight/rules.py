"""Rules: judge the facts, link by link. Pure: facts in, checks out.

The chain, in order: NVIDIA driver -> driver supports the CUDA of the PyTorch build ->
PyTorch sees every GPU -> PyTorch has kernels for each GPU -> the engine's required PyTorch
is the installed one -> the model resolves and servefit understands it -> weights on disk
-> disk space -> dtype and quantization supported on each GPU -> the parallel layout fits
the GPUs -> the plan fits the memory free now. A link whose facts depend on a failed link
is skipped, not guessed.

The links are in :mod:`servefit.preflight.host_rules` (driver, CUDA, PyTorch, engine) and
:mod:`servefit.preflight.model_rules` (model, weights, disk, precision, layout, plan), the
:class:`Check` they return in :mod:`servefit.preflight.check`; every name stays importable
from here. This module runs the chain (:func:`judge`) and decides (:func:`verdict`).
"""

from __future__ import annotations

# `X as X`: re-exported, so ``servefit.preflight.rules.<name>`` keeps working
from servefit.core.hardware import GpuCatalog
from servefit.core.model_spec import ModelSpec
from servefit.core.plan import ServeSettings
from servefit.preflight.check import Check as Check
from servefit.preflight.check import Status as Status
from servefit.preflight.facts import HostFacts
from servefit.preflight.host_rules import (
    MINOR_VERSION_COMPAT_MIN_DRIVER as MINOR_VERSION_COMPAT_MIN_DRIVER,
)
from servefit.preflight.host_rules import check_driver as check_driver
from servefit.preflight.host_rules import (
    check_driver_supports_torch_cuda as check_driver_supports_torch_cuda,
)
from servefit.preflight.host_rules import check_engine_torch as check_engine_torch
from servefit.preflight.host_rules import check_torch_arch as check_torch_arch
from servefit.preflight.host_rules import check_torch_sees_gpus as check_torch_sees_gpus
from servefit.preflight.model_rules import BF16_MIN_CC as BF16_MIN_CC
from servefit.preflight.model_rules import FP4_NATIVE_MIN_CC as FP4_NATIVE_MIN_CC
from servefit.preflight.model_rules import FP8_NATIVE_MIN_CC as FP8_NATIVE_MIN_CC
from servefit.preflight.model_rules import FP8_WEIGHT_ONLY_MIN_CC as FP8_WEIGHT_ONLY_MIN_CC
from servefit.preflight.model_rules import INT8_MIN_CC as INT8_MIN_CC
from servefit.preflight.model_rules import check_disk_space as check_disk_space
from servefit.preflight.model_rules import check_model as check_model
from servefit.preflight.model_rules import check_parallel_layout as check_parallel_layout
from servefit.preflight.model_rules import (
    check_plan_fits_free_memory as check_plan_fits_free_memory,
)
from servefit.preflight.model_rules import check_precision_support as check_precision_support
from servefit.preflight.model_rules import check_weights_on_disk as check_weights_on_disk


def judge(
    facts: HostFacts,
    *,
    spec: ModelSpec | None,
    settings: ServeSettings,
    catalog: GpuCatalog,
    mamba_ssm_dtype: str | None = None,
    weights_total_bytes: float | None = None,
) -> list[Check]:
    """Every check of the chain, in order."""
    return [
        check_driver(facts),
        check_driver_supports_torch_cuda(facts),
        check_torch_sees_gpus(facts),
        check_torch_arch(facts),
        check_engine_torch(facts),
        check_model(facts),
        check_weights_on_disk(facts),
        check_disk_space(facts, weights_total_bytes),
        check_precision_support(facts, spec),
        check_parallel_layout(facts, settings),
        check_plan_fits_free_memory(facts, spec, settings, catalog, mamba_ssm_dtype),
    ]


def verdict(checks: list[Check], *, strict: bool = False) -> bool:
    """True when the command may run: no failure (and no warning under --strict)."""
    bad = {Status.FAIL, Status.WARN} if strict else {Status.FAIL}
    return not any(c.status in bad for c in checks)
