"""Preflight rules for the host's software stack, the first links of the chain: the NVIDIA
driver -> the driver supports the CUDA of the PyTorch build -> PyTorch sees every GPU ->
PyTorch has kernels for each GPU -> the engine's required PyTorch is the installed one.
Pure: facts in, checks out. Run in order by :func:`servefit.preflight.rules.judge`."""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from servefit.preflight.check import (
    SKIP_GPU_FACTS,
    Check,
    Status,
    cc_tuple,
    gpu_facts_usable,
    impossible,
)
from servefit.preflight.facts import TORCH_ARCH, HostFacts, parse_numeric_version

# CUDA minor-version compatibility: the oldest driver that runs every toolkit of a major
# release (NVIDIA, "CUDA Compatibility", Table 1: CUDA 13.x >= 580, 12.x >= 525, 11.x >= 450.80.02).
MINOR_VERSION_COMPAT_MIN_DRIVER: dict[int, tuple[int, ...]] = {
    13: (580,),
    12: (525,),
    11: (450, 80, 2),
}


def _ptx_target(arch: str) -> int | None:
    """ "compute_90" -> 90; None for an ``sm_`` entry (validated by ``TORCH_ARCH``)."""
    match = TORCH_ARCH.match(arch)
    return int(match[2]) if match and match[1] == "compute" else None


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
    problems = nvml.problems()
    if problems:
        return Check(
            name="NVIDIA driver",
            status=Status.FAIL,
            reason="the driver's report is impossible: "
            + "; ".join(problems[:3])
            + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""),
            remedy="probe this host again (a recording with these facts was edited or "
            "damaged); if probed live, compare with nvidia-smi",
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
    if not gpu_facts_usable(facts) or not nvml.driver_version:
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
    problems = t.version_problems()
    if problems:
        return impossible(name, "PyTorch's report", problems)
    if not nvml.cuda_driver_version:
        return Check(
            name=name,
            status=Status.FAIL,
            reason=f"driver {nvml.driver_version} did not say which CUDA it supports",
            remedy="probe this host again; check nvidia-smi shows a CUDA version",
        )
    built = parse_numeric_version(t.cuda_version)
    supported = parse_numeric_version(nvml.cuda_driver_version)
    if supported >= built:
        return Check(
            name=name,
            status=Status.PASS,
            reason=f"torch {t.version} needs CUDA {t.cuda_version}; driver "
            f"{nvml.driver_version} supports up to {nvml.cuda_driver_version}",
        )
    floor = MINOR_VERSION_COMPAT_MIN_DRIVER.get(built[0])
    driver = parse_numeric_version(nvml.driver_version)
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
    if (
        not t.is_installed
        or t.error
        or not t.cuda_version
        or t.version_problems()
        or not gpu_facts_usable(facts)
    ):
        return Check(name=name, status=Status.SKIP, reason="depends on a failed link above")
    problems = t.device_problems()
    if problems:
        return impossible(name, "PyTorch's report", problems)
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
    if not gpu_facts_usable(facts):
        return Check(name=name, status=Status.SKIP, reason=SKIP_GPU_FACTS)
    if not t.arch_list or not nvml.gpus:
        return Check(
            name=name, status=Status.SKIP, reason="no architecture list or no GPU to compare"
        )
    if t.device_problems():
        return Check(name=name, status=Status.SKIP, reason="depends on a failed link above")
    problems: list[str] = []
    jit: list[str] = []
    for cc in sorted({cc_tuple(g) for g in nvml.gpus}):
        sm = f"sm_{cc[0]}{cc[1]}"
        if sm in t.arch_list:
            continue
        ptx = [
            a
            for a in t.arch_list
            if (target := _ptx_target(a)) is not None and target <= cc[0] * 10 + cc[1]
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
        # fail closed: without an engine there is nothing the command could serve with
        return Check(
            name=name,
            status=Status.FAIL,
            reason=f"no vLLM or SGLang installed in {t.python or 'the probed Python'}",
            remedy="install the engine (or point --python at its environment)",
        )
    engine_problems = [p for engine in facts.engines for p in engine.problems()]
    if engine_problems:
        return impossible(name, "the engine's report", engine_problems)
    if not t.version:
        return Check(
            name=name,
            status=Status.FAIL,
            reason="PyTorch version unknown: the engine's pin cannot be checked",
            remedy="install the PyTorch version your engine requires into its environment",
        )
    failures, passes = [], []
    try:
        installed = Version(t.version.split("+")[0])
    except InvalidVersion:
        failures.append(f"torch version {t.version!r} is not a version")
        installed = None
    for engine in facts.engines:
        if not engine.torch_requirement:
            passes.append(f"{engine.name} {engine.version} (no torch pin)")
            continue
        try:
            requirement = Requirement(engine.torch_requirement)
        except InvalidRequirement:
            failures.append(
                f"{engine.name} {engine.version}: unreadable requirement "
                f"{engine.torch_requirement!r}"
            )
            continue
        if requirement.name.lower() != "torch":
            failures.append(
                f"{engine.name} {engine.version}: {engine.torch_requirement!r} is not a torch pin"
            )
            continue
        ok = installed is not None and installed in requirement.specifier
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
