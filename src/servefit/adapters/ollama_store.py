"""``ollama:NAME[:TAG]`` as a model: the GGUF file Ollama pulled, found through its store.

Ollama keeps a pulled model as a manifest and content-addressed blobs under its models
folder (``OLLAMA_MODELS``, by default ``~/.ollama/models``):

- ``manifests/registry.ollama.ai/<namespace>/<name>/<tag>``: a Docker-distribution manifest
  (``schemaVersion`` 2) whose ``layers`` list the parts by media type and digest;
- the layer of media type ``application/vnd.ollama.image.model`` is the GGUF file itself, at
  ``blobs/sha256-<hex>`` (the digest's colon written as a dash);
- ``application/vnd.ollama.image.params`` is a JSON object of the model's run options
  (``num_ctx``, ``stop``, ...), when the model sets any.

A bare name is in the ``library`` namespace with the tag ``latest``, as ``ollama run`` reads
it (``qwen2.5:32b`` is ``registry.ollama.ai/library/qwen2.5/32b``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefit.errors import ModelNotFoundError

PREFIX = "ollama:"
REGISTRY = "registry.ollama.ai"
MODEL_LAYER = "application/vnd.ollama.image.model"
PARAMS_LAYER = "application/vnd.ollama.image.params"
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_MANIFEST_BYTES = 1 << 20
MAX_PARAMS_BYTES = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class OllamaModel:
    """A pulled model: its GGUF blob and the run options its params layer sets."""

    name: str  # as given, without the prefix
    gguf_path: Path
    params: dict[str, Any]

    @property
    def num_ctx(self) -> int | None:
        value = self.params.get("num_ctx")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def is_ollama_name(model: str) -> bool:
    return model.startswith(PREFIX)


def models_dir() -> Path:
    """Where Ollama keeps its models: ``OLLAMA_MODELS``, else ``~/.ollama/models``."""
    given = os.environ.get("OLLAMA_MODELS")
    return Path(given).expanduser() if given else Path.home() / ".ollama" / "models"


def manifest_path(root: Path, name: str) -> Path:
    """``qwen2.5:32b`` -> ``manifests/registry.ollama.ai/library/qwen2.5/32b``."""
    model, _, tag = name.partition(":")
    namespace, _, short = model.rpartition("/")
    parts = [namespace or "library", short, tag or "latest"]
    if not all(_PART.fullmatch(p) for p in parts) or "/" in namespace:
        raise ModelNotFoundError(
            f"{PREFIX}{name} is not an Ollama model name (name[:tag] or namespace/name[:tag])"
        )
    return root / "manifests" / REGISTRY / parts[0] / parts[1] / parts[2]


def find_ollama_model(model: str, root: Path | None = None) -> OllamaModel:
    """The pulled model ``ollama:NAME[:TAG]`` names in Ollama's store (``root``: the store)."""
    name = model.removeprefix(PREFIX)
    root = root or models_dir()
    path = manifest_path(root, name)
    if not path.is_file():
        raise ModelNotFoundError(
            f"{model}: not in the Ollama store at {root} (no {path.relative_to(root)}); "
            "`ollama pull` it first, or set OLLAMA_MODELS to the store"
        )
    manifest = _json(path, MAX_MANIFEST_BYTES, "manifest")
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    if not isinstance(layers, list):
        raise ModelNotFoundError(f"{model}: its manifest {path} lists no layers")
    blobs = {
        layer.get("mediaType"): layer.get("digest")
        for layer in layers
        if isinstance(layer, dict) and isinstance(layer.get("digest"), str)
    }
    digest = blobs.get(MODEL_LAYER)
    if not isinstance(digest, str):
        raise ModelNotFoundError(f"{model}: its manifest {path} has no model layer")
    gguf = _blob(root, digest, model)
    params: dict[str, Any] = {}
    params_digest = blobs.get(PARAMS_LAYER)
    if isinstance(params_digest, str):
        loaded = _json(_blob(root, params_digest, model), MAX_PARAMS_BYTES, "params")
        params = loaded if isinstance(loaded, dict) else {}
    return OllamaModel(name=name, gguf_path=gguf, params=params)


def _blob(root: Path, digest: str, model: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", hexdigest):
        raise ModelNotFoundError(f"{model}: a layer's digest {digest!r} is not sha256:<hex>")
    path = root / "blobs" / f"sha256-{hexdigest}"
    if not path.is_file():
        raise ModelNotFoundError(f"{model}: blob {path.name} is missing from {root / 'blobs'}")
    return path


def _json(path: Path, limit: int, what: str) -> Any:
    try:
        if path.stat().st_size > limit:
            raise ModelNotFoundError(f"{path}: an Ollama {what} of over {limit:,} bytes")
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelNotFoundError(f"{path}: not a readable Ollama {what} ({exc})") from None


def pulled_models(root: Path | None = None) -> tuple[str, ...]:
    """Every model in Ollama's store, as ``ollama:NAME:TAG`` (``library`` names bare, as
    ``ollama list`` shows them), sorted; none when there is no store."""
    root = root or models_dir()
    base = root / "manifests" / REGISTRY
    if not base.is_dir():
        return ()
    names = []
    for manifest in sorted(base.glob("*/*/*")):
        if not manifest.is_file():
            continue
        namespace, model, tag = manifest.relative_to(base).parts
        name = model if namespace == "library" else f"{namespace}/{model}"
        names.append(f"{PREFIX}{name}:{tag}")
    return tuple(names)
