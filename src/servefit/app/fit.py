"""``servefit fit``: which bundled models, and which of their quantizations, this hardware
serves, ranked.

Every row is ``plan`` of one (model, weights) on the hardware at the task's context (capped
at the model's own maximum), capacity only, so a row says exactly what ``servefit plan MODEL
--gpu G --max-model-len C [--quantization fp8 | --gguf TYPE]`` says of it; the decode speed
of one request alone is the same roofline step the plan's performance section starts from.
The ranking: what fits first, then the largest model (the most parameters that fit), then
the fastest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from servefit.adapters.ollama_store import is_ollama_name
from servefit.app.deployment import Deployment, Hardware
from servefit.app.fleet_search import has_fp8
from servefit.app.plan import judged
from servefit.app.resolve import Resolved, resolve, resolve_gpu
from servefit.core.op_cost import decode_step
from servefit.core.ops import model_coeffs
from servefit.core.roofline import step_time
from servefit.core.weights import count_params
from servefit.errors import InvalidArgumentError, ServefitError

# the context a task's requests need (prompt + answer), servefit's choice for each:
# a conversation; a repository's files; retrieved passages; an agent's growing session
TASK_CONTEXT_TOKENS = {"chat": 8_192, "code": 32_768, "rag": 32_768, "agent": 65_536}
DECODE_CONTEXT_TOKENS = 1_024  # the speed column: one request decoding at this context


@dataclass(frozen=True, slots=True, kw_only=True)
class FitRow:
    model: str
    weights: str  # the checkpoint's ("bfloat16", "awq", ...), "fp8 on load" or "GGUF Q4_K_M"
    engine: str
    total_params: int
    fits: bool
    context_tokens: int  # the context planned: the task's, capped at the model's own
    largest_context_tokens: int  # the longest request the KV cache holds
    max_concurrency: float  # requests of context_tokens held at once
    weights_bytes_per_gpu: int
    # one request alone at DECODE_CONTEXT_TOKENS: vLLM's roofline step; None for llama.cpp
    # and MLX, whose speed models run the simulation (plan's performance section)
    decode_tok_per_s: float | None
    problem: str  # why it does not fit ("" when it does)
    argv: tuple[str, ...]  # the `servefit plan` flags that give this row

    @property
    def rank_key(self) -> tuple[bool, int, float]:
        return (self.fits, self.total_params, self.decode_tok_per_s or 0.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class FitOutcome:
    gpu: str
    task: str
    rows: tuple[FitRow, ...]  # ranked
    skipped: tuple[str, ...]  # models servefit could not plan here, each with the reason

    @property
    def fitting(self) -> tuple[FitRow, ...]:
        return tuple(r for r in self.rows if r.fits)

    def document(self, top: int = 0) -> dict[str, Any]:
        """``servefit fit --json`` (and the page's fit view): the first ``top`` rows (0: all)."""
        rows = self.rows if top == 0 else self.rows[:top]
        return {
            "gpu": self.gpu,
            "task": self.task,
            "rows": [
                {
                    "model": r.model,
                    "weights": r.weights,
                    "engine": r.engine,
                    "total_params": r.total_params,
                    "fits": r.fits,
                    "context_tokens": r.context_tokens,
                    "largest_context_tokens": r.largest_context_tokens,
                    "max_concurrency": r.max_concurrency,
                    "weights_bytes_per_gpu": r.weights_bytes_per_gpu,
                    "decode_tok_per_s": r.decode_tok_per_s,
                    "problem": r.problem,
                    "plan_args": list(r.argv),
                }
                for r in rows
            ],
            "skipped": list(self.skipped),
        }


def matching_models(model_ids: Sequence[str], search: str | None) -> list[str]:
    """The ids that hold every word of ``search`` (all of them without one)."""
    words = (search or "").lower().split()
    ids = [m for m in model_ids if all(w in m.lower() for w in words)]
    if not ids:
        raise InvalidArgumentError(
            f"--search {search!r} matches no bundled model (see `servefit models`)"
        )
    return ids


def _variants(
    deployment: Deployment, gguf: str | None
) -> Iterable[tuple[tuple[str, ...], Deployment]]:
    """(the plan flags that choose the weights, the deployment) of each variant tried."""
    yield (), deployment
    yield (
        ("--quantization", "fp8"),
        replace(deployment, settings=replace(deployment.settings, quantization="fp8")),
    )
    if gguf:
        yield ("--gguf", gguf), replace(deployment, gguf=gguf)


def fit_models(
    hardware: Hardware,
    model_ids: Sequence[str],
    *,
    task: str = "chat",
    context_tokens: int | None = None,
    gguf: str | None = None,
) -> FitOutcome:
    """Plan every model of ``model_ids`` on ``hardware`` as published, in fp8 where the GPU
    computes it and the checkpoint is 16-bit, and as a GGUF of type ``gguf`` when asked."""
    if task not in TASK_CONTEXT_TOKENS:
        raise InvalidArgumentError(
            f"--task {task!r}: choose one of {', '.join(TASK_CONTEXT_TOKENS)}"
        )
    if context_tokens is not None and context_tokens < 1:
        raise InvalidArgumentError(f"--context must be >= 1 token, got {context_tokens}")
    wanted = context_tokens or TASK_CONTEXT_TOKENS[task]
    gpu = resolve_gpu(hardware)  # once: detecting this machine runs nvidia-smi
    rows: list[FitRow] = []
    skipped: list[str] = []
    for model_id in model_ids:
        base = Deployment(model=model_id, hardware=hardware, allow_hub=False)
        if is_ollama_name(model_id):  # planned at the task's context, not its num_ctx
            base = base.with_settings(replace(base.settings, max_model_len=wanted))
        loaded = None
        for flags, d in _variants(base, gguf):
            try:
                resolved = resolve(d, loaded=loaded if d.gguf is None else None, gpu=gpu)
                loaded = loaded or resolved.loaded
                row = _row(model_id, flags, planned_at(resolved, d, wanted), resolved)
            except ServefitError as error:
                if not flags:
                    skipped.append(f"{model_id}: {str(error).splitlines()[0]}")
                continue  # a variant the model or GPU does not take (fp8 of an fp8 checkpoint)
            if row is not None:
                rows.append(row)
    rows.sort(key=lambda r: r.rank_key, reverse=True)
    return FitOutcome(gpu=gpu.name, task=task, rows=tuple(rows), skipped=tuple(skipped))


def planned_at(resolved: Resolved, d: Deployment, wanted: int) -> Deployment:
    """``d`` at the context asked, capped at the model's own maximum."""
    spec = resolved.loaded.spec
    context = min(wanted, spec.max_position_embeddings or wanted)
    return replace(d, settings=replace(d.settings, max_model_len=context))


def _row(
    model_id: str, flags: tuple[str, ...], planned: Deployment, resolved: Resolved
) -> FitRow | None:
    """One row: the plan's own capacity and verdict (``plan_deployment`` without the
    suggestions and recommendation a ranking does not need)."""
    spec, gpu = resolved.loaded.spec, resolved.gpu
    if flags[:1] == ("--quantization",) and (spec.quant.is_quantized or not has_fp8(gpu)):
        return None  # fp8 only where it is a choice the GPU computes
    if not flags:
        label = spec.quant.method if spec.quant.is_quantized else spec.dtype
    else:
        label = "fp8 on load" if flags[0] == "--quantization" else f"GGUF {flags[1]}"
    context = planned.settings.max_model_len or 0
    plan, _, verdict = judged(resolved, planned, with_suggestions=False)
    speed = None
    if verdict.fits and resolved.engine.name in ("vllm", "vllm-cpu"):
        m = model_coeffs(plan.model, kv_cache_dtype=plan.settings.kv_cache_dtype)
        step = step_time(m, decode_step(1, DECODE_CONTEXT_TOKENS), gpu, resolved.profile())
        speed = 1.0 / step.time_s
    return FitRow(
        model=model_id,
        weights=label,
        engine=resolved.engine.name,
        total_params=count_params(spec).total,
        fits=verdict.fits,
        context_tokens=context,
        largest_context_tokens=plan.largest_max_model_len,
        max_concurrency=plan.max_concurrency,
        weights_bytes_per_gpu=plan.memory.weights_bytes,
        decode_tok_per_s=speed,
        problem="" if verdict.fits else verdict.headline,
        argv=("--max-model-len", str(context), *flags),
    )
