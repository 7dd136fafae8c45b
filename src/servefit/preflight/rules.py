"""Rules: judge the facts, link by link. Pure: facts in, checks out.

The chain, in order: NVIDIA driver -> driver supports the CUDA of the PyTorch build ->
PyTorch sees every GPU -> PyTorch has kernels for each GPU -> the engine's required PyTorch
is the installed one -> the model resolves and servefit understands it -> weights on disk
-> disk space -> dtype and quantization supported on each GPU -> the parallel layout fits
the GPUs -> the plan fits the memory free now. A link whose facts depend on a failed link
is skipped, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from servefit.core.hardware import GpuCatalog, GpuSpec, custom_gpu
from servefit.core.model_spec import ModelSpec
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.errors import ServefitError
from servefit.preflight.facts import GpuFacts, HostFacts
from servefit.units import GIB_BYTES

# CUDA minor-version compatibility: the oldest driver that runs every toolkit of a major
# release (NVIDIA, "CUDA Compatibility", Table 1: CUDA 13.x >= 580, 12.x >= 525, 11.x >= 450.80.02).
MINOR_VERSION_COMPAT_MIN_DRIVER: dict[int, tuple[int, ...]] = {
    13: (580,),
    12: (525,),
    11: (450, 80, 2),
}

# Compute-capability floors (NVIDIA CUDA GPUs list; vLLM quantization docs):
BF16_MIN_CC = (8, 0)  # Ampere
FP8_NATIVE_MIN_CC = (8, 9)  # Ada / Hopper: FP8 tensor cores (W8A8)
FP8_WEIGHT_ONLY_MIN_CC = (7, 5)  # vLLM runs FP8 checkpoints as W8A16 via FP8 Marlin from Turing
FP4_NATIVE_MIN_CC = (10, 0)  # Blackwell: FP4 tensor cores
INT8_MIN_CC = (7, 5)  # CUTLASS int8 W8A8


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


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _cc(gpu: GpuFacts) -> tuple[int, int]:
    major, _, minor = gpu.compute_capability.partition(".")
    return int(major), int(minor or 0)


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB_BYTES:.1f} GiB"


def check_driver(facts: HostFacts) -> Check:
    nvml = facts.nvml
    if nvml.error or not nvml.driver_version:
        return Check(
            name="NVIDIA driver",
            status=Status.FAIL,
            reason=nvml.error or "the driver reported no version",
            remedy="run on a host with an NVIDIA GPU and its driver installed "
            "(>= 580 for CUDA 13 builds)",
        )
    if not nvml.gpus:
        return Check(
            name="NVIDIA driver",
            status=Status.FAIL,
            reason=f"driver {nvml.driver_version} sees no GPU",
            remedy="check the GPU is attached (nvidia-smi) and not hidden from this container",
        )
    names = ", ".join(sorted({g.name for g in nvml.gpus}))
    return Check(
        name="NVIDIA driver",
        status=Status.PASS,
        reason=f"driver {nvml.driver_version} (CUDA {nvml.cuda_driver_version}), "
        f"{len(nvml.gpus)} x {names}",
    )


def check_driver_supports_torch_cuda(facts: HostFacts) -> Check:
    name = "driver supports PyTorch's CUDA"
    t, nvml = facts.torch, facts.nvml
    if nvml.error or not nvml.cuda_driver_version or not nvml.driver_version:
        return Check(name=name, status=Status.SKIP, reason="depends on the driver (failed above)")
    if not t.is_installed or t.error:
        return Check(
            name=name,
            status=Status.FAIL,
            reason=t.error or f"PyTorch is not installed in {t.python or 'the probed Python'}",
            remedy="install the PyTorch version your engine requires into the engine's environment",
        )
    if not t.cuda_version:
        return Check(
            name=name,
            status=Status.FAIL,
            reason=f"torch {t.version} is a CPU-only build",
            remedy="install a CUDA build of PyTorch (the one vLLM requires)",
        )
    built = _version_tuple(t.cuda_version)
    supported = _version_tuple(nvml.cuda_driver_version)
    if supported >= built:
        return Check(
            name=name,
            status=Status.PASS,
            reason=f"torch {t.version} needs CUDA {t.cuda_version}; driver "
            f"{nvml.driver_version} supports up to {nvml.cuda_driver_version}",
        )
    floor = MINOR_VERSION_COMPAT_MIN_DRIVER.get(built[0])
    driver = _version_tuple(nvml.driver_version)
    if built[0] == supported[0] and floor is not None and driver >= floor:
        return Check(
            name=name,
            status=Status.WARN,
            reason=f"torch {t.version} was built with CUDA {t.cuda_version}, driver "
            f"{nvml.driver_version} supports {nvml.cuda_driver_version}: runs under CUDA "
            "minor-version "
            "compatibility (features needing a newer driver and PTX JIT of newer code fail)",
            remedy=f"update the driver to one that supports CUDA {t.cuda_version}",
        )
    need = ".".join(str(p) for p in floor) if floor else "a newer one"
    return Check(
        name=name,
        status=Status.FAIL,
        reason=f"torch {t.version} needs CUDA {t.cuda_version} but driver {nvml.driver_version} "
        f"supports only up to CUDA {nvml.cuda_driver_version}: torch.cuda.is_available() "
        "will be False",
        remedy=f"install an NVIDIA driver >= {need}, or a PyTorch build for CUDA "
        f"{supported[0]}.x (a cu{supported[0]}x wheel) of the version your engine requires",
    )


def check_torch_sees_gpus(facts: HostFacts) -> Check:
    name = "PyTorch sees every GPU"
    t, nvml = facts.torch, facts.nvml
    if not t.is_installed or t.error or not t.cuda_version or nvml.error:
        return Check(name=name, status=Status.SKIP, reason="depends on a failed link above")
    if not t.is_cuda_available:
        said = f" (torch said: {t.warnings[0]})" if t.warnings else ""
        return Check(
            name=name,
            status=Status.FAIL,
            reason=f"torch.cuda.is_available() is False{said}",
            remedy="fix the driver/CUDA mismatch above, or check the container exposes the GPUs",
        )
    if t.device_count < len(nvml.gpus):
        how = " (CUDA_VISIBLE_DEVICES is set)" if t.visible_devices_restricted else ""
        return Check(
            name=name,
            status=Status.WARN,
            reason=f"PyTorch sees {t.device_count} of {len(nvml.gpus)} GPUs{how}",
            remedy="intended? otherwise unset CUDA_VISIBLE_DEVICES or fix the container's "
            "device list",
        )
    return Check(
        name=name,
        status=Status.PASS,
        reason=f"{t.device_count} GPU(s) visible to torch {t.version}",
    )


def check_torch_arch(facts: HostFacts) -> Check:
    name = "PyTorch has kernels for each GPU"
    t, nvml = facts.torch, facts.nvml
    if not t.arch_list or nvml.error or not nvml.gpus:
        return Check(
            name=name, status=Status.SKIP, reason="no architecture list or no GPU to compare"
        )
    problems, jit = [], []
    for cc in sorted({_cc(g) for g in nvml.gpus}):
        sm = f"sm_{cc[0]}{cc[1]}"
        if sm in t.arch_list:
            continue
        ptx = [
            a
            for a in t.arch_list
            if a.startswith("compute_") and _version_tuple(a[8:]) <= (cc[0] * 10 + cc[1],)
        ]
        (jit if ptx else problems).append(sm)
    if problems:
        return Check(
            name=name,
            status=Status.FAIL,
            reason=f"torch {t.version} has no kernels for {', '.join(problems)} "
            f"(built for {', '.join(t.arch_list)})",
            remedy="install a PyTorch build that targets this GPU "
            "(newer CUDA builds add new architectures)",
        )
    if jit:
        return Check(
            name=name,
            status=Status.WARN,
            reason=f"{', '.join(jit)} only through PTX JIT (slow first start)",
            remedy="prefer a PyTorch build compiled for this architecture",
        )
    return Check(name=name, status=Status.PASS, reason=f"built for {', '.join(t.arch_list)}")


def check_engine_torch(facts: HostFacts) -> Check:
    name = "engine's PyTorch requirement"
    t = facts.torch
    if not facts.engines:
        return Check(
            name=name,
            status=Status.WARN,
            reason="no vLLM or SGLang installed in the probed Python",
            remedy="install the engine (or point --python at its environment)",
        )
    if not t.version:
        return Check(name=name, status=Status.SKIP, reason="PyTorch version unknown")
    failures, passes = [], []
    installed = t.version.split("+")[0]
    for engine in facts.engines:
        if not engine.torch_requirement:
            passes.append(f"{engine.name} {engine.version} (no torch pin)")
            continue
        try:
            requirement = Requirement(engine.torch_requirement)
            ok = Version(installed) in requirement.specifier
        except (InvalidRequirement, InvalidVersion):
            passes.append(
                f"{engine.name} {engine.version} "
                f"(unreadable requirement {engine.torch_requirement!r})"
            )
            continue
        target = f"{engine.name} {engine.version} requires {engine.torch_requirement}"
        (passes if ok else failures).append(target)
    if failures:
        return Check(
            name=name,
            status=Status.FAIL,
            reason=f"{'; '.join(failures)}, installed torch {t.version}",
            remedy="install the torch version the engine pins "
            "(reinstalling the engine usually does it)",
        )
    return Check(name=name, status=Status.PASS, reason="; ".join(passes) + f"; torch {t.version}")


def check_model(facts: HostFacts) -> Check:
    m = facts.model
    if m is None:
        return Check(name="model config", status=Status.SKIP, reason="no model given")
    if m.error:
        return Check(
            name="model config",
            status=Status.FAIL,
            reason=m.error,
            remedy="pass a Hugging Face id, a config.json or a model directory servefit "
            "understands",
        )
    return Check(name="model config", status=Status.PASS, reason=f"{m.model} ({m.origin})")


def check_weights_on_disk(facts: HostFacts) -> Check:
    m = facts.model
    name = "weights on disk"
    if m is None or m.error or not m.is_local:
        return Check(name=name, status=Status.SKIP, reason="not a local model directory")
    if not m.weights_present:
        return Check(
            name=name,
            status=Status.FAIL,
            reason="no *.safetensors or *.bin files next to config.json",
            remedy="download the weights into the directory, or pass the Hub id",
        )
    if (
        m.checkpoint_bytes
        and m.weights_bytes_on_disk is not None
        and m.weights_bytes_on_disk < m.checkpoint_bytes
    ):
        return Check(
            name=name,
            status=Status.FAIL,
            reason=f"{_gib(m.weights_bytes_on_disk)} on disk, the index lists "
            f"{_gib(m.checkpoint_bytes)}",
            remedy="the download is incomplete: fetch the missing shards",
        )
    return Check(
        name=name, status=Status.PASS, reason=f"{_gib(m.weights_bytes_on_disk or 0)} of weights"
    )


def check_disk_space(facts: HostFacts, weights_total_bytes: float | None) -> Check:
    name = "disk space for the weights"
    m, disk = facts.model, facts.disk
    if m is None or m.error or disk is None or m.is_local:
        return Check(
            name=name, status=Status.SKIP, reason="weights already local, or nothing to download"
        )
    need = m.checkpoint_bytes or weights_total_bytes
    if not need:
        return Check(name=name, status=Status.SKIP, reason="checkpoint size unknown")
    if disk.free_bytes < need:
        return Check(
            name=name,
            status=Status.FAIL,
            reason=f"{_gib(disk.free_bytes)} free in the {disk.path_kind}, the weights need "
            f"{_gib(need)}",
            remedy="free disk space or point HF_HUB_CACHE at a larger disk",
        )
    return Check(
        name=name, status=Status.PASS, reason=f"{_gib(disk.free_bytes)} free, weights {_gib(need)}"
    )


def check_precision_support(facts: HostFacts, spec: ModelSpec | None) -> Check:
    name = "dtype and quantization on these GPUs"
    if spec is None or facts.nvml.error or not facts.nvml.gpus:
        return Check(name=name, status=Status.SKIP, reason="no model or no GPU")
    cc = min(_cc(g) for g in facts.nvml.gpus)
    cc_text = f"compute capability {cc[0]}.{cc[1]}"
    quant = spec.quant
    computes = set()
    if quant.default is not None:
        computes.add(quant.default.compute_dtype)
    computes |= {r.fmt.compute_dtype for r in quant.rules if r.fmt is not None}
    warnings: list[str] = []
    if spec.dtype == "bfloat16" and cc < BF16_MIN_CC:
        warnings.append(
            f"bfloat16 is not supported below 8.0: vLLM runs it as float16 on {cc_text} "
            "(pass --dtype float16)"
        )
    if "fp8" in computes:
        if cc >= FP8_NATIVE_MIN_CC:
            pass
        elif cc >= FP8_WEIGHT_ONLY_MIN_CC:
            moe = " (FP8 MoE kernels below 8.9 depend on the vLLM version)" if spec.is_moe else ""
            warnings.append(
                f"no FP8 tensor cores on {cc_text}: vLLM runs FP8 weights as W8A16 through "
                f"FP8 Marlin: 8-bit weights, 16-bit matmuls{moe}"
            )
        else:
            return Check(
                name=name,
                status=Status.FAIL,
                reason=f"FP8 checkpoints need compute capability >= 7.5, this GPU is {cc_text}",
                remedy="use a 16-bit or int4 checkpoint",
            )
    if "fp4" in computes and cc < FP4_NATIVE_MIN_CC:
        warnings.append(
            f"no FP4 tensor cores on {cc_text}: vLLM uses weight-only FP4 kernels where it has "
            "them (MXFP4 through Triton/Marlin, NVFP4 through Marlin)"
        )
    if "int8" in computes and cc < INT8_MIN_CC:
        return Check(
            name=name,
            status=Status.FAIL,
            reason=f"int8 W8A8 needs compute capability >= 7.5 ({cc_text})",
            remedy="use a weight-only checkpoint",
        )
    if warnings:
        return Check(
            name=name,
            status=Status.WARN,
            reason="; ".join(warnings),
            remedy="expected slower prefill; pick a GPU with native support to avoid it",
        )
    return Check(
        name=name,
        status=Status.PASS,
        reason=f"{spec.dtype}, {quant.description} native on {cc_text}",
    )


def _gpu_for(facts: GpuFacts, catalog: GpuCatalog) -> GpuSpec:
    """The catalog row for an NVML name, with the memory this device really reports."""
    try:
        base = catalog.get(facts.name)
    except ServefitError:
        return custom_gpu(
            memory_bytes=facts.memory_total_bytes, memory_bandwidth_bytes_per_s=1.0, name=facts.name
        )
    return replace(base, usable_memory_bytes=facts.memory_total_bytes)


def check_parallel_layout(facts: HostFacts, settings: ServeSettings) -> Check:
    name = "parallel layout fits the GPUs"
    if facts.nvml.error:
        return Check(name=name, status=Status.SKIP, reason="no GPU facts")
    needed = settings.tensor_parallel_size * settings.pipeline_parallel_size
    visible = facts.torch.device_count if facts.torch.is_cuda_available else len(facts.nvml.gpus)
    if needed > visible:
        return Check(
            name=name,
            status=Status.FAIL,
            reason=f"TP {settings.tensor_parallel_size} x PP {settings.pipeline_parallel_size} "
            f"needs {needed} GPUs, {visible} visible",
            remedy=f"use --tensor-parallel-size <= {visible} or run on more GPUs",
        )
    return Check(name=name, status=Status.PASS, reason=f"{needed} of {visible} GPUs")


def check_plan_fits_free_memory(
    facts: HostFacts,
    spec: ModelSpec | None,
    settings: ServeSettings,
    catalog: GpuCatalog,
    mamba_ssm_dtype: str | None = None,
) -> Check:
    name = "plan fits the memory free now"
    if spec is None or facts.nvml.error or not facts.nvml.gpus:
        return Check(name=name, status=Status.SKIP, reason="no model or no GPU")
    count = settings.tensor_parallel_size * settings.pipeline_parallel_size
    gpus = facts.nvml.gpus[:count]
    try:
        plan = plan_capacity(
            spec, _gpu_for(gpus[0], catalog), settings, mamba_ssm_dtype=mamba_ssm_dtype
        )
    except ServefitError as exc:
        return Check(
            name=name, status=Status.FAIL, reason=str(exc), remedy="change the flags named above"
        )
    util = plan.settings.gpu_memory_utilization
    for gpu in gpus:
        # vLLM asks for a share of the *total*; other processes' memory makes startup fail.
        requested = gpu.memory_total_bytes * util
        if gpu.memory_free_bytes < requested:
            holders = (
                ", ".join(
                    f"pid {p.pid}{' ' + p.name if p.name else ''}"
                    + (f" ({_gib(p.used_bytes)})" if p.used_bytes else "")
                    for p in gpu.processes
                )
                or "other processes"
            )
            fits_util = gpu.memory_free_bytes / gpu.memory_total_bytes
            return Check(
                name=name,
                status=Status.FAIL,
                reason=f"GPU {gpu.index} has {_gib(gpu.memory_free_bytes)} free but vLLM asks for "
                f"{_gib(requested)} ({util:.2f} x {_gib(gpu.memory_total_bytes)}); "
                f"held by {holders}",
                remedy=f"stop {holders}, or lower --gpu-memory-utilization to "
                f"{fits_util - 0.01:.2f} "
                "(and re-plan: the KV cache shrinks with it)",
            )
    if not plan.starts:
        return Check(
            name=name,
            status=Status.FAIL,
            reason=plan.problems[0],
            remedy="; ".join(p for p in plan.problems[1:] if p.startswith("would fit"))
            or "a larger GPU, more GPUs or a smaller checkpoint",
        )
    if not plan.meets_target:
        return Check(
            name=name,
            status=Status.WARN,
            reason=plan.problems[0],
            remedy="; ".join(p for p in plan.problems[1:]),
        )
    return Check(
        name=name,
        status=Status.PASS,
        reason=f"{_gib(plan.memory.kv_cache_bytes)} KV cache per GPU, {plan.max_concurrency:.1f}x "
        f"concurrency at {plan.settings.max_model_len:,} tokens",
    )


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
