"""llama.cpp (``llama-server``) serving a GGUF file: KV cells allocated at start.

llama-server allocates its whole KV cache when it starts: ``-c N`` cells (tokens), f16 by
default (``-ctk/-ctv``, "default: f16", tools/server/README.md), shared by ``-np P`` slots.
With ``-np`` given, each slot gets its own stream of ``n_ctx / P`` cells, padded to 256
(src/llama-context.cpp: ``n_ctx = GGML_PAD(n_ctx, 256)``; ``n_ctx_seq = GGML_PAD(n_ctx /
n_seq_max, 256)``), and a request longer than its slot is cut off. servefit therefore plans
``-c P x L -np P``: P slots of L tokens (L rounded up to 256), P x L cells reserved up front.

    budget    = device memory x share         (on a Mac: the GPU's wired share, 3/4 of RAM)
    kv_cache  = P x L x KV bytes per token    (must fit in budget - weights - compute buffer)

Worked example (Llama-3.1-8B Q4_K_M, 32 layers x 8 KV heads x 128 dims, f16): one cell is
2 (K and V) x 8 x 128 x 2 bytes x 32 layers = 131,072 bytes, so ``-c 32768 -np 4`` (4 slots
of 8,192 tokens) reserves 32,768 x 131,072 bytes = 4 GiB of KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from servefit.core.engines import llama_cpp_split as split
from servefit.core.engines import unified_memory as um
from servefit.core.hardware import GpuSpec
from servefit.core.kv_cache import (
    CacheSettings,
    KvLayout,
    blocks_per_request,
    largest_fitting_len,
    stage_layout,
)
from servefit.core.memory import MemoryBreakdown, activation_peak_bytes
from servefit.core.model_spec import ModelSpec
from servefit.core.plan import CapacityPlan, ResolvedSettings, ServeSettings
from servefit.core.weights import count_params, weight_bytes
from servefit.errors import InvalidArgumentError
from servefit.units import cdiv

CTX_PAD_TOKENS = 256  # src/llama-context.cpp: n_ctx and n_ctx_seq padded to a multiple of 256
# llama-server defaults (tools/server/README.md, generated from common/arg.cpp):
BATCH_TOKENS = 2048  # -b, --batch-size: logical maximum batch size
UBATCH_TOKENS = 512  # -ub, --ubatch-size: physical batch, what the compute buffer is sized for
ALL_LAYERS = "99"  # -ngl 99: offload every layer to the GPU (more than any model has)
# -ctk/-ctv values servefit can size (default f16); q8_0/q4_0 block formats are not modelled
KV_TYPES = {"auto": "float16", "f16": "float16", "bf16": "bfloat16", "f32": "float32"}
LABEL = "llama.cpp"
# llama-server --device names by backend (its --list-devices): CUDA0, ROCm0, ...
DEVICE_PREFIX = {"nvidia": "CUDA", "amd": "ROCm"}
_STARTUP = "llama-server would not start: "


@dataclass(frozen=True, slots=True, kw_only=True)
class LlamaCppEngine:
    name: str = "llama.cpp"

    def refusal(self, spec: ModelSpec, gpu: GpuSpec) -> str | None:
        if not um.is_gguf_checkpoint(spec):
            kind = "an MLX export" if um.is_mlx_checkpoint(spec) else "a safetensors checkpoint"
            return (
                f"llama.cpp serves GGUF files; {spec.name} is {kind} "
                f"({spec.quant.description}). Convert it with llama.cpp's "
                "convert_hf_to_gguf.py (then llama-quantize), or pick the engine that loads it: "
                + (
                    "MLX on Apple silicon"
                    if um.is_mlx_checkpoint(spec)
                    else "vLLM, or MLX on a Mac"
                )
            )
        if gpu.vendor == "google":
            return f"llama.cpp has no TPU backend; {gpu.name} cannot run it"
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
        """Whether ``-c P x L -np P`` starts, with P and L from the target (or the flags)."""
        kv_dtype = _check_flags(settings)
        is_apple = gpu.vendor == "apple"
        if is_apple and settings.pipeline_parallel_size > 1:
            raise InvalidArgumentError(
                f"--pipeline-parallel-size {settings.pipeline_parallel_size}: a Mac has one GPU "
                f"({gpu.name}, unified memory); llama.cpp splits layers over several GPUs of "
                "one machine. Plan one device"
            )
        total = um.device_memory_bytes(gpu) if is_apple else gpu.cuda_total_bytes
        default_fraction = um.default_wired_fraction(total) if is_apple else 1.0
        fraction = settings.gpu_memory_utilization or default_fraction
        slots = settings.max_num_seqs or settings.concurrency or 1
        asked_len = settings.max_model_len or settings.context_tokens
        asked_len = asked_len or spec.max_position_embeddings  # -c 0: the model's own length
        if asked_len is None:
            raise InvalidArgumentError(
                f"{spec.name}: the config has no max_position_embeddings; pass --max-model-len"
            )
        slot_len = cdiv(asked_len, CTX_PAD_TOKENS) * CTX_PAD_TOKENS
        cache = CacheSettings(
            tp=1,
            kv_cache_dtype=kv_dtype,
            block_size=CTX_PAD_TOKENS,
            mamba_ssm_dtype=mamba_ssm_dtype,
        )
        layout = stage_layout(spec, None, cache)
        r = ResolvedSettings(
            tensor_parallel_size=1,
            pipeline_parallel_size=settings.pipeline_parallel_size,  # GPUs, split by layers
            max_model_len=slot_len,
            max_num_seqs=slots,
            max_num_batched_tokens=settings.max_num_batched_tokens or BATCH_TOKENS,
            gpu_memory_utilization=fraction,
            kv_cache_dtype=settings.kv_cache_dtype,
            block_size=layout.min_block_size if layout.groups else CTX_PAD_TOKENS,
            enable_prefix_caching=settings.enable_prefix_caching is not False,  # --cache-prompt
            enforce_eager=True,  # no graph memory pool is reserved up front
            vllm_version="",
            concurrency=settings.concurrency or 1,
            context_tokens=settings.context_tokens or slot_len,
        )
        weights = weight_bytes(spec, tp=1, pp=1)
        where = split.placement(
            spec.num_layers,
            settings.pipeline_parallel_size,
            tensor_split=settings.tensor_split,
            n_gpu_layers=settings.n_gpu_layers,
        )
        on_device = split.device_weights(spec, where)
        mnbt = r.max_num_batched_tokens
        devices = [
            _device_fit(spec, cache, where, on_device, d, total, fraction, slots, slot_len, mnbt)
            for d in range(where.num_devices)
        ]
        binding = min(devices, key=lambda f: (f.fit_len, f.device))
        memory = binding.memory
        per_slot = blocks_per_request(layout, slot_len, mnbt) if layout.groups else 0
        blocks = slots * per_slot  # allocated at start, whatever the traffic
        kv_bytes = binding.kv_bytes
        starts = all(f.starts for f in devices)
        fit_len = binding.fit_len if binding.fit_len < _UNBOUNDED else slot_len
        holds_context = r.context_tokens <= slot_len
        at_context = float(slots) if holds_context else 0.0
        kv_per_token, state_per_seq = um.per_token_sizes(spec, cache)
        seq_bytes = sum(
            g.num_layers * g.spec.bytes_per_request(r.context_tokens, mnbt) for g in layout.groups
        )

        on_gpu = f" on GPU {binding.device}" if where.num_devices > 1 else ""
        problems, warnings = _verdict(spec, r, memory, kv_bytes, starts, fit_len, on_gpu)
        meets = starts and not problems
        return CapacityPlan(
            model=spec,
            params=count_params(spec),
            gpu=gpu,
            settings=r,
            behaviour=um.no_vllm_behaviour(LABEL, default_fraction),
            memory=memory,
            weights_total_bytes=sum(t.num_bytes for t in spec.file_tensors) or weights.total_bytes,
            layout=layout,
            num_blocks=blocks,
            kv_cache_tokens=slots * slot_len,
            max_concurrency=float(slots) if per_slot else 0.0,
            largest_max_model_len=slot_len if starts else fit_len,
            concurrency_at_context=at_context if starts else 0.0,
            max_context_at_concurrency=slot_len if r.concurrency <= slots and starts else 0,
            kv_bytes_per_token=kv_per_token,
            state_bytes_per_sequence=state_per_seq,
            sequence_bytes_at_context=seq_bytes,
            mamba_block_limit=None,
            starts=starts,
            meets_target=meets,
            problems=problems,
            warnings=warnings,
            assumptions=_assumptions(spec, r, memory, is_apple, default_fraction)
            + _split_assumptions(where, on_device),
            engine=self.name,
            engine_label=LABEL,
            memory_label="unified memory" if is_apple else "visible to the GPU backend",
            budget_label="GPU wired-memory share" if is_apple else "share used",
            reserved_kv_cache_bytes=kv_bytes,
            host_layers=len(where.host_layers),
        )

    def launch_args(self, model_id: str, plan: CapacityPlan, asked: ServeSettings) -> list[str]:
        """``llama-server -m FILE.gguf -c P*L -np P -ngl 99`` (``-hf`` for a Hub repository)."""
        r = plan.settings
        method = plan.model.quant.method
        if plan.model.file_tensors:  # a GGUF file read (a path, or the blob Ollama pulled)
            source = ["-m", plan.model.name]
        elif model_id.lower().endswith(".gguf"):
            source = ["-m", model_id]
        elif method.startswith("gguf "):  # a checkpoint planned as a GGUF of one type (--gguf)
            kind = method.removeprefix("gguf ")
            source = ["-m", f"{model_id.rsplit('/', 1)[-1]}-{kind}.gguf"]
        else:
            source = ["-hf", model_id]
        args = ["llama-server", *source]
        args += ["-c", str(r.max_num_seqs * r.max_model_len), "-np", str(r.max_num_seqs)]
        given = asked.n_gpu_layers
        args += ["-ngl", ALL_LAYERS if given is None else str(given)]
        if r.pipeline_parallel_size > 1 and plan.gpu.vendor in DEVICE_PREFIX:
            prefix = DEVICE_PREFIX[plan.gpu.vendor]
            devices = ",".join(f"{prefix}{i}" for i in range(r.pipeline_parallel_size))
            args += ["-dev", devices]  # the GPUs planned, whatever else the machine has
        if asked.tensor_split is not None:
            args += ["-ts", ",".join(f"{x:g}" for x in asked.tensor_split)]
        kv_type = r.kv_cache_dtype.lower()
        if kv_type not in ("auto", "f16"):
            args += ["-ctk", kv_type, "-ctv", kv_type]
        if asked.max_num_batched_tokens is not None:
            args += ["-b", str(r.max_num_batched_tokens)]
        if not r.enable_prefix_caching:
            args += ["--no-cache-prompt"]
        return args


_UNBOUNDED = 1 << 62  # a device without KV layers limits no slot


@dataclass(frozen=True, slots=True, kw_only=True)
class _DeviceFit:
    """One GPU under llama.cpp's layer split: its memory, the KV its layers reserve, and
    the longest slot its memory holds."""

    device: int
    memory: MemoryBreakdown
    kv_bytes: int
    fit_len: int

    @property
    def starts(self) -> bool:
        return self.memory.kv_cache_bytes >= self.kv_bytes


def _device_fit(
    spec: ModelSpec,
    cache: CacheSettings,
    where: split.Placement,
    on_device: split.DeviceWeights,
    device: int,
    total: int,
    fraction: float,
    slots: int,
    slot_len: int,
    mnbt: int,
) -> _DeviceFit:
    """GPU ``device``'s weights, compute buffer and the KV cells of its layers."""
    layers = where.device_layers(device)
    holds_output = where.output_device == device
    compute = (
        activation_peak_bytes(
            spec,
            layers,
            tp=1,
            max_num_batched_tokens=UBATCH_TOKENS,
            max_num_seqs=slots,
            is_last_stage=holds_output,
        )
        if layers or holds_output
        else 0
    )
    memory = um.budget(
        total_bytes=total,
        fraction=fraction,
        weights_bytes=int(on_device.device_bytes[device]),
        activation_peak_bytes=compute,
    )
    layout = stage_layout(spec, layers, cache) if layers else None
    if layout is None or not layout.groups:
        fit_len = _UNBOUNDED if memory.kv_cache_bytes >= 0 else 0
        return _DeviceFit(device=device, memory=memory, kv_bytes=0, fit_len=fit_len)
    kv_bytes = slots * blocks_per_request(layout, slot_len, mnbt) * layout.bytes_per_block
    fit_blocks = max(memory.kv_cache_bytes, 0) // layout.bytes_per_block
    fit_len = _largest_slot(layout, int(fit_blocks) // slots, mnbt)
    return _DeviceFit(device=device, memory=memory, kv_bytes=kv_bytes, fit_len=fit_len)


def _check_flags(s: ServeSettings) -> str:
    """The KV dtype to size; vLLM flags llama-server has no counterpart for are refused."""
    if s.tensor_parallel_size != 1:
        raise InvalidArgumentError(
            f"--tensor-parallel-size {s.tensor_parallel_size}: llama.cpp splits a model over "
            "GPUs by layers (its default --split-mode layer), not by tensor parallelism; plan "
            f"{s.tensor_parallel_size} GPUs with --pipeline-parallel-size "
            f"{s.tensor_parallel_size} (and --tensor-split for unequal shares)"
        )
    if s.tensor_split is not None and len(s.tensor_split) != s.pipeline_parallel_size:
        raise InvalidArgumentError(
            f"--tensor-split has {len(s.tensor_split)} values for "
            f"--pipeline-parallel-size {s.pipeline_parallel_size}: give one share per GPU"
        )
    unsupported = {
        "--data-parallel-size": s.data_parallel_size != 1,
        "--quantization": s.quantization is not None,
        "--kv-cache-memory-bytes": s.kv_cache_memory_bytes is not None,
        "--block-size": s.block_size is not None,
        "--dtype": s.dtype != "auto",
    }
    named = [flag for flag, is_set in unsupported.items() if is_set]
    if named:
        raise InvalidArgumentError(
            f"{', '.join(named)}: llama-server has no such setting (the GGUF file's own "
            "weights, layers split over the GPUs). Drop the flag"
        )
    kv = KV_TYPES.get(s.kv_cache_dtype.lower())
    if kv is None:
        raise InvalidArgumentError(
            f"--kv-cache-dtype {s.kv_cache_dtype}: servefit sizes llama.cpp KV caches of type "
            f"{', '.join(k for k in KV_TYPES if k != 'auto')} (-ctk/-ctv); quantized cache "
            "types (q8_0, q4_0, ...) are not modelled"
        )
    return kv


def _largest_slot(layout: KvLayout, blocks: int, mnbt: int) -> int:
    """The longest slot (a multiple of 256 tokens) that ``blocks`` hold."""
    if blocks <= 0:
        return 0
    longest = largest_fitting_len(layout, blocks, mnbt, blocks * layout.min_block_size)
    return longest // CTX_PAD_TOKENS * CTX_PAD_TOKENS


def _verdict(
    spec: ModelSpec,
    r: ResolvedSettings,
    memory: MemoryBreakdown,
    kv_bytes: int,
    starts: bool,
    fit_len: int,
    on_gpu: str = "",
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    problems: list[str] = []
    warnings: list[str] = []
    slots, slot_len = r.max_num_seqs, r.max_model_len
    if not starts:
        left = max(memory.kv_cache_bytes, 0)
        problems.append(
            f"{_STARTUP}-c {slots * slot_len:,} -np {slots} reserves {um.gib(kv_bytes)} of "
            f"{r.kv_cache_dtype if r.kv_cache_dtype != 'auto' else 'f16'} KV cache{on_gpu} but "
            f"{um.gib(left)} is left of {um.gib(memory.requested_bytes)} after the weights "
            f"({um.gib(memory.weights_bytes)}) and compute buffers"
        )
        if fit_len:
            problems.append(
                f"would fit: -c {slots * fit_len:,} -np {slots} ({slots} slots of "
                f"{fit_len:,} tokens)"
            )
        else:
            problems.append(
                "nothing fits: a smaller quantization, fewer slots or a larger device is needed"
            )
    if r.context_tokens > slot_len:
        problems.append(
            f"--context {r.context_tokens:,} exceeds a slot's {slot_len:,} tokens (-c / -np): "
            "llama-server cuts longer requests off"
        )
    if r.concurrency > slots:
        warnings.append(
            f"--target-concurrency {r.concurrency} exceeds the {slots} slots (-np): the rest "
            "wait for a free slot"
        )
    if spec.max_position_embeddings and slot_len > spec.max_position_embeddings:
        warnings.append(
            f"a slot of {slot_len:,} tokens exceeds the model's {spec.max_position_embeddings:,} "
            "positions (its training context)"
        )
    return tuple(problems), tuple(warnings)


def _assumptions(
    spec: ModelSpec,
    r: ResolvedSettings,
    memory: MemoryBreakdown,
    is_apple: bool,
    default_fraction: float,
) -> tuple[str, ...]:
    share = (
        f"the GPU may wire {um.gib(memory.requested_bytes)} of {um.gib(memory.total_bytes)} "
        f"unified memory (macOS's default share is {default_fraction:.2f} of RAM, "
        "iogpu.wired_limit_mb=0); llama.cpp's Metal backend takes that as the device's memory"
        if is_apple
        else f"llama.cpp may use {r.gpu_memory_utilization:.0%} of the device's memory"
    )
    out = [
        share,
        f"llama-server reserves all {r.max_num_seqs * r.max_model_len:,} KV cells at start "
        f"({r.max_num_seqs} slots x {r.max_model_len:,} tokens, padded to 256)",
        f"compute buffer estimated for one {UBATCH_TOKENS}-token ubatch (-ub) with the "
        "per-token formula servefit fits to vLLM; llama.cpp sizes it from the graph",
        (
            "weights as the file's tensor table gives them"
            if spec.file_tensors
            else f"weights sized from the GGUF type's bits per weight ({spec.quant.description})"
        ),
    ]
    if spec.is_hybrid:
        out.append(
            "recurrent / linear-attention state is counted with vLLM's page grouping; "
            "llama.cpp keeps one state per slot (an approximation)"
        )
    return tuple(out)


def _split_assumptions(where: split.Placement, on_device: split.DeviceWeights) -> tuple[str, ...]:
    """Where llama.cpp puts the layers (several GPUs) and what stays in host memory."""
    out = []
    if where.num_devices > 1:
        parts = []
        for d in range(where.num_devices):
            layers = where.device_layers(d)
            held = f"layers {layers.start}-{layers.stop - 1}" if layers else "no layers"
            if where.output_device == d:
                held += " and the output layer"
            parts.append(f"GPU {d}: {held} ({um.gib(on_device.device_bytes[d])})")
        out.append(
            f"layers split over {where.num_devices} GPUs as llama.cpp's --split-mode layer "
            "assigns them (src/llama-model.cpp), by --tensor-split or equal shares (free "
            f"memory of identical, empty GPUs): {'; '.join(parts)}; the memory shown is the "
            "GPU that binds first"
        )
    host = where.host_layers
    if host:
        out.append(
            f"-ngl leaves layers {host.start}-{host.stop - 1} ({len(host)} of "
            f"{len(where.layer_devices)}) and their KV cells in host memory with the token "
            f"embedding: {um.gib(on_device.host_bytes)} of weights there, which the CPU runs"
        )
    else:
        out.append(
            "-ngl 99 offloads every layer; the token embedding stays in host memory "
            f"({um.gib(on_device.host_bytes)}), as llama.cpp keeps the input layer on the CPU"
        )
    return tuple(out)
