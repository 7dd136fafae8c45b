"""Every file ``servefit deploy --emit DIR`` writes, as text, from one :class:`ManifestSpec`:

=============================  ==============================================================
``vllm-serve.sh``              the exact ``vllm serve`` command of one replica
``compose.yaml``               docker compose, one single-node replica (not for multi-node
                               or disaggregated deployments)
``k8s/deployment.yaml``,       a single-node replica: Deployment + Service
``k8s/service.yaml``
``k8s/leaderworkerset.yaml``   a replica spanning nodes: LeaderWorkerSet with Ray + Service
``k8s/prefill.yaml``,          disaggregated prefill/decode: a Deployment + Service per role
``k8s/decode.yaml``
``k8s/model-cache.yaml``       the Hugging Face cache every pod mounts (a PVC)
``ray/head.sh``,               bare metal, a replica spanning nodes: the Ray head (then vLLM)
``ray/worker.sh``              and each other node
``README.txt``                 what each file is, the assumptions, how to apply them
=============================  ==============================================================

No file carries a secret: the token is a Secret reference (Kubernetes) or the name of an
environment variable passed through (compose); a file that would hold the value of a
secret-named environment variable of this process is refused (:func:`check_no_secret`).
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from servefit import __version__
from servefit.adapters import manifests_k8s as k8s
from servefit.adapters.manifest_spec import HF_CACHE_PATH, HF_HOME_ENV, HF_TOKEN_ENV, ManifestSpec
from servefit.adapters.redact import secret_env_values
from servefit.core.load_time import (
    DOWNLOAD_BYTES_PER_S,
    READ_BYTES_PER_S,
    SAFETY_FACTOR,
    startup_probe_for,
)
from servefit.errors import InvalidArgumentError
from servefit.units import GB_BYTES, GIB_BYTES


class _Dumper(yaml.SafeDumper):
    """Block style, multi-line strings (the Ray scripts) as literal blocks, and every
    repeated structure written out again (no YAML anchors: a reader sees each pod whole)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> Any:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def yaml_text(docs: list[dict[str, Any]], header: str) -> str:
    body = yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
    return header + body


def header(spec: ManifestSpec) -> str:
    return (
        f"# servefit {__version__} deploy: {spec.model} on {spec.gpu_name}, vLLM "
        f"{spec.vllm_version}\n"
    )


def compose_escaped(text: str) -> str:
    """Compose interpolates ``$VAR``; ``$$`` is a literal ``$``."""
    return text.replace("$", "$$")


def health_check_command(port: int) -> list[str]:
    """``/health`` from inside the container, with the image's own Python (no curl needed)."""
    url = f"http://localhost:{port}/health"
    return [
        "CMD",
        "python3",
        "-c",
        f"import urllib.request; urllib.request.urlopen({url!r}, timeout=5)",
    ]


def compose(spec: ManifestSpec) -> dict[str, Any]:
    """One replica on one host: the GPUs reserved through NVIDIA's container toolkit."""
    budget_s = startup_probe_for(spec.predicted_load_s).budget_s
    service: dict[str, Any] = {
        "image": spec.image,
        "entrypoint": list(spec.vllm_args[:2]),
        "command": [compose_escaped(a) for a in spec.vllm_args[2:]],
        "ports": [f"{spec.port}:{spec.port}"],
        "volumes": [f"hf-cache:{HF_CACHE_PATH}"],
        "shm_size": f"{-(-spec.shm_size_bytes // GIB_BYTES)}gb",
        "deploy": {
            "resources": {
                "reservations": {
                    "devices": [
                        {
                            "driver": "nvidia",
                            "count": spec.gpus_per_replica,
                            "capabilities": ["gpu"],
                        }
                    ]
                }
            }
        },
        "healthcheck": {
            "test": health_check_command(spec.port),
            "interval": "30s",
            "timeout": "10s",
            "retries": 3,
            "start_period": f"{budget_s}s",
        },
        "restart": "unless-stopped",
    }
    service["environment"] = [f"{HF_HOME_ENV}={HF_CACHE_PATH}"]
    if spec.hf_token_secret:
        # the variable's name alone: compose passes the value from the shell that runs it
        service["environment"].append(HF_TOKEN_ENV)
    return {"name": spec.name, "services": {"vllm": service}, "volumes": {"hf-cache": {}}}


def serve_script(spec: ManifestSpec, argv: tuple[str, ...], where: str) -> str:
    return (
        "#!/bin/sh\n"
        + header(spec)
        + f"# The exact command of one {where}.\n"
        + "exec "
        + shlex.join(argv)
        + "\n"
    )


def serve_scripts(spec: ManifestSpec) -> dict[str, str]:
    """``vllm-serve.sh``; a disaggregated deployment whose roles differ gets one per role."""
    if spec.is_multi_node:
        return {"vllm-serve.sh": serve_script(spec, spec.vllm_args, "replica, on the Ray head")}
    commands = {role.vllm_args for role in spec.roles}
    if len(commands) > 1:
        return {
            f"vllm-serve-{r.role}.sh": serve_script(spec, r.vllm_args, f"{r.role} instance")
            for r in spec.roles
        }
    if commands:
        return {"vllm-serve.sh": serve_script(spec, commands.pop(), "prefill or decode instance")}
    return {"vllm-serve.sh": serve_script(spec, spec.vllm_args, "replica, on a GPU host")}


def ray_head_script(spec: ManifestSpec) -> str:
    return (
        "#!/bin/sh\n"
        + header(spec)
        + f"# Bare metal: run on the head node of each replica ({spec.nodes_per_replica} nodes x "
        f"{spec.gpus_per_node} GPUs),\n# then ray/worker.sh HEAD_IP on each other node.\n"
        + "set -e\n"
        + k8s.ray_leader_script(spec)
        + "\n"
    )


def ray_worker_script(spec: ManifestSpec) -> str:
    return (
        "#!/bin/sh\n"
        + header(spec)
        + "# Bare metal: run on each node but the head, with the head node's address.\n"
        + 'HEAD_IP="${1:?usage: worker.sh HEAD_IP}"\n'
        + k8s.ray_worker_script("$HEAD_IP")
        + "\n"
    )


def check_no_secret(files: dict[str, str]) -> None:
    """Refuse to write a file holding the value of a secret-named environment variable."""
    secrets = secret_env_values()
    for path, text in files.items():
        if any(value in text for value in secrets):
            raise InvalidArgumentError(
                f"{path} would hold the value of a secret environment variable: servefit "
                "writes Secret references only; remove the value from the flags"
            )


def render_manifests(spec: ManifestSpec) -> dict[str, str]:
    """Every file of the deployment, path (relative to DIR) -> text."""
    top = header(spec)
    files: dict[str, str] = serve_scripts(spec)
    if not spec.is_multi_node and not spec.is_disaggregated:
        files["compose.yaml"] = yaml_text([compose(spec)], top)
    if spec.is_disaggregated:
        for path, docs in k8s.disaggregated(spec).items():
            files[path] = yaml_text(docs, top)
    elif spec.is_multi_node:
        files["k8s/leaderworkerset.yaml"] = yaml_text(k8s.leader_worker_set(spec), top)
        files["ray/head.sh"] = ray_head_script(spec)
        files["ray/worker.sh"] = ray_worker_script(spec)
    else:
        for path, doc in k8s.single_node(spec).items():
            files[path] = yaml_text([doc], top)
    if spec.checkpoint_bytes:
        files["k8s/model-cache.yaml"] = yaml_text([k8s.cache_claim(spec)], top)
    files["README.txt"] = readme(spec, sorted([*files, "README.txt"]))
    check_no_secret(files)
    return files


FILE_NOTES = {
    "vllm-serve.sh": "the exact `vllm serve` command of one replica (the plan's flags)",
    "vllm-serve-prefill.sh": "the exact command of one prefill instance",
    "vllm-serve-decode.sh": "the exact command of one decode instance",
    "compose.yaml": "docker compose: one replica on this host (`docker compose up -d`)",
    "k8s/deployment.yaml": "Kubernetes Deployment: replicas x GPUs, probes on /health",
    "k8s/service.yaml": "Kubernetes Service (ClusterIP) on the server's port",
    "k8s/leaderworkerset.yaml": "LeaderWorkerSet (needs the LWS controller) + Service: "
    "one group of pods per replica, the leader runs the Ray head and vLLM",
    "k8s/prefill.yaml": "prefill instances: Deployment + Service, with --kv-transfer-config",
    "k8s/decode.yaml": "decode instances: Deployment + Service, with --kv-transfer-config",
    "k8s/model-cache.yaml": "the Hugging Face cache volume (ReadWriteMany PVC) every pod mounts",
    "ray/head.sh": "bare metal: Ray head, wait for the workers, then vLLM",
    "ray/worker.sh": "bare metal: join the Ray head (`ray/worker.sh HEAD_IP`)",
    "README.txt": "this file",
}


def readme(spec: ManifestSpec, paths: list[str]) -> str:
    from servefit.core.load_time import estimate_load_time

    probe = startup_probe_for(spec.predicted_load_s)
    layout = f"TP {spec.tp} x PP {spec.pp} x DP {spec.dp}"
    lines = [
        f"servefit {__version__} deploy: {spec.model} on {spec.gpu_name}, image {spec.image}",
        f"One replica: {spec.gpus_per_replica} GPU(s) ({layout}) on {spec.nodes_per_replica} "
        f"node(s); {spec.replicas} replica(s).",
        "",
        "Files:",
        *(f"  {p:<26} {FILE_NOTES.get(p, '')}" for p in paths),
        "",
        "Before applying:",
    ]
    if spec.hf_token_secret:
        lines += [
            f"  Gated models need a token: the pods read {HF_TOKEN_ENV} from the Secret "
            f"'{spec.hf_token_secret}' (key '{spec.hf_token_secret_key}'):",
            f"    kubectl create secret generic {spec.hf_token_secret} "
            f'--from-literal={spec.hf_token_secret_key}="${HF_TOKEN_ENV}"',
            f"  compose passes {HF_TOKEN_ENV} from the shell that runs it. No file holds a token.",
        ]
    lines.append("  Kubernetes: `kubectl apply -f k8s/` (in the namespace of the Secret).")
    if spec.is_multi_node:
        lines.append("  k8s/leaderworkerset.yaml needs the LeaderWorkerSet controller installed.")
    if spec.is_disaggregated:
        lines += [
            f"  Both roles carry --kv-transfer-config {spec.kv_transfer_config}.",
            "  A P/D-aware router in front (vLLM's disaggregation proxy, llm-d) sends each",
            "  request to a prefill instance, then a decode instance; servefit does not write it.",
        ]
    if spec.checkpoint_bytes:
        lines.append(
            "  k8s/model-cache.yaml needs a storage class offering ReadWriteMany; with "
            "ReadWriteOnce, run one replica or give each pod its own cache."
        )
    lines += ["", "Startup probe (sized from the predicted load time):"]
    if spec.checkpoint_bytes:
        est = estimate_load_time(spec.checkpoint_bytes)
        lines.append(
            f"  checkpoint {spec.checkpoint_bytes / GB_BYTES:.1f} GB: download "
            f"{est.download_s:.0f} s at {DOWNLOAD_BYTES_PER_S / GB_BYTES:g} GB/s (first start), "
            f"read {est.read_s:.0f} s at {READ_BYTES_PER_S / GB_BYTES:g} GB/s, warm-up (compile, "
            "CUDA graphs)"
        )
    lines += [
        f"  predicted load time {spec.predicted_load_s:.0f} s x safety factor "
        f"{SAFETY_FACTOR:g} -> failureThreshold {probe.failure_threshold} x periodSeconds "
        f"{probe.period_s} = {probe.budget_s} s (compose: start_period).",
        *(
            [
                f"  The LeaderWorkerSet's leader adds {k8s.RAY_JOIN_TIMEOUT_S} s for its workers "
                "to join."
            ]
            if spec.is_multi_node
            else []
        ),
        "  A faster network or local NVMe starts sooner; the probe only bounds the wait.",
        "",
        "Scaling out: raise the Deployment's or the LeaderWorkerSet's replicas (or an HPA on",
        "them); servefit writes the configuration, Kubernetes, Ray and vLLM do the scheduling.",
    ]
    return "\n".join(lines) + "\n"
