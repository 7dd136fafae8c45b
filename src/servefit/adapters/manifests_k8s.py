"""Kubernetes manifests of a :class:`ManifestSpec`, as plain data (dicts) for a YAML writer:

- a single-node replica: a Deployment (``replicas`` pods of ``gpus_per_replica`` GPUs) and
  a Service on vLLM's port;
- a replica spanning nodes: a LeaderWorkerSet (one group of ``nodes_per_replica`` pods per
  replica) whose leader starts the Ray head, waits for the workers and runs ``vllm serve``
  with the Ray executor, and whose workers join the head at ``$(LWS_LEADER_ADDRESS)`` — the
  layout vLLM's LWS guide describes; a Service selects the leaders;
- disaggregated prefill/decode: a Deployment and a Service per role, each with the same
  ``--kv-transfer-config``.

Every pod gets its GPUs as requests and limits, ``/dev/shm`` as a memory-backed emptyDir,
the Hugging Face cache as a volume, ``HF_TOKEN`` from a Secret (a reference, never a value),
readiness and liveness on ``/health`` and a startup probe sized from the predicted load time.
"""

from __future__ import annotations

import shlex
from typing import Any

from servefit.adapters.manifest_spec import (
    HF_CACHE_PATH,
    HF_HOME_ENV,
    HF_TOKEN_ENV,
    RAY_PORT,
    ManifestSpec,
)
from servefit.core.load_time import StartupProbe, startup_probe_for
from servefit.units import GIB_BYTES

Manifest = dict[str, Any]
GPU_RESOURCE = "nvidia.com/gpu"  # NVIDIA's device plugin
MANAGED_BY = {"app.kubernetes.io/managed-by": "servefit"}
HEALTH_PATH = "/health"  # vLLM's liveness endpoint: 200 once the engine is up
CACHE_HEADROOM = 1.25  # the cache volume holds the checkpoint plus the Hub's metadata and locks
RAY_JOIN_TIMEOUT_S = 600  # how long the Ray head waits for its workers before vLLM starts


def kubelet_escaped(text: str) -> str:
    """``$(NAME)`` in a command or argument is expanded by the kubelet; ``$$`` keeps a
    literal ``$``, so a flag value the user wrote reaches vLLM unchanged."""
    return text.replace("$(", "$$(")


def quantity_gib(num_bytes: float) -> str:
    """A Kubernetes quantity in whole GiB, rounded up."""
    return f"{max(1, -(-int(num_bytes) // GIB_BYTES))}Gi"


def labels(spec: ManifestSpec, component: str = "") -> dict[str, str]:
    out = {"app.kubernetes.io/name": spec.name, **MANAGED_BY}
    if component:
        out["app.kubernetes.io/component"] = component
    return out


def startup_probe_of(spec: ManifestSpec, extra_s: float = 0.0) -> StartupProbe:
    return startup_probe_for(spec.predicted_load_s + extra_s)


def server_startup_probe(spec: ManifestSpec) -> StartupProbe:
    """The vLLM server's startup probe: a multi-node leader also waits for its workers."""
    return startup_probe_of(spec, RAY_JOIN_TIMEOUT_S if spec.is_multi_node else 0.0)


def _http_probe(spec: ManifestSpec, *, period_s: int, failure_threshold: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": HEALTH_PATH, "port": spec.port},
        "periodSeconds": period_s,
        "failureThreshold": failure_threshold,
        "timeoutSeconds": 5,
    }


def probes(spec: ManifestSpec, extra_startup_s: float = 0.0) -> dict[str, Any]:
    startup = startup_probe_of(spec, extra_startup_s)
    return {
        "startupProbe": _http_probe(
            spec, period_s=startup.period_s, failure_threshold=startup.failure_threshold
        ),
        "readinessProbe": _http_probe(spec, period_s=5, failure_threshold=3),
        "livenessProbe": _http_probe(spec, period_s=10, failure_threshold=3),
    }


def env(spec: ManifestSpec, *, with_pod_ip: bool = False) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"name": HF_HOME_ENV, "value": HF_CACHE_PATH}]
    if spec.hf_token_secret:
        out.append(
            {
                "name": HF_TOKEN_ENV,
                "valueFrom": {
                    "secretKeyRef": {
                        "name": spec.hf_token_secret,
                        "key": spec.hf_token_secret_key,
                        "optional": True,  # public models start without the Secret
                    }
                },
            }
        )
    if with_pod_ip:  # NIXL's side channel listens on the pod's own address
        out.append(
            {
                "name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
                "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
            }
        )
    return out


def gpu_resources(gpus: int) -> dict[str, Any]:
    return {"requests": {GPU_RESOURCE: gpus}, "limits": {GPU_RESOURCE: gpus}}


def cache_claim_name(spec: ManifestSpec) -> str:
    return f"{spec.name}-hf-cache"


def volumes(spec: ManifestSpec) -> list[dict[str, Any]]:
    cache: dict[str, Any] = {"emptyDir": {}}
    if spec.checkpoint_bytes:
        cache = {"persistentVolumeClaim": {"claimName": cache_claim_name(spec)}}
    return [
        {
            "name": "dshm",
            "emptyDir": {"medium": "Memory", "sizeLimit": quantity_gib(spec.shm_size_bytes)},
        },
        {"name": "hf-cache", **cache},
    ]


VOLUME_MOUNTS = [
    {"name": "dshm", "mountPath": "/dev/shm"},
    {"name": "hf-cache", "mountPath": HF_CACHE_PATH},
]


def vllm_container(
    spec: ManifestSpec, argv: tuple[str, ...], *, gpus: int, with_pod_ip: bool = False
) -> dict[str, Any]:
    """The vLLM server container: ``command`` + ``args`` are the argv, token for token."""
    return {
        "name": "vllm",
        "image": spec.image,
        "command": list(argv[:2]),
        "args": [kubelet_escaped(a) for a in argv[2:]],
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
        "env": env(spec, with_pod_ip=with_pod_ip),
        "resources": gpu_resources(gpus),
        "volumeMounts": VOLUME_MOUNTS,
        **probes(spec),
    }


def deployment(
    spec: ManifestSpec,
    *,
    name: str,
    argv: tuple[str, ...],
    replicas: int,
    gpus: int,
    component: str = "server",
    with_pod_ip: bool = False,
) -> Manifest:
    pod_labels = labels(spec, component)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": pod_labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "containers": [vllm_container(spec, argv, gpus=gpus, with_pod_ip=with_pod_ip)],
                    "volumes": volumes(spec),
                },
            },
        },
    }


def service(spec: ManifestSpec, *, name: str, selector: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels(spec)},
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": spec.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def cache_claim(spec: ManifestSpec) -> Manifest:
    """The model cache every pod mounts: ReadWriteMany so replicas on other nodes share
    one download (needs a storage class that offers it: NFS, EFS, Filestore, CephFS)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": cache_claim_name(spec), "labels": labels(spec)},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {
                "requests": {"storage": quantity_gib(spec.checkpoint_bytes * CACHE_HEADROOM)}
            },
        },
    }


def single_node(spec: ManifestSpec) -> dict[str, Manifest]:
    """``k8s/deployment.yaml`` and ``k8s/service.yaml``."""
    d = deployment(
        spec,
        name=spec.name,
        argv=spec.vllm_args,
        replicas=spec.replicas,
        gpus=spec.gpus_per_replica,
    )
    return {
        "k8s/deployment.yaml": d,
        "k8s/service.yaml": service(spec, name=spec.name, selector=labels(spec, "server")),
    }


def disaggregated(spec: ManifestSpec) -> dict[str, list[Manifest]]:
    """``k8s/prefill.yaml`` and ``k8s/decode.yaml``: a Deployment and a Service each."""
    out = {}
    for role in spec.roles:
        name = f"{spec.name}-{role.role}"
        d = deployment(
            spec,
            name=name,
            argv=role.vllm_args,
            replicas=role.replicas,
            gpus=role.gpus_per_replica,
            component=role.role,
            with_pod_ip=True,
        )
        out[f"k8s/{role.role}.yaml"] = [
            d,
            service(spec, name=name, selector=labels(spec, role.role)),
        ]
    return out


def ray_leader_script(spec: ManifestSpec) -> str:
    """Start the Ray head, wait until every node of the group has joined, run vLLM (a
    shell script; :func:`kubelet_escaped` before it goes into a pod's command)."""
    wait = (
        'import ray, sys; ray.init(address="auto", logging_level="ERROR"); '
        f'sys.exit(0 if sum(n["Alive"] for n in ray.nodes()) >= {spec.nodes_per_replica} else 1)'
    )
    return "\n".join(
        [
            f"ray start --head --port={RAY_PORT}",
            f"for i in $(seq {RAY_JOIN_TIMEOUT_S // 5}); do",
            f"  python3 -c {shlex.quote(wait)} && break",
            "  sleep 5",
            "done",
            "exec " + shlex.join(spec.vllm_args),
        ]
    )


def ray_worker_script(address: str) -> str:
    """Join the Ray head at ``address`` (a shell expression), retrying while it starts."""
    return "\n".join(
        [
            f"for i in $(seq {RAY_JOIN_TIMEOUT_S // 5}); do",
            f'  ray start --address="{address}:{RAY_PORT}" --block && exit 0',
            "  sleep 5",
            "done",
            "exit 1",
        ]
    )


def leader_worker_set(spec: ManifestSpec) -> list[Manifest]:
    """``k8s/leaderworkerset.yaml``: the LeaderWorkerSet and the Service on its leaders."""
    leader = {
        **vllm_container(spec, spec.vllm_args, gpus=spec.gpus_per_node),
        "command": ["sh", "-c", kubelet_escaped(ray_leader_script(spec))],
        "args": [],
        **probes(spec, extra_startup_s=RAY_JOIN_TIMEOUT_S),
    }
    worker = {
        "name": "vllm-worker",
        "image": spec.image,
        # LWS puts the leader's address in the pods' environment
        "command": ["sh", "-c", kubelet_escaped(ray_worker_script("$LWS_LEADER_ADDRESS"))],
        "env": env(spec),
        "resources": gpu_resources(spec.gpus_per_node),
        "volumeMounts": VOLUME_MOUNTS,
    }
    leader_labels = {**labels(spec, "leader"), "role": "leader"}
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": spec.name, "labels": labels(spec)},
        "spec": {
            "replicas": spec.replicas,
            "leaderWorkerTemplate": {
                "size": spec.nodes_per_replica,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": leader_labels},
                    "spec": {"containers": [leader], "volumes": volumes(spec)},
                },
                "workerTemplate": {
                    "metadata": {"labels": labels(spec, "worker")},
                    "spec": {"containers": [worker], "volumes": volumes(spec)},
                },
            },
        },
    }
    selector = {"leaderworkerset.sigs.k8s.io/name": spec.name, "role": "leader"}
    return [lws, service(spec, name=spec.name, selector=selector)]


def pod_templates(manifest: Manifest) -> list[Manifest]:
    """The pod templates a manifest holds (a Deployment's one, a LeaderWorkerSet's two):
    what a schema check of a custom resource can still hold to the core PodTemplateSpec."""
    spec = manifest.get("spec", {})
    if "template" in spec:
        return [spec["template"]]
    lwt = spec.get("leaderWorkerTemplate", {})
    return [lwt[k] for k in ("leaderTemplate", "workerTemplate") if k in lwt]
