"""What the engines of Apple silicon (MLX, llama.cpp's Metal backend) share: the part of
unified memory the GPU may wire, checkpoint formats, and a memory budget without CUDA.

On a Mac the CPU and GPU share one pool of RAM, but macOS lets the GPU wire (pin) only part
of it: Metal reports that limit as ``MTLDevice.recommendedMaxWorkingSetSize``, and
``sudo sysctl iogpu.wired_limit_mb=N`` changes it (0, the default, means "the system's
policy"). Both engines treat it as the device's memory:

- ``mlx_lm.server`` wires exactly that much at start (mlx-lm ``mlx_lm/server.py``, ``main``:
  ``mx.set_wired_limit(mx.device_info()["max_recommended_working_set_size"])``; read at
  ml-explore/mlx-lm@d78bf58e);
- llama.cpp's Metal backend reports it as the device's memory (``llama-server
  --list-devices`` prints ``MTL0: Apple M1 Max (26000 MiB, ...)`` after
  ``iogpu.wired_limit_mb=26000``; Andyyyy64/whichllm#152).

Worked example (M4 Pro, 64 GiB): 3/4 x 64 GiB = 48 GiB the GPU may wire; 16 GiB stay with
macOS and other applications.
"""

from __future__ import annotations

from servefit.core import engine as vllm_engine
from servefit.core.hardware import GpuSpec
from servefit.core.kv_cache import CacheSettings, layer_specs
from servefit.core.memory import MemoryBreakdown
from servefit.core.model_spec import ModelSpec
from servefit.units import GIB_BYTES, MIB_BYTES

# macOS's default GPU working set, as a fraction of RAM. Readings of
# recommendedMaxWorkingSetSize: 16 GiB M1 -> 10922.67 MB = 2/3 (abetlen/llama-cpp-python#687),
# 32 GiB M2 Pro -> 21845.34 MB = 2/3 (ggml_metal_init log line quoted in a public test
# fixture), 64 GiB M1/M2 Max -> ~48 GiB = 3/4 (ggml-org/llama.cpp#1870: loads fail from
# ~47 GB; stencel.io "Apple silicon limitations": 64 GB -> ~48 GB, 128 GB -> ~96 GB).
# Assumption: the switch from 2/3 to 3/4 lies between 32 and 64 GiB; servefit switches
# above 32 GiB (36 and 48 GiB machines were not verified). macOS 26 was measured at
# 107.52 GiB on a 128 GiB M5 Max (84%, antirez/ds4#893): newer macOS may allow more.
WIRED_FRACTION_SMALL = 2 / 3
WIRED_FRACTION_LARGE = 3 / 4
WIRED_FRACTION_SWITCH_BYTES = 32 * GIB_BYTES  # above this much RAM, 3/4


def device_memory_bytes(gpu: GpuSpec) -> int:
    """All of the device's memory (unified RAM on a Mac, HBM/GDDR elsewhere)."""
    return gpu.usable_memory_bytes or gpu.memory_bytes


def default_wired_fraction(memory_bytes: int) -> float:
    """The share of RAM macOS lets the GPU wire when ``iogpu.wired_limit_mb`` is 0."""
    if memory_bytes > WIRED_FRACTION_SWITCH_BYTES:
        return WIRED_FRACTION_LARGE
    return WIRED_FRACTION_SMALL


def wired_limit_mb(num_bytes: float) -> int:
    """The ``iogpu.wired_limit_mb`` value (MiB, rounded up) that lets the GPU wire this much."""
    return -(-int(num_bytes) // MIB_BYTES)


def is_mlx_checkpoint(spec: ModelSpec) -> bool:
    """An MLX export (mlx-lm's ``quantization`` block): MLX affine weights."""
    fmt = spec.quant.default
    return spec.quant.method.startswith("mlx") or (fmt is not None and fmt.name.startswith("mlx-"))


def is_gguf_checkpoint(spec: ModelSpec) -> bool:
    """A GGUF file (llama.cpp's format), as :func:`servefit.core.quant.gguf` describes it."""
    fmt = spec.quant.default
    return fmt is not None and fmt.name.startswith("gguf-")


def no_vllm_behaviour(version_label: str, budget_fraction: float) -> vllm_engine.VllmBehaviour:
    """``CapacityPlan.behaviour`` for an engine that is not vLLM: every vLLM-only switch off
    (no CUDA graphs, no hybrid prefix caching, no Mamba block check)."""
    return vllm_engine.VllmBehaviour(
        version=version_label,
        default_gpu_memory_utilization=budget_fraction,
        is_cuda_graph_in_budget=False,
        is_token_count_from_concurrency=False,
        has_xlarge_batch_defaults=False,
        checks_mamba_blocks_vs_max_num_seqs=False,
        has_hybrid_prefix_caching=False,
    )


def budget(
    *,
    total_bytes: int,
    fraction: float,
    weights_bytes: int,
    activation_peak_bytes: int,
) -> MemoryBreakdown:
    """The memory the GPU may use (``total x fraction``) less weights and activations: what
    is left for the KV cache. No CUDA graphs, no non-torch allocations."""
    requested = int(total_bytes * fraction)
    return MemoryBreakdown(
        total_bytes=total_bytes,
        gpu_memory_utilization=fraction,
        requested_bytes=requested,
        weights_bytes=weights_bytes,
        activation_peak_bytes=activation_peak_bytes,
        non_torch_bytes=0,
        cuda_graph_bytes=0,
        is_cuda_graph_in_budget=False,
        kv_cache_bytes=requested - weights_bytes - activation_peak_bytes,
    )


def per_token_sizes(spec: ModelSpec, cache: CacheSettings) -> tuple[int, int]:
    """(attention KV bytes per token, constant state bytes per sequence), all layers."""
    specs = layer_specs(spec, None, cache)
    kv_per_token = sum(s.page_size_bytes // s.block_size for s in specs if not s.is_state)
    state = sum(s.page_size_bytes for s in specs if s.is_state)
    return kv_per_token, state


def gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB_BYTES:.2f} GiB"
