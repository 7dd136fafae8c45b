"""The application layer: one :class:`Deployment` and the use cases over it. This is the
Python API; the CLI (and any other surface) only parses, calls these and renders.

::

    from servefit.app import Deployment, Hardware, default_workload, plan_deployment

    d = Deployment(
        model="Qwen/Qwen3.6-27B-FP8",
        hardware=Hardware(gpu="A40"),
        settings=ServeSettings(max_model_len=32768, max_num_seqs=128),
        workload=default_workload(input_len=1024, output_len=64, concurrency=8,
                                  request_rate_per_s=None),
        is_workload_given=True,
    )
    outcome = plan_deployment(d)
    outcome.fits, outcome.verdict.reasons, outcome.vllm_command, outcome.recommendation

=================================  ================================================
use case                           module
=================================  ================================================
plan (verdict, recommendation)     :mod:`servefit.app.plan`
compare models x GPUs              :mod:`servefit.app.compare`
cost                               :mod:`servefit.app.cost`
report                             :mod:`servefit.app.report`
scaling (TP x PP x DP layouts)     :mod:`servefit.app.scaling`
bench --plan-model                 :mod:`servefit.app.bench`
up (detect, plan, gate, launch)    :mod:`servefit.app.up`
check-log                          :mod:`servefit.app.check_log`
deploy (manifests of a plan)       :mod:`servefit.app.deploy`
recommend (a fleet under SLOs)     :mod:`servefit.app.fleet`
run history                        :mod:`servefit.app.history`
=================================  ================================================
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Deployment": "servefit.app.deployment",
    "Hardware": "servefit.app.deployment",
    "CapacityTarget": "servefit.app.deployment",
    "default_workload": "servefit.app.deployment",
    "Verdict": "servefit.app.verdict",
    "Recommendation": "servefit.app.recommend",
    "PlanOutcome": "servefit.app.plan",
    "plan_deployment": "servefit.app.plan",
    "compare_deployments": "servefit.app.compare",
    "CostRequest": "servefit.app.cost",
    "estimate_deployment_cost": "servefit.app.cost",
    "ReportRequest": "servefit.app.report",
    "report_deployment": "servefit.app.report",
    "ScalingRequest": "servefit.app.scaling",
    "plan_deployment_scaling": "servefit.app.scaling",
    "UpRequest": "servefit.app.up",
    "run_up": "servefit.app.up",
    "check_startup_log": "servefit.app.check_log",
    "ManifestSpec": "servefit.app.deploy",
    "manifest_spec_from_plan": "servefit.app.deploy",
    "write_manifests": "servefit.app.deploy",
    "FleetRequest": "servefit.app.fleet_types",
    "recommend_fleet": "servefit.app.fleet",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'servefit.app' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
