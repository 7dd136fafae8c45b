"""Where one GPU's memory goes under vLLM: weights, activations, runtime, KV cache, headroom.

vLLM V1 sizes the KV cache from a budget (``vllm/v1/worker/gpu_worker.py``,
``determine_available_memory``)::

    requested  = total x gpu_memory_utilization
    kv_cache   = requested - weights - activation_peak - non_torch [- cuda_graphs]

``total`` is the memory CUDA reports (not what is free: other processes do not shrink the
budget, they make startup fail). The activation peak and non-torch memory are measured by
vLLM in a profile run; servefit estimates them (see :mod:`servefit.core.engine`). CUDA
graphs come out of the budget from vLLM 0.21 on, and out of the headroom before that.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from servefit.core import engine, engine_v0
from servefit.core.model_spec import DenseMlpSpec, ModelSpec, MoeSpec
from servefit.units import dtype_bytes


@lru_cache(maxsize=1024)
def activation_peak_bytes(
    spec: ModelSpec,
    layers: range,
    *,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    is_last_stage: bool,
    sorts_sampler_logits: bool = False,
    dp: int = 1,
    expert_parallel: bool = False,
    moe_chunk_tokens: int | None = None,
) -> int:
    """Estimated peak of vLLM's profile run on one GPU.

    The larger of the sampler's working set (``SAMPLER_LOGITS_FACTOR`` x fp32 logits of
    ``min(max_num_seqs, max_num_batched_tokens)`` requests; last pipeline stage only) and
    the dense forward pass (gate/up output, activation and a few hidden-state copies per
    token), plus the fused-MoE intermediate buffers (top-k copies per token), which the fit
    finds beside the sampler's (Mixtral-8x7B TP 2, Qwen3-30B-A3B); MXFP4 MoE's buffers live
    only for the layer's call, so there the larger of the two is the peak.

    The MoE layers see every data-parallel rank's tokens: the ranks of one engine all-gather
    their hidden states before the experts and reduce-scatter the sums after them (the
    naive and allgather-reducescatter dispatch, vLLM's defaults), and each rank's profile
    run is ``max_num_batched_tokens`` long, so a rank holds ``dp`` x that many tokens in and
    out, and its MoE buffers are sized for them, up to the release's chunk
    (``moe_chunk_tokens``, :func:`servefit.core.engine.moe_chunk_tokens`). An expert's slice
    is its intermediate over ``tp x dp`` GPUs, or whole with expert parallelism
    (:func:`servefit.core.weights.moe_ranks`).
    """
    tokens = max_num_batched_tokens
    num_reqs = min(max_num_seqs, tokens)
    act = dtype_bytes(spec.dtype)
    h = spec.hidden_size
    factor = engine.SAMPLER_LOGITS_FACTOR
    if sorts_sampler_logits:  # 0.12-0.16: top-k/top-p sorts the logits (engine.py)
        factor += engine.SORTED_SAMPLER_EXTRA_FACTOR
    sampler = factor * num_reqs * spec.vocab_size * engine.LOGIT_BYTES if is_last_stage else 0
    dense_width = max(
        (m.intermediate_size for i in layers if isinstance(m := spec.layers[i].mlp, DenseMlpSpec)),
        default=0,
    )
    dense_forward = tokens * (3 * dense_width / tp + 4 * h) * act
    gathered = tokens * dp
    moe_tokens = gathered if moe_chunk_tokens is None else min(gathered, moe_chunk_tokens)
    slices = 1 if expert_parallel else tp * dp
    moe_layers = [m for i in layers if isinstance(m := spec.layers[i].mlp, MoeSpec)]
    moe_forward = (
        max(
            (
                moe_tokens * m.num_experts_per_token * (3 * m.expert_intermediate_size / slices + h)
                for m in moe_layers
            ),
            default=0,
        )
        * act
    )
    # the other ranks' hidden states gathered in, and their sums out
    moe_gathered = 2 * (gathered - tokens) * h * act if moe_layers else 0
    if spec.quant.method == "mxfp4":
        # vLLM's MXFP4 MoE (quantization/mxfp4.py Mxfp4MoEMethod) calls its kernels for the
        # layer (triton_kernel_moe_forward / apply_monolithic, fused_marlin_moe, FlashInfer
        # TRT-LLM) and their buffers are freed when it returns, so the sampler does not find
        # them: gpt-oss-20b at TP 2 logs a 2.87 GiB peak (vLLM 0.19), the sampler's 2.99 alone
        return int(max(sampler, dense_forward + moe_forward + moe_gathered))
    return int(max(sampler, dense_forward) + moe_forward + moe_gathered)


def profile_bytes(
    spec: ModelSpec,
    layers: range,
    *,
    behaviour: engine.VllmBehaviour,
    tp: int,
    pp: int,
    switched_nvlink: bool,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    is_last_stage: bool,
    dp: int = 1,
    expert_parallel: bool = False,
) -> tuple[int, int]:
    """(activation peak, non-torch memory) of the profile run on one GPU, as the release
    runs and measures it (the V0 engine: :mod:`servefit.core.engine_v0`)."""
    non_torch = engine.non_torch_bytes(tp, pp, switched_nvlink, behaviour.counts_distributed_init)
    if behaviour.v0_release is not None:
        release = behaviour.v0_release
        activation = engine_v0.activation_peak_bytes(
            spec,
            layers,
            tp=tp,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            is_last_stage=is_last_stage,
            release=release,
        )
        return activation, engine_v0.non_torch_bytes(
            release, max(non_torch - engine.non_torch_bytes(1, 1), 0)
        )
    activation = activation_peak_bytes(
        spec,
        layers,
        tp=tp,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        is_last_stage=is_last_stage,
        sorts_sampler_logits=behaviour.sorts_sampler_logits,
        dp=dp,
        expert_parallel=expert_parallel,
        moe_chunk_tokens=behaviour.fused_moe_chunk_tokens,
    )
    return activation, non_torch


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryBreakdown:
    """One GPU's memory. ``requested`` = weights + activations + runtime-in-budget + KV."""

    total_bytes: int  # what CUDA reports as the device's memory
    gpu_memory_utilization: float
    requested_bytes: int  # total x gpu_memory_utilization: vLLM's budget
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    is_cuda_graph_in_budget: bool
    kv_cache_bytes: int  # what is left for KV cache and sequence state (may be negative)
    is_kv_cache_given: bool = False  # --kv-cache-memory-bytes bypassed the budget

    @property
    def runtime_bytes(self) -> int:
        """Non-torch allocations plus the CUDA graph pool."""
        return self.non_torch_bytes + self.cuda_graph_bytes

    @property
    def headroom_bytes(self) -> int:
        """Memory vLLM leaves unused (CUDA graphs come out of it before vLLM 0.21)."""
        used = self.weights_bytes + self.activation_peak_bytes + self.runtime_bytes
        return self.total_bytes - used - max(self.kv_cache_bytes, 0)

    @property
    def parts_bytes(self) -> dict[str, int]:
        """The breakdown a report draws; sums to ``total_bytes`` when the KV cache fits."""
        return {
            "weights": self.weights_bytes,
            "kv_cache": max(self.kv_cache_bytes, 0),
            "activations": self.activation_peak_bytes,
            "runtime": self.runtime_bytes,
            "headroom": self.headroom_bytes,
        }


def memory_breakdown(
    *,
    total_bytes: int,
    gpu_memory_utilization: float,
    weights_bytes: int,
    activation_peak_bytes: int,
    non_torch_bytes: int,
    cuda_graph_bytes: int,
    behaviour: engine.VllmBehaviour,
    kv_cache_memory_bytes: int | None = None,
) -> MemoryBreakdown:
    """The budget arithmetic; ``kv_cache_memory_bytes`` replaces it when given (as vLLM's
    ``--kv-cache-memory-bytes`` skips profiling)."""
    requested = total_bytes * gpu_memory_utilization
    in_budget = behaviour.is_cuda_graph_in_budget
    if kv_cache_memory_bytes is not None:
        kv = kv_cache_memory_bytes
    else:
        kv = int(
            requested
            - weights_bytes
            - activation_peak_bytes
            - non_torch_bytes
            - (cuda_graph_bytes if in_budget else 0)
        )
    return MemoryBreakdown(
        total_bytes=total_bytes,
        gpu_memory_utilization=gpu_memory_utilization,
        requested_bytes=int(requested),
        weights_bytes=weights_bytes,
        activation_peak_bytes=activation_peak_bytes,
        non_torch_bytes=non_torch_bytes,
        cuda_graph_bytes=cuda_graph_bytes,
        is_cuda_graph_in_budget=in_budget,
        kv_cache_bytes=kv,
        is_kv_cache_given=kv_cache_memory_bytes is not None,
    )
