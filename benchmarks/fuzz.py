"""Hostile input: model configs and flags, mutated, planned in-process, counted per class.

Run: python benchmarks/fuzz.py [--cases 10000] [--flag-cases 500] [--artifact-cases 1000]
[--seed 0] (prints a table per kind: configs, flags, and ``benchmarks/fuzz_artifacts.py``'s
bench records, preflight facts and calibration profiles; exits 0 whatever the counts; a run
of 10,000 configs takes ~5 minutes on a 2-core machine, 1,000 artifacts of each kind ~7).

Each config case takes a bundled config (``src/servefit/data/models``), mutates it (a value
set to NaN, Infinity, 1e308, a 5,000-digit integer, a negative or zero count, a bool, a
string, a list, 100,000-deep nesting; a key deleted or inserted; the file re-encoded as
UTF-16, Latin-1 or with a BOM, truncated; a junk ``hf_quant_config.json`` or
``model.safetensors.index.json`` next to it), writes it to a directory and plans it with
``plan_deployment`` on an H100 (capacity only: the config is what is fuzzed). Each flag case
runs ``servefit plan`` in-process (``cli.main``) with random, often hostile, flag values.

Classes:

- *clean error*: a ``ServefitError`` (exit 2 at the CLI);
- *plausible*: a plan whose numbers are finite and non-negative (a negative KV-cache budget
  is how a plan says "does not fit"), whose parameters are within 2x of the unmutated
  config's unless a size field changed, and that was not built from a value known to be
  wrong (a negative count, NaN, an unknown ``--dtype``, ...);
- *implausible*: a plan that breaks one of those;
- *crash*: any other exception (exit 3 at the CLI);
- *hang*: over the per-case time limit, or out of memory on the way.

The test suite (``tests/property/test_fuzz_configs.py``) draws the same mutations with
Hypothesis and holds the invariant "clean error or plausible".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import random
import resource
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLASSES = ("clean error", "plausible", "implausible", "crash", "hang")
GPU = "H100"
CONFIG_TIME_LIMIT_S = 5.0  # a capacity plan takes ~25 ms
FLAG_TIME_LIMIT_S = 20.0  # a plan with the performance section takes ~1 s
MEMORY_HEADROOM_BYTES = 3 * 2**30  # over this much growth in one case counts as a hang

# the config cases live beside this file; the tests load this module by path, so its folder
# is put on the import path for them too
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_config_cases import (  # noqa: E402
    ENCODINGS,  # noqa: F401 (fuzz_artifacts.py mutates its files with the same values)
    NESTED,  # noqa: F401
    VALUES,  # noqa: F401
    Chooser,
    ConfigCase,
    Seed,
    mutate,
    seeds,
)

# -- judging one result --------------------------------------------------------------------

# a verdict's margin is what is to spare, negative when the plan is short
NEGATIVE_OK = frozenset(
    {
        "headroom_bytes_per_gpu",
        "kv_cache_memory_bytes",
        "spare_kv_cache_fraction",
        "spare_kv_cache_bytes",
        "spare_kv_cache_tokens",
    }
)


def _numbers(doc: Any, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _numbers(value, key)
    elif isinstance(doc, list):
        for value in doc:
            yield from _numbers(value, path)
    elif isinstance(doc, int | float) and not isinstance(doc, bool):
        yield path, doc


def implausible_numbers(doc: dict[str, Any]) -> list[str]:
    """Numbers a plan document must never hold: NaN, infinities, negative counts."""
    bad = []
    for name, value in _numbers(doc):
        if not math.isfinite(value) or (value < 0 and name not in NEGATIVE_OK):
            bad.append(f"{name}={value}")
    return bad


def judge_outcome(outcome: Any, case: ConfigCase, baseline: int | None) -> tuple[str, str]:
    from servefit.adapters.plan_document import outcome_document

    doc = json.loads(outcome_document(outcome).model_dump_json())
    bad = implausible_numbers(doc)
    total = outcome.capacity.params.total
    if bad:
        return "implausible", ", ".join(bad[:3])
    if not 0 < total < 1e14:
        return "implausible", f"{total:.3g} parameters"
    if case.is_bad_value:
        return "implausible", "accepted a wrong value"
    if baseline and not case.is_size_changed and not baseline / 2 <= total <= 2 * baseline:
        return "implausible", f"{total:.3g} parameters, unmutated {baseline:.3g}"
    return "plausible", ""


class Hang(BaseException):
    """The per-case time limit passed (a BaseException: nothing in servefit catches it)."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise Hang

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _clear_caches() -> None:
    from servefit.core import weights

    for fn in (weights.count_params, weights.weight_tensors):
        with contextlib.suppress(AttributeError):
            fn.cache_clear()


def plan_directory(folder: Path) -> Any:
    from servefit.app.deployment import Deployment, Hardware
    from servefit.app.plan import plan_deployment

    d = Deployment(model=str(folder), hardware=Hardware(gpu=GPU), allow_hub=False)
    return plan_deployment(d, with_performance=False)


def run_config_case(
    case: ConfigCase, folder: Path, baseline: int | None, limit_s: float = CONFIG_TIME_LIMIT_S
) -> tuple[str, str]:
    """Write ``case`` into ``folder`` and plan it: (class, detail)."""
    from servefit.errors import ServefitError

    for old in folder.iterdir():
        old.unlink()
    for name, data in case.files.items():
        (folder / name).write_bytes(data)
    try:
        with time_limit(limit_s):
            outcome = plan_directory(folder)
            return judge_outcome(outcome, case, baseline)
    except Hang:
        return "hang", f"over {limit_s:g} s"
    except MemoryError:
        return "hang", "out of memory"
    except ServefitError as error:
        return "clean error", str(error)[:100]
    except Exception as error:  # the class this benchmark exists to count
        return "crash", f"{type(error).__name__}: {str(error)[:100]}"
    finally:
        _clear_caches()


def baselines(all_seeds: list[Seed], folder: Path) -> None:
    from servefit.errors import ServefitError

    for seed in all_seeds:
        case = ConfigCase(seed.model_id, {"config.json": json.dumps(seed.config).encode()}, "")
        if seed.hf_quant_config is not None:
            case.files["hf_quant_config.json"] = json.dumps(seed.hf_quant_config).encode()
        for old in folder.iterdir():
            old.unlink()
        for name, data in case.files.items():
            (folder / name).write_bytes(data)
        try:
            seed.params_total = plan_directory(folder).capacity.params.total
        except ServefitError:
            seed.params_total = None


# -- flags --------------------------------------------------------------------------------

# flag -> (values vLLM / servefit must accept, values that must be refused)
FLAG_VALUES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "--concurrency": (("1", "8", "64"), ("0", "-1", "1e9", "1000000000", "nan")),
    "--num-requests": (("10", "200"), ("0", "-5", "10000000")),
    "--input-len": (("1", "512", "4k", "1e12"), ("0", "-1", "nan")),
    "--output-len": (("1", "128", "1000000000000"), ("0", "-1")),
    "--request-rate": (("0.5", "4"), ("nan", "inf", "-1", "0")),
    "--turns": (("1", "3"), ("0", "-2", "1000000000")),
    "--range-ratio": (("0", "0.5"), ("nan", "1", "-0.1", "inf")),
    "--prefix-len": (("0", "16"), ("-1", "nan")),
    "--slo-ttft-ms": (("500",), ("nan", "-1", "inf")),
    "--slo-tpot-ms": (("50",), ("nan", "-5")),
    "--max-model-len": (("4096", "8k"), ("0", "-64", "nan")),
    "--max-num-seqs": (("16", "256"), ("0", "-1")),
    "--max-num-batched-tokens": (("8192",), ("0", "-1", "nan")),
    "--gpu-memory-utilization": (("0.8", "0.95"), ("0", "1.5", "nan", "inf", "-1")),
    "--kv-cache-dtype": (
        ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"),
        ("int4", "int8", "", "banana"),
    ),
    "--kv-cache-memory-bytes": (("10G", "4GiB"), ("0", "-1", "nan", "abc")),
    "--block-size": (("16", "32"), ("0", "-16", "nan")),
    "--dtype": (("auto", "bfloat16", "float16", "half", "float32"), ("int8", "fp8", "", "x")),
    "--vllm-version": (("0.10", "0.11", "0.19", "0.32"), ("99.0", "0.1", "abc", "")),
    "-tp": (("1", "2"), ("0", "-1", "nan")),
    "-pp": (("1", "2"), ("0", "-1")),
    "--gpu-memory-gib": (("80",), ("0", "nan", "inf", "-1")),
    "--gpu-bandwidth-gbps": (("3350",), ("0", "nan", "inf")),
    "--context": (("8k",), ("0", "-1", "nan")),
    "--num-gpus": (("8",), ("0", "-1")),
}
# flag -> values a plan may take, but never as a fit (vLLM would not start with them)
NO_FIT_VALUES: dict[str, tuple[str, ...]] = {
    "--max-model-len": ("1e30", "1099511627776"),
    "--kv-cache-memory-bytes": ("1000TiB", "1e30"),
}
WORKLOAD_FLAGS = frozenset(
    {
        "--concurrency",
        "--num-requests",
        "--input-len",
        "--output-len",
        "--request-rate",
        "--turns",
        "--range-ratio",
        "--prefix-len",
        "--slo-ttft-ms",
        "--slo-tpot-ms",
    }
)
FLAG_MODELS = ("Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-1B-Instruct", "Qwen/Qwen3-30B-A3B")


@dataclass
class FlagCase:
    argv: list[str]
    is_bad_value: bool = False
    is_no_fit: bool = False  # a value vLLM would not start with: never a fit
    flags: list[str] = field(default_factory=list)


def flag_case(pick: Chooser) -> FlagCase:
    argv = ["plan", pick.choice(FLAG_MODELS), "--gpu", "H100", "--json"]
    case = FlagCase(argv)
    for _ in range(pick.choice((1, 1, 2, 3))):
        flag = pick.choice(sorted(FLAG_VALUES))
        if flag in case.flags:  # a repeated flag: the last value wins, the first is moot
            continue
        good, bad = FLAG_VALUES[flag]
        is_bad = pick.random() < 0.6
        value = pick.choice(bad if is_bad else good)
        if flag in NO_FIT_VALUES and pick.random() < 0.3:
            value, is_bad = pick.choice(NO_FIT_VALUES[flag]), False
            case.is_no_fit = True
        argv += [flag, value]
        case.flags.append(flag)
        case.is_bad_value |= is_bad
    if not WORKLOAD_FLAGS & set(case.flags):
        argv.append("--no-performance")
    return case


def run_flag_case(case: FlagCase, limit_s: float = FLAG_TIME_LIMIT_S) -> tuple[str, str]:
    """Run ``servefit`` in-process on ``case.argv``: (class, detail)."""
    from servefit.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    try:
        with time_limit(limit_s), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(case.argv)
    except SystemExit as done:
        code = done.code
    except Hang:
        return "hang", f"over {limit_s:g} s"
    except MemoryError:
        return "hang", "out of memory"
    finally:
        _clear_caches()
    if code == 2:
        return "clean error", err.getvalue().strip()[:100]
    if code not in (0, 1):
        return "crash", f"exit {code}: {err.getvalue().strip()[-120:]}"
    try:
        doc = json.loads(out.getvalue())
    except ValueError:
        return "crash", "exit 0/1 without a JSON document"
    bad = implausible_numbers(doc)
    if bad:
        return "implausible", ", ".join(bad[:3])
    if case.is_bad_value:
        return "implausible", "accepted a wrong value"
    if case.is_no_fit and code == 0:
        return "implausible", "fits with a value vLLM would not start with"
    return "plausible", ""


# -- the run ------------------------------------------------------------------------------


def _limit_memory() -> None:
    """Cap the address space, so a runaway case fails with MemoryError instead of taking
    the machine."""
    pages = int(Path("/proc/self/statm").read_text().split()[0])
    limit = pages * resource.getpagesize() + MEMORY_HEADROOM_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))


def _table(title: str, counts: Counter[str], examples: dict[str, list[str]], n: int) -> None:
    print(f"\n{title} ({n:,} cases)")
    print(f"{'class':<14}{'count':>8}{'share':>8}  example")
    for name in CLASSES:
        example = examples.get(name, [""])[0]
        print(f"{name:<14}{counts[name]:>8,}{counts[name] / max(n, 1):>8.1%}  {example[:90]}")


def run(
    num_cases: int, num_flag_cases: int, seed: int, *, on_case: Callable[..., None] | None = None
) -> tuple[Counter[str], Counter[str]]:
    rng = random.Random(seed)
    all_seeds = seeds()
    config_counts: Counter[str] = Counter()
    flag_counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        baselines(all_seeds, folder)
        _limit_memory()
        started = time.perf_counter()
        for i in range(num_cases):
            s = rng.choice(all_seeds)
            case = mutate(s, rng)
            verdict, detail = run_config_case(case, folder, s.params_total)
            config_counts[verdict] += 1
            examples.setdefault(verdict, []).append(f"{s.model_id}: {case.description} -> {detail}")
            if on_case:
                on_case(verdict, s.model_id, case.description, detail)
            if (i + 1) % 1000 == 0:
                print(
                    f"  {i + 1:,} configs, {time.perf_counter() - started:.0f} s", file=sys.stderr
                )
        _table("configs", config_counts, examples, num_cases)
        flag_examples: dict[str, list[str]] = {}
        for _ in range(num_flag_cases):
            fcase = flag_case(rng)
            verdict, detail = run_flag_case(fcase)
            flag_counts[verdict] += 1
            flag_examples.setdefault(verdict, []).append(f"{' '.join(fcase.argv[1:])} -> {detail}")
            if on_case:
                on_case(verdict, "flags", " ".join(fcase.argv), detail)
        _table("flags", flag_counts, flag_examples, num_flag_cases)
    return config_counts, flag_counts


def _artifacts() -> Any:
    """``benchmarks/fuzz_artifacts.py``, sharing this module (not a second copy of it)."""
    import importlib.util

    sys.modules.setdefault("servefit_fuzz", sys.modules[__name__])
    spec = importlib.util.spec_from_file_location(
        "servefit_fuzz_artifacts", Path(__file__).with_name("fuzz_artifacts.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def exit_on_bad_cases(counts_by_kind: dict[str, Counter[str]], seed: int) -> None:
    """``--strict``: exit 1, naming them, when any kind has a crash, hang or implausible case."""
    bad = {
        f"{kind} {verdict}": count
        for kind, counts in counts_by_kind.items()
        for verdict, count in counts.items()
        if verdict not in ("plausible", "clean error") and count
    }
    if bad:
        print(f"\nstrict: {bad} (rerun with --seed {seed} --log FILE for the cases)")
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000, help="config cases")
    parser.add_argument("--flag-cases", type=int, default=500, help="flag cases")
    parser.add_argument(
        "--artifact-cases",
        type=int,
        default=1000,
        help="bench-record, preflight-facts, calibration, eval-run and imported-result cases, "
        "each (fuzz_artifacts.py)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", help="write every non-plausible case here (one per line)")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when any case crashed, hung or planned implausibly (CI's soak run)",
    )
    args = parser.parse_args()
    log = Path(args.log).open("w") if args.log else None  # noqa: SIM115 - closed below

    def on_case(verdict: str, model: str, description: str, detail: str) -> None:
        if log is not None and verdict not in ("plausible", "clean error"):
            log.write(f"{verdict}\t{model}\t{description}\t{detail}\n")
            log.flush()

    try:
        config_counts, flag_counts = run(args.cases, args.flag_cases, args.seed, on_case=on_case)
        artifact_counts = _artifacts().run(args.artifact_cases, args.seed, on_case=on_case)
    finally:
        if log is not None:
            log.close()
    if args.strict:
        exit_on_bad_cases(
            {"config": config_counts, "flag": flag_counts, **artifact_counts}, args.seed
        )


if __name__ == "__main__":
    main()
