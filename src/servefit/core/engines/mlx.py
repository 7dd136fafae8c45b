"""MLX (``mlx_lm.server``) on Apple silicon: capacity on unified memory.

The budget is the GPU's wired-memory limit (:mod:`.unified_memory`), not a CUDA total:

    wired     = RAM x fraction                (3/4 of 64 GiB = 48 GiB on an M4 Pro)
    kv_cache  = wired - weights - activations (no CUDA graphs, no paged pool reserved)

mlx-lm reserves nothing up front: each sequence's KV cache grows in steps of 256 tokens
(``KVCache.step = 256`` in ``mlx_lm/models/cache.py``: a new step is allocated when the
cached tokens outgrow the last one), in the model's dtype. servefit reuses vLLM's block
machinery with 256-token blocks, so ``num_blocks`` is how many such steps the KV memory
holds, and "fits" means the target's sequences, rounded up to whole steps, fit in it.

Worked example (Qwen3-30B-A3B, 48 attention layers, 4 KV heads x 128 dims, bf16): one
step of one layer holds 2 (K and V) x 256 tokens x 4 x 128 x 2 bytes = 524,288 bytes;
48 layers make a 24 MiB block, so 30 GiB of KV memory holds 1,280 steps = 327,680 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from servefit.core.engines import unified_memory as um
from servefit.core.hardware import GpuSpec
from servefit.core.kv_cache import (
    CacheSettings,
    KvLayout,
    blocks_per_request,
    kv_cache_tokens,
    largest_fitting_len,
    max_concurrency,
    num_blocks,
    stage_layout,
)
from servefit.core.memory import MemoryBreakdown, activation_peak_bytes
from servefit.core.model_spec import ModelSpec
from servefit.core.plan import CapacityPlan, ResolvedSettings, ServeSettings
from servefit.core.weights import count_params, weight_bytes
from servefit.errors import InvalidArgumentError

KV_STEP_TOKENS = 256  # mlx_lm/models/cache.py: KVCache.step (and RotatingKVCache.step)
# mlx_lm.server defaults (mlx_lm/server.py, main(), ml-explore/mlx-lm@d78bf58e):
DECODE_CONCURRENCY = 32  # --decode-concurrency: requests decoded together in one batch
PREFILL_STEP_TOKENS = 2048  # --prefill-step-size: prompt tokens per prefill step
LABEL = "mlx-lm"
_STARTUP = "mlx-lm would not fit in the GPU's wired memory: "


@dataclass(frozen=True, slots=True, kw_only=True)
class MlxEngine:
    name: str = "mlx"

    def refusal(self, spec: ModelSpec, gpu: GpuSpec) -> str | None:
        if gpu.vendor != "apple":
            return (
                f"MLX runs on Apple silicon only (Metal); {gpu.name} is not an Apple device "
                f"({gpu.vendor}). "
                + (
                    f"{spec.name} is an MLX export: plan it on an Apple device (e.g. --gpu "
                    "M4-Pro), or plan the checkpoint it was converted from with vLLM"
                    if um.is_mlx_checkpoint(spec)
                    else "Use vLLM there (engine 'vllm')"
                )
            )
        if um.is_gguf_checkpoint(spec):
            return (
                f"{spec.name} is a GGUF file ({spec.quant.description}): mlx-lm loads "
                "safetensors, not GGUF. Serve it with llama.cpp (engine 'llama.cpp'), or "
                "convert the original checkpoint with mlx_lm.convert"
            )
        return None

    def plan(
        self,
        spec: ModelSpec,
        gpu: GpuSpec,
        settings: ServeSettings,
        *,
        mamba_ssm_dtype: str | None = None,
        with_suggestions: bool = True,  # no suggestions to work out: the verdict says them
    ) -> CapacityPlan:
        """Everything `servefit plan` prints, for one model in one Mac's unified memory."""
        _check_flags(settings)
        total = um.device_memory_bytes(gpu)
        default_fraction = um.default_wired_fraction(total)
        fraction = settings.gpu_memory_utilization or default_fraction
        max_model_len = settings.max_model_len or spec.max_position_embeddings
        if max_model_len is None:
            raise InvalidArgumentError(
                f"{spec.name}: the config has no max_position_embeddings; pass --max-model-len"
            )
        cache = CacheSettings(
            tp=1, block_size=KV_STEP_TOKENS, mamba_ssm_dtype=mamba_ssm_dtype
        )  # KV in the model dtype, as mlx-lm keeps it
        layout = stage_layout(spec, None, cache)
        r = ResolvedSettings(
            tensor_parallel_size=1,
            pipeline_parallel_size=1,
            max_model_len=max_model_len,
            max_num_seqs=settings.max_num_seqs or DECODE_CONCURRENCY,
            max_num_batched_tokens=settings.max_num_batched_tokens or PREFILL_STEP_TOKENS,
            gpu_memory_utilization=fraction,
            kv_cache_dtype="auto",
            block_size=layout.min_block_size if layout.groups else KV_STEP_TOKENS,
            # mlx_lm.server keeps its prompt cache unless told not to
            enable_prefix_caching=settings.enable_prefix_caching is not False,
            enforce_eager=True,  # MLX captures no graphs
            vllm_version="",
            concurrency=settings.concurrency or 1,
            context_tokens=settings.context_tokens or max_model_len,
        )
        weights = weight_bytes(spec, tp=1, pp=1)
        activation = activation_peak_bytes(
            spec,
            range(spec.num_layers),
            tp=1,
            max_num_batched_tokens=r.max_num_batched_tokens,
            max_num_seqs=r.max_num_seqs,
            is_last_stage=True,
        )
        memory = um.budget(
            total_bytes=total,
            fraction=fraction,
            weights_bytes=int(weights.per_stage_bytes[0]),
            activation_peak_bytes=activation,
        )
        blocks = num_blocks(layout, memory.kv_cache_bytes)
        mnbt = r.max_num_batched_tokens
        has_kv = bool(layout.groups)
        concurrency = max_concurrency(layout, blocks, max_model_len, mnbt) if has_kv else 0.0
        upper = max(max_model_len, spec.max_position_embeddings or 0)
        largest = largest_fitting_len(layout, blocks, mnbt, upper) if has_kv else 0
        at_context = max_concurrency(layout, blocks, r.context_tokens, mnbt) if has_kv else 0.0
        per_request = blocks // r.concurrency
        max_context = largest_fitting_len(layout, per_request, mnbt, upper) if has_kv else 0
        kv_per_token, state_per_seq = um.per_token_sizes(spec, cache)
        seq_bytes = sum(
            g.num_layers * g.spec.bytes_per_request(r.context_tokens, mnbt) for g in layout.groups
        )

        problems, warnings = _verdict(spec, r, memory, at_context, largest, default_fraction)
        starts = memory.kv_cache_bytes > 0
        meets = starts and not problems
        if not meets:
            problems = (*problems, *_suggestions(r, layout, memory, max_context))
        return CapacityPlan(
            model=spec,
            params=count_params(spec),
            gpu=gpu,
            settings=r,
            behaviour=um.no_vllm_behaviour(LABEL, default_fraction),
            memory=memory,
            weights_total_bytes=weights.total_bytes,
            layout=layout,
            num_blocks=blocks,
            kv_cache_tokens=kv_cache_tokens(layout, blocks),
            max_concurrency=concurrency,
            largest_max_model_len=largest,
            concurrency_at_context=at_context,
            max_context_at_concurrency=max_context,
            kv_bytes_per_token=kv_per_token,
            state_bytes_per_sequence=state_per_seq,
            sequence_bytes_at_context=seq_bytes,
            mamba_block_limit=None,
            starts=starts,
            meets_target=meets,
            problems=problems,
            warnings=warnings,
            assumptions=_assumptions(spec, r, memory, default_fraction),
            engine=self.name,
            engine_label=LABEL,
            memory_label="unified memory",
            budget_label="GPU wired-memory share",
        )

    def launch_args(self, model_id: str, plan: CapacityPlan, asked: ServeSettings) -> list[str]:
        """``mlx_lm.server`` (the console script mlx-lm installs) for this plan."""
        r = plan.settings
        args = ["mlx_lm.server", "--model", model_id]
        if asked.max_num_seqs is not None:
            args += ["--decode-concurrency", str(r.max_num_seqs)]
        if asked.max_num_batched_tokens is not None:
            args += ["--prefill-step-size", str(r.max_num_batched_tokens)]
        return args


def _check_flags(s: ServeSettings) -> None:
    """vLLM flags mlx_lm.server has no counterpart for."""
    unsupported = {
        "--tensor-parallel-size": s.tensor_parallel_size != 1,
        "--pipeline-parallel-size": s.pipeline_parallel_size != 1,
        "--quantization": s.quantization is not None,
        "--kv-cache-dtype": s.kv_cache_dtype != "auto",
        "--kv-cache-memory-bytes": s.kv_cache_memory_bytes is not None,
        "--block-size": s.block_size is not None,
        "--dtype": s.dtype != "auto",
    }
    named = [flag for flag, is_set in unsupported.items() if is_set]
    if named:
        raise InvalidArgumentError(
            f"{', '.join(named)}: mlx_lm.server has no such setting (one Mac, the checkpoint's "
            "own weights, a KV cache in the model dtype). Drop the flag, or quantize with "
            "mlx_lm.convert -q"
        )


def _verdict(
    spec: ModelSpec,
    r: ResolvedSettings,
    memory: MemoryBreakdown,
    at_context: float,
    largest: int,
    default_fraction: float,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    problems: list[str] = []
    warnings: list[str] = []
    wired = um.gib(memory.requested_bytes)
    if memory.kv_cache_bytes <= 0:
        needed = memory.weights_bytes + memory.activation_peak_bytes
        problems.append(
            f"{_STARTUP}weights and activations need {um.gib(needed)} but the GPU may wire "
            f"{wired} ({r.gpu_memory_utilization:.2f} x {um.gib(memory.total_bytes)}); past "
            "that macOS swaps or Metal fails with an out-of-memory error"
        )
    elif at_context < r.concurrency:
        problems.append(
            f"the wired memory holds the KV cache of {at_context:.2f} requests of "
            f"{r.context_tokens:,} tokens at once, not the {r.concurrency} asked for: mlx-lm "
            "reserves nothing up front, so past that the cache outgrows the wired limit "
            "(swapping, or a Metal out-of-memory error)"
        )
    if r.context_tokens > r.max_model_len:
        problems.append(
            f"--context {r.context_tokens:,} exceeds the model's {r.max_model_len:,} positions"
        )
    if memory.kv_cache_bytes > 0 and 0 < largest < r.max_model_len:
        warnings.append(
            f"one request of --max-model-len {r.max_model_len:,} tokens would outgrow the "
            f"wired memory; the longest that fits is {largest:,} tokens (mlx_lm.server does "
            "not cap the length: it is up to the client)"
        )
    if r.concurrency > r.max_num_seqs:
        warnings.append(
            f"--target-concurrency {r.concurrency} exceeds mlx_lm.server's "
            f"--decode-concurrency {r.max_num_seqs}: the rest wait for a place in the batch"
        )
    if r.gpu_memory_utilization != default_fraction:
        warnings.append(
            f"assumes the GPU may wire {wired}: run `sudo sysctl iogpu.wired_limit_mb="
            f"{um.wired_limit_mb(memory.requested_bytes)}` first (macOS's default is "
            f"{default_fraction:.2f} of RAM)"
        )
    method = spec.quant.method
    if method != "none" and not um.is_mlx_checkpoint(spec):
        warnings.append(
            f"{spec.name} is quantized for CUDA kernels ({spec.quant.description}); mlx-lm may "
            "not load it: an MLX export (mlx_lm.convert -q) is the usual route"
        )
    return tuple(problems), tuple(warnings)


def _suggestions(
    r: ResolvedSettings, layout: KvLayout, memory: MemoryBreakdown, max_context: int
) -> tuple[str, ...]:
    """What would fit: fewer or shorter requests, or a higher wired limit."""
    out: list[str] = []
    if memory.kv_cache_bytes > 0 and 0 < max_context < r.context_tokens:
        out.append(f"would fit: {r.concurrency} requests of up to {max_context:,} tokens each")
    if layout.groups:
        need_blocks = r.concurrency * blocks_per_request(
            layout, min(r.context_tokens, r.max_model_len), r.max_num_batched_tokens
        )
        need_bytes = (
            memory.weights_bytes
            + memory.activation_peak_bytes
            + need_blocks * layout.bytes_per_block
        )
        if need_bytes < memory.total_bytes:
            out.append(
                f"would fit: `sudo sysctl iogpu.wired_limit_mb={um.wired_limit_mb(need_bytes)}` "
                f"(lets the GPU wire {um.gib(need_bytes)} of {um.gib(memory.total_bytes)}; "
                "leave macOS enough for itself)"
            )
        else:
            out.append(
                f"the target needs {um.gib(need_bytes)}, more than this Mac's "
                f"{um.gib(memory.total_bytes)}: a smaller quantization or a larger Mac is needed"
            )
    return tuple(out)


def _assumptions(
    spec: ModelSpec, r: ResolvedSettings, memory: MemoryBreakdown, default_fraction: float
) -> tuple[str, ...]:
    out = [
        f"the GPU may wire {um.gib(memory.requested_bytes)} of {um.gib(memory.total_bytes)} "
        f"unified memory (macOS's default share is {default_fraction:.2f} of RAM, "
        "iogpu.wired_limit_mb=0); mlx_lm.server wires that much at start",
        f"mlx-lm grows each sequence's KV cache in steps of {KV_STEP_TOKENS} tokens, in the "
        "model dtype, and reserves nothing up front (mlx_lm/models/cache.py)",
        f"activation peak estimated for one {r.max_num_batched_tokens}-token prefill step "
        f"(--prefill-step-size) and {r.max_num_seqs} decoding requests with the per-token "
        "formula servefit fits to vLLM; MLX does not measure it",
        "no graph capture and no runtime reserve: MLX evaluates lazily, step by step",
        f"weights as the checkpoint stores them ({spec.quant.description})",
    ]
    if spec.is_hybrid:
        out.append(
            "linear-attention / Mamba state is counted with vLLM's page grouping; mlx-lm keeps "
            "one state array per sequence (an approximation)"
        )
    return tuple(out)
