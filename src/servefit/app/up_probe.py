"""What ``servefit up`` asks the engine it launched: ready (``/health``, ``/v1/models``),
the block size it runs with (``/metrics``), with the API key the engine demands (its own
``--api-key``, else ``VLLM_API_KEY``: vLLM guards ``/v1`` with it, not ``/health``)."""

from __future__ import annotations

import contextlib
import json
import re
import urllib.error
import urllib.request

from servefit.adapters.vllm_log import LogFact


def engine_api_key(command: list[str], env: dict[str, str]) -> str | None:
    """The key the engine will demand (``--api-key KEY``, else ``VLLM_API_KEY``): up's own
    probes and smoke bench send it, as any client of that server must."""
    for i, arg in enumerate(command):
        if arg.startswith("--api-key="):
            return arg.partition("=")[2] or None
        if arg == "--api-key" and i + 1 < len(command) and not command[i + 1].startswith("--"):
            return command[i + 1]
    return env.get("VLLM_API_KEY") or None


def _get(url: str, timeout_s: float = 3.0, api_key: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, b""


def is_ready(base_url: str, api_key: str | None = None) -> bool:
    """``/health`` answers 200 and ``/v1/models`` lists a model."""
    status, _ = _get(f"{base_url}/health")
    if status != 200:
        return False
    status, body = _get(f"{base_url}/v1/models", api_key=api_key)
    if status != 200:
        return False
    with contextlib.suppress(ValueError):
        return bool(json.loads(body).get("data"))
    return False


def served_block_size(base_url: str, api_key: str | None = None) -> LogFact | None:
    """The block size the engine runs with, from ``vllm:cache_config_info`` on ``/metrics``
    (vLLM logs it only when a hybrid model raises it)."""
    status, body = _get(f"{base_url}/metrics", timeout_s=10, api_key=api_key)
    if status != 200:
        return None
    for line in body.decode(errors="replace").splitlines():
        if line.startswith("vllm:cache_config_info{"):
            m = re.search(r'\bblock_size="(\d+)"', line)
            if m:
                return LogFact(
                    quantity="block_size",
                    value=int(m.group(1)),
                    line=f"/metrics vllm:cache_config_info block_size={m.group(1)}",
                )
    return None
