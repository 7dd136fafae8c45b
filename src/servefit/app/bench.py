"""What ``plan`` predicts for a benchmark's own workload (``bench --plan-model``), so the
measured run prints next to the prediction of the same deployment."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servefit.app.deployment import Deployment, Hardware, default_workload, longest_request_tokens
from servefit.app.plan import plan_deployment
from servefit.core.plan import ServeSettings
from servefit.errors import InvalidArgumentError

if TYPE_CHECKING:
    from servefit.bench.config import BenchConfig


def bench_deployment(model: str, gpu_name: str, tp: int, cfg: BenchConfig) -> Deployment:
    w, sched = cfg.workload, cfg.schedule
    if w.kind == "agent":
        workload = default_workload(
            input_len=w.system_prompt_len + w.message_len,
            output_len=w.output_len,
            concurrency=sched.concurrency,
            request_rate_per_s=sched.rate_per_s,
            prefix_len=w.system_prompt_len,
            turns=w.turns,
        )
    else:
        workload = default_workload(
            input_len=w.input_len,
            output_len=w.output_len,
            concurrency=sched.concurrency,
            request_rate_per_s=sched.rate_per_s,
            prefix_len=w.prefix_len if w.kind == "shared-prefix" else 0,
        )
    return Deployment(
        model=model,
        hardware=Hardware(gpu=gpu_name),
        # the server's own max-model-len is unknown: the workload's longest request
        settings=ServeSettings(
            tensor_parallel_size=tp, max_model_len=longest_request_tokens(workload)
        ),
        workload=workload,
        is_workload_given=True,
    )


def predict_bench(model: str, gpu_name: str | None, tp: int, cfg: BenchConfig) -> dict[str, Any]:
    """What ``servefit plan`` predicts for the benchmark's workload on the server's GPU."""
    if gpu_name is None:
        raise InvalidArgumentError("--plan-model needs --gpu (the server's GPU)")
    d = bench_deployment(model, gpu_name, tp, cfg)
    outcome = plan_deployment(d)
    plan, perf, v = outcome.capacity, outcome.performance, outcome.verdict
    return {
        "model": outcome.resolved.model_id,
        "gpu": outcome.resolved.gpu.name,
        "tensor_parallel_size": tp,
        "context_tokens": v.workload_tokens,
        "kv_cache_memory_bytes": plan.memory.kv_cache_bytes,
        "kv_cache_tokens": plan.kv_cache_tokens,
        "max_concurrent_requests_at_context": v.workload_requests_held,
        "target_concurrency": d.workload.concurrency,
        "fits_target": v.fits,
        "ttft_s": perf.ttft_s if perf else None,
        "tpot_s": perf.tpot_s if perf else None,
        "output_throughput_tok_per_s": perf.output_throughput_tok_per_s if perf else None,
        "bound": perf.bound.value if perf else None,
        "note": outcome.performance_note if perf is None else "predicted by servefit plan",
    }
