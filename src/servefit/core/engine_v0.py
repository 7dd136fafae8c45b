"""vLLM's V0 engine (0.5.x to 0.7.x, the default before 0.8): how its worker sizes the KV cache.

Read from the PyPI wheels of 0.5.5, 0.6.0, 0.6.3.post1, 0.6.4.post1, 0.6.5, 0.6.6.post1, 0.7.0
and 0.7.3 (``vllm/worker/worker.py`` ``determine_num_available_blocks``,
``vllm/worker/model_runner.py`` ``profile_run``, ``vllm/model_executor/layers/sampler.py``,
``vllm/engine/arg_utils.py`` and ``vllm/config.py`` ``SchedulerConfig``). What differs from V1:

* **the scheduler's defaults**: 256 sequences; without chunked prefill the batch is the whole
  ``max(max_model_len, 2048)`` tokens, so the profile run prefills a full context; chunked
  prefill is on by default only past 32K tokens (``use_long_context``), with 512 tokens a step
  up to 0.6.4 and 2048 from 0.6.5;
* **the profile run** is eager PyTorch (no torch.compile): ``max_num_seqs`` prompts sharing
  the batch's tokens, then the sampler with top-p 0.99 and top-k ``vocab - 1``, which sorts
  the fp32 logits of every prompt;
* **what it measures**, three ways (:class:`V0Profile`);
* **CUDA graphs** are captured after the cache is allocated, from the headroom;
* the cache is counted in blocks of 16 tokens over all layers ("# GPU blocks: N"), every
  layer full attention (no hybrid manager), and "Maximum concurrency" is blocks x block size
  / max_model_len.
"""

from __future__ import annotations

from enum import StrEnum

from servefit.core.model_spec import DenseMlpSpec, ModelSpec, MoeSpec
from servefit.units import GIB_BYTES, dtype_bytes

FIRST_V1_RELEASE = (0, 8, 0)  # VLLM_USE_V1 defaults on from v0.8.0
OLDEST_V0_RELEASE = (0, 5, 0)
V0_MAX_NUM_SEQS = 256  # EngineArgs.max_num_seqs (0.5-0.6.4; None -> 256 without V1 from 0.6.5)
V0_MIN_BATCHED_TOKENS = 2048  # SchedulerConfig: "If max_model_len is too short, use 2048"
LONG_CONTEXT_TOKENS = 32768  # EngineArgs.create_engine_config: use_long_context = len > 32768
V0_BLOCK_SIZE = 16  # EngineArgs.block_size (16; 0.7 leaves None and the CUDA platform sets 16)


class V0Profile(StrEnum):
    """How a V0 worker measures the memory the KV cache may not use."""

    # <= 0.6.3: peak = free memory at init - free memory after the profile run, so the
    # caching allocator's reserved blocks count and the CUDA context (there before) does not
    FREE_MEMORY = "free_memory"
    # 0.6.4 (PR #9352): torch's allocated peak plus everything on the device torch did not
    # allocate (device used - torch allocated): the CUDA context and other processes included
    TORCH_PEAK = "torch_peak"
    # 0.6.5 on (PR #10511, ``memory_profiling``): weights + torch's peak increase + the
    # non-torch increase since the worker's baseline, as V1 does
    SNAPSHOT = "snapshot"


def v0_profile(release: tuple[int, int, int]) -> V0Profile:
    if release >= (0, 6, 5):
        return V0Profile.SNAPSHOT
    if release >= (0, 6, 4):
        return V0Profile.TORCH_PEAK
    return V0Profile.FREE_MEMORY


def chunked_prefill_tokens(release: tuple[int, int, int]) -> int:
    """SchedulerConfig's max_num_batched_tokens with chunked prefill: 512 ("the values that
    have the best balance between ITL and TTFT on A100", 0.5-0.6.4), 2048 from 0.6.5."""
    return V0_MIN_BATCHED_TOKENS if release >= (0, 6, 5) else 512


# --block-size's choices: [8, 16, 32, 128, ..., 2048] in 0.5.5; [8, 16, 32] in 0.6.0-0.6.3
# and 0.6.5; [8, 16, 32, 64, 128] in 0.6.4, 0.6.6 and 0.7.x (arg_utils.py)
def block_size_choices(release: tuple[int, int, int]) -> tuple[int, ...]:
    if release < (0, 6, 0):
        return (8, 16, 32, 128, 256, 512, 1024, 2048)
    if release[:2] == (0, 6) and release[2] in (0, 1, 2, 3, 5):
        return (8, 16, 32)
    return (8, 16, 32, 64, 128)


def is_chunked_prefill_default(
    *,
    max_model_len: int,
    has_sliding_window: bool,
    has_lora: bool,
) -> bool:
    """EngineArgs.create_engine_config: chunked prefill goes on by itself for a context over
    32K on a GPU, unless the model has a sliding window or LoRA (or speculation, a pooling
    or multimodal model, ROCm from 0.6.6: refused or not planned here) is on."""
    return max_model_len > LONG_CONTEXT_TOKENS and not has_sliding_window and not has_lora


def batch_defaults(
    release: tuple[int, int, int], *, max_model_len: int, chunked: bool
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) V0 picks when neither is given."""
    tokens = (
        chunked_prefill_tokens(release) if chunked else max(max_model_len, V0_MIN_BATCHED_TOKENS)
    )
    return tokens, V0_MAX_NUM_SEQS


# The sampler's working set per logit, in bytes, at its peak (sampler.py _apply_top_k_top_p,
# called because the profile asks for top-k and top-p), for N prompts x V vocabulary entries.
# It peaks inside ``logits.sort``: the model-dtype logits the runner still holds (2 bytes),
# their fp32 copy (4), the sorted values (4) and int64 indices (8), the int64 index sequence
# the sort starts from (8) and the radix sort's double buffers for keys and indices (4 + 8):
# 38 bytes. After the sort the masks, probabilities and the scattered result hold 32. Six V0
# logs whose batch is too short for the forward pass to win print 38.3 to 39.3 bytes a logit
# (PyTorch activation peak / (N x V)): phi-1_5, Llama-3.2-1B and opt-125m on a GTX 1080 (0.6.4,
# xlisp/jimw-vllm README and quickstart.py @ 0cb9738), Qwen2.5-Math-1.5B on an L40 (0.7.2),
# Llama-3.2-3B on a T4 (0.8.2 falling back to V0, huggingface/cookbook
# fine_tune_chatbot_docs_synthetic.ipynb). Up to 0.6.2 the result is unsorted through an
# inverse permutation (an int64 index tensor, 8, then a gather, 4), which holds 40 bytes
# after the sort (0.5.5 and 0.6.0 read; 0.6.3 scatters).
SAMPLER_BYTES_PER_LOGIT = 38
SAMPLER_BYTES_PER_LOGIT_INVERSE_PERMUTATION = 40


def sampler_bytes_per_logit(release: tuple[int, int, int]) -> int:
    if release < (0, 6, 3):
        return SAMPLER_BYTES_PER_LOGIT_INVERSE_PERMUTATION
    return SAMPLER_BYTES_PER_LOGIT


def activation_peak_bytes(
    spec: ModelSpec,
    layers: range,
    *,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    is_last_stage: bool,
    release: tuple[int, int, int],
) -> int:
    """The torch peak of V0's eager profile run above the weights, on one GPU.

    The forward pass peaks inside an MLP: ``LlamaMLP.forward`` keeps the gate/up output
    (``2 I / tp``) while the activation (``I / tp``) and the down projection's output (``h``)
    are written, beside the residual and the layer's input (``h`` each): ``3 I / tp + 3 h``
    elements a token. A fused-MoE layer holds its three intermediate caches instead, ``top_k
    x (3 I_e / tp + h)`` a token. The sampler runs after the forward, on the fp32 logits of
    ``min(max_num_seqs, tokens)`` prompts (:data:`SAMPLER_BYTES_PER_LOGIT`), while the
    runner still holds the last hidden states. The two do not overlap: the larger wins.

    Held against two V0 logs of Llama-3.1-8B on an RTX 3090 (vllm-project/vllm#10517,
    0.6.4): 20,000 and 29,000 batched tokens give 2.06 and 2.99 GiB; the logs' peak minus
    the logged weights is 2.07 and 2.99 GiB."""
    tokens = max_num_batched_tokens
    act = dtype_bytes(spec.dtype)
    h = spec.hidden_size
    per_token = 0.0
    for i in layers:
        mlp = spec.layers[i].mlp
        if isinstance(mlp, DenseMlpSpec):
            per_token = max(per_token, 3 * mlp.intermediate_size / tp + 3 * h)
        elif isinstance(mlp, MoeSpec):
            width = mlp.num_experts_per_token * (3 * mlp.expert_intermediate_size / tp + h)
            shared = 3 * mlp.shared_intermediate_size / tp if mlp.shared_intermediate_size else 0
            per_token = max(per_token, width + shared + 3 * h)
    forward = tokens * per_token * act
    sampler = 0.0
    if is_last_stage:
        num_reqs = min(max_num_seqs, tokens)
        logits = num_reqs * spec.vocab_size
        sampler = logits * sampler_bytes_per_logit(release) + tokens * h * act
    return int(max(forward, sampler))


# What the device holds outside torch when the profile is measured. 0.6.4 counts all of it:
# the CUDA context, cuBLAS and the kernels' code modules, and other processes' memory. Its
# logs of one GPU print non_torch_memory=0.35GiB on an RTX 3090 (vllm-project/vllm#10517),
# 0.15-0.47 on a GTX 1080 (the higher with a desktop on it) and 0.73 on an H200: servefit
# takes the 3090's. The other profiles count the increase since the worker's baseline, made
# after the context: 0.05-0.08 GiB on one GPU in the 0.7.2 and 0.8.2 logs above (eager
# PyTorch loads fewer kernels than V1's compiled graphs), and with tensor parallelism the V1
# figures (engine.non_torch_bytes), NCCL's communicators included (V0 takes the baseline before
# init_worker_distributed_environment); no V0 log with TP checked them.
NON_TORCH_DEVICE_SINGLE_GPU_BYTES = int(0.35 * GIB_BYTES)
NON_TORCH_INCREASE_SINGLE_GPU_BYTES = int(0.06 * GIB_BYTES)


def non_torch_bytes(release: tuple[int, int, int], parallel_bytes: int) -> int:
    """Non-torch memory as this release's profile counts it: one GPU's (the whole device's
    in 0.6.4, the increase otherwise), plus ``parallel_bytes``, what tensor or pipeline
    parallelism adds to V1's one-GPU figure (engine.non_torch_bytes)."""
    if v0_profile(release) is V0Profile.TORCH_PEAK:
        return NON_TORCH_DEVICE_SINGLE_GPU_BYTES + parallel_bytes
    return NON_TORCH_INCREASE_SINGLE_GPU_BYTES + parallel_bytes
