"""Deployment manifests (``servefit deploy``): every file validates against the published
schema (Kubernetes' OpenAPI schemas bundled in kubernetes-validate; the compose-spec JSON
schema bundled in check-jsonschema), offline; the server's argv is the plan's, token for
token; no secret value is written; the startup probe outlasts the predicted load."""

from __future__ import annotations

import json
import shlex
import socket
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from servefit.adapters.manifest_spec import ManifestSpec, image_for, resource_name
from servefit.app.deploy import (
    disaggregate,
    load_time_of,
    manifest_spec_from_plan,
    write_manifests,
)
from servefit.app.deployment import Deployment, Hardware
from servefit.app.plan import PlanOutcome, plan_deployment
from servefit.core.load_time import SAFETY_FACTOR, estimate_load_time, startup_probe_for
from servefit.core.plan import ServeSettings
from servefit.errors import InvalidArgumentError

K8S_VERSION = latest_version()  # the newest Kubernetes schema set the package bundles
TOKEN = "hf_" + "Zq7" * 12  # shaped like a Hugging Face token; must appear in no file
# A flag servefit does not model, with characters compose and the kubelet would expand
EXTRA = ("--override-generation-config", '{"temperature": 0.6, "note": "$(HOME) $USER"}')


def _plan(model: str, gpu: str, *, extra: tuple[str, ...] = (), **settings: int) -> PlanOutcome:
    d = Deployment(
        model=model,
        hardware=Hardware(gpu=gpu),
        settings=ServeSettings(**settings),
        allow_hub=False,
        extra_args=extra,
    )
    return plan_deployment(d, with_performance=False)


@pytest.fixture(scope="module")
def plans() -> dict[str, PlanOutcome]:
    return {
        "single": _plan("meta-llama/Llama-3.1-8B", "A40", extra=EXTRA),
        "tp2": _plan("meta-llama/Llama-3.1-8B", "A40", tensor_parallel_size=2),
        "multinode": _plan(
            "deepseek-ai/DeepSeek-V3", "h100", tensor_parallel_size=8, pipeline_parallel_size=2
        ),
    }


def _spec(plans: dict[str, PlanOutcome], kind: str) -> ManifestSpec:
    if kind == "disagg":
        return disaggregate(
            manifest_spec_from_plan(plans["single"]), prefill_replicas=1, decode_replicas=2
        )
    return manifest_spec_from_plan(plans[kind], replicas=2 if kind == "tp2" else 1)


KINDS = ("single", "tp2", "multinode", "disagg")


@pytest.fixture
def no_network(monkeypatch):
    """Validation runs with no network: any connection attempt fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a validator tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _emit(spec: ManifestSpec, out: Path) -> dict[str, str]:
    paths = write_manifests(spec, out)
    return {str(p.relative_to(out)): p.read_text(encoding="utf-8") for p in paths}


def _docs(files: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    return {
        path: [d for d in yaml.safe_load_all(text) if d is not None]
        for path, text in files.items()
        if path.endswith(".yaml")
    }


def _compose_schema() -> dict[str, Any]:
    vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    return json.loads((vendor / "compose-spec.json").read_text(encoding="utf-8"))


def validate_compose(doc: dict[str, Any]) -> None:
    schema = _compose_schema()
    jsonschema.validators.validator_for(schema)(schema).validate(doc)


def validate_k8s(doc: dict[str, Any]) -> None:
    """Core kinds against Kubernetes' schema (strict: unknown fields fail). The
    LeaderWorkerSet is a CRD no package bundles a schema of: its pod templates are held to
    the core PodTemplateSpec, wrapped in a PodTemplate."""
    if doc["kind"] == "LeaderWorkerSet":
        from servefit.adapters.manifests_k8s import pod_templates

        templates = pod_templates(doc)
        assert len(templates) == 2
        for template in templates:
            wrapped = {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": doc["metadata"]["name"]},
                "template": template,
            }
            kubernetes_validate.validate(wrapped, K8S_VERSION, strict=True)
        return
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def _server_argv(container: dict[str, Any]) -> list[str]:
    """What the container runs, as vLLM receives it (the kubelet turns $$ into $)."""
    argv = [*container["command"], *container.get("args", [])]
    if argv[:2] == ["sh", "-c"]:
        last = argv[2].strip().splitlines()[-1].replace("$$", "$")
        assert last.startswith("exec ")
        return shlex.split(last.removeprefix("exec "))
    return [a.replace("$$", "$") for a in argv]


def _pod_specs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    from servefit.adapters.manifests_k8s import pod_templates

    return [t["spec"] for t in pod_templates(doc)]


# --- schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_every_manifest_validates_against_its_schema(plans, kind, tmp_path, no_network):
    files = _emit(_spec(plans, kind), tmp_path)
    docs = _docs(files)
    assert docs, files.keys()
    kinds = []
    for path, items in docs.items():
        for doc in items:
            if path == "compose.yaml":
                validate_compose(doc)
                kinds.append("compose")
            else:
                validate_k8s(doc)
                kinds.append(doc["kind"])
    expected = {
        "single": {"compose", "Deployment", "Service", "PersistentVolumeClaim"},
        "tp2": {"compose", "Deployment", "Service", "PersistentVolumeClaim"},
        "multinode": {"LeaderWorkerSet", "Service", "PersistentVolumeClaim"},
        "disagg": {"Deployment", "Service", "PersistentVolumeClaim"},
    }[kind]
    assert set(kinds) == expected


def test_the_validators_reject_a_broken_manifest(plans, tmp_path, no_network):
    """The schema checks are not vacuous: a typo'd field and a wrong type both fail."""
    docs = _docs(_emit(_spec(plans, "single"), tmp_path))
    deployment = docs["k8s/deployment.yaml"][0]
    deployment["spec"]["template"]["spec"]["containers"][0]["startupprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_k8s(deployment)
    compose = docs["compose.yaml"][0]
    compose["services"]["vllm"]["deploy"]["resources"]["reservations"]["devices"][0]["count"] = []
    with pytest.raises(jsonschema.ValidationError):
        validate_compose(compose)


# --- the plan's exact command ----------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_every_server_runs_the_plans_argv_token_by_token(plans, kind, tmp_path):
    base = plans["single" if kind == "disagg" else kind]
    expected = list(base.command_args)
    if kind == "multinode":
        expected += ["--distributed-executor-backend", "ray"]
    if kind == "disagg":
        expected += ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}']
    files = _emit(_spec(plans, kind), tmp_path)
    seen = 0
    for path, items in _docs(files).items():
        for doc in items:
            if path == "compose.yaml":
                service = doc["services"]["vllm"]
                argv = [*service["entrypoint"], *service["command"]]
                assert [a.replace("$$", "$") for a in argv] == expected
                seen += 1
            elif doc["kind"] in ("Deployment", "LeaderWorkerSet"):
                server = _pod_specs(doc)[0]["containers"][0]
                assert _server_argv(server) == expected, path
                seen += 1
    script = files["vllm-serve.sh"].strip().splitlines()[-1]
    assert shlex.split(script.removeprefix("exec ")) == expected
    if kind == "multinode":
        head = files["ray/head.sh"].strip().splitlines()[-1]
        assert shlex.split(head.removeprefix("exec ")) == expected
    assert seen == {"single": 2, "tp2": 2, "multinode": 1, "disagg": 2}[kind]


def test_the_users_extra_flags_reach_vllm_verbatim(plans):
    """A flag servefit does not model travels unchanged, though it holds $(...) and $VAR
    (escaped for the kubelet and for compose, which would otherwise expand them)."""
    assert tuple(plans["single"].command_args[-2:]) == EXTRA
    spec = _spec(plans, "single")
    from servefit.adapters.manifests import compose
    from servefit.adapters.manifests_k8s import single_node

    args = single_node(spec)["k8s/deployment.yaml"]["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert args[-1] == EXTRA[1].replace("$(", "$$(")
    assert compose(spec)["services"]["vllm"]["command"][-1] == EXTRA[1].replace("$", "$$")


# --- what an operator checks -----------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_gpus_shm_cache_token_and_probes(plans, kind, tmp_path):
    spec = _spec(plans, kind)
    docs = _docs(_emit(spec, tmp_path))
    pods = [
        pod
        for path, items in docs.items()
        if path != "compose.yaml"
        for doc in items
        if doc["kind"] in ("Deployment", "LeaderWorkerSet")
        for pod in _pod_specs(doc)
    ]
    assert pods
    for pod in pods:
        container = pod["containers"][0]
        gpus = spec.gpus_per_node
        assert container["resources"] == {
            "requests": {"nvidia.com/gpu": gpus},
            "limits": {"nvidia.com/gpu": gpus},
        }
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
        assert volumes["dshm"]["emptyDir"]["sizeLimit"].endswith("Gi")
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts == {"/dev/shm": "dshm", "/hf-cache": "hf-cache"}
        # the cache is where huggingface_hub looks, whatever the image's user and home
        assert {"name": "HF_HOME", "value": "/hf-cache"} in container["env"]
        token = next(e for e in container["env"] if e["name"] == "HF_TOKEN")
        assert "value" not in token
        assert token["valueFrom"]["secretKeyRef"] == {
            "name": "hf-token",
            "key": "token",
            "optional": True,
        }
    servers = [p["containers"][0] for p in pods if "readinessProbe" in p["containers"][0]]
    assert len(servers) == {"single": 1, "tp2": 1, "multinode": 1, "disagg": 2}[kind]
    for server in servers:
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert server[probe]["httpGet"] == {"path": "/health", "port": 8000}
        startup = server["startupProbe"]
        budget_s = startup["failureThreshold"] * startup["periodSeconds"]
        assert budget_s >= spec.predicted_load_s * SAFETY_FACTOR


def test_startup_budget_covers_the_predicted_load_of_the_plan(plans, tmp_path):
    outcome = plans["multinode"]
    predicted_s = load_time_of(outcome).total_s
    # DeepSeek-V3's safetensors index: 688,586,727,753 bytes, over a 1 Gbit/s link
    assert predicted_s > 5000
    docs = _docs(_emit(manifest_spec_from_plan(outcome), tmp_path))
    lws = docs["k8s/leaderworkerset.yaml"][0]
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    probe = leader["startupProbe"]
    assert probe["failureThreshold"] * probe["periodSeconds"] >= predicted_s * SAFETY_FACTOR
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert "$LWS_LEADER_ADDRESS:6379" in worker["command"][2]


def test_compose_reserves_the_gpus_with_shm_cache_and_healthcheck(plans, tmp_path):
    spec = _spec(plans, "tp2")
    service = _docs(_emit(spec, tmp_path))["compose.yaml"][0]["services"]["vllm"]
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}]
    assert service["shm_size"] == "4gb"  # 2 GiB per GPU
    assert "hf-cache:/hf-cache" in service["volumes"]
    # HF_HOME at the cache's mount; the token passed through by name, no value
    assert service["environment"] == ["HF_HOME=/hf-cache", "HF_TOKEN"]
    assert "/health" in service["healthcheck"]["test"][-1]
    start_s = int(service["healthcheck"]["start_period"].removesuffix("s"))
    assert start_s >= spec.predicted_load_s * SAFETY_FACTOR
    assert spec.image == "vllm/vllm-openai:v0.33.0"  # the version the plan mirrors, pinned


@pytest.mark.parametrize("kind", KINDS)
def test_no_secret_value_is_written(plans, kind, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    files = _emit(_spec(plans, kind), tmp_path)
    for path, text in files.items():
        assert TOKEN not in text, path
    assert "secretKeyRef" in "".join(files.values())


def test_a_secret_flag_is_refused_not_written(plans):
    with pytest.raises(InvalidArgumentError, match="--api-key"):
        ManifestSpec(
            **{
                **_fields(_spec(plans, "single")),
                "vllm_args": ("vllm", "serve", "m", "--api-key", "sk-" + "a" * 30),
            }
        )


def _fields(spec: ManifestSpec) -> dict[str, Any]:
    return {f: getattr(spec, f) for f in spec.__dataclass_fields__}


def test_a_non_empty_directory_is_refused_unless_forced(plans, tmp_path):
    spec = _spec(plans, "single")
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(InvalidArgumentError, match="not empty"):
        write_manifests(spec, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    written = write_manifests(spec, tmp_path, force=True)
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert tmp_path / "README.txt" in written


def test_a_layout_that_does_not_fill_whole_nodes_is_refused(plans):
    with pytest.raises(InvalidArgumentError, match="whole nodes"):
        manifest_spec_from_plan(plans["multinode"], gpus_per_node=6)


# --- the small pieces, hand-derived ----------------------------------------------------


def test_load_time_and_probe_sizing_by_hand():
    # 16 GB at 0.125 GB/s = 128 s, at 1 GB/s = 16 s, + 120 s warm-up = 264 s
    est = estimate_load_time(16e9)
    assert (est.download_s, est.read_s, est.warmup_s) == (128.0, 16.0, 120.0)
    assert est.total_s == 264.0 and est.cached_s == 136.0
    assert estimate_load_time(16e9, enforce_eager=True).warmup_s == 30.0
    # 264 s x 1.5 = 396 s -> 40 periods of 10 s
    probe = startup_probe_for(264.0)
    assert (probe.failure_threshold, probe.period_s, probe.budget_s) == (40, 10, 400)


def test_image_tag_and_resource_names():
    assert image_for("0.33") == "vllm/vllm-openai:v0.33.0"
    assert image_for("0.10.1") == "vllm/vllm-openai:v0.10.1"
    with pytest.raises(InvalidArgumentError):
        image_for("latest")
    assert resource_name("meta-llama/Llama-3.1-8B") == "vllm-llama-3-1-8b"
    assert resource_name("Qwen/Qwen3-235B-A22B-FP8") == "vllm-qwen3-235b-a22b-fp8"


def test_data_parallel_in_the_flags_counts_its_gpus():
    """--data-parallel-size in the user's flags: one pod of TP x DP GPUs (vLLM's DP)."""
    outcome = _plan(
        "meta-llama/Llama-3.1-8B",
        "A40",
        extra=("--data-parallel-size", "2"),
        tensor_parallel_size=2,
    )
    spec = manifest_spec_from_plan(outcome)
    assert (spec.tp, spec.dp, spec.gpus_per_replica, spec.nodes_per_replica) == (2, 2, 4, 1)


def test_a_secret_value_in_any_flag_is_refused(plans, tmp_path, monkeypatch):
    """A flag whose name is not secret-looking but whose value is this process's HF_TOKEN
    is still never written."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    spec = _spec(plans, "single")
    leaky = ManifestSpec(**{**_fields(spec), "vllm_args": (*spec.vllm_args, "--x", TOKEN)})
    with pytest.raises(InvalidArgumentError, match="secret environment variable"):
        write_manifests(leaky, tmp_path / "out")
    assert not (tmp_path / "out").exists()
