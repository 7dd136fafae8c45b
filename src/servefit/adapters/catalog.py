"""The bundled catalogs: GPUs (``data/gpus.toml``), model configs (``data/models/``) and the
performance model's efficiency factors (``data/efficiency.toml``).

Both are data files shipped inside the package, each entry with its source. Loading is
cached: a CLI call reads the GPU table once and only the one model file it needs.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servefit.core.hardware import GpuCatalog, GpuSpec, gpu_from_row, normalise_gpu_name
from servefit.errors import ConfigError, InvalidArgumentError

if TYPE_CHECKING:  # the performance and cost models load only when a plan predicts speed
    from servefit.core.cost import ApiPrice
    from servefit.core.roofline import EfficiencyTable

# the package's data folder (servefit installs as plain files, never zipped; a Path costs
# nothing at start-up where importlib.resources imports zipfile and tempfile)
DATA_DIR = Path(__file__).resolve().parent.parent / "data"


def _data_file(name: str) -> Path:
    return DATA_DIR / name


@cache
def gpu_catalog() -> GpuCatalog:
    """The hardware catalog, parsed once per process."""
    raw = tomllib.loads(_data_file("gpus.toml").read_text(encoding="utf-8"))
    if raw.get("schema_version") != 1:
        raise ConfigError(f"gpus.toml: unsupported schema_version {raw.get('schema_version')!r}")
    return GpuCatalog.from_rows(raw["gpu"])


_GPU_TABLE = "\n[[gpu]]\n"
_NAME_LINE = re.compile(r"^(?:name|aliases) = (.*)$", re.MULTILINE)


@lru_cache(maxsize=256)
def find_gpu(name: str) -> GpuSpec:
    """One catalog GPU by name or alias, as ``gpu_catalog().get(name)`` finds it, without
    parsing the whole catalog: only the table whose name or alias matches is parsed (a
    plan's cold start). Anything else (an unknown name, which gets suggestions) goes
    through the full catalog."""
    if not gpu_catalog.cache_info().currsize:  # parsed already: the index is faster
        key = normalise_gpu_name(name)
        text = _data_file("gpus.toml").read_text(encoding="utf-8")
        header, *tables = text.split(_GPU_TABLE)
        if "\nschema_version = 1\n" in header:
            matches = [t for t in tables if key in _table_keys(t)]
            if len(matches) == 1:
                return gpu_from_row(tomllib.loads(matches[0]))
    return gpu_catalog().get(name)


def _table_keys(table: str) -> set[str]:
    """The normalised name and aliases of one ``[[gpu]]`` table's text."""
    keys: set[str] = set()
    for value in _NAME_LINE.findall(table):
        keys.update(normalise_gpu_name(v) for v in re.findall(r'"([^"]*)"', value))
    return keys


@cache
def efficiency_table() -> EfficiencyTable:
    """The performance model's efficiency factors per hardware class and engine."""
    from servefit.core.roofline import EfficiencyTable, profile_from_row

    raw = tomllib.loads(_data_file("efficiency.toml").read_text(encoding="utf-8"))
    if raw.get("schema_version") != 1:
        raise ConfigError(
            f"efficiency.toml: unsupported schema_version {raw.get('schema_version')!r}"
        )
    return EfficiencyTable(tuple(profile_from_row(row) for row in raw["profile"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogModel:
    """One bundled model: its config values and where they come from."""

    model_id: str
    config: dict[str, Any]
    hf_quant_config: dict[str, Any] | None
    source: str
    confidence: str
    notes: str
    published_params: dict[str, Any] | None


def _file_name(model_id: str) -> str:
    return model_id.replace("/", "__") + ".json"


@cache
def model_ids() -> tuple[str, ...]:
    """Every Hugging Face id in the bundled catalog."""
    folder = _data_file("models")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".json"))
    return tuple(n[: -len(".json")].replace("__", "/") for n in names)


@cache
def _ids_by_lower() -> dict[str, str]:
    return {m.lower(): m for m in model_ids()}


def find_catalog_model(model_id: str) -> CatalogModel | None:
    """The bundled entry for ``model_id`` (case-insensitive), or None."""
    exact = _ids_by_lower().get(model_id.lower())
    if exact is None:
        return None
    raw = json.loads(_data_file("models").joinpath(_file_name(exact)).read_text(encoding="utf-8"))
    return CatalogModel(
        model_id=raw["id"],
        config=raw["config"],
        hf_quant_config=raw.get("hf_quant_config"),
        source=raw["source"],
        confidence=raw["confidence"],
        notes=raw.get("notes", ""),
        published_params=raw.get("published_params"),
    )


@cache
def _prices() -> dict[str, Any]:
    raw = tomllib.loads(_data_file("prices.toml").read_text(encoding="utf-8"))
    if raw.get("schema_version") != 1:
        raise ConfigError(f"prices.toml: unsupported schema_version {raw.get('schema_version')!r}")
    return raw


def gpu_price(gpu_name: str) -> tuple[float, str] | None:
    """(on-demand $/GPU-hour, where and when it was seen) for a catalog GPU, if known."""
    for row in _prices()["gpu_hour"]:
        if row["gpu"] == gpu_name:
            return float(row["usd_per_gpu_hour"]), f"{row['provider']}, {row['date']}"
    return None


def api_price(name: str) -> ApiPrice:
    """A per-token API price from the catalog, by (case-insensitive) name."""
    from servefit.core.cost import ApiPrice

    rows = _prices()["api"]
    for row in rows:
        if row["name"].lower() == name.lower():
            return ApiPrice(
                name=f"{row['name']} ({row['provider']}, {row['date']})",
                usd_per_million_input_tokens=float(row["usd_per_million_input_tokens"]),
                usd_per_million_output_tokens=float(row["usd_per_million_output_tokens"]),
                source=row["source"],
            )
    known = ", ".join(row["name"] for row in rows)
    raise InvalidArgumentError(f"no API price named {name!r}; known: {known}")
