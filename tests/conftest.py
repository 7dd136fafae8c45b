"""Shared fixtures: catalog models and GPUs, loaded the way the CLI loads them."""

from __future__ import annotations

import pytest

from servefit.adapters.catalog import gpu_catalog
from servefit.adapters.model_source import LoadedModel, load_model
from servefit.core.hardware import GpuSpec


@pytest.fixture(scope="session")
def catalog_model():
    cache: dict[str, LoadedModel] = {}

    def get(model_id: str) -> LoadedModel:
        if model_id not in cache:
            cache[model_id] = load_model(model_id, allow_hub=False)
        return cache[model_id]

    return get


@pytest.fixture(scope="session")
def gpu():
    def get(name: str) -> GpuSpec:
        return gpu_catalog().get(name)

    return get
