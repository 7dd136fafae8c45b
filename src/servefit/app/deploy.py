"""``servefit deploy``: the manifests that run a plan on the engines people already use —
the ``vllm serve`` command, a docker compose file, Kubernetes manifests (a Deployment and a
Service; a LeaderWorkerSet with Ray for a replica spanning nodes; two deployments for
disaggregated prefill/decode) and the Ray commands for bare metal.

servefit writes their configuration; Kubernetes, Ray and vLLM's data parallelism do the
scaling. The API (stable; ``servefit recommend`` calls it)::

    from servefit.app.deploy import manifest_spec_from_plan, write_manifests

    outcome = plan_deployment(d)
    spec = manifest_spec_from_plan(outcome, replicas=2, gpus_per_node=8)
    paths = write_manifests(spec, Path("deploy/"))

:func:`disaggregate` turns a spec into a prefill/decode pair with a KV-transfer connector.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from servefit.adapters.manifest_spec import (
    DEFAULT_HF_TOKEN_SECRET,
    DEFAULT_PORT,
    ManifestSpec,
    RoleSpec,
    flag_value,
    image_for,
)
from servefit.adapters.redact import write_text
from servefit.app.deployment import Deployment
from servefit.app.plan import PlanOutcome
from servefit.core.load_time import LoadTimeEstimate, estimate_load_time
from servefit.errors import InvalidArgumentError

if TYPE_CHECKING:  # the scaling search (and its simulator) is imported only when asked for
    from servefit.app.scaling import ScalingRequest

__all__ = [
    "ManifestSpec",
    "RoleSpec",
    "disaggregate",
    "load_time_of",
    "manifest_spec_from_plan",
    "plan_best_layout",
    "write_manifests",
]

DEFAULT_GPUS_PER_NODE = 8
DEFAULT_CONNECTOR = "NixlConnector"  # vLLM's NIXL KV connector (GPU-to-GPU over UCX/RDMA)


def load_time_of(outcome: PlanOutcome) -> LoadTimeEstimate:
    """The predicted start of one replica of the plan: the checkpoint's size (the
    safetensors index when known, else the planned weights) and whether it compiles."""
    loaded = outcome.resolved.loaded
    checkpoint_bytes = loaded.checkpoint_bytes or outcome.capacity.weights_total_bytes
    return estimate_load_time(
        checkpoint_bytes, enforce_eager=outcome.capacity.settings.enforce_eager
    )


def _int_flag(argv: tuple[str, ...], flag: str, default: int) -> int:
    value = flag_value(argv, flag)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"{flag} {value!r} is not an integer") from None


def manifest_spec_from_plan(
    outcome: PlanOutcome,
    *,
    replicas: int = 1,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    image: str | None = None,
    hf_token_secret: str | None = DEFAULT_HF_TOKEN_SECRET,
    use_recommendation: bool = False,
) -> ManifestSpec:
    """The manifests' spec of a plan: its exact ``vllm serve`` argv (with the user's extra
    flags verbatim), its GPUs per replica (TP x PP x the argv's --data-parallel-size), the
    nodes those take at ``gpus_per_node``, and the image of the vLLM version it mirrors.
    ``use_recommendation`` takes the recommended command instead (a plan that does not
    fit). A replica spanning nodes runs over Ray: ``--distributed-executor-backend ray`` is
    added unless the argv names a backend."""
    if gpus_per_node < 1:
        raise InvalidArgumentError(f"--gpus-per-node must be >= 1, got {gpus_per_node}")
    if not outcome.capacity.engine.startswith("vllm"):
        raise InvalidArgumentError(
            f"servefit deploy writes vLLM's manifests; a {outcome.capacity.engine_label} "
            "deployment is not written yet: its launch line is `servefit plan`'s"
        )
    argv = outcome.command_args
    capacity = outcome.capacity
    if use_recommendation:
        if outcome.recommendation is None:
            raise InvalidArgumentError("the plan has no recommendation to deploy")
        argv, capacity = outcome.recommendation_args, outcome.recommendation.capacity
    tp = capacity.settings.tensor_parallel_size
    pp = capacity.settings.pipeline_parallel_size
    dp = _int_flag(argv, "--data-parallel-size", 1)  # the planned DP, or an extra flag's
    gpus = tp * pp * dp
    nodes = -(-gpus // gpus_per_node)
    if nodes > 1 and gpus % gpus_per_node:
        raise InvalidArgumentError(
            f"a replica of {gpus} GPUs (TP {tp} x PP {pp} x DP {dp}) does not fill whole nodes "
            f"of {gpus_per_node} GPUs: choose a layout that does (or set --gpus-per-node)"
        )
    if nodes > 1 and flag_value(argv, "--distributed-executor-backend") is None:
        argv = (*argv, "--distributed-executor-backend", "ray")
    version = outcome.deployment.settings.vllm_version
    load = load_time_of(outcome)
    checkpoint_bytes = outcome.resolved.loaded.checkpoint_bytes or capacity.weights_total_bytes
    return ManifestSpec(
        model=outcome.resolved.model_id,
        served_name=flag_value(argv, "--served-model-name") or outcome.resolved.model_id,
        vllm_args=tuple(argv),
        vllm_version=version,
        image=image or image_for(version),
        gpu_name=outcome.resolved.gpu.name,
        gpus_per_replica=gpus,
        predicted_load_s=load.total_s,
        replicas=replicas,
        nodes_per_replica=nodes,
        tp=tp,
        pp=pp,
        dp=dp,
        port=_int_flag(argv, "--port", DEFAULT_PORT),
        hf_token_secret=hf_token_secret,
        checkpoint_bytes=int(checkpoint_bytes),
    )


def plan_best_layout(d: Deployment, request: ScalingRequest) -> tuple[PlanOutcome, int]:
    """The best TP x PP x DP (+ EP) layout of ``request.num_gpus`` as one replica's plan
    (:func:`servefit.app.scaling.plan_on_gpus`) and the number of replicas (the layout's DP):
    Kubernetes runs the replicas, each a vLLM server."""
    from servefit.app.scaling import plan_on_gpus

    chosen = plan_on_gpus(d, request, with_performance=False)
    if not chosen.is_chosen:
        problems = sorted({r.problem for r in chosen.scaling.layouts if r.problem})
        raise InvalidArgumentError(
            f"no layout of {request.num_gpus} GPUs serves the workload"
            + (f": {problems[0]}" if problems else "")
            + "; try more GPUs (--num-gpus) or a larger GPU"
        )
    return chosen.outcome, chosen.replicas


def kv_transfer_config(connector: str = DEFAULT_CONNECTOR) -> str:
    """The ``--kv-transfer-config`` JSON both roles carry: with NIXL each instance is
    ``kv_both`` (the router tells it whether it prefills or decodes a request)."""
    return json.dumps({"kv_connector": connector, "kv_role": "kv_both"}, separators=(",", ":"))


def disaggregate(
    spec: ManifestSpec,
    *,
    prefill_replicas: int = 1,
    decode_replicas: int = 1,
    connector: str = DEFAULT_CONNECTOR,
) -> ManifestSpec:
    """The spec as disaggregated prefill/decode: two deployments of the same argv, each
    with ``--kv-transfer-config`` for ``connector``. A P/D-aware router in front (vLLM's
    disaggregation proxy, llm-d) sends each request to a prefill then a decode instance."""
    if spec.is_multi_node:
        raise InvalidArgumentError(
            "disaggregated prefill/decode is written for single-node replicas"
        )
    if flag_value(spec.vllm_args, "--kv-transfer-config") is not None:
        raise InvalidArgumentError("the command already carries --kv-transfer-config")
    config = kv_transfer_config(connector)
    argv = (*spec.vllm_args, "--kv-transfer-config", config)
    return replace(
        spec,
        kv_transfer_config=config,
        prefill=RoleSpec(
            role="prefill",
            vllm_args=argv,
            replicas=prefill_replicas,
            gpus_per_replica=spec.gpus_per_replica,
        ),
        decode=RoleSpec(
            role="decode",
            vllm_args=argv,
            replicas=decode_replicas,
            gpus_per_replica=spec.gpus_per_replica,
        ),
    )


def write_manifests(spec: ManifestSpec, out_dir: Path, *, force: bool = False) -> list[Path]:
    """Write every manifest of ``spec`` under ``out_dir`` and return their paths. A
    non-empty ``out_dir`` is refused unless ``force`` (then servefit's files are replaced,
    nothing else is touched)."""
    from servefit.adapters.manifests import render_manifests

    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InvalidArgumentError(f"--emit {out_dir}: not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise InvalidArgumentError(
            f"--emit {out_dir}: the directory is not empty; choose an empty one, or pass "
            "--force to overwrite servefit's files in it"
        )
    files = render_manifests(spec)
    written = []
    for relative, text in files.items():
        path = out_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
        if relative.endswith(".sh"):
            path.chmod(0o755)
        written.append(path)
    return written
