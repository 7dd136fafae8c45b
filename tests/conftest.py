"""Shared fixtures: catalog models and GPUs, loaded the way the CLI loads them; every test's
run history in its own temporary file."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

from servefit.adapters.catalog import gpu_catalog
from servefit.adapters.model_source import LoadedModel, load_model
from servefit.core.hardware import GpuSpec

# Set on import, before any other conftest (tests/ui's imports a module that copies
# os.environ into its subprocesses' env) or test module is loaded: no test run writes the
# user's own history, whatever runs the commands.
_HISTORY_DIR = tempfile.mkdtemp(prefix="servefit-history-")
os.environ["SERVEFIT_DB"] = str(Path(_HISTORY_DIR) / "history.sqlite")


# Every property test is seeded: the same examples on every run (a red CI run is the same
# red run on a laptop), none kept between runs. HYPOTHESIS_PROFILE=explore draws afresh.
settings.register_profile("seeded", derandomize=True, database=None)
settings.register_profile("explore", database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "seeded"))


def pytest_unconfigure(config):
    shutil.rmtree(_HISTORY_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def history_db(tmp_path_factory, monkeypatch):
    """Commands record their runs (bench, up, report, plan --save): each test gets its own
    history file, and subprocesses inherit it, so no test writes the user's data directory."""
    path = tmp_path_factory.mktemp("history") / "history.sqlite"
    monkeypatch.setenv("SERVEFIT_DB", str(path))
    return path


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
