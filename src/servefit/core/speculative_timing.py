"""The step timer under speculative decoding (:mod:`servefit.core.speculative` holds the
rules; docs/speculative.md a worked example)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from servefit.core.hardware import GpuSpec
from servefit.core.op_coeffs import ModelCoeffs, model_coeffs
from servefit.core.op_cost import StepShape
from servefit.core.roofline import EfficiencyProfile, StepTime
from servefit.core.speculative import Speculation, SpeculativeConfig
from servefit.core.step_timer import make_timer


@lru_cache(maxsize=16)
def speculative_timer(
    m: ModelCoeffs,
    gpu: GpuSpec,
    profile: EfficiencyProfile,
    speculation: Speculation,
    kv_cache_dtype: str = "auto",
):
    """The step timer under speculative decoding, in steps of one token per decoding
    request (the simulation's unit).

    A real step verifies ``k + 1`` tokens per decoding request in one pass of the target
    (``StepShape.decode_query_tokens``: every position sampled; an SGLang tree verifies its
    ``num_draft_tokens``) after ``k`` draft passes over the decoding requests (over each of
    an SGLang tree's ``topk`` branches; the drafter also reads the step's prompt chunks
    once), and yields ``E`` tokens per request on average
    (:meth:`Acceptance.expected_tokens_per_step`). Its decode share is spread over those
    ``E`` tokens: a step of the simulation takes ``prefill + (real - prefill) / E``, where
    ``prefill`` is the step's prompt chunks timed alone (0 for a decode-only step)."""
    base = make_timer(m, gpu, profile)
    k = speculation.k
    verified = speculation.config.verify_tokens
    branches = speculation.config.eagle_topk
    expected = speculation.expected_tokens_per_step
    draft = None
    if speculation.draft is not None:
        # the drafter's passes run inside the engine's step: the scheduling and per-request
        # bookkeeping are paid once, by the target's pass; each draft pass pays the profile's
        # draft_pass_overhead_s (vLLM's EagleProposer.propose prepares and samples between
        # graph replays; SGLang replays all its draft steps as one CUDA graph)
        per_pass = profile.draft_pass_overhead_s
        draft = make_timer(
            model_coeffs(speculation.draft, tp=m.tp, pp=1, kv_cache_dtype=kv_cache_dtype),
            gpu,
            profile
            if per_pass is None
            else replace(profile, step_overhead_s=per_pass, per_seq_overhead_s=0.0),
        )

    def timer(shape: StepShape) -> StepTime:
        decodes = shape.decode_contexts
        if not decodes:
            st = base(shape)
            if draft is None or not shape.prefill_chunks:
                return st
            return _sum_steps(st, draft(shape), 1.0)
        chunks = shape.prefill_chunks
        verify = replace(shape, decode_query_tokens=verified)
        real = base(verify)
        drafted = StepShape(decode_contexts=decodes * branches)
        if draft is not None:
            real = _sum_steps(real, draft(drafted), float(k))
            if chunks:
                real = _sum_steps(real, draft(StepShape(prefill_chunks=chunks)), 1.0)
        share = 0.0  # of the real step, the prompt chunks' part
        if chunks:
            # split as the simulation splits a mixed step: by the parts' stand-alone times
            alone = StepShape(
                prefill_chunks=chunks, num_finishing_prefills=shape.num_finishing_prefills
            )
            verify_alone = StepShape(decode_contexts=decodes, decode_query_tokens=verified)
            part_p = base(alone).time_s
            part_d = base(verify_alone).time_s
            if draft is not None:
                part_p += draft(alone).time_s
                part_d += k * draft(drafted).time_s
            share = part_p / (part_p + part_d) if part_p + part_d > 0 else 0.0
        scale = share + (1.0 - share) / expected
        return StepTime(
            time_s=real.time_s * scale,
            compute_s=real.compute_s * scale,
            memory_s=real.memory_s * scale,
            comm_s=real.comm_s * scale,
            overhead_s=real.overhead_s * scale,
        )

    return lru_cache(maxsize=8192)(timer)


def _at_depth(config: SpeculativeConfig, k: int) -> SpeculativeConfig:
    """The config drafting ``k`` tokens deep: a chain verifies ``k + 1`` (an SGLang tree
    keeps its verified tokens)."""
    chain = config.eagle_topk == 1
    return replace(
        config,
        num_speculative_tokens=k,
        num_draft_tokens=None if chain else config.num_draft_tokens,
    )


def _sum_steps(a: StepTime, b: StepTime, times: float) -> StepTime:
    return StepTime(
        time_s=a.time_s + times * b.time_s,
        compute_s=a.compute_s + times * b.compute_s,
        memory_s=a.memory_s + times * b.memory_s,
        comm_s=a.comm_s + times * b.comm_s,
        overhead_s=a.overhead_s + times * b.overhead_s,
    )


def step_timer(
    m: ModelCoeffs,
    gpu: GpuSpec,
    profile: EfficiencyProfile,
    speculation: Speculation | None,
    kv_cache_dtype: str = "auto",
):
    """The timer a plan's simulations use: speculative when the deployment speculates."""
    if speculation is None:
        return make_timer(m, gpu, profile)
    return speculative_timer(m, gpu, profile, speculation, kv_cache_dtype)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculationGain:
    """What speculation buys this workload: the same plan timed without it (the same KV
    cache), and the ``k`` that is fastest at batch 1 and at the load's mean batch."""

    k: int
    expected_tokens_per_step: float
    tpot_batch1_without_s: float
    tpot_without_s: float  # under the workload's load
    output_throughput_without_tok_per_s: float
    tpot_batch1_by_k_s: tuple[tuple[int, float], ...]  # k = 1 .. max(k, MAX_K_TRIED)
    best_k_batch1: int
    best_k_at_load: int
    mean_batch: float  # the load's mean batch, where best_k_at_load is judged


MAX_K_TRIED = 6  # the drafts a step tries when choosing k (vLLM's examples go up to 7)


def speculation_gain(
    m: ModelCoeffs,
    gpu: GpuSpec,
    profile: EfficiencyProfile,
    speculation: Speculation,
    kv_cache_dtype: str,
    *,
    context: int,
    mean_batch: float,
    without: tuple[float, float, float],
) -> SpeculationGain:
    """``without``: TPOT at batch 1, TPOT and output throughput under the load, all timed
    without speculation."""

    def tpot(k: int, batch: int) -> float:
        at_k = Speculation(
            config=_at_depth(speculation.config, k),
            acceptance=speculation.acceptance,
            draft=speculation.draft,
        )
        timer = speculative_timer(m, gpu, profile, at_k, kv_cache_dtype)
        return timer(StepShape(decode_contexts=(context,) * batch)).time_s

    ks = range(1, max(speculation.k, MAX_K_TRIED) + 1)
    by_k = tuple((k, tpot(k, 1)) for k in ks)
    batch = max(1, round(mean_batch))
    return SpeculationGain(
        k=speculation.k,
        expected_tokens_per_step=speculation.expected_tokens_per_step,
        tpot_batch1_without_s=without[0],
        tpot_without_s=without[1],
        output_throughput_without_tok_per_s=without[2],
        tpot_batch1_by_k_s=by_k,
        best_k_batch1=min(by_k, key=lambda item: item[1])[0],
        best_k_at_load=min(ks, key=lambda k: tpot(k, batch)),
        mean_batch=mean_batch,
    )
