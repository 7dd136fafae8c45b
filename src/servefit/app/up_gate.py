"""The checks ``servefit up`` makes before it launches anything: the preflight chain for
GPUs (:mod:`servefit.preflight.gate`), and for vLLM's CPU backend the links that apply to it
(PyTorch, the engine's torch pin, the model, its weights, disk) plus the host memory free now:
vLLM's CPU worker refuses to start when it asks for more than is available
(``vllm/v1/worker/cpu_worker.py``, 0.32)."""

from __future__ import annotations

from typing import Any

from servefit.adapters.detect import DetectedHardware
from servefit.app.plan import PlanOutcome
from servefit.core.engines.vllm_cpu import CPU_PROCESS_BYTES, KVCACHE_SPACE_ENV
from servefit.core.plan import CapacityPlan
from servefit.units import GIB_BYTES


def cpu_gate(facts: Any, plan: CapacityPlan, hw: DetectedHardware) -> list[Any]:
    """The links of the preflight chain that apply to vLLM's CPU backend, and the host
    memory free now (vLLM refuses to start when it asks for more than is available)."""
    from servefit.preflight import rules
    from servefit.preflight.rules import Check, Status

    t = facts.torch
    torch_check = Check(
        name="PyTorch",
        status=Status.PASS if t.is_installed and not t.error else Status.FAIL,
        reason=t.error or (f"torch {t.version}" if t.is_installed else "not installed"),
        remedy="install the PyTorch build vLLM's CPU wheel requires",
    )
    return [
        torch_check,
        rules.check_engine_torch(facts),
        rules.check_model(facts),
        rules.check_weights_on_disk(facts),
        rules.check_disk_space(facts, plan.weights_total_bytes),
        _host_memory_check(plan, hw),
    ]


def _host_memory_check(plan: CapacityPlan, hw: DetectedHardware) -> Any:
    from servefit.preflight.rules import Check, Status

    name = "plan fits the host memory free now"
    available = hw.available_memory_bytes
    if available is None:
        return Check(name=name, status=Status.SKIP, reason="available memory unknown")
    m = plan.memory
    gib = GIB_BYTES
    if m.is_kv_cache_given:
        need = m.kv_cache_bytes + m.weights_bytes + CPU_PROCESS_BYTES
        if need > available:
            return Check(
                name=name,
                status=Status.FAIL,
                reason=f"the KV cache ({m.kv_cache_bytes / gib:.2f} GiB), the weights and the "
                f"process need {need / gib:.2f} GiB; {available / gib:.2f} GiB is available",
                remedy=f"a smaller {KVCACHE_SPACE_ENV} / --kv-cache-memory-bytes",
            )
        return Check(
            name=name,
            status=Status.PASS,
            reason=f"{need / gib:.2f} GiB needed, {available / gib:.2f} GiB available",
        )
    requested = m.total_bytes * m.gpu_memory_utilization
    if requested > available:
        fits = max(available / m.total_bytes - 0.01, 0.01)
        return Check(
            name=name,
            status=Status.FAIL,
            reason=f"vLLM's CPU worker asks for {m.gpu_memory_utilization:g} x "
            f"{m.total_bytes / gib:.2f} GiB = {requested / gib:.2f} GiB and refuses to start "
            f"with {available / gib:.2f} GiB available",
            remedy=f"set {KVCACHE_SPACE_ENV}=N (GiB) or --kv-cache-memory-bytes, or "
            f"--gpu-memory-utilization {fits:.2f}",
        )
    return Check(
        name=name,
        status=Status.PASS,
        reason=f"{requested / gib:.2f} GiB asked for, {available / gib:.2f} GiB available",
    )


def gate_checks(
    facts: Any, outcome: PlanOutcome, hw: DetectedHardware, *, allow_hub: bool
) -> tuple[list[Any], bool]:
    """The checks and whether the launch may go on."""
    from servefit.preflight import gate, rules

    if hw.is_cpu:
        checks = cpu_gate(facts, outcome.capacity, hw)
        return checks, rules.verdict(checks)
    result = gate.run_gate(
        facts, outcome.deployment.engine_settings(), strict=False, allow_hub=allow_hub
    )
    return result.checks, result.passed
