"""``plan_capacity``: does this model fit these GPUs under vLLM, and where does memory go?

The steps, one named call each:

1. resolve the engine's defaults for this GPU (batch sizes, utilisation, max length);
2. check the parallel layout (heads divisible by TP, enough layers for PP);
3. weights per GPU for each pipeline stage (:mod:`servefit.core.weights`);
4. the memory budget per stage (:mod:`servefit.core.memory`);
5. the KV-cache layout and number of blocks per stage; the engine takes the minimum;
6. what that buys: "GPU KV cache size", "Maximum concurrency", the longest request that fits,
   concurrency at the user's context, context at the user's concurrency;
7. the verdict, with what is needed, what would fit, and the flags that make it fit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from servefit.core import engine
from servefit.core.hardware import GpuSpec
from servefit.core.kv_cache import (
    CacheMode,
    CacheSettings,
    KvLayout,
    kv_cache_tokens,
    largest_fitting_len,
    layer_specs,
    max_concurrency,
    num_blocks,
    stage_layout,
)
from servefit.core.memory import MemoryBreakdown, activation_peak_bytes, memory_breakdown
from servefit.core.model_spec import (
    AttentionSpec,
    LinearAttentionSpec,
    MambaSpec,
    MixerKind,
    MlaSpec,
    ModelSpec,
)
from servefit.core.quant import QuantSpec, fp8_per_tensor
from servefit.core.weights import ParamCounts, count_params, pipeline_layer_split, weight_bytes
from servefit.errors import InvalidArgumentError
from servefit.units import GIB_BYTES, dtype_bytes

BF16_MIN_CC = (8, 0)  # bfloat16 needs Ampere or newer
MLA_BLOCK_SIZE_HOPPER = 64  # FlashMLA forces block size 64 on compute capability 9.x
MLA_BLOCK_SIZE_BLACKWELL = 128  # CUTLASS MLA forces 128 on compute capability 10.x
TP_CANDIDATES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeSettings:
    """vLLM's flags (None = vLLM's default for this GPU) plus the user's target."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    dtype: str = "auto"  # --dtype: auto = the checkpoint's dtype
    quantization: str | None = None  # --quantization: fp8 quantizes a 16-bit checkpoint at load
    kv_cache_dtype: str = "auto"
    kv_cache_memory_bytes: int | None = None
    block_size: int | None = None
    enable_prefix_caching: bool = True  # vLLM V1 enables it by default
    enforce_eager: bool = False
    vllm_version: str = engine.DEFAULT_VLLM_VERSION
    concurrency: int | None = None  # the user's target: concurrent requests
    context_tokens: int | None = None  # the user's target: tokens per request

    def __post_init__(self) -> None:
        checks = {
            "--tensor-parallel-size": self.tensor_parallel_size,
            "--pipeline-parallel-size": self.pipeline_parallel_size,
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


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedSettings:
    """The settings vLLM would actually run with."""

    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    block_size: int  # the attention block size after hybrid inflation
    enable_prefix_caching: bool
    enforce_eager: bool
    vllm_version: str
    concurrency: int
    context_tokens: int

    @property
    def num_gpus(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityPlan:
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

    @property
    def fits(self) -> bool:
        return self.starts and self.meets_target


def resolve_settings(
    spec: ModelSpec, gpu: GpuSpec, s: ServeSettings, *, block_size: int = 0
) -> tuple[ResolvedSettings, engine.VllmBehaviour]:
    """Step 1: fill in what vLLM would choose for this GPU."""
    behaviour = engine.vllm_behaviour(s.vllm_version)
    default_tokens, default_seqs = engine.server_batch_defaults(
        gpu.cuda_total_bytes, gpu.name, behaviour
    )
    max_model_len = s.max_model_len or spec.max_position_embeddings
    if max_model_len is None:
        raise InvalidArgumentError(
            f"{spec.name}: the config has no max_position_embeddings; pass --max-model-len"
        )
    max_num_batched_tokens = s.max_num_batched_tokens or default_tokens
    max_num_seqs = min(s.max_num_seqs or default_seqs, max_num_batched_tokens)
    resolved = ResolvedSettings(
        tensor_parallel_size=s.tensor_parallel_size,
        pipeline_parallel_size=s.pipeline_parallel_size,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        gpu_memory_utilization=s.gpu_memory_utilization or behaviour.default_gpu_memory_utilization,
        kv_cache_dtype=s.kv_cache_dtype,
        block_size=block_size or s.block_size or 0,
        enable_prefix_caching=s.enable_prefix_caching,
        enforce_eager=s.enforce_eager,
        vllm_version=behaviour.version,
        concurrency=s.concurrency or 1,
        context_tokens=s.context_tokens or max_model_len,
    )
    return resolved, behaviour


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


@lru_cache(maxsize=1024)
def check_parallel_layout(spec: ModelSpec, tp: int, pp: int) -> None:
    """Step 2: the divisibility vLLM enforces at startup."""
    for layer in spec.layers:
        mixer = layer.mixer
        heads = None
        if isinstance(mixer, AttentionSpec | MlaSpec):
            heads = mixer.num_q_heads if isinstance(mixer, AttentionSpec) else mixer.num_heads
        elif isinstance(mixer, LinearAttentionSpec):
            heads = mixer.num_v_heads
        elif isinstance(mixer, MambaSpec) and mixer.version == 2:
            heads = mixer.num_heads
        if heads is not None and heads % tp:
            valid = [t for t in TP_CANDIDATES if heads % t == 0]
            raise InvalidArgumentError(
                f"--tensor-parallel-size {tp} does not divide the model's {heads} heads "
                f"({spec.name}); vLLM refuses to start. Valid sizes: {valid}"
            )
    if pp > spec.num_layers:
        raise InvalidArgumentError(
            f"--pipeline-parallel-size {pp} exceeds the model's {spec.num_layers} layers"
        )


def _cache_settings(
    spec: ModelSpec,
    gpu: GpuSpec,
    r: ResolvedSettings,
    behaviour: engine.VllmBehaviour,
    mamba_ssm_dtype: str | None,
) -> CacheSettings:
    cc = gpu.compute_capability_tuple
    mla_block = 16
    if cc is not None and cc[0] == 9:
        mla_block = MLA_BLOCK_SIZE_HOPPER
    elif cc is not None and cc[0] == 10:
        mla_block = MLA_BLOCK_SIZE_BLACKWELL
    has_state = bool(spec.mixer_kinds & {MixerKind.LINEAR_ATTENTION, MixerKind.MAMBA})
    return CacheSettings(
        tp=r.tensor_parallel_size,
        kv_cache_dtype=r.kv_cache_dtype,
        block_size=r.block_size or None,
        mamba_ssm_dtype=mamba_ssm_dtype,
        cache_mode=(
            CacheMode.ALIGN
            if has_state and r.enable_prefix_caching and behaviour.has_hybrid_prefix_caching
            else CacheMode.NONE
        ),
        mla_block_size=mla_block,
    )


def _stage_memory(
    spec: ModelSpec,
    gpu: GpuSpec,
    r: ResolvedSettings,
    behaviour: engine.VllmBehaviour,
    stage_layers: range,
    stage_weights_bytes: float,
    is_last: bool,
    kv_cache_memory_bytes: int | None,
) -> MemoryBreakdown:
    """Step 4 for one pipeline stage."""
    activation = activation_peak_bytes(
        spec,
        stage_layers,
        tp=r.tensor_parallel_size,
        max_num_batched_tokens=r.max_num_batched_tokens,
        max_num_seqs=r.max_num_seqs,
        is_last_stage=is_last,
    )
    graphs = 0 if r.enforce_eager else engine.cuda_graph_bytes(len(stage_layers))
    return memory_breakdown(
        total_bytes=gpu.cuda_total_bytes,
        gpu_memory_utilization=r.gpu_memory_utilization,
        weights_bytes=int(stage_weights_bytes),
        activation_peak_bytes=activation,
        non_torch_bytes=engine.non_torch_bytes(r.tensor_parallel_size, r.pipeline_parallel_size),
        cuda_graph_bytes=graphs,
        behaviour=behaviour,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
    )


def plan_capacity(
    spec: ModelSpec,
    gpu: GpuSpec,
    settings: ServeSettings,
    *,
    mamba_ssm_dtype: str | None = None,
    with_suggestions: bool = True,
) -> CapacityPlan:
    """Everything `servefit plan` prints, for one model on ``tp x pp`` GPUs of one kind."""
    spec = apply_load_options(spec, settings, gpu)
    r, behaviour = resolve_settings(spec, gpu, settings)
    tp, pp = r.tensor_parallel_size, r.pipeline_parallel_size
    check_parallel_layout(spec, tp, pp)
    weights = weight_bytes(spec, tp=tp, pp=pp)
    stages = pipeline_layer_split(spec.num_layers, pp)
    cache = _cache_settings(spec, gpu, r, behaviour, mamba_ssm_dtype)

    per_stage = []
    for index, layers in enumerate(stages):
        memory = _stage_memory(
            spec,
            gpu,
            r,
            behaviour,
            layers,
            weights.per_stage_bytes[index],
            index == pp - 1,
            settings.kv_cache_memory_bytes,
        )
        layout = stage_layout(spec, layers, cache)
        per_stage.append((num_blocks(layout, memory.kv_cache_bytes), index, memory, layout))
    # every worker allocates the same number of blocks: the smallest wins
    blocks, _, memory, layout = min(per_stage, key=lambda item: (item[0], item[1]))

    if layout.groups:  # the block size vLLM settles on (hybrids raise it)
        r, _ = resolve_settings(spec, gpu, settings, block_size=layout.min_block_size)
    mnbt = r.max_num_batched_tokens
    concurrency = max_concurrency(layout, blocks, r.max_model_len, mnbt) if layout.groups else 0.0
    if behaviour.is_token_count_from_concurrency:
        tokens = int(concurrency * r.max_model_len)
    else:
        tokens = kv_cache_tokens(layout, blocks)
    upper = max(r.max_model_len, spec.max_position_embeddings or 0)
    largest = largest_fitting_len(layout, blocks, mnbt, upper) if layout.groups else 0
    at_context = max_concurrency(layout, blocks, r.context_tokens, mnbt) if layout.groups else 0.0
    per_request_blocks = blocks // r.concurrency if r.concurrency else blocks
    max_context = (
        largest_fitting_len(layout, per_request_blocks, mnbt, upper) if layout.groups else 0
    )

    kv_per_token, state_per_seq = _per_gpu_sizes(spec, cache, pp)
    seq_bytes = sum(
        g.num_layers * g.spec.bytes_per_request(r.context_tokens, mnbt) for g in layout.groups
    )
    mamba_limit = blocks if state_per_seq else None

    problems, warnings = _verdict(
        spec, r, behaviour, memory, blocks, concurrency, at_context, largest, mamba_limit
    )
    starts = not any(p.startswith(_STARTUP) for p in problems)
    meets = starts and not problems
    if with_suggestions and not meets:
        problems = (
            *problems,
            *_suggestions(
                mamba_limit, spec, gpu, settings, r, largest, max_context, mamba_ssm_dtype
            ),
        )

    assumptions = (*behaviour.notes, *_model_assumptions(spec, tp))
    return CapacityPlan(
        model=spec,
        params=count_params(spec),
        gpu=gpu,
        settings=r,
        behaviour=behaviour,
        memory=memory,
        weights_total_bytes=weights.all_gpus_bytes(tp * pp),
        layout=layout,
        num_blocks=blocks,
        kv_cache_tokens=tokens,
        max_concurrency=concurrency,
        largest_max_model_len=largest,
        concurrency_at_context=at_context,
        max_context_at_concurrency=max_context,
        kv_bytes_per_token=kv_per_token,
        state_bytes_per_sequence=state_per_seq,
        sequence_bytes_at_context=seq_bytes,
        mamba_block_limit=mamba_limit,
        starts=starts,
        meets_target=meets,
        problems=problems,
        warnings=warnings,
        assumptions=assumptions,
    )


@lru_cache(maxsize=1024)
def _model_assumptions(spec: ModelSpec, tp: int) -> tuple[str, ...]:
    out = [
        "activation peak, non-torch and CUDA-graph memory are estimates fitted to vLLM 0.19 "
        "startup logs (vLLM measures them at startup)",
        "weights per GPU follow vLLM's tensor-parallel sharding"
        + (" (KV heads replicated when fewer than the ranks)" if tp > 1 else ""),
    ]
    if spec.vision is not None:
        out.append("vision tower parameters are estimated from vision_config")
    if any(
        isinstance(layer.mixer, AttentionSpec) and layer.mixer.attention_chunk_tokens
        for layer in spec.layers
    ):
        out.append(
            "chunked local attention layers hold full-length KV: vLLM disables the hybrid KV "
            "cache manager for chunked attention by default"
        )
    return tuple(out)


@lru_cache(maxsize=1024)
def _per_gpu_sizes(spec: ModelSpec, cache: CacheSettings, pp: int) -> tuple[int, int]:
    """(attention KV bytes per token, constant state bytes per sequence) on one GPU,
    averaged over pipeline stages."""
    specs = layer_specs(spec, None, cache)
    kv_per_token = sum(s.page_size_bytes // s.block_size for s in specs if not s.is_state)
    state = sum(s.page_size_bytes for s in specs if s.is_state)
    return kv_per_token // pp, state // pp


_STARTUP = "vLLM would not start: "


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB_BYTES:.2f} GiB"


def _verdict(
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
    if memory.kv_cache_bytes <= 0:
        needed = memory.weights_bytes + memory.activation_peak_bytes + memory.non_torch_bytes
        problems.append(
            f"{_STARTUP}no memory is left for the KV cache: weights, activations and runtime "
            f"need {_gib(needed)} per GPU but the budget ({r.gpu_memory_utilization:.2f} x "
            f"{_gib(memory.total_bytes)}) is {_gib(memory.requested_bytes)}"
        )
    elif concurrency < 1:
        problems.append(
            f"{_STARTUP}one request of --max-model-len {r.max_model_len:,} tokens needs more "
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
            f"{_STARTUP}--max-num-seqs {r.max_num_seqs} exceeds the {mamba_limit} Mamba cache "
            f"blocks (each running sequence holds one); vLLM >= 0.30 stops while capturing CUDA "
            f"graphs. Lower --max-num-seqs to {mamba_limit} or free memory"
        )
    if not problems and at_context < r.concurrency:
        problems.append(
            f"the KV cache holds {at_context:.2f} requests of {r.context_tokens:,} tokens at once, "
            f"not the {r.concurrency} asked for (--target-concurrency): the rest would queue "
            "(or be preempted)"
        )
    if r.concurrency > r.max_num_seqs:
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
            f"{_STARTUP}--max-model-len {r.max_model_len:,} exceeds the model's "
            f"max_position_embeddings ({spec.max_position_embeddings:,}); vLLM refuses it "
            "unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
        )
    return tuple(problems), tuple(warnings)


def _suggestions(
    mamba_limit: int | None,
    spec: ModelSpec,
    gpu: GpuSpec,
    settings: ServeSettings,
    r: ResolvedSettings,
    largest: int,
    max_context: int,
    mamba_ssm_dtype: str | None,
) -> tuple[str, ...]:
    """What would fit: shorter context, fewer sequences, fp8 KV cache, more GPUs."""
    out: list[str] = []
    if 0 < largest < r.max_model_len:
        out.append(f"would fit: --max-model-len {largest:,} (the longest one request can hold)")
    if settings.concurrency and 0 < max_context < r.context_tokens:
        out.append(
            f"would fit: {settings.concurrency} requests of up to {max_context:,} tokens each"
        )
    trials: list[tuple[str, ServeSettings]] = []
    if mamba_limit is not None and 0 < mamba_limit < r.max_num_seqs:
        trials.append(
            (f"--max-num-seqs {mamba_limit}", replace(settings, max_num_seqs=mamba_limit))
        )
    if r.kv_cache_dtype == "auto" and spec.dtype in ("bfloat16", "float16"):
        trials.append(("--kv-cache-dtype fp8", replace(settings, kv_cache_dtype="fp8")))
    for tp in TP_CANDIDATES:
        if tp > settings.tensor_parallel_size:
            trials.append(
                (
                    f"--tensor-parallel-size {tp} ({tp * settings.pipeline_parallel_size} GPUs)",
                    replace(settings, tensor_parallel_size=tp),
                )
            )
    for label, trial in trials:
        try:
            other = plan_capacity(
                spec, gpu, trial, mamba_ssm_dtype=mamba_ssm_dtype, with_suggestions=False
            )
        except InvalidArgumentError:
            continue
        if other.fits:
            out.append(
                f"would fit: {label} -> {other.concurrency_at_context:.1f} requests of "
                f"{other.settings.context_tokens:,} tokens at once"
            )
            if label.startswith(("--tensor", "--max-num-seqs")):
                break
    if len(out) == 0:
        out.append(
            f"nothing tried fits on {gpu.name}: a larger GPU or a quantized checkpoint is needed"
        )
    return tuple(out)
