"""The ``vllm serve`` command line that realises a plan: every flag the user set (so pasting
it launches the deployment that was planned), the layout, and ``--max-model-len``, which is
always worth pinning. Flags servefit does not model travel verbatim in ``extra_args``."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from servefit.core.engine import vllm_behaviour

if TYPE_CHECKING:
    from servefit.core.plan import CapacityPlan, ServeSettings


def vllm_serve_args(
    model_id: str,
    plan: CapacityPlan,
    asked: ServeSettings,
    *,
    extra_args: Sequence[str] = (),
    enable_expert_parallel: bool = False,
) -> list[str]:
    """Arguments of ``vllm serve`` for this plan; ``asked`` holds what the user set (a
    setting left to vLLM's default stays out, so the engine picks the same default)."""
    r = plan.settings
    args = ["vllm", "serve", model_id]
    if r.tensor_parallel_size > 1:
        args += ["--tensor-parallel-size", str(r.tensor_parallel_size)]
    if r.pipeline_parallel_size > 1:
        args += ["--pipeline-parallel-size", str(r.pipeline_parallel_size)]
    if r.data_parallel_size > 1:
        args += ["--data-parallel-size", str(r.data_parallel_size)]
    if enable_expert_parallel or asked.enable_expert_parallel:
        args += ["--enable-expert-parallel"]
    args += ["--max-model-len", str(r.max_model_len)]
    if asked.gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", f"{r.gpu_memory_utilization:g}"]
    if asked.max_num_seqs is not None:
        args += ["--max-num-seqs", str(r.max_num_seqs)]
    if asked.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(r.max_num_batched_tokens)]
    if asked.dtype != "auto":
        args += ["--dtype", asked.dtype]
    if asked.quantization:
        args += ["--quantization", asked.quantization]
    if r.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", r.kv_cache_dtype]
    if asked.kv_cache_memory_bytes is not None:
        args += ["--kv-cache-memory-bytes", str(asked.kv_cache_memory_bytes)]
    if asked.block_size is not None:
        args += ["--block-size", str(asked.block_size)]
    if asked.mamba_ssm_cache_dtype != "auto":
        args += ["--mamba-ssm-cache-dtype", asked.mamba_ssm_cache_dtype]
    # the user's --[no-]enable-prefix-caching as given (vLLM's default differs by model:
    # off for attention-free ones, plan_settings.default_prefix_caching); off is always
    # spelled out
    # spelled out. The V0 engine (before 0.8) takes --enable-prefix-caching alone (a
    # store_true flag, off by default) and --enable-chunked-prefill=BOOL (StoreBoolean)
    is_v0 = vllm_behaviour(r.vllm_version).is_v0_engine
    if is_v0:
        if r.enable_prefix_caching:
            args += ["--enable-prefix-caching"]
    elif asked.enable_prefix_caching is not None or not r.enable_prefix_caching:
        on = r.enable_prefix_caching
        args += ["--enable-prefix-caching" if on else "--no-enable-prefix-caching"]
    if asked.enable_chunked_prefill is not None:
        on = asked.enable_chunked_prefill
        if is_v0:
            args += [f"--enable-chunked-prefill={on}"]
        else:
            args += ["--enable-chunked-prefill" if on else "--no-enable-chunked-prefill"]
    if r.enforce_eager:
        args += ["--enforce-eager"]
    if asked.lora is not None:
        args += ["--enable-lora"]
        if asked.lora.max_loras != 1:
            args += ["--max-loras", str(asked.lora.max_loras)]
        if asked.lora.max_lora_rank != 16:
            args += ["--max-lora-rank", str(asked.lora.max_lora_rank)]
    if asked.speculative is not None:  # as the user wrote it (vLLM parses the JSON)
        args += ["--speculative-config", asked.speculative.given_json]
    return [*args, *extra_args]


def vllm_serve_command(
    model_id: str,
    plan: CapacityPlan,
    asked: ServeSettings,
    *,
    extra_args: Sequence[str] = (),
) -> str:
    return shlex.join(vllm_serve_args(model_id, plan, asked, extra_args=extra_args))
