"""Planner speed: in-process plan latency, CLI cold start, and a 10,000-configuration sweep.

Run: python benchmarks/plan_speed.py     (prints a table; exits 0 whatever the numbers)

Targets (issue 11, on a 2-core machine): <= 5 ms per plan (warm); CLI cold start <= 0.15 s
for a capacity-only plan (``--no-performance --json``) and <= 0.35 s with the performance
section; <= 2 s for a 10,000-configuration sweep; <= 1 s for ``servefit fit`` over the whole
catalog. Cold starts are medians of 7 runs; on a
machine shared with other work they are slower, so the table also prints ``python -c pass``,
``python -c 'import click'`` and ``servefit --version`` measured in the same run as the
baselines to read them against (what is left of a target once Python and click have started).
The CLI runs byte-compiled, as an installed package does, through the console script's
entry point (``servefit.cli.entry``).

``--instructions`` also counts the CPU instructions of each cold start under valgrind
(``cachegrind``, when installed): a count the machine's load does not change, to compare
commits on a shared machine, and to see where the time goes (the CLI's imports, one frozen
dataclass per value type, the plan itself).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from servefit.adapters.catalog import gpu_catalog
from servefit.adapters.model_source import load_model
from servefit.core import kv_cache, memory, plan, weights
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.errors import InvalidArgumentError

MODELS = [
    "meta-llama/Llama-3.1-8B",
    "Qwen/Qwen3-30B-A3B",
    "deepseek-ai/DeepSeek-V3",
    "google/gemma-3-27b-it",
    "Qwen/Qwen3.6-27B-FP8",
    "nvidia/Qwen3.6-27B-NVFP4",
]
GPUS = ["H100-SXM", "A40", "A100-80GB-SXM", "H200-SXM", "L40S"]


def _clear_caches() -> None:
    for fn in (
        weights.weight_tensors,
        weights.count_params,
        weights.weight_bytes,
        kv_cache.layer_specs,
        kv_cache.kv_layout,
        memory.activation_peak_bytes,
        plan.check_parallel_layout,
        plan._per_gpu_sizes,
    ):
        fn.cache_clear()


def plan_latency() -> list[tuple[str, float, float]]:
    rows = []
    gpu = gpu_catalog().get("H100-SXM")
    for model_id in MODELS:
        loaded = load_model(model_id, allow_hub=False)
        cold = []
        for _ in range(5):
            _clear_caches()
            start = time.perf_counter()
            plan_capacity(
                loaded.spec,
                gpu,
                ServeSettings(max_model_len=8192),
                mamba_ssm_dtype=loaded.mamba_ssm_dtype,
            )
            cold.append(time.perf_counter() - start)
        warm = []
        for i in range(50):
            start = time.perf_counter()
            plan_capacity(
                loaded.spec,
                gpu,
                ServeSettings(max_model_len=8192 + i),
                mamba_ssm_dtype=loaded.mamba_ssm_dtype,
            )
            warm.append(time.perf_counter() - start)
        rows.append((model_id, statistics.median(cold), statistics.median(warm)))
    return rows


def deployment_latency() -> tuple[float, float]:
    """The application layer's plan (capacity, verdict and, when it does not fit, the
    verified recommendation), warm: what every command pays before rendering."""
    from servefit.app.deployment import Deployment, Hardware
    from servefit.app.plan import plan_deployment

    def median_s(max_model_len: int) -> float:
        samples = []
        for i in range(30):
            d = Deployment(
                model="Qwen/Qwen3.6-27B-FP8",
                hardware=Hardware(gpu="A40"),
                settings=ServeSettings(max_model_len=max_model_len + i, max_num_seqs=128),
                allow_hub=False,
            )
            start = time.perf_counter()
            plan_deployment(d, with_performance=False)
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    median_s(32768)  # warm the model's caches
    return median_s(32768), median_s(262144)  # fits; does not (a recommendation is searched)


# the console script's own entry point, as ``servefit`` runs it
CLI = [sys.executable, "-c", "import sys; from servefit.cli.entry import main; sys.exit(main())"]
SEED = ["plan", "Qwen/Qwen3.6-27B-FP8", "--gpu", "A40", "--max-model-len", "32768"]
SEED += ["--max-num-seqs", "128"]  # the README's quick start: it fits
# what each cold start runs, after the program (the CLI, or python itself)
COLD_CASES = {
    "python": ("-c", "pass"),
    "click": ("-c", "import click"),
    "version": ("--version",),
    "capacity": (*SEED, "--no-performance", "--json"),
    "performance": (*SEED, "--json"),
}


def _bytecode_env() -> dict[str, str]:
    cache = tempfile.mkdtemp(prefix="servefit-pycache-")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPYCACHEPREFIX": cache}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def cli_instructions() -> dict[str, int] | None:
    """Instructions each cold start executes (valgrind's cachegrind), or None without it."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    env = _bytecode_env()
    subprocess.run([*CLI, *COLD_CASES["performance"]], env=env, capture_output=True, check=True)
    counts = {}
    for name, args in COLD_CASES.items():
        program = [sys.executable] if name in ("python", "click") else CLI
        tool = ["--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
        run = subprocess.run(
            [valgrind, *tool, *program, *args],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        found = re.search(r"I\s+refs:\s+([\d,]+)", run.stderr)
        if found is None:
            return None
        counts[name] = int(found.group(1).replace(",", ""))
    return counts


def cli_cold_start() -> dict[str, float]:
    # A fresh process with the package byte-compiled, as pip installs it: bytecode goes to a
    # temporary cache (PYTHONDONTWRITEBYTECODE, set on some machines, would otherwise make
    # every run recompile servefit's sources) and one warm-up run fills it.
    env = _bytecode_env()
    cli, seed = CLI, SEED

    def seconds(*args: str, program: list[str] = cli) -> float:
        start = time.perf_counter()
        subprocess.run([*program, *args], env=env, capture_output=True, check=True)
        return time.perf_counter() - start

    runs: dict[str, list[float]] = {
        "python": [],
        "click": [],
        "version": [],
        "capacity": [],
        "performance": [],
    }
    seconds(*seed, "--json")  # warm-up: compiles the bytecode of everything a plan imports
    for _ in range(7):
        runs["python"].append(seconds("-c", "pass", program=[sys.executable]))
        runs["click"].append(seconds("-c", "import click", program=[sys.executable]))
        runs["version"].append(seconds("--version"))
        runs["capacity"].append(seconds(*seed, "--no-performance", "--json"))
        runs["performance"].append(seconds(*seed, "--json"))
    return {name: statistics.median(values) for name, values in runs.items()}


def sweep() -> tuple[int, float]:
    """Models x GPUs x TP x context x concurrency x KV dtype: 10,000 plans, cold caches."""
    _clear_caches()
    loaded = [load_model(m, allow_hub=False) for m in MODELS]
    gpus = [gpu_catalog().get(g) for g in GPUS]
    lengths = [2048, 4096, 8192, 16384, 32768, 40960, 65536, 131072, 262144]
    concurrencies = [1, 8, 32, 64, 256]
    grid = list(
        itertools.product(loaded, gpus, (1, 2, 4, 8), lengths, concurrencies, ("auto", "fp8"))
    )[:10_000]
    start = time.perf_counter()
    count = 0
    for model, gpu, tp, length, conc, kv in grid:
        with contextlib.suppress(InvalidArgumentError):  # a TP that does not divide the heads
            plan_capacity(
                model.spec,
                gpu,
                ServeSettings(
                    tensor_parallel_size=tp,
                    max_model_len=length,
                    concurrency=conc,
                    kv_cache_dtype=kv,
                ),
                mamba_ssm_dtype=model.mamba_ssm_dtype,
                with_suggestions=False,
            )
        count += 1
    return count, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count each cold start's CPU instructions under valgrind (load-independent)",
    )
    options = parser.parse_args()
    print("servefit planner speed (median of repeats)\n")
    print(f"{'what':58s} {'measured':>12s} {'target':>10s}")
    for model_id, cold, warm in plan_latency():
        print(f"{'plan, first for the model: ' + model_id:58s} {cold * 1e3:9.2f} ms {'':>10s}")
        print(
            f"{'plan, model already seen:  ' + model_id:58s} {warm * 1e3:9.2f} ms {'<= 5 ms':>10s}"
        )
    fits_s, recommend_s = deployment_latency()
    print(f"{'plan_deployment, fits (verdict)':58s} {fits_s * 1e3:9.2f} ms {'<= 5 ms':>10s}")
    print(
        f"{'plan_deployment, does not fit (+ recommendation)':58s} {recommend_s * 1e3:9.2f} ms "
        f"{'<= 5 ms':>10s}"
    )
    cold = cli_cold_start()
    rows = [
        ("CLI cold start: capacity-only plan (--no-performance --json)", "capacity", "<= 0.15 s"),
        ("CLI cold start: plan --json with the performance section", "performance", "<= 0.35 s"),
        ("baseline: servefit --version", "version", ""),
        ("baseline: python -c 'import click' (the CLI's framework)", "click", ""),
        ("baseline: python -c pass", "python", ""),
    ]
    for label, key, target in rows:
        print(f"{label:58s} {cold[key]:10.3f} s {target:>10s}")
    counts = cli_instructions() if options.instructions else None
    if options.instructions and counts is None:
        print("(--instructions: valgrind is not installed; no counts)")
    for name, value in (counts or {}).items():
        label = f"instructions, cold start: {name} ({' '.join(COLD_CASES[name])[:28]})"
        print(f"{label:58s} {value / 1e6:8.0f} M")
    count, seconds = sweep()
    print(
        f"{f'sweep of {count:,} configurations (6 models x 5 GPUs x ...)':58s} "
        f"{seconds:10.3f} s {'<= 2 s':>10s}"
    )
    rows, seconds = fit_catalog()
    print(
        f"{f'servefit fit: the whole catalog ({rows} rows, RTX-4090)':58s} "
        f"{seconds:10.3f} s {'<= 1 s':>10s}"
    )


def fit_catalog() -> tuple[int, float]:
    """``servefit fit --gpu RTX-4090`` in process: every bundled model, as published and in
    fp8 (issue 26's target: under a second for the whole catalog)."""
    from servefit.adapters.catalog import model_ids
    from servefit.app.deployment import Hardware
    from servefit.app.fit import fit_models

    ids = model_ids()
    t0 = time.perf_counter()
    outcome = fit_models(Hardware(gpu="RTX-4090"), ids)
    return len(outcome.rows), time.perf_counter() - t0


if __name__ == "__main__":
    main()
