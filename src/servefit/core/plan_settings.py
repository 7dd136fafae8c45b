"""What a capacity plan is asked and answers: the settings, their resolution, the plan.

:class:`ServeSettings` are vLLM's flags as the user gives them (None = vLLM's default) plus
the user's target; :func:`resolve_settings` fills in what vLLM would choose for the GPU
(step 1 of :func:`servefit.core.plan.plan_capacity`) into :class:`ResolvedSettings`;
:func:`apply_load_options` applies ``--dtype`` and ``--quantization`` to the model.
:class:`CapacityPlan` is the answer. All stay importable from :mod:`servefit.core.plan`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from servefit.core import engine, engine_v0
from servefit.core.hardware import GpuSpec
from servefit.core.kv_cache import KvLayout
from servefit.core.lora import LoraSettings
from servefit.core.memory import MemoryBreakdown
from servefit.core.model_spec import MixerKind, ModelSpec
from servefit.core.quant import QuantSpec, fp8_per_tensor
from servefit.core.speculative import DraftNetwork, SpeculativeConfig
from servefit.core.weights import ParamCounts
from servefit.errors import InvalidArgumentError
from servefit.units import dtype_bytes

BF16_MIN_CC = (8, 0)  # bfloat16 needs Ampere or newer

# --dtype as vLLM 0.32 takes it (vllm/config/model.py ModelDType).
VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
# --kv-cache-dtype: vLLM 0.32's choices (vllm/config/cache.py CacheDType) whose page size
# servefit models; vLLM also takes nvfp4_ds_mla, turboquant_*, ultraquant_4bit,
# {int4,int8,fp8}_per_token_head, nvfp4 and nvfp4_4over6, which servefit does not model.
VLLM_KV_CACHE_DTYPES = (
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
)
VLLM_ONLY_KV_CACHE_DTYPES = (
    "nvfp4_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "ultraquant_4bit",
    "int4_per_token_head",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
)


# --mamba-ssm-cache-dtype's choices (vllm/config/cache.py MambaDType, v0.32)
MAMBA_CACHE_DTYPES = ("auto", "float32", "float16", "bfloat16")


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeSettings:
    """vLLM's flags (None = vLLM's default for this GPU) plus the user's target."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    # --data-parallel-size: engine ranks of TP x PP GPUs each, every one with its own KV cache
    # and requests; a MoE model's experts are spread over all of them (weights.moe_ranks)
    data_parallel_size: int = 1
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    dtype: str = "auto"  # --dtype: auto = the checkpoint's dtype
    quantization: str | None = None  # --quantization: fp8 quantizes a 16-bit checkpoint at load
    kv_cache_dtype: str = "auto"
    kv_cache_memory_bytes: int | None = None
    block_size: int | None = None
    # --mamba-ssm-cache-dtype: auto = the architecture's hook (hf_config.state_dtype)
    mamba_ssm_cache_dtype: str = "auto"
    # --enable-prefix-caching / --no-enable-prefix-caching; None = vLLM's default for the
    # model (:func:`default_prefix_caching`: off for attention-free models, on otherwise)
    enable_prefix_caching: bool | None = None
    enforce_eager: bool = False
    vllm_version: str = engine.DEFAULT_VLLM_VERSION
    concurrency: int | None = None  # the user's target: concurrent requests
    context_tokens: int | None = None  # the user's target: tokens per request
    # --speculative-config, and the draft checkpoint it names (loaded by app/resolve)
    speculative: SpeculativeConfig | None = None
    draft: DraftNetwork | None = None
    # --enable-expert-parallel: each GPU holds whole experts (E / TP of them) instead of a
    # TP-th of every expert; the attention stays tensor parallel
    enable_expert_parallel: bool = False
    lora: LoraSettings | None = None  # --enable-lora (with --max-loras, --max-lora-rank)
    # --[no-]enable-chunked-prefill; None = vLLM's default. The V0 engine (before 0.8) turns
    # it on by itself only past 32K tokens and otherwise batches whole prompts (engine_v0.py);
    # V1 always chunks, so V1 plans do not read it
    enable_chunked_prefill: bool | None = None
    # llama.cpp's --tensor-split (-ts): each GPU's share of the layers, one a pipeline stage
    # (llama.cpp's layer split); None = equal shares. Only llama.cpp takes it
    tensor_split: tuple[float, ...] | None = None
    # llama.cpp's --n-gpu-layers (-ngl): the last N of its layers (the output layer counted)
    # offloaded to the GPUs; None = all of them (-ngl 99). Only llama.cpp takes it
    n_gpu_layers: int | None = None
    sglang_version: str | None = None  # --sglang-version: whose SGLang defaults (None: newest)
    # SGLang's --enable-dp-attention: attention data-parallel over data_parallel_size ranks,
    # the experts over every GPU (planned as DP x EP); only SGLang takes it
    sglang_dp_attention: bool = False

    def __post_init__(self) -> None:
        checks = {
            "--tensor-parallel-size": self.tensor_parallel_size,
            "--pipeline-parallel-size": self.pipeline_parallel_size,
            "--data-parallel-size": self.data_parallel_size,
            "--max-model-len": self.max_model_len,
            "--max-num-seqs": self.max_num_seqs,
            "--max-num-batched-tokens": self.max_num_batched_tokens,
            "--block-size": self.block_size,
            "--target-concurrency": self.concurrency,
            "--context": self.context_tokens,
        }
        for flag, value in checks.items():
            if value is not None and value < 1:
                raise InvalidArgumentError(f"{flag} must be a positive integer, got {value}")
        util = self.gpu_memory_utilization
        if util is not None and not 0 < util <= 1:
            raise InvalidArgumentError(
                f"--gpu-memory-utilization must be in (0, 1], got {util} "
                "(it is a fraction, not a percentage)"
            )
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes <= 0:
            raise InvalidArgumentError("--kv-cache-memory-bytes must be positive")
        if self.dtype.removeprefix("torch.") not in VLLM_DTYPES:
            raise InvalidArgumentError(
                f"--dtype {self.dtype!r}: unknown dtype to vLLM, which takes "
                f"{', '.join(VLLM_DTYPES)} "
                "(quantized weights come from the checkpoint or --quantization)"
            )
        if self.mamba_ssm_cache_dtype not in MAMBA_CACHE_DTYPES:
            raise InvalidArgumentError(
                f"--mamba-ssm-cache-dtype {self.mamba_ssm_cache_dtype!r} is not one vLLM takes: "
                f"{', '.join(MAMBA_CACHE_DTYPES)}"
            )
        kv = self.kv_cache_dtype
        if kv in VLLM_ONLY_KV_CACHE_DTYPES:
            raise InvalidArgumentError(
                f"--kv-cache-dtype {kv}: vLLM takes it, but servefit does not model its page "
                f"size; modelled: {', '.join(VLLM_KV_CACHE_DTYPES)}"
            )
        if kv not in VLLM_KV_CACHE_DTYPES:
            raise InvalidArgumentError(
                f"--kv-cache-dtype {kv!r} is not one vLLM takes; servefit models "
                f"{', '.join(VLLM_KV_CACHE_DTYPES)}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedSettings:
    """The settings vLLM would actually run with."""

    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int
    max_num_seqs: int  # per data-parallel rank (each runs its own scheduler)
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    block_size: int  # the attention block size after hybrid inflation
    enable_prefix_caching: bool  # as vLLM resolves it (the default per model filled in)
    enforce_eager: bool
    vllm_version: str
    concurrency: int
    context_tokens: int
    speculative: SpeculativeConfig | None = None
    enable_expert_parallel: bool = False
    lora: LoraSettings | None = None
    enable_chunked_prefill: bool = True  # as the engine resolves it (V0: engine_v0.py)
    data_parallel_size: int = 1

    @property
    def num_gpus(self) -> int:
        """Every GPU of the deployment: TP x PP x DP."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    @property
    def gpus_per_rank(self) -> int:
        """The GPUs of one data-parallel rank (one engine core): TP x PP."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def expert_parallel_size(self) -> int:
        """EP, as vLLM sizes it: TP x DP with --enable-expert-parallel, else 1."""
        if not self.enable_expert_parallel:
            return 1
        return self.tensor_parallel_size * self.data_parallel_size


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityPlan:
    """What vLLM's startup accounting gives for one model, device and settings: memory,
    KV pages, concurrency, the verdict."""

    model: ModelSpec
    params: ParamCounts
    gpu: GpuSpec
    settings: ResolvedSettings
    behaviour: engine.VllmBehaviour
    memory: MemoryBreakdown  # the limiting GPU (pipeline stage)
    weights_total_bytes: float
    layout: KvLayout
    num_blocks: int
    kv_cache_tokens: int  # vLLM's "GPU KV cache size" line
    max_concurrency: float  # vLLM's "Maximum concurrency for max_model_len tokens"
    largest_max_model_len: int  # the longest single request the KV cache holds
    concurrency_at_context: float  # requests of context_tokens that fit at once
    max_context_at_concurrency: int  # longest context with `concurrency` requests at once
    kv_bytes_per_token: int  # attention KV per token per GPU (all attention layers)
    state_bytes_per_sequence: int  # constant state per sequence per GPU (linear attn/Mamba)
    sequence_bytes_at_context: int  # one sequence at context_tokens, per GPU
    mamba_block_limit: int | None  # max_num_seqs may not exceed this (hybrids)
    starts: bool  # vLLM would start with these flags
    meets_target: bool  # ... and hold the target concurrency at the target context
    problems: tuple[str, ...]
    warnings: tuple[str, ...]
    assumptions: tuple[str, ...]
    # Whose accounting this is (servefit.core.engines), and its words for the output:
    engine: str = "vllm"
    engine_label: str = "vLLM"
    memory_label: str = "visible to CUDA"  # what memory.total_bytes is
    budget_label: str = "gpu_memory_utilization"  # what memory.gpu_memory_utilization is
    # an engine that reserves every KV cell at start (llama-server's -c): the bytes those
    # cells take on the limiting GPU, which must fit in memory.kv_cache_bytes; None for
    # engines that size their cache from the memory left (vLLM)
    reserved_kv_cache_bytes: int | None = None
    engine_version: str = ""  # an engine other than vLLM: the release whose rules it follows
    host_layers: int = 0  # decoder layers left in host memory (llama.cpp's -ngl below all)

    @property
    def fits(self) -> bool:
        return self.starts and self.meets_target


def is_attention_free(spec: ModelSpec) -> bool:
    """No attention layer at all: only Mamba / linear-attention state (pure Mamba). vLLM
    calls the model's attn_type "attention_free" (vllm/config/model.py ModelConfig.attn_type,
    from the model class's IsAttentionFree interface)."""
    return not spec.mixer_kinds - {MixerKind.MAMBA, MixerKind.LINEAR_ATTENTION}


def default_prefix_caching(spec: ModelSpec) -> bool:
    """vLLM's ``enable_prefix_caching`` when the flag is not given.

    vLLM 0.32 leaves ``EngineArgs.enable_prefix_caching`` None unless given
    (vllm/engine/arg_utils.py), then ``EngineArgs._set_default_chunked_prefill_and_prefix_
    caching_args`` sets it to ``ModelConfig.is_prefix_caching_supported``
    (vllm/config/model.py): False for an "attention_free" generative model ("the feature is
    still experimental"), True for "decoder" and "hybrid" ones. A flag given either way is
    kept as given: an explicit ``--enable-prefix-caching`` on a pure Mamba stays on."""
    return not is_attention_free(spec)


# the model classes with SupportsMambaPrefixCaching (vllm/model_executor/models, v0.18.0 to
# v0.32.0: mamba.py, mamba2.py, jamba.py, nemotron_h.py, granitemoehybrid.py, falcon_h1.py,
# bamba.py, zamba2.py); Gated-DeltaNet and other linear-attention hybrids are not among them
MAMBA_PREFIX_CACHING_ARCHITECTURES = frozenset(
    {
        "MambaForCausalLM",
        "FalconMambaForCausalLM",
        "Mamba2ForCausalLM",
        "JambaForCausalLM",
        "NemotronHForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "FalconH1ForCausalLM",
        "BambaForCausalLM",
        "Zamba2ForCausalLM",
    }
)


def has_state(spec: ModelSpec) -> bool:
    return bool(spec.mixer_kinds & {MixerKind.LINEAR_ATTENTION, MixerKind.MAMBA})


def supports_mamba_prefix_caching(spec: ModelSpec) -> bool:
    return spec.architecture in MAMBA_PREFIX_CACHING_ARCHITECTURES


def resolve_prefix_caching(
    spec: ModelSpec, asked: bool | None, behaviour: engine.VllmBehaviour | None = None
) -> bool:
    """The user's ``--[no-]enable-prefix-caching`` when given, else vLLM's default, as the
    release treats a model with Mamba / linear-attention state (``behaviour``)."""
    if behaviour is not None and behaviour.is_v0_engine:
        return bool(asked)  # V0's EngineArgs.enable_prefix_caching defaults to False
    if behaviour is None or not has_state(spec):
        return default_prefix_caching(spec) if asked is None else asked
    if behaviour.is_state_prefix_caching_forced_off:
        return False
    if not behaviour.has_hybrid_prefix_caching and not supports_mamba_prefix_caching(spec):
        return (
            False  # v0.12-v0.15 MambaModelConfig: "without support for prefix caching: disabling"
        )
    if asked is None:
        return not is_attention_free(spec) and behaviour.is_hybrid_prefix_caching_default
    return asked


def resolve_settings(
    spec: ModelSpec, gpu: GpuSpec, s: ServeSettings, *, block_size: int = 0
) -> tuple[ResolvedSettings, engine.VllmBehaviour]:
    """Step 1: fill in what vLLM would choose for this GPU."""
    behaviour = engine.behaviour_on(s.vllm_version, gpu.compute_capability_tuple)
    if not behaviour.serves_state_models and has_state(spec):
        raise InvalidArgumentError(
            f"vLLM {behaviour.version} serves Mamba and linear-attention models with its V0 "
            "engine (V1's _is_v1_supported_oracle falls back before 0.10) and keeps their "
            "state in a separate cache, which servefit does not model: plan with "
            "--vllm-version 0.10 or later"
        )
    if s.enable_expert_parallel and not spec.is_moe:  # ModelConfig._verify_with_expert_parallelism
        raise InvalidArgumentError(
            f"--enable-expert-parallel: {spec.name} has no experts (it is not a "
            "mixture-of-experts model); leave the flag out"
        )
    max_model_len = s.max_model_len or spec.max_position_embeddings
    if max_model_len is None:
        raise InvalidArgumentError(
            f"{spec.name}: the config has no max_position_embeddings; pass --max-model-len"
        )
    chunked = True
    if behaviour.v0_release is not None:
        check_v0(spec, s, behaviour)
        chunked = (
            s.enable_chunked_prefill
            if s.enable_chunked_prefill is not None
            else engine_v0.is_chunked_prefill_default(
                max_model_len=max_model_len,
                has_sliding_window=MixerKind.SLIDING_WINDOW in spec.mixer_kinds,
                has_lora=s.lora is not None,
            )
        )
        default_tokens, default_seqs = engine_v0.batch_defaults(
            behaviour.v0_release, max_model_len=max_model_len, chunked=chunked
        )
    else:
        default_tokens, default_seqs = engine.server_batch_defaults(
            gpu.cuda_total_bytes, gpu.name, behaviour
        )
    max_num_batched_tokens = s.max_num_batched_tokens or default_tokens
    if not chunked and max_num_batched_tokens < max_model_len:
        raise InvalidArgumentError(  # SchedulerConfig._verify_args (V0)
            f"--max-num-batched-tokens {max_num_batched_tokens} is smaller than "
            f"--max-model-len {max_model_len}: without chunked prefill vLLM "
            f"{behaviour.version} refuses it (a longer prompt could never be scheduled); "
            "raise --max-num-batched-tokens, lower --max-model-len or add "
            "--enable-chunked-prefill"
        )
    max_num_seqs = min(s.max_num_seqs or default_seqs, max_num_batched_tokens)
    resolved = ResolvedSettings(
        tensor_parallel_size=s.tensor_parallel_size,
        pipeline_parallel_size=s.pipeline_parallel_size,
        data_parallel_size=s.data_parallel_size,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        gpu_memory_utilization=s.gpu_memory_utilization or behaviour.default_gpu_memory_utilization,
        kv_cache_dtype=s.kv_cache_dtype,
        block_size=block_size or s.block_size or 0,
        enable_prefix_caching=resolve_prefix_caching(spec, s.enable_prefix_caching, behaviour),
        enforce_eager=s.enforce_eager,
        vllm_version=behaviour.version,
        concurrency=s.concurrency or 1,
        context_tokens=s.context_tokens or max_model_len,
        speculative=s.speculative,
        enable_expert_parallel=s.enable_expert_parallel,
        lora=s.lora,
        enable_chunked_prefill=chunked,
    )
    return resolved, behaviour


def check_v0(spec: ModelSpec, s: ServeSettings, behaviour: engine.VllmBehaviour) -> None:
    """What servefit does not plan on vLLM's V0 engine, each named."""
    refused = [
        (s.speculative is not None, "speculative decoding (V0's --speculative-model flags)"),
        (s.lora is not None, "LoRA (V0 profiles with warm-up adapters)"),
        (s.enable_expert_parallel, "--enable-expert-parallel (a V1 flag)"),
        (s.data_parallel_size > 1, "--data-parallel-size (V0 data parallelism)"),
        (MixerKind.MLA in spec.mixer_kinds, f"{spec.name}'s MLA cache (V0's MLA backends)"),
        (spec.vision is not None, f"{spec.name}'s vision encoder (V0 profiles with images)"),
    ]
    for is_refused, what in refused:
        if is_refused:
            raise InvalidArgumentError(
                f"vLLM {behaviour.version} runs the V0 engine, and servefit does not model "
                f"{what} there: plan with --vllm-version 0.8 or later"
            )


ONLINE_QUANTIZATION = {"fp8": fp8_per_tensor}


def auto_dtype(spec: ModelSpec, gpu: GpuSpec) -> str:
    """What ``--dtype auto`` loads: vLLM downcasts a float32 checkpoint to the platform's
    preferred dtype (vllm/config/model.py ``_resolve_auto_dtype``): bfloat16 where supported
    (CUDA compute capability >= 8.0, CPUs, other accelerators), float16 on older NVIDIA GPUs."""
    if spec.dtype != "float32":
        return spec.dtype
    cc = gpu.compute_capability_tuple
    return "float16" if cc is not None and cc < BF16_MIN_CC else "bfloat16"


def apply_load_options(spec: ModelSpec, s: ServeSettings, gpu: GpuSpec) -> ModelSpec:
    """``--dtype`` and ``--quantization`` change what is loaded."""
    if s.dtype == "auto" and auto_dtype(spec, gpu) != spec.dtype:
        spec = replace(spec, dtype=auto_dtype(spec, gpu))
    elif s.dtype not in ("auto", spec.dtype):
        dtype_bytes(s.dtype)  # validates the name
        spec = replace(spec, dtype=s.dtype.removeprefix("torch."))
    if s.quantization is None:
        return spec
    method = s.quantization.lower()
    if spec.quant.is_quantized:
        if method not in (spec.quant.method, spec.quant.method.replace("-", "_")):
            raise InvalidArgumentError(
                f"--quantization {method} does not match the checkpoint's quantization "
                f"({spec.quant.method}); vLLM refuses the mismatch. Drop the flag."
            )
        return spec
    make = ONLINE_QUANTIZATION.get(method)
    if make is None:
        raise InvalidArgumentError(
            f"--quantization {method} needs a checkpoint quantized that way; servefit models "
            f"online quantization for: {', '.join(ONLINE_QUANTIZATION)}"
        )
    quant = QuantSpec(
        method=method, default=make(), description=f"{method.upper()} (quantized at load time)"
    )
    return replace(spec, quant=quant)
