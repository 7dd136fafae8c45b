"""``recommend --emit DIR``: the winning fleet's manifests, written through ``servefit
deploy``'s API (:mod:`servefit.app.deploy`): the winner re-planned as a deployment of its
GPU with its flags, its replicas (or its prefill and decode pools) in the spec."""

from __future__ import annotations

from pathlib import Path

from servefit.app.deploy import disaggregate, manifest_spec_from_plan, write_manifests
from servefit.app.deployment import Deployment, Hardware
from servefit.app.fleet_types import Candidate, FleetRequest
from servefit.app.plan import plan_deployment
from servefit.errors import InvalidArgumentError


def emit_manifests(
    request: FleetRequest, winner: Candidate, out_dir: Path, *, force: bool = False
) -> list[Path]:
    """Write the winner's manifests under ``out_dir``; the paths written."""
    if winner.serve_settings is None:
        raise InvalidArgumentError("the winning fleet carries no vLLM settings to deploy")
    d = Deployment(
        model=winner.model,
        hardware=Hardware(gpu=winner.gpu),
        settings=winner.serve_settings,
        workload=request.workload,
        allow_hub=request.allow_hub,
        extra_args=("--enable-expert-parallel",) if winner.expert_parallel else (),
    )
    outcome = plan_deployment(d, with_performance=False)
    spec = manifest_spec_from_plan(
        outcome,
        replicas=max(1, winner.replicas) if winner.mode == "aggregated" else 1,
        gpus_per_node=request.gpus_per_node,
    )
    if winner.mode == "disaggregated":
        spec = disaggregate(
            spec,
            prefill_replicas=winner.prefill_replicas,
            decode_replicas=winner.decode_replicas,
        )
    return write_manifests(spec, out_dir, force=force)
