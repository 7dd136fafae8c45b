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
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from servefit.adapters.catalog import find_catalog_model, model_ids
from servefit.adapters.ollama_store import find_ollama_model, is_ollama_name
from servefit.core.hf_config import spec_from_hf_config, state_dtype
from servefit.core.hf_values import show
from servefit.core.model_spec import ModelSpec
from servefit.errors import ConfigError, HubError, ModelNotFoundError

CONFIG_FILE = "config.json"
QUANT_CONFIG_FILE = "hf_quant_config.json"
SAFETENSORS_INDEX_FILE = "model.safetensors.index.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedModel:
    """A model spec and where its config came from."""

    spec: ModelSpec
    origin: str  # "path", "catalog", "hub" or "upload" (a config sent to `servefit ui`)
    source: str  # the path, the catalog entry's provenance, or the Hub id
    mamba_ssm_dtype: str | None
    checkpoint_bytes: int | None = None  # safetensors index total_size, when known
    published_params: dict[str, Any] | None = None
    # the catalog entry's confidence ("high", "medium", "low", ...) and notes; None off it
    catalog_confidence: str | None = None
    catalog_note: str | None = None
    # an EAGLE-3 head's own vocabulary (``draft_vocab_size``: its LM head's rows)
    draft_vocab_size: int | None = None
    # the context the model is served with unless told otherwise (an Ollama model's num_ctx)
    default_max_model_len: int | None = None


def _draft_vocab_size(config: Any) -> int | None:
    value = config.get("draft_vocab_size") if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# The deepest JSON a config file may nest: Hugging Face configs nest 3 levels (a config,
# its text_config, its quantization_config's groups); Python's parser gives up near 1,000.
MAX_JSON_DEPTH = 32
# The longest integer a config file may spell: 2^64 has 20 digits; Python refuses > 4,300.
MAX_INT_DIGITS = 40
# Byte-order marks, longest first (UTF-32's little-endian mark begins like UTF-16's).
_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xef\xbb\xbf", "UTF-8 with a byte-order mark"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def _decode(path: Path | str, data: bytes) -> str:
    """A JSON file's text. transformers (and so vLLM) reads configs as UTF-8 without a
    byte-order mark: anything else is refused with the encoding named, never guessed at."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            raise ConfigError(
                f"{path}: the file is {encoding}; transformers and vLLM read configs as UTF-8 "
                "without a byte-order mark. Re-save it as plain UTF-8"
            )
    if len(data) >= 2 and (data[0] == 0 or data[1] == 0):  # '{' + NUL: UTF-16/32, no mark
        raise ConfigError(
            f"{path}: the file looks like UTF-16 or UTF-32 (NUL bytes between characters); "
            "transformers and vLLM read configs as UTF-8. Re-save it as UTF-8"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = data[exc.start]
        raise ConfigError(
            f"{path}: not UTF-8 (perhaps Latin-1 or Windows-1252): byte 0x{byte:02x} at offset "
            f"{exc.start} is not valid UTF-8; transformers and vLLM read configs as UTF-8. "
            "Re-save it as UTF-8"
        ) from None


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ConfigError(
            f"an integer of {len(text.lstrip('-')):,} digits (the most a config value needs "
            f"is {MAX_INT_DIGITS})"
        )
    return int(text)


def _depth_over(value: Any, limit: int) -> bool:
    """Does ``value`` nest deeper than ``limit``? (Iterative: the value may be deep.)"""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        if isinstance(node, dict | list):
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _read_json(path: Path) -> Any:
    """A JSON file, decoded and parsed defensively: every failure is a ``ConfigError``
    naming the file and what is wrong with it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror})") from None
    return parse_json_bytes(data, path)


def parse_json_bytes(data: bytes, path: Path | str) -> Any:
    """JSON content (a file read, or one uploaded to ``servefit ui``) parsed as
    :func:`_read_json` parses a file; ``path`` only names it in the errors."""
    text = _decode(path, data)
    try:
        value = json.loads(text, parse_int=_bounded_int)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except ConfigError as exc:  # from _bounded_int
        raise ConfigError(f"{path}: {exc}") from None
    except RecursionError:
        raise ConfigError(
            f"{path}: JSON nested too deeply to parse (a config nests a few levels; the most "
            f"servefit reads is {MAX_JSON_DEPTH})"
        ) from None
    if _depth_over(value, MAX_JSON_DEPTH):
        raise ConfigError(
            f"{path}: JSON nested more than {MAX_JSON_DEPTH} levels deep (a config nests a few)"
        )
    return value


# A checkpoint larger than this is a wrong index: 10^14 parameters (servefit's limit) x 4
# bytes (fp32) is 4 x 10^14 bytes.
MAX_CHECKPOINT_BYTES = 4 * 10**14


def _checkpoint_bytes(index: Any, where: str = SAFETENSORS_INDEX_FILE) -> int | None:
    """``metadata.total_size`` of a safetensors index: the checkpoint's bytes, or None
    when the index does not say. A malformed index is a ``ConfigError``."""
    if index is None:
        return None
    if not isinstance(index, dict):
        raise ConfigError(f"{where}: a safetensors index must be a JSON object, got {show(index)}")
    metadata = index.get("metadata")
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise ConfigError(f"{where}: metadata must be a JSON object, got {show(metadata)}")
    size = metadata.get("total_size")
    if size is None:
        return None
    if isinstance(size, float) and size.is_integer():
        size = int(size)  # some writers emit 1.6e10
    if isinstance(size, bool) or not isinstance(size, int):
        raise ConfigError(f"{where}: metadata.total_size must be bytes, got {show(size)}")
    if not 0 < size <= MAX_CHECKPOINT_BYTES:
        raise ConfigError(
            f"{where}: metadata.total_size must be 1 to {MAX_CHECKPOINT_BYTES:.0e} bytes "
            f"(10^14 fp32 parameters), got {show(size)}"
        )
    return size


def _from_gguf(path: Path) -> LoadedModel:
    from servefit.adapters.gguf_file import gguf_spec

    spec, file_bytes = gguf_spec(path)
    return LoadedModel(
        spec=spec,
        origin="path",
        source=str(path),
        mamba_ssm_dtype=None,
        checkpoint_bytes=file_bytes,
    )


def _from_path(path: Path) -> LoadedModel:
    if path.is_file() and path.suffix.lower() == ".gguf":
        return _from_gguf(path)
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
        checkpoint_bytes=_checkpoint_bytes(index, str(index_path)),
        draft_vocab_size=_draft_vocab_size(config),
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
            raise HubError(
                unreachable.format("offline, not in the local cache") + _close_hint(model_id)
            ) from None
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
                f"({len(model_ids())} models, see `servefit models`) and not a Hub repository."
                + _close_hint(model_id)
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
        draft_vocab_size=_draft_vocab_size(config),
    )


def model_from_config(
    config: Any, *, name: str, source: str, hf_quant_config: Any = None
) -> LoadedModel:
    """A model from a config already in memory (a config.json uploaded to ``servefit ui``):
    read as a config file is read, no path touched."""
    spec = spec_from_hf_config(config, name=name, hf_quant_config=hf_quant_config)
    return LoadedModel(
        spec=spec, origin="upload", source=source, mamba_ssm_dtype=state_dtype(config)
    )


# huggingface_hub's validate_repo_id: org/name, each part at most 96 characters of these
HUB_ID_PART_CHARS = 96
HUB_ID_RE = re.compile(r"[A-Za-z0-9_.-]{1,96}/[A-Za-z0-9_.-]{1,96}")
SHOWN_NAME_CHARS = 80  # of a model argument quoted in an error


CLOSE_ENTRIES = 3  # bundled ids suggested for one that is not bundled


def close_entries(model: str) -> list[str]:
    """The bundled ids nearest ``model`` (``Qwen/Qwen2.5-7B-Instruct`` -> the base
    ``Qwen/Qwen2.5-7B``, its siblings): by the whole id, then by the name after the org."""
    import difflib

    ids = list(model_ids())
    by_lower = {i.lower(): i for i in ids}
    wanted = model.lower()
    # the checkpoint it was derived from first (an -Instruct, -AWQ or -FP8 of a bundled id)
    found = sorted((i for i in by_lower if wanted.startswith(i) and i != wanted), key=len)[::-1]
    found += difflib.get_close_matches(wanted, list(by_lower), n=CLOSE_ENTRIES, cutoff=0.6)
    if not found:
        names = {i.rpartition("/")[2]: i for i in by_lower}
        name = wanted.rpartition("/")[2]
        found = [names[n] for n in difflib.get_close_matches(name, list(names), cutoff=0.6)]
    return [by_lower[f] for f in dict.fromkeys(found)][:CLOSE_ENTRIES]


def _close_hint(model: str) -> str:
    near = close_entries(model)
    if not near:
        return ""
    return (
        f" Close bundled entries: {', '.join(near)} (a sibling may differ in its context or "
        "quantization: give its config.json to plan it exactly)."
    )


def _shown(model: str) -> str:
    """The model argument as an error quotes it: a 600-character name is cut."""
    if len(model) <= SHOWN_NAME_CHARS:
        return repr(model)
    return f"{model[:SHOWN_NAME_CHARS]!r}... ({len(model)} characters)"


def _is_existing_path(path: Path, model: str) -> bool:
    """Whether ``model`` names an existing file or folder; a name the file system cannot
    hold (too long, a NUL byte) is a clear error, not an internal one."""
    try:
        return path.exists()
    except (OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise ModelNotFoundError(
            f"{_shown(model)} cannot be a path here ({reason}) and is no catalog or Hub id: "
            "give a model folder, a config.json, or a Hugging Face id (org/name)"
        ) from None


def load_model(
    model: str, *, revision: str | None = None, allow_hub: bool = True, allow_path: bool = True
) -> LoadedModel:
    """Resolve ``model`` (path, catalog id or Hub id) to a :class:`LoadedModel`.
    ``allow_path=False`` (the web page's requests) never reads a local file."""
    if allow_path and is_ollama_name(model):  # a model Ollama pulled: its GGUF blob
        pulled = find_ollama_model(model)
        return replace(
            _from_gguf(pulled.gguf_path),
            origin="ollama",
            source=f"{model} ({pulled.gguf_path})",
            default_max_model_len=pulled.num_ctx,
        )
    path = Path(model).expanduser()
    if allow_path and _is_existing_path(path, model):
        return _from_path(path)
    loaded = _from_catalog(model)
    if loaded is not None:
        return loaded
    if "/" not in model or model.startswith((".", "/", "~")):
        raise ModelNotFoundError(
            f"{_shown(model)} is neither an existing path nor a Hugging Face id (org/name). "
            "`servefit models` lists the bundled catalog."
        )
    if not HUB_ID_RE.fullmatch(model):
        raise ModelNotFoundError(
            f"{_shown(model)} is not a Hugging Face id: the Hub's ids are org/name, each part "
            f"at most {HUB_ID_PART_CHARS} letters, digits, '-', '_' or '.'; nor is it an "
            "existing path"
        )
    if not allow_hub:
        raise ModelNotFoundError(
            f"{model!r} is not in the bundled catalog and --offline is set." + _close_hint(model)
        )
    return _from_hub(model, revision)


@lru_cache(maxsize=128)
def _from_catalog(model: str) -> LoadedModel | None:
    """A bundled model, parsed once per process (the catalog is read-only data, so a
    process that plans it many times, the web page or a search, parses it once)."""
    entry = find_catalog_model(model)
    if entry is None:
        return None
    spec = spec_from_hf_config(
        entry.config, name=entry.model_id, hf_quant_config=entry.hf_quant_config
    )
    return LoadedModel(
        spec=spec,
        origin="catalog",
        source=entry.source,
        mamba_ssm_dtype=state_dtype(entry.config),
        published_params=entry.published_params,
        catalog_confidence=entry.confidence.strip().rstrip(".").lower(),
        catalog_note=entry.notes,
    )
