"""The versioned JSON document of ``servefit plan --json`` (what scripts consume)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servefit import __version__
from servefit.adapters.band_sections import ErrorBandsSection, bands_section
from servefit.adapters.document import FrozenDoc, register_annotation_types
from servefit.core.margin import Margin
from servefit.core.plan import CapacityPlan
from servefit.core.weights import WeightBytes, weight_bytes

if TYPE_CHECKING:  # the performance sections load only when a plan has one (cold start)
    from servefit.adapters.perf_document import ScalingSection
    from servefit.adapters.perf_sections import PerformanceSection
    from servefit.app.plan import PlanOutcome


def _import_performance_types() -> None:
    from servefit.adapters.perf_document import ScalingSection
    from servefit.adapters.perf_sections import PerformanceSection

    globals().update(PerformanceSection=PerformanceSection, ScalingSection=ScalingSection)


register_annotation_types(_import_performance_types)

SCHEMA_VERSION = 1


class ModelSection(FrozenDoc):
    """The model as planned: architecture, dtype, format, parameter counts."""

    id: str
    source: str
    architecture: str
    model_type: str
    family: str
    dtype: str
    quantization: str
    num_layers: int
    layer_kinds: dict[str, int]
    params_total: int
    params_active: int  # all parameters a token uses, input embedding included (Mistral's)
    params_embedding: int
    params_vision: int
    params_mtp: int
    checkpoint_bytes: int | None  # safetensors index total_size, when the source has one
    # active without the input embedding lookup (OpenAI's convention); None in old documents
    params_active_non_embedding: int | None = None
    # the bundled catalog entry's confidence ("high", "medium", "low", ...) and its notes
    # (a reconstructed entry says so there); None when the config came from a path or the Hub
    catalog_confidence: str | None = None
    catalog_note: str | None = None


class GpuSection(FrozenDoc):
    """The device planned on, with its catalog source."""

    name: str
    count: int
    memory_bytes: int
    cuda_total_bytes: int
    memory_bandwidth_bytes_per_s: float
    compute_capability: str | None
    source: str


class SettingsSection(FrozenDoc):
    """The vLLM settings in force (the user's and the engine's defaults)."""

    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    block_size: int
    enable_prefix_caching: bool
    enforce_eager: bool
    vllm_version: str
    concurrency: int
    context_tokens: int
    speculative_config: str | None = None  # --speculative-config as given (vLLM's JSON)
    data_parallel_size: int = 1  # engine ranks of TP x PP GPUs; KV figures are per rank


class MemorySection(FrozenDoc):
    """Where the memory goes, and the KV cache it leaves."""

    total_bytes_per_gpu: int
    requested_bytes_per_gpu: int
    weights_bytes_per_gpu: int
    weights_bytes_total: int  # every GPU of the layout: parameters once + each GPU's buffers
    weights_parameter_bytes_total: int  # the parameters as the checkpoint stores them, once
    activation_peak_bytes_per_gpu: int
    non_torch_bytes_per_gpu: int
    cuda_graph_bytes_per_gpu: int
    headroom_bytes_per_gpu: int
    kv_cache_memory_bytes: int
    kv_cache_memory_given: bool
    num_blocks: int
    bytes_per_block: int
    kv_cache_groups: int
    kv_cache_tokens: int
    kv_cache_tokens_definition: str
    max_concurrency: float
    max_concurrency_definition: str
    largest_max_model_len: int
    concurrency_at_context: float
    max_context_at_concurrency: int
    kv_bytes_per_token: int
    state_bytes_per_sequence: int
    sequence_bytes_at_context: int
    mamba_block_limit: int | None
    # the same GPU's weights as the checkpoint stores them, before vLLM repacks quantized
    # weights for the kernel it picks on this GPU (weights_bytes_per_gpu counts the kernel's
    # layout: core/kernel_layout.py); None when the engine's weights are not vLLM's accounting
    weights_checkpoint_bytes_per_gpu: int | None = None


class MarginSection(FrozenDoc):
    """How far the tightest capacity comparison is from the edge."""

    constraint: str
    requests_held: float
    requests_needed: float
    # what is to spare, as a share of the KV cache, in bytes and in tokens (negative: short)
    spare_kv_cache_fraction: float
    spare_kv_cache_bytes: int
    spare_kv_cache_tokens: int
    is_at_edge: bool
    text: str


class VerdictSection(FrozenDoc):
    """The one verdict, with its checks and the workload it judged."""

    fits: bool
    headline: str
    starts: bool
    workload_runs: bool | None  # None: no workload described, not judged
    meets_target: bool | None  # None: no --context target
    reasons: list[str]
    checks: list[str]
    workload: str
    workload_tokens: int
    workload_requests_held: float
    is_at_edge: bool = False  # closer to the edge than the KV figure's measured error
    margin: MarginSection | None = None
    edge_advice: tuple[str, ...] = ()  # the flags that take an at-the-edge plan out of its band


class ChangeSection(FrozenDoc):
    """One flag the recommendation changes, and what it gives up."""

    flag: str
    before: str
    after: str
    gives_up: str


class RecommendationSection(FrozenDoc):
    """The one recommendation: its command, its changes and its capacity."""

    vllm_command: str
    changes: list[ChangeSection]
    num_gpus: int
    max_model_len: int
    max_num_seqs: int
    kv_cache_tokens: int
    max_concurrency: float
    workload_requests_held: float


class PlanDocument(FrozenDoc):
    """``servefit plan --json``: the versioned document scripts consume."""

    schema_version: int
    servefit_version: str
    model: ModelSection
    gpu: GpuSection
    settings: SettingsSection
    memory: MemorySection
    fits: bool
    starts: bool
    meets_target: bool
    problems: list[str]
    warnings: list[str]
    assumptions: list[str]
    vllm_command: str
    verdict: VerdictSection | None = None
    recommendation: RecommendationSection | None = None  # when it does not fit
    performance: PerformanceSection | None = None  # None when the plan does not start
    performance_note: str = ""  # why there is no performance section
    scaling: ScalingSection | None = None  # with --num-gpus
    error_bands: ErrorBandsSection | None = None  # each figure's measured error


def outcome_document(
    outcome: PlanOutcome, *, scaling: ScalingSection | None = None
) -> PlanDocument:
    """The document of a planned deployment: the capacity plan, the one verdict, the one
    recommendation and the performance section."""
    v, rec = outcome.verdict, outcome.recommendation
    perf = outcome.performance
    if perf is not None:
        from servefit.adapters.perf_sections import performance_section
    doc = plan_document(
        outcome.capacity,
        model_id=outcome.resolved.model_id,
        source=outcome.resolved.loaded.source,
        vllm_command=outcome.vllm_command,
        checkpoint_bytes=outcome.resolved.loaded.checkpoint_bytes,
        catalog_confidence=outcome.resolved.loaded.catalog_confidence,
        catalog_note=outcome.resolved.loaded.catalog_note,
        performance=performance_section(perf) if perf is not None else None,
        scaling=scaling,
    )
    verdict = VerdictSection(
        fits=v.fits,
        headline=v.headline,
        starts=v.starts,
        workload_runs=v.workload_runs,
        meets_target=v.meets_target,
        reasons=list(v.reasons),
        checks=list(v.checks),
        workload=outcome.deployment.workload.describe(),
        workload_tokens=v.workload_tokens,
        workload_requests_held=v.workload_requests_held,
        is_at_edge=v.is_at_edge,
        margin=_margin(v.margin) if v.margin is not None else None,
        edge_advice=v.edge_advice,
    )
    recommendation = None
    if rec is not None:
        c = rec.capacity
        recommendation = RecommendationSection(
            vllm_command=outcome.recommended_command or "",
            changes=[
                ChangeSection(flag=ch.flag, before=ch.before, after=ch.after, gives_up=ch.gives_up)
                for ch in rec.changes
            ],
            num_gpus=c.settings.num_gpus,
            max_model_len=c.settings.max_model_len,
            max_num_seqs=c.settings.max_num_seqs,
            kv_cache_tokens=c.kv_cache_tokens,
            max_concurrency=c.max_concurrency,
            workload_requests_held=rec.verdict.workload_requests_held,
        )
    return doc.model_copy(
        update={
            "fits": v.fits,
            "starts": v.starts,
            "meets_target": v.meets_target is not False,
            "problems": list(v.reasons),
            "verdict": verdict,
            "recommendation": recommendation,
            "performance_note": outcome.performance_note if perf is None else "",
            "error_bands": bands_section(outcome.bands),
        }
    )


def _margin(m: Margin) -> MarginSection:
    return MarginSection(
        constraint=m.constraint.what,
        requests_held=m.constraint.held,
        requests_needed=m.constraint.needed,
        spare_kv_cache_fraction=m.relative,
        spare_kv_cache_bytes=m.bytes,
        spare_kv_cache_tokens=m.tokens,
        is_at_edge=m.is_at_edge,
        text=m.describe(),
    )


def plan_document(
    plan: CapacityPlan,
    *,
    model_id: str,
    source: str,
    vllm_command: str,
    checkpoint_bytes: int | None = None,
    performance: PerformanceSection | None = None,
    scaling: ScalingSection | None = None,
    catalog_confidence: str | None = None,
    catalog_note: str | None = None,
) -> PlanDocument:
    spec, p, m, r = plan.model, plan.params, plan.memory, plan.settings
    kinds: dict[str, int] = {}
    for layer in spec.layers:
        kind = layer.mixer.kind.value if layer.mixer else ("mlp_only" if layer.mlp else "no_op")
        kinds[kind] = kinds.get(kind, 0) + 1
    return PlanDocument(
        schema_version=SCHEMA_VERSION,
        servefit_version=__version__,
        model=ModelSection(
            id=model_id,
            source=source,
            architecture=spec.architecture,
            model_type=spec.model_type,
            family=spec.family,
            dtype=spec.dtype,
            quantization=spec.quant.description,
            num_layers=spec.num_layers,
            layer_kinds=kinds,
            params_total=p.total,
            params_active=p.active,
            params_active_non_embedding=p.active_non_embedding,
            params_embedding=p.embedding,
            params_vision=p.vision,
            params_mtp=p.mtp,
            checkpoint_bytes=checkpoint_bytes,
            catalog_confidence=catalog_confidence,
            catalog_note=catalog_note,
        ),
        gpu=GpuSection(
            name=plan.gpu.name,
            count=r.num_gpus,
            memory_bytes=plan.gpu.memory_bytes,
            cuda_total_bytes=plan.gpu.cuda_total_bytes,
            memory_bandwidth_bytes_per_s=plan.gpu.memory_bandwidth_bytes_per_s,
            compute_capability=plan.gpu.compute_capability,
            source=plan.gpu.source,
        ),
        settings=SettingsSection(
            tensor_parallel_size=r.tensor_parallel_size,
            pipeline_parallel_size=r.pipeline_parallel_size,
            data_parallel_size=r.data_parallel_size,
            max_model_len=r.max_model_len,
            max_num_seqs=r.max_num_seqs,
            max_num_batched_tokens=r.max_num_batched_tokens,
            gpu_memory_utilization=r.gpu_memory_utilization,
            kv_cache_dtype=r.kv_cache_dtype,
            block_size=r.block_size,
            enable_prefix_caching=r.enable_prefix_caching,
            enforce_eager=r.enforce_eager,
            vllm_version=r.vllm_version,
            concurrency=r.concurrency,
            context_tokens=r.context_tokens,
            speculative_config=r.speculative.given_json if r.speculative else None,
        ),
        memory=MemorySection(
            total_bytes_per_gpu=m.total_bytes,
            requested_bytes_per_gpu=m.requested_bytes,
            weights_bytes_per_gpu=m.weights_bytes,
            weights_bytes_total=int(plan.weights_total_bytes),
            weights_parameter_bytes_total=int(_weights(plan).checkpoint_total_bytes),
            activation_peak_bytes_per_gpu=m.activation_peak_bytes,
            non_torch_bytes_per_gpu=m.non_torch_bytes,
            cuda_graph_bytes_per_gpu=m.cuda_graph_bytes,
            headroom_bytes_per_gpu=m.headroom_bytes,
            kv_cache_memory_bytes=m.kv_cache_bytes,
            kv_cache_memory_given=m.is_kv_cache_given,
            num_blocks=plan.num_blocks,
            bytes_per_block=plan.layout.bytes_per_block,
            kv_cache_groups=len(plan.layout.groups),
            kv_cache_tokens=plan.kv_cache_tokens,
            kv_cache_tokens_definition=_tokens_definition(plan),
            max_concurrency=plan.max_concurrency,
            max_concurrency_definition=(
                "vLLM's 'Maximum concurrency for max_model_len tokens per request': "
                + (
                    "num_blocks x block_size / max_model_len"
                    if plan.behaviour.is_concurrency_from_tokens
                    else "num_blocks / blocks one request of max_model_len needs across all "
                    "KV-cache groups"
                )
            ),
            largest_max_model_len=plan.largest_max_model_len,
            concurrency_at_context=plan.concurrency_at_context,
            max_context_at_concurrency=plan.max_context_at_concurrency,
            kv_bytes_per_token=plan.kv_bytes_per_token,
            state_bytes_per_sequence=plan.state_bytes_per_sequence,
            sequence_bytes_at_context=plan.sequence_bytes_at_context,
            mamba_block_limit=plan.mamba_block_limit,
            weights_checkpoint_bytes_per_gpu=_checkpoint_weights_per_gpu(plan),
        ),
        fits=plan.fits,
        starts=plan.starts,
        meets_target=plan.meets_target,
        problems=list(plan.problems),
        warnings=list(plan.warnings),
        assumptions=list(plan.assumptions),
        vllm_command=vllm_command,
        performance=performance,
        scaling=scaling,
    )


def _weights(plan: CapacityPlan) -> WeightBytes:
    """The plan's weight count (the plan computed it: a cache hit), laid out and as stored."""
    r = plan.settings
    return weight_bytes(
        plan.model,
        tp=r.tensor_parallel_size,
        pp=r.pipeline_parallel_size,
        capability=plan.gpu.compute_capability_tuple,
        has_triton_kernels=plan.behaviour.ships_triton_kernels,
        dp=r.data_parallel_size,
    )


def _tokens_definition(plan: CapacityPlan) -> str:
    if plan.behaviour.is_v0_engine:  # V0 prints "# GPU blocks: N"
        return "the V0 engine's '# GPU blocks' x block_size (V0 prints the blocks)"
    if plan.behaviour.is_token_count_from_concurrency:
        return "vLLM's 'GPU KV cache size': int(max_concurrency x max_model_len)"
    return "vLLM's 'GPU KV cache size': num_blocks // num_kv_cache_groups x block_size"


def _checkpoint_weights_per_gpu(plan: CapacityPlan) -> int | None:
    """The planned GPU's weights as the checkpoint stores them: the pipeline stage whose
    kernel-laid-out weights are the plan's, counted without the kernel's layout."""
    laid = _weights(plan)
    stage = next(
        (i for i, b in enumerate(laid.per_stage_bytes) if int(b) == plan.memory.weights_bytes),
        None,
    )
    if stage is None:
        return None
    return int(laid.checkpoint_per_stage_bytes[stage])
