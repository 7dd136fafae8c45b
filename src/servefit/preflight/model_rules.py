"""Preflight rules for what is served, the last links of the chain: the model resolves and
servefit understands it -> weights on disk -> disk space -> dtype and quantization
supported on each GPU -> the parallel layout fits the GPUs -> the plan fits the memory free
now. Pure: facts in, checks out. Run in order by :func:`servefit.preflight.rules.judge`."""

from __future__ import annotations

from dataclasses import replace

from servefit.core.hardware import GpuCatalog, GpuSpec, custom_gpu
from servefit.core.model_spec import ModelSpec
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.errors import ServefitError
from servefit.preflight.check import SKIP_GPU_FACTS, Check, Status, cc_tuple, gpu_facts_usable
from servefit.preflight.facts import GpuFacts, HostFacts
from servefit.units import GIB_BYTES

# Compute-capability floors (NVIDIA CUDA GPUs list; vLLM quantization docs):
BF16_MIN_CC = (8, 0)  # Ampere
FP8_NATIVE_MIN_CC = (8, 9)  # Ada / Hopper: FP8 tensor cores (W8A8)
FP8_WEIGHT_ONLY_MIN_CC = (7, 5)  # vLLM runs FP8 checkpoints as W8A16 via FP8 Marlin from Turing
FP4_NATIVE_MIN_CC = (10, 0)  # Blackwell: FP4 tensor cores
INT8_MIN_CC = (7, 5)  # CUTLASS int8 W8A8


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB_BYTES:.1f} GiB"


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
    if m.problems():
        return Check(
            name=name,
            status=Status.FAIL,
            reason="the model's facts are impossible: " + "; ".join(m.problems()),
            remedy="probe this host again (a recording with these facts was edited or damaged)",
        )
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
    problems = m.problems() + disk.problems()
    if problems:
        return Check(
            name=name,
            status=Status.FAIL,
            reason="the disk's or the model's facts are impossible: " + "; ".join(problems),
            remedy="probe this host again (a recording with these facts was edited or damaged)",
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
    if not gpu_facts_usable(facts):
        return Check(name=name, status=Status.SKIP, reason=SKIP_GPU_FACTS)
    if spec is None or not facts.nvml.gpus:
        return Check(name=name, status=Status.SKIP, reason="no model or no GPU")
    cc = min(cc_tuple(g) for g in facts.nvml.gpus)
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
    if not gpu_facts_usable(facts) or facts.torch.device_problems():
        return Check(name=name, status=Status.SKIP, reason="depends on a failed link above")
    dp = settings.data_parallel_size
    needed = settings.tensor_parallel_size * settings.pipeline_parallel_size * dp
    visible = facts.torch.device_count if facts.torch.is_cuda_available else len(facts.nvml.gpus)
    if needed > visible:
        return Check(
            name=name,
            status=Status.FAIL,
            reason=f"TP {settings.tensor_parallel_size} x PP {settings.pipeline_parallel_size} "
            + (f"x DP {dp} " if dp > 1 else "")
            + f"needs {needed} GPUs, {visible} visible",
            remedy=f"use --tensor-parallel-size <= {visible} or run on more GPUs"
            if dp == 1
            else f"use TP x PP x DP <= {visible} or run on more GPUs",
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
    if not gpu_facts_usable(facts):
        return Check(name=name, status=Status.SKIP, reason=SKIP_GPU_FACTS)
    if spec is None or not facts.nvml.gpus:
        return Check(name=name, status=Status.SKIP, reason="no model or no GPU")
    count = settings.tensor_parallel_size * settings.pipeline_parallel_size
    count *= settings.data_parallel_size
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
