"""Step 7 of :func:`servefit.core.plan.plan_capacity`: the verdict.

:func:`capacity_verdict` says what stops vLLM from starting (each such problem begins with
:data:`STARTUP`), what misses the user's target, and what to watch. What would fit instead
(the suggestions) is worked out in :mod:`servefit.core.plan`, which re-plans with other flags.
"""

from __future__ import annotations

from servefit.core import engine
from servefit.core.memory import MemoryBreakdown
from servefit.core.model_spec import ModelSpec
from servefit.core.plan_settings import ResolvedSettings
from servefit.units import GIB_BYTES

STARTUP = "vLLM would not start: "


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB_BYTES:.2f} GiB"


def _needed(memory: MemoryBreakdown) -> int:
    """Besides the KV cache: weights, activations, runtime (and CUDA graphs)."""
    graphs = memory.cuda_graph_bytes if memory.is_cuda_graph_in_budget else 0
    return memory.weights_bytes + memory.activation_peak_bytes + memory.non_torch_bytes + graphs


def capacity_verdict(
    spec: ModelSpec,
    r: ResolvedSettings,
    behaviour: engine.VllmBehaviour,
    memory: MemoryBreakdown,
    blocks: int,
    concurrency: float,
    at_context: float,
    largest: int,
    mamba_limit: int | None,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Step 7: what stops vLLM, what misses the target, what to watch."""
    problems: list[str] = []
    warnings: list[str] = []
    if memory.weights_bytes > memory.total_bytes:
        # vLLM loads the weights before it profiles anything: a shard larger than the device
        # is a CUDA out-of-memory error while loading (gpu_model_runner.load_model), not the
        # "no memory for the KV cache" of a later step
        problems.append(
            f"{STARTUP}the weights need {_gib(memory.weights_bytes)} per GPU, more than the "
            f"{_gib(memory.total_bytes)} the device has: vLLM fails while loading them (CUDA "
            f"out of memory), before it sizes any KV cache"
        )
    elif memory.kv_cache_bytes <= 0:
        needed = memory.weights_bytes + memory.activation_peak_bytes + memory.non_torch_bytes
        problems.append(
            f"{STARTUP}no memory is left for the KV cache: weights, activations and runtime "
            f"need {_gib(needed)} per GPU but the budget ({r.gpu_memory_utilization:.2f} x "
            f"{_gib(memory.total_bytes)}) is {_gib(memory.requested_bytes)}: vLLM loads the "
            f"weights, profiles, then stops with no memory for the cache blocks"
        )
    elif memory.is_kv_cache_given and memory.kv_cache_bytes + _needed(memory) > memory.total_bytes:
        problems.append(
            f"{STARTUP}--kv-cache-memory-bytes {_gib(memory.kv_cache_bytes)} plus weights, "
            f"activations and runtime ({_gib(_needed(memory))}) exceed the device's "
            f"{_gib(memory.total_bytes)}: allocating the KV cache runs out of memory"
        )
    elif concurrency < 1:
        problems.append(
            f"{STARTUP}one request of --max-model-len {r.max_model_len:,} tokens needs more "
            f"KV cache than the {_gib(memory.kv_cache_bytes)} available; the longest that "
            f"fits is {largest:,} tokens"
        )
    if (
        mamba_limit is not None
        and behaviour.checks_mamba_blocks_vs_max_num_seqs
        and not r.enforce_eager
        and 0 < mamba_limit < r.max_num_seqs
        and not problems
    ):
        problems.append(
            f"{STARTUP}--max-num-seqs {r.max_num_seqs} exceeds the {mamba_limit} Mamba cache "
            f"blocks (each running sequence holds one); vLLM >= 0.30 stops while capturing CUDA "
            f"graphs. Lower --max-num-seqs to {mamba_limit} or free memory"
        )
    dp = r.data_parallel_size
    per_rank = -(-r.concurrency // dp)  # the requests of the busiest data-parallel rank
    if not problems and at_context < per_rank:
        ranks = f" on each of the {dp} data-parallel ranks" if dp > 1 else ""
        asked = f"the {per_rank} of the {r.concurrency}" if dp > 1 else f"the {r.concurrency}"
        problems.append(
            f"the KV cache holds {at_context:.2f} requests of {r.context_tokens:,} tokens at "
            f"once{ranks}, not {asked} asked for (--target-concurrency): the rest would queue "
            "(or be preempted)"
        )
    if per_rank > r.max_num_seqs:
        warnings.append(
            f"--target-concurrency {r.concurrency} exceeds --max-num-seqs {r.max_num_seqs}: vLLM "
            f"runs at most {r.max_num_seqs} requests at once"
        )
    if r.context_tokens > r.max_model_len:
        problems.append(
            f"--context {r.context_tokens:,} exceeds --max-model-len {r.max_model_len:,}: vLLM "
            "rejects longer requests"
        )
    if spec.max_position_embeddings and r.max_model_len > spec.max_position_embeddings:
        # vllm/config/model.py (_get_and_verify_max_len) raises unless the user opts in with
        # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, which servefit does not assume.
        problems.insert(
            0,
            f"{STARTUP}--max-model-len {r.max_model_len:,} exceeds the model's "
            f"max_position_embeddings ({spec.max_position_embeddings:,}); vLLM refuses it "
            "unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
        )
    return tuple(problems), tuple(warnings)
