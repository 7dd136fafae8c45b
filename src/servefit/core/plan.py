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

The settings and the plan's value types (step 1) are in :mod:`servefit.core.plan_settings`,
the verdict (step 7) in :mod:`servefit.core.plan_verdict`; this module runs the steps and
works out the suggestions. Every public name stays importable from here.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from servefit.core import addons, engine
from servefit.core.hardware import GpuSpec
from servefit.core.kv_cache import (
    KERNEL_BLOCK_SIZE,
    CacheMode,
    CacheSettings,
    kv_cache_tokens,
    largest_fitting_len,
    layer_specs,
    max_concurrency,
    num_blocks,
    stage_layout,
)
from servefit.core.memory import MemoryBreakdown, memory_breakdown, profile_bytes
from servefit.core.model_spec import (
    AttentionSpec,
    MixerKind,
    ModelSpec,
)

# `X as X`: re-exported, so ``servefit.core.plan.<name>`` keeps working
from servefit.core.plan_settings import BF16_MIN_CC as BF16_MIN_CC
from servefit.core.plan_settings import ONLINE_QUANTIZATION as ONLINE_QUANTIZATION
from servefit.core.plan_settings import (
    CapacityPlan,
    ResolvedSettings,
    ServeSettings,
    apply_load_options,
    has_state,
    is_attention_free,
    resolve_settings,
    supports_mamba_prefix_caching,
)
from servefit.core.plan_settings import auto_dtype as auto_dtype
from servefit.core.plan_verdict import STARTUP, capacity_verdict
from servefit.core.tp_rules import MAX_LISTED_TP, tp_refusals, valid_tp_sizes
from servefit.core.weights import (
    count_params,
    kernel_layouts,
    pipeline_layer_split,
    weight_bytes,
)
from servefit.errors import InvalidArgumentError

MLA_BLOCK_SIZE_HOPPER = 64  # FlashMLA forces block size 64 on compute capability 9.x
MLA_BLOCK_SIZE_BLACKWELL = 128  # CUTLASS MLA forces 128 on compute capability 10.x
# DeepSeek-V3.2's sparse MLA: the indexer's backend takes only 64-token blocks on CUDA and
# the sparse MLA backends multiples of 64 (vLLM 0.32, v1/attention/backends/mla/indexer.py
# DeepseekV32IndexerBackend.get_supported_kernel_block_sizes: [64]; flashmla_sparse.py,
# flashattn_mla_sparse.py: MultipleOf(64)), so Platform._preferred_block_size_for_backends
# settles on 64 on Hopper and Blackwell alike
SPARSE_MLA_BLOCK_SIZE = 64
# The --kv-cache-dtype values a sparse-MLA layer stores as fp8_ds_mla (656 B a token), by
# compute capability major (vLLM 0.32 mla_attention.py _canonicalize_sparse_mla_kv_cache_dtype
# and platforms/cuda.py's sparse MLA priorities): on 9.x the sparse backend that takes fp8 is
# FLASHMLA_SPARSE, which stores any fp8 dtype so; on 12.x FLASHINFER_MLA_SPARSE_SM120 does
# it for auto, fp8 and fp8_e4m3; on 10.x FLASHINFER_MLA_SPARSE comes first for fp8 and keeps
# plain fp8 (576 B)
SPARSE_DS_MLA_DTYPES = {
    9: frozenset({"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"}),
    12: frozenset({"auto", "fp8", "fp8_e4m3"}),
}
TP_CANDIDATES = (1, 2, 4, 8)


@lru_cache(maxsize=1024)
def check_parallel_layout(
    spec: ModelSpec, tp: int, pp: int, *, ep: bool = False, dp: int = 1
) -> None:
    """Step 2: the divisibility and replication rules vLLM 0.32 enforces at startup, per
    layer kind (:mod:`servefit.core.tp_rules`, each rule citing its vLLM source); ``ep``:
    with ``--enable-expert-parallel``; ``dp``: ``--data-parallel-size``. Raises
    ``InvalidArgumentError`` (exit 2) naming every broken rule and the sizes that would
    start."""
    if tp < 1:
        raise InvalidArgumentError(f"--tensor-parallel-size must be >= 1, got {tp}")
    reasons = tp_refusals(spec, tp, ep=ep, dp=dp)
    if reasons:
        valid = ", ".join(map(str, valid_tp_sizes(spec, ep=ep, dp=dp))) or "none"
        with_dp = f" with --data-parallel-size {dp}" if dp > 1 else ""
        raise InvalidArgumentError(
            f"--tensor-parallel-size {tp}{with_dp}: vLLM refuses to start {spec.name}: "
            + "; ".join(reasons)
            + f". Valid sizes up to {MAX_LISTED_TP}{with_dp}: {valid}"
        )
    if pp > spec.num_layers:
        raise InvalidArgumentError(
            f"--pipeline-parallel-size {pp} exceeds the model's {spec.num_layers} layers"
        )


def state_cache_mode(
    spec: ModelSpec, r: ResolvedSettings, behaviour: engine.VllmBehaviour
) -> CacheMode:
    """vLLM's ``mamba_cache_mode`` for this model: "align" when prefix caching is on.

    vLLM 0.32, vllm/model_executor/models/config.py ``MambaModelConfig.
    verify_and_update_config`` (hybrids inherit it through HybridAttentionMambaModelConfig):
    with ``cache_config.enable_prefix_caching`` it sets mamba_cache_mode "align" and
    mamba_block_size = the cache block size; without, "none" and mamba_block_size =
    max_model_len. Pure Mamba and hybrids alike: prefix caching is *resolved* first
    (:func:`servefit.core.plan_settings.default_prefix_caching`), so a pure Mamba is
    "align" only with an explicit ``--enable-prefix-caching``."""
    if not (has_state(spec) and r.enable_prefix_caching):
        return CacheMode.NONE
    if behaviour.has_mamba_all_mode and supports_mamba_prefix_caching(spec):
        raise InvalidArgumentError(
            f"vLLM {behaviour.version} keeps a Mamba state page per block for {spec.architecture} "
            'with prefix caching on (mamba_cache_mode "all"), which servefit does not model: '
            "plan with --no-enable-prefix-caching, or --vllm-version 0.28 or later"
        )
    return CacheMode.ALIGN


def _cache_settings(
    spec: ModelSpec,
    gpu: GpuSpec,
    r: ResolvedSettings,
    behaviour: engine.VllmBehaviour,
    mamba_ssm_dtype: str | None,
    kernel_block_size: int = KERNEL_BLOCK_SIZE,
) -> CacheSettings:
    cc = gpu.compute_capability_tuple
    mla_block = 16
    if cc is not None and cc[0] == 9:
        mla_block = MLA_BLOCK_SIZE_HOPPER
    elif cc is not None and cc[0] == 10:
        mla_block = MLA_BLOCK_SIZE_BLACKWELL
    sparse = spec.is_sparse_mla
    if sparse:
        mla_block = SPARSE_MLA_BLOCK_SIZE
    return CacheSettings(
        tp=r.tensor_parallel_size,
        kv_cache_dtype=r.kv_cache_dtype,
        block_size=r.block_size or None,
        mamba_ssm_dtype=mamba_ssm_dtype,
        cache_mode=state_cache_mode(spec, r, behaviour),
        mla_block_size=mla_block,
        kernel_block_size=kernel_block_size,
        mamba2_checkpoint_blocks=1 if behaviour.has_mamba2_checkpoint_block else 0,
        unify_sliding_window=not behaviour.has_hybrid_kv_cache_manager,
        sparse_ds_mla_dtypes=SPARSE_DS_MLA_DTYPES.get(cc[0], frozenset())
        if sparse and cc is not None
        else frozenset(),
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
    activation, non_torch = profile_bytes(
        spec,
        stage_layers,
        behaviour=behaviour,
        tp=r.tensor_parallel_size,
        pp=r.pipeline_parallel_size,
        switched_nvlink=gpu.has_switched_nvlink,
        max_num_batched_tokens=r.max_num_batched_tokens,
        max_num_seqs=r.max_num_seqs,
        is_last_stage=is_last,
        dp=r.data_parallel_size,
        expert_parallel=r.enable_expert_parallel,
    )
    graphs = 0 if r.enforce_eager else engine.cuda_graph_bytes(len(stage_layers))
    return memory_breakdown(
        total_bytes=gpu.cuda_total_bytes,
        gpu_memory_utilization=r.gpu_memory_utilization,
        weights_bytes=int(stage_weights_bytes),
        activation_peak_bytes=activation,
        non_torch_bytes=non_torch,
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
    kernel_block_size: int = KERNEL_BLOCK_SIZE,
) -> CapacityPlan:
    """Everything `servefit plan` prints, for one model on ``tp x pp`` GPUs of one kind.

    ``kernel_block_size`` is the attention backend's smallest kernel block (16 on CUDA; the
    vllm-cpu engine passes the CPU backend's 32): hybrids raise their block in its steps."""
    spec = apply_load_options(spec, settings, gpu)
    if settings.mamba_ssm_cache_dtype != "auto":  # the user's flag wins over the hook
        mamba_ssm_dtype = settings.mamba_ssm_cache_dtype
    r, behaviour = resolve_settings(spec, gpu, settings)
    # an MLA model's block is the MLA backend's own (the CPU forces 16), a pure Mamba has
    # no attention kernel: the kernel multiple binds the others
    engine.check_block_size(
        settings.block_size,
        behaviour,
        kernel_block_size=kernel_block_size,
        uses_attention_kernel=not is_attention_free(spec) and MixerKind.MLA not in spec.mixer_kinds,
    )
    tp, pp, dp = r.tensor_parallel_size, r.pipeline_parallel_size, r.data_parallel_size
    check_parallel_layout(spec, tp, pp, ep=r.enable_expert_parallel, dp=dp)
    # quantized weights as the kernel vLLM picks on this GPU lays them out (Marlin, ...)
    weights = weight_bytes(
        spec,
        tp=tp,
        pp=pp,
        capability=gpu.compute_capability_tuple,
        has_triton_kernels=behaviour.ships_triton_kernels,
        dp=dp,
    )
    stages = list(pipeline_layer_split(spec.num_layers, pp))
    cache = _cache_settings(spec, gpu, r, behaviour, mamba_ssm_dtype, kernel_block_size)
    extra = addons.plan_effect(spec, r, settings.draft, behaviour, gpu, cache, has_state(spec))
    cache, cache_spec = extra.cache, extra.cache_spec  # the drafter's layers on the last stage
    stages[-1] = range(stages[-1].start, cache_spec.num_layers)
    per_stage = []
    for index, layers in enumerate(stages):
        memory = _stage_memory(
            spec,
            gpu,
            r,
            behaviour,
            range(layers.start, min(layers.stop, spec.num_layers)),
            weights.per_stage_bytes[index] + (extra.weight_bytes if index == pp - 1 else 0.0),
            index == pp - 1,
            settings.kv_cache_memory_bytes,
        )
        layout = stage_layout(cache_spec, layers, cache)
        per_stage.append((num_blocks(layout, memory.kv_cache_bytes), index, memory, layout))
    # every worker allocates the same number of blocks: the smallest wins
    blocks, _, memory, layout = min(per_stage, key=lambda item: (item[0], item[1]))

    # pure Mamba without prefix caching: MambaModelConfig.verify_and_update_config makes
    # max_model_len the block (one per request); with it ("align"), the cache block size
    one_block_a_request = is_attention_free(spec) and cache.cache_mode is CacheMode.NONE
    if layout.groups:  # the block size vLLM settles on (hybrids raise it)
        block = r.max_model_len if one_block_a_request else layout.min_block_size
        r, _ = resolve_settings(spec, gpu, settings, block_size=block)
    mnbt = r.max_num_batched_tokens
    concurrency = max_concurrency(layout, blocks, r.max_model_len, mnbt) if layout.groups else 0.0
    if behaviour.is_token_count_from_concurrency or one_block_a_request:
        tokens = int(concurrency * r.max_model_len)
    else:
        tokens = kv_cache_tokens(layout, blocks)
    # the "Maximum concurrency" line; the start check stays in blocks a request (concurrency)
    printed_concurrency = (
        tokens / r.max_model_len if behaviour.is_concurrency_from_tokens else concurrency
    )
    upper = max(r.max_model_len, spec.max_position_embeddings or 0)
    largest = largest_fitting_len(layout, blocks, mnbt, upper) if layout.groups else 0
    at_context = max_concurrency(layout, blocks, r.context_tokens, mnbt) if layout.groups else 0.0
    per_request_blocks = blocks // r.concurrency if r.concurrency else blocks
    max_context = (
        largest_fitting_len(layout, per_request_blocks, mnbt, upper) if layout.groups else 0
    )

    kv_per_token, state_per_seq = _per_gpu_sizes(cache_spec, cache, pp)
    seq_bytes = sum(
        g.num_layers * g.spec.bytes_per_request(r.context_tokens, mnbt) for g in layout.groups
    )
    mamba_limit = blocks if state_per_seq else None

    problems, warnings = capacity_verdict(
        spec, r, behaviour, memory, blocks, concurrency, at_context, largest, mamba_limit
    )
    starts = not any(p.startswith(STARTUP) for p in problems)
    meets = starts and not problems
    if with_suggestions and not meets:
        problems = (
            *problems,
            *_suggestions(
                mamba_limit,
                spec,
                gpu,
                settings,
                r,
                largest,
                max_context,
                mamba_ssm_dtype,
                kernel_block_size,
            ),
        )

    assumptions = (
        *behaviour.notes,
        *extra.notes,
        *_model_assumptions(spec, tp, cache.mamba_ssm_dtype),
        *(
            f"weights as {k.kernel} lays them out on compute capability "
            f"{gpu.compute_capability}: {k.note}"
            for k in kernel_layouts(
                spec, gpu.compute_capability_tuple, behaviour.ships_triton_kernels
            )
        ),
    )
    return CapacityPlan(
        model=spec,
        params=count_params(spec),
        gpu=gpu,
        settings=r,
        behaviour=behaviour,
        memory=memory,
        weights_total_bytes=weights.all_gpus_bytes(r.num_gpus) + extra.weight_bytes * tp * dp,
        layout=layout,
        num_blocks=blocks,
        kv_cache_tokens=tokens,
        max_concurrency=printed_concurrency,
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
def _model_assumptions(spec: ModelSpec, tp: int, state_dtype: str | None) -> tuple[str, ...]:
    out = [
        "activation peak, non-torch and CUDA-graph memory are estimates fitted to vLLM 0.19 "
        "startup logs (vLLM measures them at startup)",
        "weights per GPU follow vLLM's tensor-parallel sharding"
        + (" (KV heads replicated when fewer than the ranks)" if tp > 1 else ""),
    ]
    if spec.vision is not None:
        out.append("vision tower parameters are estimated from vision_config")
    if spec.mixer_kinds & {MixerKind.LINEAR_ATTENTION, MixerKind.MAMBA}:
        out.append(
            f"recurrent (SSM) state in {state_dtype or spec.dtype + ' (the model dtype)'}, as "
            "vLLM picks it for this architecture with --mamba-ssm-cache-dtype auto"
        )
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


def _suggestions(
    mamba_limit: int | None,
    spec: ModelSpec,
    gpu: GpuSpec,
    settings: ServeSettings,
    r: ResolvedSettings,
    largest: int,
    max_context: int,
    mamba_ssm_dtype: str | None,
    kernel_block_size: int = KERNEL_BLOCK_SIZE,
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
                spec,
                gpu,
                trial,
                mamba_ssm_dtype=mamba_ssm_dtype,
                with_suggestions=False,
                kernel_block_size=kernel_block_size,
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
