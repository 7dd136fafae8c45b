"""Start and stop a real vLLM (CPU build) OpenAI-compatible server on a tiny local model.

Used by ``conftest.py``; usable by hand too::

    python tests/integration/vllm_server.py            # start, print the URL, wait for Ctrl-C
    python tests/integration/vllm_server.py DIR --arch sliding --max-num-batched-tokens 512

The server runs in its own virtual environment (``<repo>/.venv-vllm``, made by
``scripts/vllm_cpu/install.sh``); this module only needs the standard library.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"
INSTALL_SCRIPT = "scripts/vllm_cpu/install.sh"
# The one opt-out for a machine without the engine: SERVEFIT_WITHOUT_VLLM=1 skips, with the
# reason, every test that needs the real vLLM; without it such a test fails (a run that
# silently tests nothing is worse than a red one).
WITHOUT_VLLM_ENV = "SERVEFIT_WITHOUT_VLLM"
CONCURRENT_STARTS = 2  # servers a module starts at once (run_concurrently)
# a server started beside another: vLLM's CPU build would pin both workers' OpenMP threads to
# the same core ("auto" binds local rank 0 to the last physical core, and reserves the rest);
# unbound, the scheduler spreads them
CONCURRENT_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def require_installed(path: Path, what: str, script: str) -> Path:
    """``path``, or the test fails naming ``script`` that installs it (skips only with
    ``SERVEFIT_WITHOUT_VLLM=1``, the one opt-out for the engines the suite installs)."""
    import os

    import pytest

    if not path.exists():
        message = (
            f"{what} {path} does not exist; run `{script}` from the repository root (or set "
            f"{WITHOUT_VLLM_ENV}=1 to skip the tests that need it)"
        )
        if os.environ.get(WITHOUT_VLLM_ENV) == "1":
            pytest.skip(message)
        pytest.fail(message, pytrace=False)
    return path


def require_vllm() -> Path:
    """The vLLM interpreter, or the test fails naming the install script."""
    return require_installed(VLLM_PYTHON, "the vLLM interpreter", INSTALL_SCRIPT)


MAKE_TINY_MODEL = Path(__file__).resolve().with_name("make_tiny_model.py")

HOST = "127.0.0.1"  # loopback only
MAX_MODEL_LEN = 4096
KV_CACHE_SPACE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE: the CPU KV cache, in GiB
STARTUP_TIMEOUT_S = 240.0
STOP_GRACE_S = 20.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def model_name(arch: str = "llama") -> str:
    """The served model name (and directory name) of one ``make_tiny_model.py --arch``."""
    return f"tiny-{arch}"


def build_tiny_model(work_dir: Path, python: Path = VLLM_PYTHON, arch: str = "llama") -> Path:
    """The tiny model under ``work_dir/tiny-<arch>``, built once and reused."""
    model_dir = Path(work_dir) / model_name(arch)
    if (model_dir / "BUILD_INFO.json").exists():
        return model_dir
    arch_args = [] if arch == "llama" else ["--arch", arch]
    subprocess.run(
        [str(python), str(MAKE_TINY_MODEL), str(model_dir), *arch_args],
        check=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        timeout=300,
    )
    return model_dir


def server_command(
    python: Path,
    model_dir: Path,
    port: int,
    *,
    served_model_name: str = "tiny-llama",
    extra_args: Sequence[str] = (),
) -> list[str]:
    # `python -m ...api_server`: the `vllm` console script does not run under the
    # vllm-cpu distribution name.
    return [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        served_model_name,
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--enforce-eager",
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--host",
        HOST,
        "--port",
        str(port),
        *extra_args,
    ]


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):  # servefit's venv, not the server's
        env.pop(key, None)
    env.update(
        VLLM_CPU_KVCACHE_SPACE=str(KV_CACHE_SPACE_GIB),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_LOGGING_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
    )
    return env


@dataclass
class VllmServer:
    base_url: str
    log_path: Path
    process: subprocess.Popen
    model_dir: Path
    port: int
    startup_seconds: float
    arch: str = "llama"
    served_model_name: str = "tiny-llama"
    extra_args: tuple[str, ...] = ()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def _get_json(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def _log_tail(log_path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _die_with_parent() -> None:  # runs in the child before exec
    """Ask the kernel to SIGTERM the server when the process that started it dies (Linux):
    a test run killed mid-way leaves no server behind. (servefit's launcher does the same;
    this helper also runs under vLLM's own interpreter, where servefit is not installed.)"""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def start_server(
    port: int,
    work_dir: Path,
    *,
    python: Path = VLLM_PYTHON,
    timeout_s: float = STARTUP_TIMEOUT_S,
) -> tuple[str, Path, subprocess.Popen]:
    """Build (or reuse) the tiny model, start the server, wait for ``/v1/models``.

    Returns ``(base_url, log_path, process)``. The server is the leader of its own process
    group, so :func:`stop_server` takes its engine-core child down with it.
    """
    server = start(port, work_dir, python=python, timeout_s=timeout_s)
    return server.base_url, server.log_path, server.process


def start(
    port: int,
    work_dir: Path,
    *,
    python: Path = VLLM_PYTHON,
    timeout_s: float = STARTUP_TIMEOUT_S,
    arch: str = "llama",
    extra_args: Sequence[str] = (),
    extra_env: dict[str, str] | None = None,
) -> VllmServer:
    """As :func:`start_server`, returning a :class:`VllmServer`.

    ``arch`` is ``make_tiny_model.py --arch`` (llama, moe, sliding, hybrid); the model is served
    as ``tiny-<arch>``. ``extra_args`` are appended to the server's command line (e.g.
    ``["--max-num-batched-tokens", "512"]``); ``extra_env`` is added to its environment.
    """
    pending = launch(
        port, work_dir, python=python, arch=arch, extra_args=extra_args, extra_env=extra_env
    )
    return wait_ready(pending, timeout_s=timeout_s)


@dataclass
class Launched:
    """A server process started by :func:`launch`, not yet known to answer."""

    server: VllmServer  # startup_seconds is 0 until wait_ready
    t0: float  # time.monotonic() at the launch


def launch(
    port: int,
    work_dir: Path,
    *,
    python: Path = VLLM_PYTHON,
    arch: str = "llama",
    extra_args: Sequence[str] = (),
    extra_env: dict[str, str] | None = None,
) -> Launched:
    """Build (or reuse) the tiny model and start its server without waiting for it: the
    start-up then runs beside whatever the caller does until :func:`wait_ready`. The server
    dies with the thread that launched it (``PR_SET_PDEATHSIG``), so launch from a thread
    that outlives it."""
    python = Path(python)
    if not python.exists():
        raise FileNotFoundError(
            f"{python} does not exist: run {INSTALL_SCRIPT} (from the repository root) first"
        )
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    model_dir = build_tiny_model(work_dir, python, arch)
    name = model_name(arch)
    extra = tuple(str(a) for a in extra_args)
    log_path = work_dir / f"vllm-server-{port}.log"
    t0 = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            server_command(python, model_dir, port, served_model_name=name, extra_args=extra),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**server_env(), **(extra_env or {})},
            cwd=work_dir,
            start_new_session=True,  # own session and process group
            # dies with the test process, even one killed before its fixtures' teardown
            preexec_fn=_die_with_parent,
        )
    server = VllmServer(
        base_url=f"http://{HOST}:{port}",
        log_path=log_path,
        process=process,
        model_dir=model_dir,
        port=port,
        startup_seconds=0.0,
        arch=arch,
        served_model_name=name,
        extra_args=extra,
    )
    return Launched(server=server, t0=t0)


def wait_ready(pending: Launched, *, timeout_s: float = STARTUP_TIMEOUT_S) -> VllmServer:
    """Wait until a launched server lists its model on ``/v1/models``; stop it and raise with
    its log's tail if it exits or stays silent ``timeout_s`` after its launch."""
    server, process = pending.server, pending.server.process
    deadline = pending.t0 + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"vLLM server exited with code {process.returncode} during startup; "
                f"log {server.log_path}:\n{_log_tail(server.log_path)}"
            )
        try:
            models = _get_json(f"{server.base_url}/v1/models", timeout=2.0)
            if models.get("data"):
                break
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            stop_server(process)
            raise TimeoutError(
                f"vLLM server did not answer {server.base_url}/v1/models within "
                f"{timeout_s:.0f} s; log {server.log_path}:\n{_log_tail(server.log_path)}"
            )
        time.sleep(1.0)
    server.startup_seconds = time.monotonic() - pending.t0
    return server


@dataclass
class Served:
    """What one start-query-stop run of :func:`serve_once` saw."""

    server: VllmServer  # stopped; its log stays
    metrics_text: str  # /metrics as the server answered before its one request
    usage: dict  # the request's usage block
    seconds: float  # from the launch to the stop


def serve_once(
    work_dir: Path,
    *,
    python: Path = VLLM_PYTHON,
    arch: str = "llama",
    extra_args: Sequence[str] = (),
) -> Served:
    """Start the ``arch`` server (unbound, so it may run beside another), read its
    ``/metrics``, send one 4-token completion of a 180-token prompt, stop it."""
    t0 = time.monotonic()
    server = start(
        free_port(),
        work_dir,
        python=python,
        arch=arch,
        extra_args=extra_args,
        extra_env=CONCURRENT_ENV,
    )
    try:
        with urllib.request.urlopen(f"{server.base_url}/metrics", timeout=10) as response:
            metrics_text = response.read().decode()
        body = {
            "model": server.served_model_name,
            "prompt": "the quick brown fox jumps over the lazy dog " * 20,
            "max_tokens": 4,
            "ignore_eos": True,
        }
        request = urllib.request.Request(
            f"{server.base_url}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            usage = json.load(response)["usage"]
    finally:
        stop_server(server.process)
    return Served(
        server=server, metrics_text=metrics_text, usage=usage, seconds=time.monotonic() - t0
    )


def run_concurrently(
    jobs: dict[str, Callable[[], T]], workers: int = CONCURRENT_STARTS
) -> dict[str, T | BaseException]:
    """Run independent start-query-stop jobs ``workers`` at a time; each job's result, or the
    exception it raised (its own test reports it, the others still run).

    A server's start-up is a chain of single-threaded steps (imports, the engine-core
    process, the profile run), so two start-ups on two cores take about the time of one.
    """
    results: dict[str, T | BaseException] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except Exception as exc:  # the job's failure belongs to the tests that use it
                results[name] = exc
    return results


def result_of(results: dict[str, T | BaseException], name: str) -> T:
    """One job's result from :func:`run_concurrently`, re-raising what the job raised."""
    value = results[name]
    if isinstance(value, BaseException):
        raise value
    return value


def stop_server(process: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> int | None:
    """SIGTERM the server's process group; SIGKILL it if still alive after ``grace_s``."""
    try:
        own_group = os.getpgid(process.pid) == process.pid  # started with start_new_session
    except ProcessLookupError:
        own_group = False

    def signal_all(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            if own_group:  # never our own group: only a group the server leads
                os.killpg(process.pid, sig)
            elif process.poll() is None:
                process.send_signal(sig)

    signal_all(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    signal_all(signal.SIGKILL)  # the group may outlive its leader (the engine-core child)
    try:
        return process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return None


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="start a vLLM CPU server on a tiny model")
    parser.add_argument("work_dir", nargs="?", type=Path, default=REPO_ROOT / ".vllm-work")
    parser.add_argument("--arch", default="llama", help="make_tiny_model.py --arch")
    args, extra = parser.parse_known_args(argv)  # unknown flags go to the server
    port = free_port()
    server = start(port, args.work_dir, arch=args.arch, extra_args=extra)
    print(f"{server.base_url} (log {server.log_path}, started in {server.startup_seconds:.1f} s)")
    try:
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(server.process)
    return 0


if __name__ == "__main__":
    sys.exit(main())
