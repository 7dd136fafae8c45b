"""What a set of deployment manifests says, once: the exact ``vllm serve`` argv of one
replica, the GPUs it takes and how they spread over nodes, the image, the predicted load
time and where the Hugging Face token comes from (a Secret's name, never a value).

The builders (:mod:`servefit.adapters.manifests`, :mod:`servefit.adapters.manifests_k8s`)
turn one :class:`ManifestSpec` into Kubernetes, compose and Ray files; the application
layer (:mod:`servefit.app.deploy`) builds the spec from a plan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from servefit.adapters.redact import argv_secret_values, is_secret_name
from servefit.errors import InvalidArgumentError
from servefit.units import GIB_BYTES

VLLM_IMAGE = "vllm/vllm-openai"  # vLLM's OpenAI-compatible server image (Docker Hub)
DEFAULT_PORT = 8000  # `vllm serve --port` default
# the model cache's mount point, set as HF_HOME in every container, so the manifests do not
# depend on the image's user or its home directory
HF_CACHE_PATH = "/hf-cache"
HF_HOME_ENV = "HF_HOME"
HF_TOKEN_ENV = "HF_TOKEN"  # read by huggingface_hub for gated models
DEFAULT_HF_TOKEN_SECRET = "hf-token"
DEFAULT_HF_TOKEN_SECRET_KEY = "token"
RAY_PORT = 6379  # `ray start --head` default GCS port
ROLES = ("prefill", "decode")
MAX_NAME_CHARS = 40  # leaves room for "-prefill", "-decode" and LWS's pod-name suffixes


def image_for(vllm_version: str) -> str:
    """The vLLM image of the version the plan mirrors, pinned (``0.33`` -> ``v0.33.0``)."""
    parts = vllm_version.strip().lstrip("v").split(".")
    if not all(p.isdigit() for p in parts) or not 2 <= len(parts) <= 3:
        raise InvalidArgumentError(f"vLLM version {vllm_version!r} is not MAJOR.MINOR[.PATCH]")
    if len(parts) == 2:
        parts.append("0")
    return f"{VLLM_IMAGE}:v{'.'.join(parts)}"


def resource_name(text: str) -> str:
    """A Kubernetes name (RFC 1035 label) from a model or served name."""
    tail = text.rstrip("/").rsplit("/", 1)[-1].lower()
    slug = re.sub(r"[^a-z0-9]+", "-", tail).strip("-")[: MAX_NAME_CHARS - 5].strip("-")
    return f"vllm-{slug}" if slug else "vllm"


def flag_value(argv: tuple[str, ...], flag: str) -> str | None:
    """The value of ``flag`` in an argv (``--flag V`` or ``--flag=V``), the last one wins."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.partition("=")[2]
    return value


def shm_bytes_for(gpus_per_node: int) -> int:
    """``/dev/shm`` for one pod: NCCL's shared-memory transport between the GPUs of a node
    and vLLM's multiprocessing queues; 2 GiB per GPU, as Docker's 64 MiB default fails
    with tensor parallelism (vLLM's docs: ``--ipc=host`` or ``--shm-size``)."""
    return max(1, gpus_per_node) * 2 * GIB_BYTES


def _check_argv(argv: tuple[str, ...], what: str) -> None:
    if argv[:2] != ("vllm", "serve") or len(argv) < 3:
        raise InvalidArgumentError(f"{what} must be a `vllm serve MODEL ...` argv, got {argv[:3]}")
    if argv_secret_values(argv):
        names = {a.partition("=")[0] for a in argv if a[:1] == "-"}
        flags = sorted(n for n in names if is_secret_name(n))
        raise InvalidArgumentError(
            f"{what} carries a secret ({', '.join(flags)}): "
            "a manifest never holds one. Drop the flag; the token comes from the Kubernetes "
            f"Secret as {HF_TOKEN_ENV} (and an API key as VLLM_API_KEY from a Secret)"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleSpec:
    """One side of a disaggregated prefill/decode deployment: its own argv (with
    ``--kv-transfer-config``), replicas and GPUs."""

    role: str  # "prefill" or "decode"
    vllm_args: tuple[str, ...]
    replicas: int = 1
    gpus_per_replica: int = 1

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidArgumentError(f"role must be one of {', '.join(ROLES)}, got {self.role}")
        _check_argv(self.vllm_args, f"the {self.role} command")
        if self.replicas < 1 or self.gpus_per_replica < 1:
            raise InvalidArgumentError(f"{self.role}: replicas and GPUs must be >= 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class ManifestSpec:
    """Everything the manifests of one deployment say. ``vllm_args`` is the exact argv of
    one replica (``vllm serve MODEL ...``); a multi-node replica (``nodes_per_replica`` >
    1) runs it on the Ray head, with ``gpus_per_replica / nodes_per_replica`` GPUs per
    node. ``prefill``/``decode``, when given, make the deployment disaggregated: two
    deployments instead of one, each with its own argv."""

    model: str
    served_name: str
    vllm_args: tuple[str, ...]
    vllm_version: str
    image: str
    gpu_name: str
    gpus_per_replica: int
    predicted_load_s: float
    replicas: int = 1
    nodes_per_replica: int = 1
    tp: int = 1
    pp: int = 1
    dp: int = 1
    name: str = ""  # Kubernetes resource name; "" -> derived from served_name
    port: int = DEFAULT_PORT
    shm_size_bytes: int = 0  # 0 -> shm_bytes_for(gpus_per_node)
    checkpoint_bytes: int = 0  # sizes the model-cache volume; 0 -> a pod-local emptyDir
    hf_token_secret: str | None = DEFAULT_HF_TOKEN_SECRET  # None: no token (public model)
    hf_token_secret_key: str = DEFAULT_HF_TOKEN_SECRET_KEY
    kv_transfer_config: str | None = None  # the connector JSON both P/D roles carry
    prefill: RoleSpec | None = None
    decode: RoleSpec | None = None

    def __post_init__(self) -> None:
        _check_argv(self.vllm_args, "the vllm serve command")
        counts = {
            "--replicas": self.replicas,
            "GPUs per replica": self.gpus_per_replica,
            "nodes per replica": self.nodes_per_replica,
            "--tensor-parallel-size": self.tp,
            "--pipeline-parallel-size": self.pp,
            "--data-parallel-size": self.dp,
        }
        for what, value in counts.items():
            if value < 1:
                raise InvalidArgumentError(f"{what} must be >= 1, got {value}")
        if self.gpus_per_replica % self.nodes_per_replica:
            raise InvalidArgumentError(
                f"{self.gpus_per_replica} GPUs do not spread evenly over "
                f"{self.nodes_per_replica} nodes"
            )
        if not 0 <= self.predicted_load_s < float("inf"):
            raise InvalidArgumentError(f"predicted load time {self.predicted_load_s} s")
        if not 1 <= self.port <= 65535:
            raise InvalidArgumentError(f"--port must be 1-65535, got {self.port}")
        if (self.prefill is None) != (self.decode is None):
            raise InvalidArgumentError("a disaggregated deployment needs both prefill and decode")
        if self.is_disaggregated and self.nodes_per_replica > 1:
            raise InvalidArgumentError("disaggregated roles are single-node deployments here")
        if not self.name:
            object.__setattr__(self, "name", resource_name(self.served_name))
        if not self.shm_size_bytes:
            object.__setattr__(self, "shm_size_bytes", shm_bytes_for(self.gpus_per_node))

    @property
    def gpus_per_node(self) -> int:
        """GPUs one pod (one node of the replica) takes."""
        return self.gpus_per_replica // self.nodes_per_replica

    @property
    def is_multi_node(self) -> bool:
        return self.nodes_per_replica > 1

    @property
    def is_disaggregated(self) -> bool:
        return self.prefill is not None and self.decode is not None

    @property
    def roles(self) -> tuple[RoleSpec, ...]:
        return tuple(r for r in (self.prefill, self.decode) if r is not None)
