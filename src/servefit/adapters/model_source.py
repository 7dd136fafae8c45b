"""Where a model's config comes from: a local path, the bundled catalog, or the Hub.

Resolution order for ``MODEL``:

1. an existing path: a ``config.json`` file, or a directory holding one (plus
   ``hf_quant_config.json`` and ``model.safetensors.index.json`` when present);
2. the bundled catalog, by Hugging Face id (works offline, first run included);
3. the Hugging Face Hub through ``huggingface_hub`` (its cache and ``HF_HUB_OFFLINE``
   apply), fetching only JSON files. No remote code is ever executed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefit.adapters.catalog import find_catalog_model, model_ids
from servefit.core.hf_config import spec_from_hf_config, state_dtype
from servefit.core.model_spec import ModelSpec
from servefit.errors import ConfigError, HubError, ModelNotFoundError

CONFIG_FILE = "config.json"
QUANT_CONFIG_FILE = "hf_quant_config.json"
SAFETENSORS_INDEX_FILE = "model.safetensors.index.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedModel:
    """A model spec and where its config came from."""

    spec: ModelSpec
    origin: str  # "path", "catalog" or "hub"
    source: str  # the path, the catalog entry's provenance, or the Hub id
    mamba_ssm_dtype: str | None
    checkpoint_bytes: int | None = None  # safetensors index total_size, when known
    published_params: dict[str, Any] | None = None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror})") from None


def _checkpoint_bytes(index: Any) -> int | None:
    if isinstance(index, dict):
        size = index.get("metadata", {}).get("total_size")
        if isinstance(size, int | float):
            return int(size)
    return None


def _from_path(path: Path) -> LoadedModel:
    folder = path if path.is_dir() else path.parent
    config_path = path / CONFIG_FILE if path.is_dir() else path
    if not config_path.is_file():
        raise ModelNotFoundError(f"{path}: no {CONFIG_FILE} there")
    config = _read_json(config_path)
    quant_path = folder / QUANT_CONFIG_FILE
    quant = _read_json(quant_path) if quant_path.is_file() else None
    index_path = folder / SAFETENSORS_INDEX_FILE
    index = _read_json(index_path) if index_path.is_file() else None
    spec = spec_from_hf_config(config, name=str(path), hf_quant_config=quant)
    return LoadedModel(
        spec=spec,
        origin="path",
        source=str(config_path),
        mamba_ssm_dtype=state_dtype(config),
        checkpoint_bytes=_checkpoint_bytes(index),
    )


HUB_CONNECT_TIMEOUT_S = 3.0


def _hub_reachable() -> bool:
    """One quick TCP connect to the Hub endpoint, so an offline machine fails in seconds
    instead of sitting through the client's retries."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=HUB_CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def _from_hub(model_id: str, revision: str | None) -> LoadedModel:
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )
        from huggingface_hub.utils import logging as hub_logging
    except ImportError:  # pragma: no cover - a declared dependency
        raise HubError("huggingface_hub is not installed; pass a local config path") from None

    unreachable = (
        f"{model_id!r} is not a local path and not in the bundled catalog, and the Hugging Face "
        "Hub could not be reached ({}). Pass a local config.json or model directory, or pick a "
        "bundled model (`servefit models`)."
    )

    hub_logging.set_verbosity_error()  # the client's retry chatter is not for our users
    # Unreachable Hub: answer from the local cache (anything fetched before) or fail fast.
    from huggingface_hub import constants

    local_only = constants.HF_HUB_OFFLINE or not _hub_reachable()

    def fetch(filename: str, *, required: bool) -> Any:
        try:
            path = hf_hub_download(
                model_id, filename, revision=revision, local_files_only=local_only
            )
        except LocalEntryNotFoundError:  # offline (HF_HUB_OFFLINE or no network) and not cached
            if not required:
                return None
            raise HubError(unreachable.format("offline, not in the local cache")) from None
        except EntryNotFoundError:
            if required:
                raise ModelNotFoundError(f"{model_id} has no {filename} on the Hub") from None
            return None
        except GatedRepoError:
            raise HubError(
                f"{model_id} is gated on the Hub: accept its license and set HF_TOKEN, or pass a "
                "local config.json"
            ) from None
        except RepositoryNotFoundError:
            raise ModelNotFoundError(
                f"{model_id!r} is not a local path, not in the bundled catalog "
                f"({len(model_ids())} models, see `servefit models`) and not a Hub repository"
            ) from None
        except (OSError, ValueError, HfHubHTTPError) as exc:  # DNS, proxy, HTTP, timeouts
            if not required:
                return None
            raise HubError(unreachable.format(type(exc).__name__)) from None
        # a file that arrived but cannot be read is a config error, not an unreachable Hub
        return _read_json(Path(path))

    config = fetch(CONFIG_FILE, required=True)
    quant = fetch(QUANT_CONFIG_FILE, required=False)
    index = fetch(SAFETENSORS_INDEX_FILE, required=False)
    spec = spec_from_hf_config(config, name=model_id, hf_quant_config=quant)
    return LoadedModel(
        spec=spec,
        origin="hub",
        source=f"huggingface.co/{model_id}" + (f"@{revision}" if revision else ""),
        mamba_ssm_dtype=state_dtype(config),
        checkpoint_bytes=_checkpoint_bytes(index),
    )


def load_model(model: str, *, revision: str | None = None, allow_hub: bool = True) -> LoadedModel:
    """Resolve ``model`` (path, catalog id or Hub id) to a :class:`LoadedModel`."""
    path = Path(model).expanduser()
    if path.exists():
        return _from_path(path)
    entry = find_catalog_model(model)
    if entry is not None:
        spec = spec_from_hf_config(
            entry.config, name=entry.model_id, hf_quant_config=entry.hf_quant_config
        )
        return LoadedModel(
            spec=spec,
            origin="catalog",
            source=entry.source,
            mamba_ssm_dtype=state_dtype(entry.config),
            published_params=entry.published_params,
        )
    if "/" not in model or model.startswith((".", "/", "~")):
        raise ModelNotFoundError(
            f"{model!r} is neither an existing path nor a Hugging Face id (org/name). "
            "`servefit models` lists the bundled catalog."
        )
    if not allow_hub:
        raise ModelNotFoundError(f"{model!r} is not in the bundled catalog and --offline is set")
    return _from_hub(model, revision)
