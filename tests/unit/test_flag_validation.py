"""Flags refuse what vLLM would refuse or what cannot be (issue 17's reproducers): each is
a usage error (exit 2) in well under a second, never a hang, a crash or a silent "fits"."""

from __future__ import annotations

import contextlib
import io
import re
import sys
import time
from pathlib import Path

import pytest

from servefit.cli.main import main
from servefit.core.plan_settings import (
    VLLM_DTYPES,
    VLLM_KV_CACHE_DTYPES,
    VLLM_ONLY_KV_CACHE_DTYPES,
    ServeSettings,
)
from servefit.core.workload import MAX_CONCURRENCY, LengthDist, Workload
from servefit.errors import InvalidArgumentError

ROOT = Path(__file__).resolve().parents[2]
MODEL = ["plan", "Qwen/Qwen3-0.6B", "--gpu", "H100"]


def servefit(*args: str) -> tuple[int, str]:
    """Run the CLI in-process: (exit code, stdout + stderr)."""
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            main(list(args))
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
    return code, out.getvalue()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--concurrency", "1000000000"], "--concurrency 1,000,000,000 is over servefit's 4,096"),
        (["--num-requests", "10000000"], "simulates 10,000,000 requests, over servefit's 100,000"),
        (["--turns", "1000000000"], "--turns 1,000,000,000 is over servefit's 1,000"),
        (["--dtype", "int8"], "--dtype 'int8': unknown dtype to vLLM"),
        (["--kv-cache-dtype", "int4"], "--kv-cache-dtype 'int4' is not one vLLM takes"),
        (["--kv-cache-dtype", "turboquant_k8v4"], "vLLM takes it, but servefit does not model"),
        (["--vllm-version", "99.0"], "servefit mirrors vLLM 0.8 to 0.33"),
        (["--vllm-version", ""], "not a version number"),
        (["--request-rate", "nan"], "must be a finite number"),
        (["--gpu-memory-utilization", "inf"], "must be a finite number"),
        (["--range-ratio", "nan"], "must be a finite number"),
        (["--slo-ttft-ms", "nan"], "must be a finite number"),
        (["--gpu-memory-gib", "nan"], "must be a finite number"),
        (["--num-gpus", "0"], ""),
        (["--gpu", ""], "--gpu is empty"),
    ],
)
def test_a_flag_that_cannot_be_is_a_usage_error(flags, message):
    started = time.perf_counter()
    code, output = servefit(*MODEL[:2], *(MODEL[2:] if flags[0] != "--gpu" else []), *flags)
    assert code == 2, output
    assert message in output
    assert time.perf_counter() - started < 5  # 1e9 / 1e7 hung with memory growing


def test_cost_requests_per_day_nan_is_a_usage_error():
    code, output = servefit("cost", "Qwen/Qwen3-0.6B", "--gpu", "H100", "--requests-per-day", "nan")
    assert code == 2 and "must be a finite number" in output


def test_a_binary_calibration_file_is_a_clean_error(tmp_path):
    path = tmp_path / "profile.json"
    path.write_bytes(bytes(range(256)))
    code, output = servefit(*MODEL, "--calibration", str(path), "--no-performance")
    assert code == 2 and "not UTF-8 text" in output


def test_a_kv_cache_larger_than_the_gpu_does_not_start():
    code, output = servefit(*MODEL, "--kv-cache-memory-bytes", "1000TiB", "--no-performance")
    assert code == 1  # it "fit" an 80 GB GPU
    assert "--kv-cache-memory-bytes" in output and "runs out of memory" in output


def test_the_accepted_values_still_plan():
    for flags in (
        ["--dtype", "half"],
        ["--kv-cache-dtype", "fp8_e5m2"],
        ["--vllm-version", "0.10"],
        ["--vllm-version", "0.33"],
        ["--kv-cache-memory-bytes", "10G"],
        ["--concurrency", str(MAX_CONCURRENCY), "--no-performance"],
    ):
        code, output = servefit(*MODEL, "--no-performance", *flags)
        assert code in (0, 1), (flags, output)


def test_settings_and_workloads_refuse_the_same_values_through_the_api():
    with pytest.raises(InvalidArgumentError, match="unknown dtype"):
        ServeSettings(dtype="int8")
    with pytest.raises(InvalidArgumentError, match="not one vLLM takes"):
        ServeSettings(kv_cache_dtype="int4")
    with pytest.raises(InvalidArgumentError, match="over servefit's 4,096"):
        Workload(input_len=LengthDist(mean=8), output_len=LengthDist(mean=8), concurrency=10**9)
    with pytest.raises(InvalidArgumentError, match="request-rate must be positive"):
        Workload(
            input_len=LengthDist(mean=8),
            output_len=LengthDist(mean=8),
            concurrency=None,
            request_rate_per_s=float("nan"),
        )


def _vllm_literal(module: str, name: str) -> set[str] | None:
    """The values of ``name = Literal[...]`` in the installed vLLM 0.32's config module."""
    paths = sorted(ROOT.glob(f".venv-vllm/lib/python3*/site-packages/vllm/config/{module}"))
    if not paths:
        return None
    match = re.search(rf"^{name} = Literal\[(.*?)\]", paths[0].read_text(), re.M | re.S)
    assert match, f"{name} not found in {paths[0]}"
    return set(re.findall(r'"([^"]+)"', match.group(1)))


def test_the_dtype_choices_are_vllms():
    dtypes = _vllm_literal("model.py", "ModelDType")
    kv = _vllm_literal("cache.py", "CacheDType")
    if dtypes is None or kv is None:
        sys.path.insert(0, str(ROOT / "tests" / "integration"))
        import vllm_server

        vllm_server.require_vllm()  # fails (SERVEFIT_WITHOUT_VLLM=1: skips)
    assert set(VLLM_DTYPES) == dtypes
    assert set(VLLM_KV_CACHE_DTYPES) | set(VLLM_ONLY_KV_CACHE_DTYPES) == kv


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--burstiness", "nan"], "'--burstiness': must be a finite number"),
        (["--burstiness", "0"], "'--burstiness': must be greater than 0"),
        (["--think-time-s", "inf"], "'--think-time-s': must be a finite number"),
        (["--think-time-s", "-1"], "'--think-time-s': must be at least 0"),
        (["--time-scale", "-1"], "'--time-scale': must be greater than 0"),
        (["--slo-ttft-ms", "inf"], "'--slo-ttft-ms': must be a finite number"),
    ],
)
def test_bench_number_flags_are_checked_before_any_server_is_contacted(args, message):
    """Port 9 (discard) has no server: each flag is refused as a usage error before bench
    tries it, so the message is the flag's, not 'cannot reach'."""
    code, out = servefit("bench", "http://127.0.0.1:9", "--concurrency", "1", *args)
    assert code == 2
    assert message in out
    assert "cannot reach" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["null-server", "--ttft-ms", "nan"], "'--ttft-ms': must be a finite number"),
        (["null-server", "--itl-ms", "-3"], "'--itl-ms': must be at least 0"),
        (["report", "run", "--usd-per-gpu-hour", "0"], "'--usd-per-gpu-hour': must be greater"),
        (["up", "m", "--startup-timeout-s", "inf"], "'--startup-timeout-s': must be a finite"),
    ],
)
def test_other_commands_number_flags_are_usage_errors(args, message):
    code, out = servefit(*args)
    assert code == 2
    assert message in out
