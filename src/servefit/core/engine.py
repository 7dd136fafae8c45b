"""What vLLM does at startup that servefit mirrors: defaults, version differences, and the
memory it uses outside weights and KV cache.

The defaults are read from vLLM's source (``vllm/engine/arg_utils.py``,
``vllm/config/cache.py``, ``vllm/v1/worker/gpu_worker.py``) at v0.10.0, v0.11.0 and v0.33.0.
The activation, non-torch and CUDA-graph figures are *fitted* to real vLLM v0.19.0 startup
logs (llm-d-incubation/llm-d-planner @ d3121e05, ``accuracy/results/v0.19.0/logs``: 59 runs of
dense, MoE, MLA and sliding-window models on 1-4 x H100 80GB), because vLLM measures them by
running the model rather than computing them. Each is stated as an assumption in reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

from servefit.core import engine_v0
from servefit.errors import InvalidArgumentError
from servefit.units import GIB_BYTES, MIB_BYTES

DEFAULT_VLLM_VERSION = "0.33"
# the first release whose default engine is V1 (v0.8.0: VLLM_USE_V1 defaults on); servefit
# reads its accounting from the v0.8.5, v0.9.2, v0.10, v0.11.0, v0.32.0 and v0.33 sources.
# Older releases run the V0 engine (core/engine_v0.py), from 0.5.
FIRST_V1_VERSION = engine_v0.FIRST_V1_RELEASE[:2]
OLDEST_VLLM_VERSION = engine_v0.OLDEST_V0_RELEASE[:2]
# a V0 minor release named without its patch is read as its last patch (the 0.6 series
# changed how the worker measures memory at 0.6.4 and 0.6.5)
LAST_V0_PATCH = {(0, 5): 5, (0, 6): 6, (0, 7): 3}

# Scheduler defaults for the OpenAI-compatible server (vllm/engine/arg_utils.py,
# get_batch_defaults / _set_default_args): (max_num_batched_tokens, max_num_seqs).
SERVER_BATCH_DEFAULTS_LARGE = (8192, 1024)  # device memory >= 70 GiB and not an A100
SERVER_BATCH_DEFAULTS_XLARGE = (16384, 1024)  # device memory >= 160 GiB (v0.33)
SERVER_BATCH_DEFAULTS_SMALL = (2048, 256)  # everything else, A100 included
LARGE_GPU_MIN_BYTES = 70 * GIB_BYTES
XLARGE_GPU_MIN_BYTES = 160 * GIB_BYTES

# The CUDA driver keeps part of the memory nvidia-smi reports as total: vLLM logged
# "total 79.19 GiB" on an H100 80GB HBM3 (nvidia-smi 81559 MiB; llm-d-planner v0.19.0 logs)
# and "total_gpu_memory=23.58GiB" on an RTX 3090 (nvidia-smi 24576 MiB; vllm-project/vllm#10517):
# 469 MiB and 430 MiB. servefit takes 450 MiB.
DRIVER_RESERVED_BYTES = 450 * MIB_BYTES

# Peak activation of the profile run: vLLM runs a dummy batch of max_num_batched_tokens
# tokens over min(max_num_seqs, max_num_batched_tokens) requests, then the sampler on their
# logits. Fitted to the v0.19.0 logs: the peak is ~3.9x the fp32 logits
# (num_reqs x vocab x 4 bytes) for dense models (Llama-3.1-8B 1.89 GiB, Qwen2.5-7B 2.21,
# gemma-2-9b 3.65, phi-4 1.52, granite-3.1-2b 0.75, phi-2 0.79; median ratio 3.87), or the
# forward pass's MLP activations when those are larger (CodeLlama-7b 0.77 GiB), plus the fused
# MoE kernel's intermediate buffers for MoE models (Mixtral-8x7B TP2 1.21, Qwen3-30B-A3B 2.68).
SAMPLER_LOGITS_FACTOR = 3.9
LOGIT_BYTES = 4  # fp32 logits
# vLLM 0.12.0-0.16.x run the dummy sampler's top-k/top-p on the PyTorch path by default
# (v1/sample/ops/topk_topp_sampler.py: FlashInfer only with VLLM_USE_FLASHINFER_SAMPLER=1,
# "Users must opt in explicitly"), which sorts the logits: apply_top_k_top_p holds the sorted
# fp32 logits (4 bytes an element), their int64 indices (8), the top-k and top-p masks (1
# each), the fp32 probabilities (4) and the scattered result (4) at once: 22 bytes, 5.5 x the
# fp32 logits, on top of the peak the 0.19 fit measured. 0.17.0 adds a Triton top-k/top-p
# kernel for batches of 8 and more (apply_top_k_top_p_triton, no sort), which the fit saw.
# The 0.12 log of Qwen3-30B-A3B on an RTX PRO 6000 (1,024 requests x 151,936 fp32 logits =
# 0.58 GiB) leaves 2.81 GiB more non-KV memory than the fit: 4.8 x.
SORTED_SAMPLER_EXTRA_FACTOR = 22 / LOGIT_BYTES

# Memory allocated outside PyTorch during profiling (NCCL, cuBLAS workspaces, custom
# all-reduce buffers), from the same logs: 0.24-0.27 GiB on one GPU, 2.06-2.21 GiB with
# tensor parallelism on H100 SXM (NVSwitch), 0.07 GiB per rank with pipeline parallelism only.
# Tensor parallelism over PCIe (or a two-GPU bridge) costs far less: NCCL opens 2-4 channels
# of ~10-12 MiB there, against 24-32 over NVSwitch, and vLLM's FlashInfer all-reduce fusion
# workspace (SM90/SM100 with NVLink) and custom all-reduce ("not supported on more than two
# PCIe-only GPUs", device_communicators/custom_all_reduce.py) are off. A vLLM 0.10.2 log of
# 8 x L40S prints 0.17-0.21 GiB; a v0.8.5 log of Qwen3-30B-A3B on 4 x A10 (198,784 KV tokens,
# vllm-project/vllm#17327) leaves room for ~0.3 GiB. servefit takes 0.35 GiB (the one-GPU
# 0.25 plus NCCL's few PCIe channels).
NON_TORCH_SINGLE_GPU_BYTES = int(0.25 * GIB_BYTES)
NON_TORCH_TENSOR_PARALLEL_BYTES = int(2.1 * GIB_BYTES)
NON_TORCH_TENSOR_PARALLEL_PCIE_BYTES = int(0.35 * GIB_BYTES)
NON_TORCH_PIPELINE_ONLY_BYTES = int(0.07 * GIB_BYTES)

# CUDA graph pool ("Graph capturing finished ... took X GiB"), fitted to the same logs:
# 0.67-0.98 GiB for 26-42 layer dense models, 1.41-1.61 GiB for 48-80 layer or MoE models.
CUDA_GRAPH_BASE_BYTES = int(0.45 * GIB_BYTES)
CUDA_GRAPH_PER_LAYER_BYTES = int(0.016 * GIB_BYTES)


def parse_version(version: str) -> tuple[int, int]:
    """ "0.19", "0.19.1", "v0.33.0" -> (major, minor)."""
    major, minor, _ = parse_release(version)
    return major, minor


def parse_release(version: str) -> tuple[int, int, int]:
    """ "0.6.4.post1" -> (0, 6, 4); "0.19" -> (0, 19, 0); "0.6" -> (0, 6, 6), a V0 minor
    release's last patch (:data:`LAST_V0_PATCH`)."""
    text = version.strip().lstrip("v")
    parts = text.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise InvalidArgumentError(
            f"--vllm-version {version!r} is not a version number like 0.19 or 0.33.0"
        ) from None
    if len(parts) < 3:
        return major, minor, LAST_V0_PATCH.get((major, minor), 0)
    leading = re.match(r"\d+", parts[2])  # "4" of "4", "4rc1", "4+cu121"
    return major, minor, int(leading.group()) if leading else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmBehaviour:
    """The version-dependent parts of vLLM's startup accounting."""

    version: str
    default_gpu_memory_utilization: float
    is_cuda_graph_in_budget: bool  # CUDA graph memory estimated and subtracted before sizing KV
    is_token_count_from_concurrency: bool  # "GPU KV cache size" = int(concurrency x max_model_len)
    has_xlarge_batch_defaults: bool
    checks_mamba_blocks_vs_max_num_seqs: bool
    has_hybrid_prefix_caching: bool  # prefix caching keeps 2 state blocks per request (align mode)
    # align mode keeps one more block per request in each Mamba-2 layer (a prefill checkpoint)
    has_mamba2_checkpoint_block: bool = False
    # the --block-size values vLLM's argument parser takes (None: any positive integer)
    block_size_choices: tuple[int, ...] | None = None
    # the release installs triton_kernels, so MXFP4 MoE on Hopper runs on it, not on Marlin
    ships_triton_kernels: bool = True
    # an A100 80GB counts as a large GPU for the server's batch defaults (0.8 only)
    has_large_defaults_on_a100: bool = False
    # the hybrid KV-cache manager keeps sliding-window layers at their window; without it
    # (0.8) every sliding-window layer of a model that also has full attention is full
    has_hybrid_kv_cache_manager: bool = True
    # "Maximum concurrency" = GPU KV cache tokens / max_model_len (0.8), not blocks per
    # request of each group
    is_concurrency_from_tokens: bool = False
    # the V1 engine serves Mamba and linear-attention models (before, vLLM falls back to V0)
    serves_state_models: bool = True
    # prefix caching of Mamba / linear-attention models, by release (vllm/config/model.py
    # ModelConfig.is_prefix_caching_supported, vllm/model_executor/models/config.py):
    # forced off (<= 0.11); off by default for hybrids ("still experimental", < 0.26); and
    # with it on, the Mamba-family models (SupportsMambaPrefixCaching) keep a state page per
    # block ("all" mode, 0.12 - 0.27), which servefit does not model
    is_state_prefix_caching_forced_off: bool = False
    is_hybrid_prefix_caching_default: bool = True
    has_mamba_all_mode: bool = False
    # the worker's memory snapshot is taken before the distributed environment starts, so the
    # NCCL communicators' memory counts as non-torch memory of the profile (0.9, 0.10)
    counts_distributed_init: bool = False
    # the dummy sampler sorts the logits for top-k/top-p (0.12-0.16: SORTED_SAMPLER_EXTRA_FACTOR)
    sorts_sampler_logits: bool = False
    # the fused-MoE kernel's intermediate buffers hold at most this many tokens (it loops over
    # chunks of them); None: the whole batch at once (moe_chunk_tokens below)
    fused_moe_chunk_tokens: int | None = None
    # the V0 engine's release (0.5.0-0.7.x; engine_v0.py), None for V1
    v0_release: tuple[int, int, int] | None = None

    @property
    def is_v0_engine(self) -> bool:
        return self.v0_release is not None

    @property
    def notes(self) -> tuple[str, ...]:
        mode = "V0" if self.is_v0_engine else "V1"
        notes = [f"mirrors vLLM {self.version} ({mode} engine) startup accounting"]
        if self.is_cuda_graph_in_budget:
            notes.append(
                "CUDA graph memory is estimated and taken from the budget before the KV cache"
            )
        else:
            notes.append("CUDA graphs are captured after the KV cache is sized, from the headroom")
        return tuple(notes)


@lru_cache(maxsize=64)  # a pure function of the version string, asked twice per plan
def vllm_behaviour(version: str = DEFAULT_VLLM_VERSION) -> VllmBehaviour:
    major, minor, patch = parse_release(version)
    v = (major, minor)
    if v < OLDEST_VLLM_VERSION:
        raise InvalidArgumentError(
            f"--vllm-version {version}: servefit mirrors vLLM from "
            f"{_dotted(OLDEST_VLLM_VERSION)} (the V0 engine to 0.7, V1 from 0.8); older "
            f"releases are not modelled. Plan with --vllm-version {_dotted(OLDEST_VLLM_VERSION)} "
            "or later"
        )
    if v < FIRST_V1_VERSION:
        return _v0_behaviour((major, minor, patch))
    return VllmBehaviour(
        version=f"{major}.{minor}",
        # 0.9 in v0.10/v0.11 (config/cache.py), 0.92 in v0.33; the release that changed it
        # was not identified: servefit switches at 0.30 and says so.
        default_gpu_memory_utilization=0.92 if v >= (0, 30) else 0.9,
        # "CUDA graph memory profiling is enabled (default since v0.21.0)" (gpu_worker.py, v0.33)
        is_cuda_graph_in_budget=v >= (0, 21),
        # "num_tokens = int(max_concurrency * max_model_len)" in vllm/v1/core/kv_cache_utils.py
        # of v0.21.0, v0.22.0, v0.23.0 and v0.32.0; v0.20.0 prints num_blocks // groups x block
        is_token_count_from_concurrency=v >= (0, 21),
        has_xlarge_batch_defaults=v >= (0, 33),
        # v0.33 config/compilation.py: "max_num_seqs (M) exceeds available Mamba cache blocks (N)"
        checks_mamba_blocks_vs_max_num_seqs=v >= (0, 30),
        # mamba_cache_mode ("align": 2 state blocks a request with prefix caching) appears in
        # v0.16.0 vllm/config/cache.py; v0.14.0 disables prefix caching for a hybrid without
        # SupportsMambaPrefixCaching (models/config.py MambaModelConfig). A v0.20 log of a
        # Qwen3.6 hybrid (attention block 2096) shows the 2 blocks.
        has_hybrid_prefix_caching=v >= (0, 16),
        # v0.11.0 models/config.py: "Hybrid or mamba-based model detected: disabling prefix
        # caching since it is not yet supported" (0.10 taken as the same)
        is_state_prefix_caching_forced_off=v < (0, 12),
        # "Hybrid models do not support prefix caching since the feature is still
        # experimental" in ModelConfig.is_prefix_caching_supported of v0.12.0-v0.25.0; v0.26.0
        # returns True for attn_type "hybrid"
        is_hybrid_prefix_caching_default=v >= (0, 26),
        # v0.16.0-v0.27.0 models/config.py: mamba_cache_mode = "all" if
        # model_config.supports_mamba_prefix_caching else "align" (v0.12-v0.15 set
        # mamba_block_size = block_size, the same per-block state); v0.28.0 keeps "align"
        has_mamba_all_mode=(0, 12) <= v < (0, 28),
        # v0.32.0 wheel, layers/mamba/mamba_mixer2.py MambaMixer2.get_kv_cache_spec:
        # num_prefill_checkpoint_blocks=1, so MambaSpec.max_memory_usage_bytes in align mode is
        # 3 pages (2 + 1). Observed: the tiny Mamba-2 (make_tiny_model --arch mamba2) served
        # with --enable-prefix-caching on the CPU build logs 5102.33x = 15,307 blocks / 3. The
        # release that added it was not identified: servefit switches at 0.32.
        has_mamba2_checkpoint_block=v >= (0, 32),
        block_size_choices=_block_size_choices(v),
        # get_mxfp4_backend takes MARLIN on 9.x when has_triton_kernels() is false. Until
        # vllm-project/vllm#27370 (Oct 2025, after v0.11.0) triton_kernels was installed by
        # hand ("users have to install triton_kernels manually", #27672), and later releases
        # load it from vllm/third_party/triton_kernels. A gpt-oss-120b log of v0.10.1 on an
        # H100 (vllm-project/vllm#23278) loads 65.97 GiB, the Marlin layout's 65.91; one of
        # v0.14.1 (#33155) 64.38 GiB, the triton_kernels layout's 64.27 (the checkpoint's
        # scales stay loaded beside their swizzled copy). servefit switches at 0.12.
        ships_triton_kernels=v >= (0, 12),
        # v0.8.5 vllm/engine/arg_utils.py _set_default_args_v1: "device_memory >= 70 *
        # GiB_bytes" alone picks (8192, 1024); v0.9.2 adds 'and "a100" not in device_name'
        # (PR #17885: large batches slowed the A100)
        has_large_defaults_on_a100=v < (0, 9),
        # v0.8.5 vllm/v1/core/kv_cache_utils.py get_kv_cache_config: unify_hybrid_kv_cache_specs
        # turns every SlidingWindowSpec into a FullAttentionSpec when both are present;
        # v0.9.2 does so only with disable_hybrid_kv_cache_manager
        has_hybrid_kv_cache_manager=v >= (0, 9),
        # v0.8.5 _get_kv_cache_config_uniform_type: "max_concurrency = num_tokens /
        # max_model_len"; v0.9.2 get_max_concurrency_for_kv_cache_config (blocks a request)
        is_concurrency_from_tokens=v < (0, 9),
        # v0.9.2 arg_utils _is_v1_supported_oracle: "No Mamba or Encoder-Decoder so far" (V1
        # falls back to V0); v0.10 serves Mamba-2 and linear-attention hybrids on V1
        serves_state_models=v >= (0, 10),
        # v0.9.2 and v0.10.1 v1/worker/gpu_worker.py init_device: MemorySnapshot() comes
        # before init_worker_distributed_environment, so what NCCL allocates there is in the
        # profile's non-torch increase; v0.11.0 takes the snapshot after it (PR #25359);
        # v0.8.5 reads non-torch memory as the whole device's use minus torch's
        counts_distributed_init=(0, 9) <= v < (0, 11),
        sorts_sampler_logits=(0, 12) <= v < (0, 17),
        fused_moe_chunk_tokens=moe_chunk_tokens(v),
    )


def moe_chunk_tokens(v: tuple[int, int]) -> int | None:
    """The token chunk of the fused-MoE kernel's intermediate buffers in release ``v``
    (``VLLM_FUSED_MOE_CHUNK_SIZE``'s default; ``fused_experts_impl`` sizes its caches for
    ``M = min(num_tokens, CHUNK_SIZE)`` and loops over the chunks).

    - 32,768 up to 0.10: v0.10 vllm/envs.py reads ``os.getenv("VLLM_FUSED_MOE_CHUNK_SIZE",
      "32768")`` (its type annotation still says 64 x 1024, the value before
      vllm-project/vllm#7995);
    - 16,384 from 0.11: a later envs.py reads ``str(16 * 1024)``; the release that lowered
      it was not identified, servefit switches at 0.11;
    - none from 0.32: the variable is gone and ``FusedMoEKernelModularImpl`` sizes its
      workspace for the whole batch (v0.32 fused_moe/modular_kernel.py
      ``_allocate_buffers(..., M_full, M_full, ...)``).
    """
    if v < (0, 11):
        return 32_768
    if v < (0, 32):
        return 16_384
    return None


# 0.8 to 0.10 fall back to V0 on a GPU older than Ampere (arg_utils.py _is_v1_supported_oracle:
# "Compute Capability < 8.0 is not supported by the V1 Engine. Falling back to V0.", read in
# v0.8.5, v0.9.2 and v0.10.1); 0.11 has no V0 engine left
V0_FALLBACK_RELEASES = ((0, 8), (0, 11))
V1_MIN_COMPUTE_CAPABILITY = (8, 0)


def behaviour_on(version: str, capability: tuple[int, int] | None) -> VllmBehaviour:
    """The release's behaviour on a GPU of this compute capability: V0 where 0.8-0.10 fall
    back to it (a T4, a V100), the release's own otherwise."""
    behaviour = vllm_behaviour(version)
    low, high = V0_FALLBACK_RELEASES
    v = parse_version(version)
    if capability is None or capability >= V1_MIN_COMPUTE_CAPABILITY or not low <= v < high:
        return behaviour
    fallback = _v0_behaviour(parse_release(version))
    # the release's own parser takes the flags
    return replace(
        fallback, version=behaviour.version, block_size_choices=behaviour.block_size_choices
    )


def _v0_behaviour(release: tuple[int, int, int]) -> VllmBehaviour:
    """The V0 engine of one release (core/engine_v0.py): no hybrid manager, no V1 features;
    the worker's memory snapshot comes before the distributed init (worker.init_device)."""
    return VllmBehaviour(
        version=".".join(map(str, release)),
        default_gpu_memory_utilization=0.9,  # CacheConfig / EngineArgs.gpu_memory_utilization
        is_cuda_graph_in_budget=False,  # captured in initialize_cache -> _warm_up_model
        is_token_count_from_concurrency=False,
        has_xlarge_batch_defaults=False,
        checks_mamba_blocks_vs_max_num_seqs=False,
        has_hybrid_prefix_caching=False,
        block_size_choices=engine_v0.block_size_choices(release),
        ships_triton_kernels=False,
        has_hybrid_kv_cache_manager=False,  # one block table: every layer full attention
        is_concurrency_from_tokens=True,  # blocks x block_size / max_model_len
        serves_state_models=False,  # V0's separate Mamba cache is not modelled
        is_state_prefix_caching_forced_off=True,
        is_hybrid_prefix_caching_default=False,
        counts_distributed_init=True,
        v0_release=release,
    )


def _dotted(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


# vLLM's CacheConfig.block_size: ``BlockSize = Literal[1, 8, 16, 32, 64, 128]`` in the 0.10
# monolithic vllm/config.py; ``Literal[1, 8, 16, 32, 64, 128, 256]`` in vllm/config/cache.py
# once it was split out; ``int = Field(gt=0)`` in the v0.32.0 wheel (vllm/config/cache.py),
# where the attention backend judges it instead (check_block_size). The releases between
# were not each read: servefit switches to 256 at 0.11 and to any integer at 0.32.
_BLOCK_SIZES_0_10 = (1, 8, 16, 32, 64, 128)
_BLOCK_SIZES_0_11 = (*_BLOCK_SIZES_0_10, 256)


def _block_size_choices(v: tuple[int, int]) -> tuple[int, ...] | None:
    if v >= (0, 32):
        return None
    return _BLOCK_SIZES_0_11 if v >= (0, 11) else _BLOCK_SIZES_0_10


def check_block_size(
    block_size: int | None,
    behaviour: VllmBehaviour,
    *,
    kernel_block_size: int,
    uses_attention_kernel: bool = True,
) -> None:
    """Refuse a ``--block-size`` vLLM would refuse: one its release's parser does not take,
    or one its attention backend cannot split into kernel blocks (v0.32.0
    vllm/v1/worker/utils.py ``select_common_block_size``: the block must be a multiple of
    the backend's ``get_supported_kernel_block_sizes``, ``MultipleOf(16)`` for CUDA's
    FlashAttention, Triton and ROCm's backends, ``MultipleOf(32)`` for the CPU's)."""
    if block_size is None:
        return
    choices = behaviour.block_size_choices
    if choices is not None and block_size not in choices:
        raise InvalidArgumentError(
            f"--block-size {block_size}: vLLM {behaviour.version} takes "
            f"{', '.join(map(str, choices))}"
        )
    if uses_attention_kernel and block_size % kernel_block_size:
        raise InvalidArgumentError(
            f"--block-size {block_size}: vLLM's attention backend here works in blocks of "
            f"{kernel_block_size} tokens, so the block must be a multiple of "
            f"{kernel_block_size} ({kernel_block_size}, {2 * kernel_block_size}, "
            f"{4 * kernel_block_size}, ...)"
        )


def server_batch_defaults(
    total_memory_bytes: float, gpu_name: str, behaviour: VllmBehaviour
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that ``vllm serve`` picks for this GPU."""
    if behaviour.has_xlarge_batch_defaults and total_memory_bytes >= XLARGE_GPU_MIN_BYTES:
        return SERVER_BATCH_DEFAULTS_XLARGE
    is_a100 = "a100" in gpu_name.lower() and not behaviour.has_large_defaults_on_a100
    if total_memory_bytes >= LARGE_GPU_MIN_BYTES and not is_a100:
        return SERVER_BATCH_DEFAULTS_LARGE
    return SERVER_BATCH_DEFAULTS_SMALL


def non_torch_bytes(
    tp: int, pp: int, switched_nvlink: bool = True, counts_distributed_init: bool = False
) -> int:
    """Non-torch memory per GPU: with tensor parallelism it depends on the link, and in
    0.9-0.10 it holds NCCL's communicators (:data:`NCCL_INIT_SWITCHED_BYTES`)."""
    if tp > 1:
        if not switched_nvlink:
            return NON_TORCH_TENSOR_PARALLEL_PCIE_BYTES
        extra = NCCL_INIT_SWITCHED_BYTES if counts_distributed_init else 0
        return NON_TORCH_TENSOR_PARALLEL_BYTES + extra
    if pp > 1:
        return NON_TORCH_PIPELINE_ONLY_BYTES
    return NON_TORCH_SINGLE_GPU_BYTES


# What NCCL's tensor-parallel communicators hold on a switched-NVLink GPU (their NVLS
# multicast buffers among them), seen where the snapshot precedes the distributed init
# (0.9-0.10): the two vLLM 0.10.0 logs of 8 x H100 SXM in the fidelity corpus (Qwen3-32B and
# Qwen3-235B-A22B-FP8, TP8, DaisukeTakai/eval_dataset) leave 3.58 and 2.95 GiB more
# non-KV memory than the 0.19-fitted estimate; servefit takes 3.3 GiB, their mean. Over PCIe
# a 0.10.2 log of 8 x L40S prints 0.17-0.21 GiB of non-torch memory in all: NCCL's few PCIe
# channels are in NON_TORCH_TENSOR_PARALLEL_PCIE_BYTES already.
NCCL_INIT_SWITCHED_BYTES = int(3.3 * GIB_BYTES)


def cuda_graph_bytes(num_layers: int) -> int:
    return CUDA_GRAPH_BASE_BYTES + CUDA_GRAPH_PER_LAYER_BYTES * num_layers
