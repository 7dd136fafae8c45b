"""``check-log``: a vLLM startup log held against the plan of the same deployment, line by
line (:mod:`servefit.app.check_sglang_log` holds an SGLang log the same way). ``up`` uses the
same comparison while the engine starts.

Each quantity downstream of the KV budget is predicted twice: end to end (servefit's own
budget: weights, activations, runtime), and given the KV memory the log reports (planned with
``ServeSettings(kv_cache_memory_bytes=logged)``). When only the first is off, the budget is
(an activation or runtime estimate); when both are, the block arithmetic is.

A comparison is a **finding** when the prediction is off by more than
:data:`FINDING_RELATIVE_ERROR` beyond the rounding of the logged figure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from servefit.adapters.sglang_log import SglangLog
from servefit.adapters.vllm_log import LogFact, Refusal, StartupLog, refusal_detail
from servefit.adapters.vllm_settings import serve_fields
from servefit.app.deployment import Deployment, Hardware
from servefit.app.plan import PlanOutcome, capacity_for, plan_deployment
from servefit.app.resolve import Resolved, load_calibration_for
from servefit.core.engine import DRIVER_RESERVED_BYTES, FIRST_V1_VERSION, parse_release
from servefit.core.engines import select_engine
from servefit.core.engines.vllm_cpu import cpu_device
from servefit.core.hardware import GpuSpec
from servefit.core.plan import CapacityPlan, ServeSettings
from servefit.errors import InvalidArgumentError
from servefit.units import GIB_BYTES

FINDING_RELATIVE_ERROR = 0.02  # a deviation over 2 % is reported
QUANTITIES = (
    "weights_bytes",
    "kv_cache_memory_bytes",
    "kv_cache_tokens",
    "kv_cache_blocks",  # the V0 engine's "# GPU blocks: N"
    "max_concurrency",
    "block_size",
    "kv_padding_layers",
)
DOWNSTREAM_OF_KV = frozenset({"kv_cache_tokens", "kv_cache_blocks", "max_concurrency"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """One logged quantity next to the plan's."""

    quantity: str
    logged: float
    predicted: float | None
    predicted_given_logged_kv_memory: float | None  # None: not downstream of the KV budget
    line: str  # the log line it was read from
    rounding: float = 0.0  # half a unit of the logged figure's last digit

    @property
    def relative_error(self) -> float | None:
        return _relative(self.predicted, self.logged)

    @property
    def relative_error_given_logged_kv_memory(self) -> float | None:
        return _relative(self.predicted_given_logged_kv_memory, self.logged)

    def _off(self, predicted: float | None, extra: float = 0.0) -> bool:
        if predicted is None:
            return False
        allowed = max(FINDING_RELATIVE_ERROR * abs(self.logged), self.rounding) + extra
        return abs(predicted - self.logged) > allowed

    @property
    def is_finding(self) -> bool:
        return self._off(self.predicted)

    @property
    def is_arithmetic_finding(self) -> bool:
        """Off even given the logged KV memory (whose own rounding is allowed for)."""
        return self._off(self.predicted_given_logged_kv_memory, self.rounding)

    def explain(self) -> str:
        """Why it is a finding, in words (empty when it is not one)."""
        if not self.is_finding and not self.is_arithmetic_finding:
            return ""
        if self.predicted_given_logged_kv_memory is None:
            return f"{self.quantity}: the plan is off by {_pct(self.relative_error)}"
        if self.is_arithmetic_finding:
            return (
                f"{self.quantity}: off by {_pct(self.relative_error_given_logged_kv_memory)} "
                "even given the logged KV memory: the block arithmetic differs (block size, "
                "layer grouping, state size)"
            )
        return (
            f"{self.quantity}: off by {_pct(self.relative_error)} end to end, right given the "
            "logged KV memory: the KV budget differs (weights, activations or runtime memory)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "quantity": self.quantity,
            "logged": self.logged,
            "predicted": self.predicted,
            "predicted_given_logged_kv_memory": self.predicted_given_logged_kv_memory,
            "relative_error": self.relative_error,
            "relative_error_given_logged_kv_memory": self.relative_error_given_logged_kv_memory,
            "is_finding": self.is_finding or self.is_arithmetic_finding,
            "line": self.line,
        }


def _relative(predicted: float | None, logged: float) -> float | None:
    if predicted is None or logged == 0:
        return None
    return (predicted - logged) / logged


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def predicted_value(plan: CapacityPlan, quantity: str) -> float:
    """The plan's figure for a logged quantity (per GPU, as vLLM logs it)."""
    if quantity == "weights_bytes":
        return float(plan.memory.weights_bytes)
    if quantity == "kv_cache_memory_bytes":
        return float(plan.memory.kv_cache_bytes)
    if quantity == "kv_cache_tokens":
        return float(plan.kv_cache_tokens)
    if quantity == "kv_cache_blocks":
        return float(plan.num_blocks)
    if quantity == "max_concurrency":
        return float(plan.max_concurrency)
    if quantity == "block_size":
        return float(plan.settings.block_size)
    if quantity == "kv_padding_layers":  # "Add N padding layers": unequal KV-cache groups
        return float(plan.layout.num_padding_layers)
    raise KeyError(quantity)


def compare_fact(
    fact: LogFact, plan: CapacityPlan, plan_given_kv: CapacityPlan | None
) -> Comparison | None:
    """The comparison one logged fact makes (None when it states no compared quantity)."""
    if fact.quantity not in QUANTITIES:
        return None
    given = None
    if fact.quantity in DOWNSTREAM_OF_KV and plan_given_kv is not None:
        given = predicted_value(plan_given_kv, fact.quantity)
    elif fact.quantity in ("block_size", "kv_padding_layers"):  # the layout, not the budget
        given = predicted_value(plan_given_kv or plan, fact.quantity)
    return Comparison(
        quantity=fact.quantity,
        logged=float(fact.value),
        predicted=predicted_value(plan, fact.quantity),
        predicted_given_logged_kv_memory=given,
        line=fact.line,
        rounding=fact.rounding,
    )


def logged_facts(log: StartupLog) -> list[LogFact]:
    """One fact per compared quantity: the smallest worker's KV memory and weights (the
    engine sizes the cache from the smallest), the engine's own capacity lines."""
    out: list[LogFact] = []
    for quantity in QUANTITIES:
        fact = (
            log.smallest(quantity)
            if quantity in ("weights_bytes", "kv_cache_memory_bytes")
            else log.first(quantity)
        )
        if fact is not None:
            out.append(fact)
    return out


def compare_log(
    log: StartupLog, plan: CapacityPlan, plan_given_kv: CapacityPlan | None
) -> tuple[Comparison, ...]:
    found = (compare_fact(f, plan, plan_given_kv) for f in logged_facts(log))
    return tuple(c for c in found if c is not None)


# ----------------------------------------------------------------- the deployment of a log


def settings_from_log(log: StartupLog) -> dict[str, Any]:
    """The ServeSettings fields the log states (its non-default args, its engine config)."""
    args = log.non_default_args
    out = serve_fields(args)
    if "kv_cache_memory_bytes" not in out and "kv_cache_memory" in args:
        out["kv_cache_memory_bytes"] = args["kv_cache_memory"]
    explicit = log.first("kv_cache_memory_bytes")
    if "kv_cache_memory_bytes" not in out and log.value("kv_cache_explicit") and explicit:
        out["kv_cache_memory_bytes"] = explicit.value  # the CPU's given space is a setting
    if "max_model_len" not in out and log.value("max_model_len"):
        out["max_model_len"] = int(log.value("max_model_len"))
    version = log.engine_version
    if version:  # a V0 release keeps its patch (0.6.4 measures memory unlike 0.6.3 and 0.6.5)
        major, minor, patch = parse_release(version)
        is_v0 = (major, minor) < FIRST_V1_VERSION
        out["vllm_version"] = f"{major}.{minor}.{patch}" if is_v0 else f"{major}.{minor}"
    return out


def merge_settings(
    base: ServeSettings, from_log: Mapping[str, Any], given: Iterable[str]
) -> ServeSettings:
    """The log's settings, except those the user set on the command line (``given``)."""
    given = set(given)
    fields: dict[str, Any] = {}
    for key, value in from_log.items():
        if key in given:
            continue
        if key == "kv_cache_memory_bytes":
            value = int(value)
        fields[key] = value
    return replace(base, **fields)


def device_for_log(log: StartupLog, hardware: Hardware) -> GpuSpec | None:
    """The device of a log: a CPU when the log (or ``--gpu cpu``) says so, with the node's
    memory from its "GiB for KV cache on node" line (or ``--gpu-memory-gib``); None for a GPU
    named or described by the user (resolved as usual). vLLM does not print a GPU's name."""
    name = (hardware.gpu or "").strip().lower()
    if name == "cpu" or (not name and log.value("device") == "CPU"):
        total = (
            int(hardware.memory_gib * GIB_BYTES)
            if hardware.memory_gib is not None
            else log.value("device_total_bytes")
        )
        if total is None:
            raise InvalidArgumentError(
                "the log does not say how much memory the CPU node has: add --gpu-memory-gib N"
            )
        return cpu_device(
            name="CPU (from the log)",
            memory_bytes=int(total),
            source="the startup log's 'GiB for KV cache on node' line, or --gpu-memory-gib",
        )
    if hardware.gpu is not None or hardware.memory_gib is not None:
        return None
    raise InvalidArgumentError(
        "the log does not name the GPU (vLLM does not print it): pass --gpu NAME "
        "(see `servefit gpus`)"
    )


def _as_logged(log: StartupLog, d: Deployment, notes: list[str]) -> GpuSpec | None:
    """The catalog GPU with the total the log prints ("total_gpu_memory" of V0, "Free memory
    on device (free/total GiB)" of V1): one board shows CUDA more or less than another of the
    same name (a Colab T4 14.74 GiB, an AWS one 14.56), and the engine sized its budget from
    what it saw. None when the log prints no total or the GPU is not a catalog NVIDIA one."""
    fact = log.first("device_total_bytes")
    if fact is None or d.hardware.gpu is None or d.hardware.memory_gib is not None:
        return None
    from servefit.app.resolve import resolve_gpu

    gpu = resolve_gpu(d.hardware)
    if gpu.vendor != "nvidia" or abs(gpu.cuda_total_bytes - fact.value) <= fact.rounding:
        return None
    notes.append(
        f"planned on the total the log prints, {fact.value / GIB_BYTES:.2f} GiB (the catalog's "
        f"{gpu.name}: {gpu.cuda_total_bytes / GIB_BYTES:.2f} GiB)"
    )
    return replace(gpu, usable_memory_bytes=int(fact.value) + DRIVER_RESERVED_BYTES)


def resolve_on(d: Deployment, device: GpuSpec) -> Resolved:
    """A deployment resolved on a device servefit found (a detected CPU or GPU) rather than
    on a catalog name."""
    from servefit.adapters.model_source import load_model

    loaded = load_model(d.model, revision=d.revision, allow_hub=d.allow_hub)
    return Resolved(
        deployment=d,
        loaded=loaded,
        gpu=device,
        calibration=load_calibration_for(d.hardware),
        engine=select_engine(d.engine, device, loaded.spec),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LogRefusal:
    kind: Refusal
    line: str
    detail: dict[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckLogOutcome:
    log: StartupLog | SglangLog
    outcome: PlanOutcome  # the end-to-end plan of the log's deployment
    plan_given_kv: CapacityPlan | None
    comparisons: tuple[Comparison, ...]
    refusals: tuple[LogRefusal, ...]
    notes: tuple[str, ...]

    @property
    def findings(self) -> tuple[str, ...]:
        return tuple(c.explain() for c in self.comparisons if c.explain())

    @property
    def is_clean(self) -> bool:
        """The engine started and every logged quantity is the plan's (within 2 %)."""
        return not self.findings and not self.refusals


def refusals_of(log: StartupLog) -> tuple[LogRefusal, ...]:
    seen: set[Refusal] = set()
    out = []
    for fact in log.refusals:
        if fact.value in seen:
            continue
        seen.add(fact.value)
        out.append(LogRefusal(kind=fact.value, line=fact.line, detail=refusal_detail(fact)))
    return tuple(out)


def check_startup_log(
    lines: Iterable[str],
    d: Deployment,
    *,
    given_settings: Iterable[str] = (),
    model_given: bool = True,
) -> CheckLogOutcome:
    """Plan the deployment the log describes (the log's flags, then the user's) and compare.

    ``d`` carries the user's model, hardware and flags; ``given_settings`` names the
    ServeSettings fields the user set explicitly (they win over the log's); without
    ``model_given`` the model is the one the log names."""
    log = StartupLog.read(lines)
    if not log.is_vllm_log:
        raise InvalidArgumentError(
            "this is not a vLLM startup log: none of the lines vLLM prints at startup "
            "(version, non-default args, model loading, KV cache size) is in it"
        )
    notes: list[str] = []
    model = d.model
    if not model_given:
        if not log.model:
            raise InvalidArgumentError("the log does not name the model: pass MODEL")
        model = log.model
    settings = merge_settings(d.settings, settings_from_log(log), given_settings)
    d = replace(d, model=model, settings=settings)
    device = device_for_log(log, d.hardware)
    if device is None:
        device = _as_logged(log, d, notes)
    resolved = resolve_on(d, device) if device is not None else None
    if device is not None and device.vendor == "cpu":
        notes.append(
            "CPU: the log does not print the ISA; planned without AVX-512 BF16 (recurrent "
            "state in the model's dtype)"
        )
    outcome = plan_deployment(d, with_performance=False, resolved=resolved)
    logged_kv = log.smallest("kv_cache_memory_bytes")
    plan_given = None
    if logged_kv is not None and logged_kv.value > 0:
        plan_given = capacity_for(
            outcome.resolved,
            replace(d.engine_settings(), kv_cache_memory_bytes=int(logged_kv.value)),
        )
        if d.settings.pipeline_parallel_size > 1:
            notes.append(
                "pipeline parallel: the log prints one worker's KV memory; the engine sizes "
                "the cache from the smallest, so the figures given the logged KV memory are "
                "approximate"
            )
    return CheckLogOutcome(
        log=log,
        outcome=outcome,
        plan_given_kv=plan_given,
        comparisons=compare_log(log, outcome.capacity, plan_given),
        refusals=refusals_of(log),
        notes=tuple(notes),
    )


def explain_refusal(refusal: LogRefusal, outcome: PlanOutcome) -> str:
    """An engine refusal in the plan's words, with the plan's recommendation."""
    plan = outcome.capacity
    reason = {
        Refusal.OUT_OF_MEMORY: "the engine ran out of device memory",
        Refusal.NO_KV_CACHE_MEMORY: "no memory was left for the KV cache",
        Refusal.MAX_MODEL_LEN_DOES_NOT_FIT: "one request of --max-model-len does not fit the "
        "KV cache",
        Refusal.MAMBA_BLOCKS: "--max-num-seqs exceeds the state (Mamba) cache blocks",
        Refusal.MAX_MODEL_LEN_TOO_LONG: "--max-model-len exceeds what the model allows",
        Refusal.HOST_MEMORY: "the host has less memory available than the engine asks for",
        Refusal.PORT_IN_USE: "the port is in use",
        Refusal.MODEL_NOT_LOADABLE: "the engine cannot load this model",
    }[refusal.kind]
    parts = [f"vLLM refused to start: {reason} ({refusal.line.strip()[:300]})"]
    estimated = refusal.detail.get("estimated_max_model_len")
    if estimated:
        parts.append(
            f"vLLM estimates the longest request at {estimated:,} tokens; servefit's plan "
            f"says {plan.largest_max_model_len:,}"
        )
    if not plan.starts:
        parts.append(f"the plan predicted it: {plan.problems[0]}")
    else:
        parts.append(
            f"the plan expected a start with {plan.memory.kv_cache_bytes / GIB_BYTES:.2f} GiB "
            "of KV cache: the budget on this machine is smaller than planned"
        )
    if outcome.recommended_command:
        parts.append(f"recommended: {outcome.recommended_command}")
    else:
        parts.extend(p for p in plan.problems if p.startswith("would fit"))
    return "; ".join(parts)
