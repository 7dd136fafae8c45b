"""servefit: will this LLM workload fit this serving system, and how fast will it run?

The public API (imported on first use, so ``servefit --version`` stays instant). A whole
deployment, judged as the CLI judges it::

    from servefit import Deployment, Hardware, ServeSettings, default_workload, plan_deployment

    outcome = plan_deployment(Deployment(
        model="Qwen/Qwen3.6-27B-FP8", hardware=Hardware(gpu="A40"),
        settings=ServeSettings(max_model_len=32768, max_num_seqs=128),
        workload=default_workload(input_len=1024, output_len=64, concurrency=8,
                                  request_rate_per_s=None),
        is_workload_given=True))
    outcome.fits, outcome.verdict.reasons, outcome.vllm_command

The core underneath, one step at a time::

    from servefit import load_model, gpu_catalog, plan_capacity, ServeSettings
    from servefit import plan_performance, fixed_workload, efficiency_table

    loaded = load_model("meta-llama/Llama-3.1-8B")
    gpu = gpu_catalog().get("H100")
    plan = plan_capacity(loaded.spec, gpu, ServeSettings(max_model_len=8192))
    perf = plan_performance(plan, fixed_workload(1024, 256, concurrency=8),
                            efficiency_table().for_gpu(gpu))
    perf.ttft_s, perf.tpot_s, perf.output_throughput_tok_per_s, perf.bound
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    # the application layer: one deployment, one verdict (what every command calls)
    "Deployment": "servefit.app.deployment",
    "Hardware": "servefit.app.deployment",
    "CapacityTarget": "servefit.app.deployment",
    "default_workload": "servefit.app.deployment",
    "plan_deployment": "servefit.app.plan",
    "compare_deployments": "servefit.app.compare",
    "estimate_deployment_cost": "servefit.app.cost",
    "report_deployment": "servefit.app.report",
    # the core and adapters underneath
    "ServefitError": "servefit.errors",
    "ModelSpec": "servefit.core.model_spec",
    "spec_from_hf_config": "servefit.core.hf_config",
    "GpuSpec": "servefit.core.hardware",
    "ServeSettings": "servefit.core.plan",
    "CapacityPlan": "servefit.core.plan",
    "plan_capacity": "servefit.core.plan",
    "Workload": "servefit.core.workload",
    "LengthDist": "servefit.core.workload",
    "Slo": "servefit.core.workload",
    "PerformancePlan": "servefit.core.perf",
    "plan_performance": "servefit.core.perf",
    "fixed_workload": "servefit.core.workload",
    "CostInputs": "servefit.core.cost",
    "estimate_cost": "servefit.core.cost",
    "diagnose": "servefit.core.diagnosis",
    "load_model": "servefit.adapters.model_source",
    "gpu_catalog": "servefit.adapters.catalog",
    "efficiency_table": "servefit.adapters.catalog",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'servefit' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
