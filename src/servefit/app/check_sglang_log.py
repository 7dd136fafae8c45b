"""``check-log`` of an SGLang server's start-up log: its weights, its KV pool and its running
cap held against servefit's SGLang plan of the same deployment.

The pool is compared twice, as vLLM's KV lines are: end to end, and given the memory the log
prints (free before and after loading, :func:`servefit.core.engines.sglang.pool_tokens`),
so a miss in servefit's loading estimate shows apart from one in the pool's arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from servefit.adapters.sglang_log import ROUNDING_BYTES, SglangLog
from servefit.app.check_log import CheckLogOutcome, Comparison, merge_settings
from servefit.app.deployment import Deployment
from servefit.app.plan import plan_deployment
from servefit.core.engines.sglang import pool_tokens
from servefit.core.engines.sglang_spec import draft_pool_tokens, sglang_speculative_config
from servefit.errors import InvalidArgumentError

# ServerArgs field -> ServeSettings field (sglang/srt/server_args.py names)
_SETTING_OF_ARG = {
    "tp_size": "tensor_parallel_size",
    "pp_size": "pipeline_parallel_size",
    "mem_fraction_static": "gpu_memory_utilization",
    "context_length": "max_model_len",
    "chunked_prefill_size": "max_num_batched_tokens",
    "max_running_requests": "max_num_seqs",
    "kv_cache_dtype": "kv_cache_dtype",
    "dtype": "dtype",
    "quantization": "quantization",
}
_KV_DTYPES = {"fp8_e4m3": "fp8", "fp8_e5m2": "fp8_e5m2", "auto": "auto", "bf16": "bfloat16"}


_INT_ARGS = frozenset(
    {"tp_size", "pp_size", "context_length", "chunked_prefill_size", "max_running_requests"}
)


def settings_from_server_args(args: dict[str, Any]) -> dict[str, Any]:
    """The ServeSettings fields an SGLang ``ServerArgs`` line states (None values left out);
    a value of the wrong type is a clear error naming it."""
    out: dict[str, Any] = {}
    for arg, setting in _SETTING_OF_ARG.items():
        value = args.get(arg)
        if value is None:
            continue
        if arg in _INT_ARGS:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif arg == "mem_fraction_static":
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        else:
            ok = isinstance(value, str)
        if not ok:
            raise InvalidArgumentError(
                f"the log's server_args {arg}={value!r} is not a value SGLang takes there"
            )
        if arg == "kv_cache_dtype":
            value = _KV_DTYPES.get(value, value)
        out[setting] = value
    dp = args.get("dp_size")
    if isinstance(dp, int) and not isinstance(dp, bool) and dp > 1:
        tp = out.get("tensor_parallel_size", 1)
        if args.get("enable_dp_attention") is True and tp % dp == 0:
            # attention ranks within the --tp-size GPUs (planned as DP x EP)
            out |= {
                "tensor_parallel_size": tp // dp,
                "data_parallel_size": dp,
                "enable_expert_parallel": True,
                "sglang_dp_attention": True,
            }
        else:
            out["data_parallel_size"] = dp
    algorithm = args.get("speculative_algorithm")
    if algorithm is not None:
        counts = {}
        for arg in (
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
        ):
            value = args.get(arg)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise InvalidArgumentError(
                    f"the log's server_args {arg}={value!r} is not a value SGLang takes there"
                )
            counts[arg] = value
        draft = args.get("speculative_draft_model_path")
        out["speculative"] = sglang_speculative_config(
            str(algorithm),
            draft_model_path=draft if isinstance(draft, str) else None,
            num_steps=counts["speculative_num_steps"],
            eagle_topk=counts["speculative_eagle_topk"],
            num_draft_tokens=counts["speculative_num_draft_tokens"],
        )
    return out


def check_sglang_log(
    lines: Iterable[str],
    d: Deployment,
    *,
    given_settings: Iterable[str] = (),
    model_given: bool = True,
) -> CheckLogOutcome:
    """Plan the SGLang deployment the log describes (its ServerArgs, then the user's flags)
    and compare the weights, the pool's tokens and the running cap."""
    log = SglangLog.read(lines)
    if log.kv_cache_tokens is None:
        raise InvalidArgumentError(
            "this SGLang log has no pool size: neither 'KV Cache is allocated. #tokens' nor "
            "'max_total_num_tokens=' is in it"
        )
    model = d.model
    if not model_given:
        if not log.model:
            raise InvalidArgumentError("the log does not name the model: pass MODEL")
        model = log.model
    if d.engine is not None and d.engine != "sglang":
        raise InvalidArgumentError(f"an SGLang log is planned on SGLang, not {d.engine}")
    settings = merge_settings(
        d.settings, settings_from_server_args(log.server_args), given_settings
    )
    d = replace(d, model=model, settings=settings, engine="sglang")
    outcome = plan_deployment(d, with_performance=False)
    plan = outcome.capacity
    notes = []
    if not log.server_args:
        notes.append(
            "the log has no server_args line: the flags are the command line's and SGLang's "
            "defaults (give --mem-fraction-static and --sglang-version where they differ)"
        )
    comparisons = []
    if log.weights_bytes is not None:
        comparisons.append(
            Comparison(
                quantity="weights_bytes",
                logged=log.weights_bytes.value,
                predicted=float(plan.memory.weights_bytes),
                predicted_given_logged_kv_memory=None,
                line=log.weights_bytes.line,
                rounding=2 * ROUNDING_BYTES,
            )
        )
    before, after = log.free_before_load_bytes, log.free_after_load_bytes
    given = None
    if before is not None and after is not None and not plan.state_bytes_per_sequence:
        loaded = before.value - after.value
        fraction = plan.settings.gpu_memory_utilization
        given = float(pool_tokens(before.value, loaded, fraction, plan.kv_bytes_per_token))
        sc = plan.settings.speculative
        if sc is not None:  # the pool's headroom for the drafts of every running request
            given += draft_pool_tokens(sc, plan.settings.max_num_seqs)
    per_token = plan.kv_bytes_per_token or 1
    comparisons.append(
        Comparison(
            quantity="kv_cache_tokens",
            logged=log.kv_cache_tokens.value,
            predicted=float(plan.kv_cache_tokens),
            predicted_given_logged_kv_memory=given,
            line=log.kv_cache_tokens.line,
            rounding=2 * ROUNDING_BYTES / per_token,
        )
    )
    running = log.scheduler.get("max_running_requests")
    if running is not None:
        comparisons.append(
            Comparison(
                quantity="max_running_requests",
                logged=running.value,
                predicted=float(plan.settings.max_num_seqs),
                predicted_given_logged_kv_memory=None,
                line=running.line,
                rounding=1.0,  # releases before 0.4.6 print the cap + 1 (the padding slot)
            )
        )
    return CheckLogOutcome(
        log=log,
        outcome=outcome,
        plan_given_kv=None,
        comparisons=tuple(comparisons),
        refusals=(),
        notes=tuple(notes),
    )
