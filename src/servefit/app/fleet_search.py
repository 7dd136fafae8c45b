"""The search space of ``servefit recommend`` for one model on one GPU type, and the cheap
stages that prune it before any simulation.

An *option* is one way to run a replica: GPUs per replica (TP x PP, + EP for MoE), the
weight format (the checkpoint's, or vLLM's online ``--quantization fp8`` of a 16-bit
checkpoint on GPUs with FP8 tensor cores) and the KV-cache dtype (auto, or fp8 on the
same GPUs). Each option goes through, cheapest first:

1. the capacity plan (:func:`servefit.core.plan.plan_capacity`): dropped when vLLM would
   refuse the layout, the engine does not start, or the cache cannot hold one request of
   the workload's longest length;
2. the single-request latencies from the roofline: dropped when one request alone misses
   the TTFT limit (a cold prefill) or the TPOT limit (a batch-1 decode step);
3. ``--max-num-seqs`` chosen: the most requests whose KV the cache holds at the workload's
   length, within the largest decode batch whose step meets the TPOT limit;
4. an upper bound on the requests/s one replica can take (the GPU time one request costs
   when decodes batch to ``max-num-seqs`` and prompts run in full chunks, with a 1.5x
   allowance for the weight reads mixed steps share), which bounds the fleet's cost from
   below: the search simulates options in the order of that bound and stops when the bound
   passes the costs already found.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

from servefit.core import drafter
from servefit.core.fleet import decode_batch_limit
from servefit.core.hardware import GpuSpec
from servefit.core.model_spec import ModelSpec
from servefit.core.ops import ModelCoeffs, decode_step, model_coeffs, prefill_step
from servefit.core.perf import blocks_counter, prefill_time_s
from servefit.core.plan import CapacityPlan, ServeSettings, plan_capacity
from servefit.core.roofline import EfficiencyProfile, step_time
from servefit.core.scaling import candidate_layouts
from servefit.core.speculative import Acceptance, Speculation, SpeculativeConfig
from servefit.core.speculative_timing import speculative_timer
from servefit.core.workload import Workload
from servefit.errors import ServefitError

# FP8 tensor cores (Ada, Hopper, Blackwell): where vLLM's online fp8 weights and an fp8 KV
# cache pay (below 8.9 vLLM runs FP8 weights as W8A16 through Marlin: memory, not speed).
# Source: NVIDIA's CUDA GPUs compute-capability list; vLLM's quantization hardware table.
FP8_NATIVE_MIN_CC = (8, 9)
# Mixed steps read the weights once for a prefill chunk and the decodes riding along, so a
# request costs less GPU time than its prefill and decode apart: the bound allows for it.
MIXED_STEP_ALLOWANCE = 1.5


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """One way to run a replica on one GPU type."""

    gpu: GpuSpec
    tp: int
    pp: int
    ep: bool
    quantization: str | None  # None: the checkpoint's weights
    kv_cache_dtype: str
    speculative: SpeculativeConfig | None = None  # recommend --speculative-config, tried

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def layout(self) -> str:
        text = f"TP{self.tp}" + (f"xPP{self.pp}" if self.pp > 1 else "")
        text += "+EP" if self.ep else ""
        sc = self.speculative
        return text + (f"+{sc.method.value}(k={sc.k})" if sc is not None else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Screened:
    """An option that starts and can meet the SLO at some load: its plan (with the chosen
    ``--max-num-seqs``), its step model and its bounds."""

    option: Option
    settings: ServeSettings  # what the command pins
    plan: CapacityPlan
    coeffs: ModelCoeffs
    profile: EfficiencyProfile
    ttft_alone_s: float
    tpot_alone_s: float
    kv_concurrency: int  # requests of the workload's length the cache holds
    decode_batch: int  # the largest decode batch within the TPOT limit (KV, max-num-seqs)
    rate_upper_per_s: float  # requests/s one replica cannot exceed
    prefill_tok_per_s: float  # full-chunk prefill rate (for disaggregated prefill pools)
    decode_rate_per_s: float  # requests/s decoding alone at decode_batch (decode pools)
    decode_batch_s: float  # one decode step at decode_batch
    speculation: Speculation | None = None  # the option speculates: how its steps are timed


@dataclass(frozen=True, slots=True, kw_only=True)
class Dropped:
    """An option pruned before simulation, and why."""

    option: Option
    stage: str  # "capacity" or "latency"
    reason: str
    ratio: float = math.inf  # for latency drops: the single request over the SLO


def has_fp8(gpu: GpuSpec) -> bool:
    cc = gpu.compute_capability_tuple
    return gpu.vendor == "nvidia" and cc is not None and cc >= FP8_NATIVE_MIN_CC


def options_for(
    spec: ModelSpec,
    gpu: GpuSpec,
    *,
    max_gpus_per_replica: int,
    gpus_per_node: int,
    allow_fp8: bool = True,
    speculative: SpeculativeConfig | None = None,
) -> Iterator[Option]:
    """TP in powers of two within a node, PP across nodes when TP fills one (x EP for a
    MoE), x weight format x KV dtype (``allow_fp8=False``: the checkpoint's and auto only),
    x with and without ``speculative``."""
    drafts: list[SpeculativeConfig | None] = [None] if speculative is None else [None, speculative]
    quants: list[str | None] = [None]
    kvs = ["auto"]
    if allow_fp8 and has_fp8(gpu):
        if not spec.quant.is_quantized and spec.dtype in ("bfloat16", "float16", "float32"):
            quants.append("fp8")
        kvs.append("fp8")
    size = 1
    while size <= max_gpus_per_replica:
        for layout in candidate_layouts(size, gpus_per_node, is_moe=spec.is_moe):
            if layout.dp != 1:
                continue
            for quant in quants:
                for kv in kvs:
                    for draft in drafts:
                        yield Option(
                            gpu=gpu,
                            tp=layout.tp,
                            pp=layout.pp,
                            ep=layout.ep,
                            quantization=quant,
                            kv_cache_dtype=kv,
                            speculative=draft,
                        )
        size *= 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    """What the screen needs of the workload: the lengths, and what one request computes."""

    input_len: int
    output_len: int
    longest_tokens: int  # the longest request (or session's last turn), prompt + output
    new_prompt_tokens: int  # prompt tokens one request computes (a cached prefix is free)
    max_model_len: int

    @classmethod
    def of(cls, w: Workload, longest_tokens: int) -> Shape:
        cached = w.prefix_len if w.prefix_len else 0
        # the performance model's own bound on a request (it rounds the sum, not each part)
        spread = int((w.input_len.mean + w.output_len.mean) * (1 + w.input_len.range_ratio))
        return cls(
            input_len=w.input_len.mean,
            output_len=w.output_len.mean,
            longest_tokens=longest_tokens,
            new_prompt_tokens=max(1, w.input_len.mean - cached),
            max_model_len=max(longest_tokens, spread),
        )


def screen(
    spec: ModelSpec,
    option: Option,
    shape: Shape,
    profile: EfficiencyProfile,
    *,
    ttft_limit_s: float | None,
    tpot_limit_s: float | None,
    vllm_version: str,
    mamba_ssm_dtype: str | None = None,
    acceptance: Acceptance | None = None,
) -> Screened | Dropped:
    """Stages 1-4 of the module docstring for one option (``acceptance``: of its drafts,
    when it speculates)."""
    settings = ServeSettings(
        tensor_parallel_size=option.tp,
        pipeline_parallel_size=option.pp,
        max_model_len=shape.max_model_len,
        quantization=option.quantization,
        kv_cache_dtype=option.kv_cache_dtype,
        vllm_version=vllm_version,
        speculative=option.speculative,
        enable_expert_parallel=option.ep,
    )
    plan = _plan(spec, option, settings, mamba_ssm_dtype)
    if isinstance(plan, Dropped):
        return plan
    per_request = blocks_counter(plan)(shape.input_len + shape.output_len)
    kv_fit = plan.num_blocks // per_request if per_request else plan.settings.max_num_seqs
    m = model_coeffs(
        plan.model,
        tp=option.tp,
        pp=option.pp,
        ep=option.tp if option.ep else 1,
        kv_cache_dtype=plan.settings.kv_cache_dtype,
    )
    chunk = plan.settings.max_num_batched_tokens
    ttft = prefill_time_s(m, option.gpu, profile, shape.input_len, 0, chunk)
    ttft += profile.request_overhead_s
    mid = shape.input_len + shape.output_len // 2

    speculation = None
    if option.speculative is not None:  # the drafter runs on the GPU only for MTP here
        speculation = Speculation(
            config=option.speculative,
            acceptance=acceptance or Acceptance(per_position=(0.0,), source="none given"),
            draft=drafter.timing_spec(plan.model, option.speculative, None),
        )
        timer = speculative_timer(m, option.gpu, profile, speculation, option.kv_cache_dtype)

    def decode_s(batch: int) -> float:
        if speculation is not None:
            return timer(decode_step(batch, mid)).time_s
        return step_time(m, decode_step(batch, mid), option.gpu, profile).time_s

    tpot = decode_s(1)
    ratio = max(
        ttft / ttft_limit_s if ttft_limit_s else 0.0, tpot / tpot_limit_s if tpot_limit_s else 0.0
    )
    if ratio > 1.0:
        which = "TTFT" if ttft_limit_s and ttft / ttft_limit_s >= ratio else "TPOT"
        alone = ttft if which == "TTFT" else tpot
        return Dropped(
            option=option,
            stage="latency",
            reason=f"one request alone: {which} {alone * 1e3:,.1f} ms",
            ratio=ratio,
        )
    most = max(1, min(plan.settings.max_num_seqs, kv_fit))
    batch = most
    if tpot_limit_s:
        batch = decode_batch_limit(decode_s, tpot_limit_s=tpot_limit_s, most=most)
    if batch != plan.settings.max_num_seqs:
        settings = replace(settings, max_num_seqs=batch)
        replanned = _plan(spec, option, settings, mamba_ssm_dtype)
        if isinstance(replanned, Dropped):
            return replanned
        plan = replanned
    chunk_s = step_time(m, prefill_step(chunk), option.gpu, profile).time_s
    prefill_s_per_token = chunk_s / chunk
    gpu_s_per_request = (
        shape.output_len * decode_s(batch) / batch + shape.new_prompt_tokens * prefill_s_per_token
    )
    return Screened(
        option=option,
        settings=settings,
        plan=plan,
        coeffs=m,
        profile=profile,
        ttft_alone_s=ttft,
        tpot_alone_s=tpot,
        kv_concurrency=kv_fit,
        decode_batch=batch,
        rate_upper_per_s=MIXED_STEP_ALLOWANCE / gpu_s_per_request,
        prefill_tok_per_s=1.0 / prefill_s_per_token,
        decode_rate_per_s=batch / (shape.output_len * decode_s(batch)),
        decode_batch_s=decode_s(batch),
        speculation=speculation,
    )


def _plan(
    spec: ModelSpec, option: Option, settings: ServeSettings, mamba_ssm_dtype: str | None
) -> CapacityPlan | Dropped:
    try:
        plan = plan_capacity(
            spec, option.gpu, settings, mamba_ssm_dtype=mamba_ssm_dtype, with_suggestions=False
        )
    except ServefitError as error:
        return Dropped(option=option, stage="capacity", reason=str(error))
    if not plan.starts:
        return Dropped(option=option, stage="capacity", reason=plan.problems[0])
    if blocks_counter(plan)(settings.max_model_len or 1) > plan.num_blocks:
        return Dropped(
            option=option,
            stage="capacity",
            reason=f"the KV cache cannot hold one request of {settings.max_model_len:,} tokens",
        )
    return plan
