"""vLLM (V1) on CUDA/ROCm: servefit's original accounting, behind the engine interface.

Capacity is :func:`servefit.core.plan.plan_capacity` and the launch command is
:func:`servefit.core.vllm_command.vllm_serve_args`, unchanged: this module only adds what
vLLM cannot load.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from servefit.core.engines import unified_memory as um
from servefit.core.hardware import GpuSpec
from servefit.core.memory import MemoryBreakdown
from servefit.core.model_spec import ModelSpec
from servefit.core.plan import CapacityPlan, ServeSettings, plan_capacity
from servefit.core.vllm_command import vllm_serve_args


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmEngine:
    """vLLM on CUDA/ROCm GPUs: its startup accounting (``servefit.core.plan``) and its
    launch command."""

    name: str = "vllm"

    def refusal(self, spec: ModelSpec, gpu: GpuSpec) -> str | None:
        return _refusal("vLLM", spec, gpu)

    def plan(
        self,
        spec: ModelSpec,
        gpu: GpuSpec,
        settings: ServeSettings,
        *,
        mamba_ssm_dtype: str | None = None,
        with_suggestions: bool = True,
    ) -> CapacityPlan:
        return plan_capacity(
            spec, gpu, settings, mamba_ssm_dtype=mamba_ssm_dtype, with_suggestions=with_suggestions
        )

    def launch_args(self, model_id: str, plan: CapacityPlan, asked: ServeSettings) -> list[str]:
        return vllm_serve_args(model_id, plan, asked)


def _refusal(label: str, spec: ModelSpec, gpu: GpuSpec) -> str | None:
    """What vLLM (and the engines planned like it) cannot load."""
    if gpu.vendor == "apple":
        return (
            f"{label} has no Metal backend: it cannot use the GPU of {gpu.name}. On Apple "
            "silicon use MLX (engine 'mlx') for safetensors/MLX checkpoints or llama.cpp "
            "(engine 'llama.cpp') for GGUF files"
        )
    if um.is_mlx_checkpoint(spec):
        return (
            f"{spec.name} is an MLX export ({spec.quant.description}): {label} cannot load "
            f"MLX-quantized weights on {gpu.name}. Plan it on an Apple silicon device "
            "(e.g. --gpu M4-Pro) with MLX, or plan the checkpoint it was converted from"
        )
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmAccountedEngine:
    """An engine servefit does not model itself (SGLang, TensorRT-LLM): vLLM's capacity
    accounting under that engine's name, said as an assumption, with its own command.

    ``free_memory_fraction`` is the engine's own KV pool rule when it has one: the pool is
    that share of the memory still free once the model is loaded (weights, activations,
    runtime buffers), not vLLM's share of the whole device. TensorRT-LLM's
    ``KvCacheConfig.free_gpu_memory_fraction`` ("The fraction of GPU memory fraction that
    should be allocated for the KV cache. Default is 90%", tensorrt_llm/llmapi/llm_args.py).
    Worked example (Llama-3.3-70B in NVFP4 on a B200): 191.8 GB visible, 47.5 GB loaded
    (weights 41.2, activations 4.1, runtime 2.1): vLLM at 0.9 keeps 0.9 x 191.8 - 47.5 =
    125.2 GB for KV, TensorRT-LLM 0.9 x (191.8 - 47.5) = 129.9 GB.
    A ``--gpu-memory-utilization`` or ``--kv-cache-memory-bytes`` the user gives still
    means what it means to vLLM."""

    name: str
    label: str
    free_memory_fraction: float | None = None

    def refusal(self, spec: ModelSpec, gpu: GpuSpec) -> str | None:
        if self.name == "trtllm" and gpu.vendor not in ("nvidia", "custom"):
            return (
                f"TensorRT-LLM runs on NVIDIA GPUs only; {gpu.name} is a {gpu.vendor} device. "
                + ("Use MLX or llama.cpp there" if gpu.vendor == "apple" else "Use vLLM there")
            )
        return _refusal(self.label, spec, gpu)

    def plan(
        self,
        spec: ModelSpec,
        gpu: GpuSpec,
        settings: ServeSettings,
        *,
        mamba_ssm_dtype: str | None = None,
        with_suggestions: bool = True,
    ) -> CapacityPlan:
        plan = plan_capacity(
            spec, gpu, settings, mamba_ssm_dtype=mamba_ssm_dtype, with_suggestions=with_suggestions
        )
        note = (
            f"assumption: {self.label} is taken to account memory as vLLM does (servefit "
            f"does not model {self.label}'s own startup); the verdict's wording is vLLM's"
        )
        fraction = self.free_memory_fraction
        own_pool = (
            fraction is not None
            and settings.gpu_memory_utilization is None
            and settings.kv_cache_memory_bytes is None
        )
        if own_pool and fraction is not None:
            pool = free_memory_kv_bytes(plan.memory, fraction)
            plan = plan_capacity(
                spec,
                gpu,
                replace(settings, kv_cache_memory_bytes=pool),
                mamba_ssm_dtype=mamba_ssm_dtype,
                with_suggestions=with_suggestions,
            )
            note = (
                f"assumption: {self.label}'s KV pool is {fraction:.0%} of the memory free after "
                f"loading ({pool / 1e9:.1f} GB), with vLLM's estimates of weights, activations "
                "and runtime buffers; the verdict's wording is vLLM's"
            )
        return replace(
            plan,
            engine=self.name,
            engine_label=self.label,
            assumptions=(note, *plan.assumptions),
        )

    def launch_args(self, model_id: str, plan: CapacityPlan, asked: ServeSettings) -> list[str]:
        if self.name == "sglang":
            return _sglang_args(model_id, plan, asked)
        return _trtllm_args(model_id, plan, asked)


def free_memory_kv_bytes(memory: MemoryBreakdown, fraction: float) -> int:
    """The KV pool of an engine that takes ``fraction`` of the memory free after loading:
    ``fraction x (total - weights - activation peak - runtime buffers)``."""
    loaded = memory.weights_bytes + memory.activation_peak_bytes + memory.runtime_bytes
    return max(int(fraction * (memory.total_bytes - loaded)), 0)


def _sglang_args(model_id: str, plan: CapacityPlan, asked: ServeSettings) -> list[str]:
    """``python -m sglang.launch_server`` (docs.sglang.io, Server Arguments)."""
    r = plan.settings
    args = ["python", "-m", "sglang.launch_server", "--model-path", model_id]
    dp = r.data_parallel_size
    tp = r.tensor_parallel_size * (dp if asked.sglang_dp_attention else 1)  # SGLang's TP
    if tp > 1:
        args += ["--tp-size", str(tp)]
    if dp > 1:
        args += ["--dp-size", str(dp)]
        if asked.sglang_dp_attention:
            args.append("--enable-dp-attention")
    if r.pipeline_parallel_size > 1:
        args += ["--pp-size", str(r.pipeline_parallel_size)]
    args += ["--context-length", str(r.max_model_len)]
    if asked.gpu_memory_utilization is not None:  # weights + KV pool, as a share of memory
        args += ["--mem-fraction-static", f"{r.gpu_memory_utilization:g}"]
    if asked.max_num_seqs is not None:
        args += ["--max-running-requests", str(r.max_num_seqs)]
    if asked.max_num_batched_tokens is not None:
        args += ["--chunked-prefill-size", str(r.max_num_batched_tokens)]
    if r.kv_cache_dtype != "auto":  # SGLang names the fp8 variant
        kv = "fp8_e4m3" if r.kv_cache_dtype == "fp8" else r.kv_cache_dtype
        args += ["--kv-cache-dtype", kv]
    sc = asked.speculative
    if sc is not None and sc.sglang_algorithm is not None:
        args += ["--speculative-algorithm", sc.sglang_algorithm]
        if sc.model:
            args += ["--speculative-draft-model-path", sc.model]
        args += [
            "--speculative-num-steps",
            str(sc.k),
            "--speculative-eagle-topk",
            str(sc.eagle_topk),
            "--speculative-num-draft-tokens",
            str(sc.verify_tokens),
        ]
    return args


def _trtllm_args(model_id: str, plan: CapacityPlan, asked: ServeSettings) -> list[str]:
    """``trtllm-serve MODEL`` (nvidia.github.io/TensorRT-LLM, commands/trtllm-serve). Its
    memory share (--kv_cache_free_gpu_memory_fraction) is of the memory left after the
    weights, not vLLM's share of the total, so servefit does not translate it."""
    r = plan.settings
    args = ["trtllm-serve", model_id]
    if r.tensor_parallel_size > 1:
        args += ["--tp_size", str(r.tensor_parallel_size)]
    if r.pipeline_parallel_size > 1:
        args += ["--pp_size", str(r.pipeline_parallel_size)]
    args += ["--max_seq_len", str(r.max_model_len)]
    if asked.max_num_seqs is not None:
        args += ["--max_batch_size", str(r.max_num_seqs)]
    if asked.max_num_batched_tokens is not None:
        args += ["--max_num_tokens", str(r.max_num_batched_tokens)]
    return args
