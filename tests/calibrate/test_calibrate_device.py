"""servefit calibrate --microbenchmarks-only: the device without a model, end to end through
the CLI and into plan --calibration; and the flags it refuses."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch", reason="the calibrate extra (PyTorch) is not installed")

from tests.calibrate.tiny_configs import TINY_QWEN3_NEXT  # noqa: E402
from tests.unit.test_cli import OFFLINE  # noqa: E402

from servefit.calibrate.device_only import run_microbenchmarks  # noqa: E402
from servefit.calibrate.profile import calibrated_device, load_calibration  # noqa: E402
from servefit.calibrate.run import GENERIC_ATTENTION  # noqa: E402
from servefit.core.hf_config import spec_from_hf_config  # noqa: E402

CLI = [sys.executable, "-m", "servefit.cli.main"]
ENV = {**OFFLINE, "OMP_NUM_THREADS": "1"}
TINY_CPU = ("--device", "cpu", "--plan", "tiny")
PLAN_ARGS = ("--max-model-len", "2048", "--input-len", "256", "--output-len", "64", "--json")


@pytest.fixture(scope="module")
def cpu_clock():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield time.thread_time
    torch.set_num_threads(threads)


def test_device_document_without_a_model(cpu_clock):
    doc = run_microbenchmarks(device_name="cpu", plan_name="tiny", clock=cpu_clock)
    assert (doc.scope, doc.model, doc.dtype, doc.points) == ("device", None, "fp32", [])
    assert doc.median_error_before is None and doc.median_error_after is None
    m = doc.measured
    assert {"fp32", "bf16"} <= set(m.matmul_flops_per_s)
    assert m.projection_flops_per_s == {}  # no model: no projection shapes
    for value in (m.read_bandwidth_bytes_per_s, m.attention_flops_per_s, m.launch_overhead_s):
        assert math.isfinite(value) and value > 0
    assert m.decode_attention_bytes_per_s > 0  # at the generic attention shape
    # no datasheet for a CPU: the measured ceilings are the device, so its factors are 1
    assert doc.device.catalog_gpu is None
    assert doc.datasheet.memory_bandwidth_bytes_per_s == m.read_bandwidth_bytes_per_s
    assert doc.datasheet.peak_flops_per_s["fp32"] == m.matmul_flops_per_s["fp32"]
    assert doc.profile.memory_efficiency == 1.0 and doc.profile.gemm_efficiency == 1.0
    assert 0.02 <= doc.profile.attention_efficiency <= 1.0


def test_a_model_only_shapes_the_microbenchmarks(cpu_clock):
    spec = spec_from_hf_config(TINY_QWEN3_NEXT, name="tiny-qwen3-next")
    doc = run_microbenchmarks(spec, device_name="cpu", plan_name="tiny", clock=cpu_clock)
    assert (doc.scope, doc.model, doc.points) == ("device", "tiny-qwen3-next", [])
    # the MoE expert's fused gate/up (2 x 64) at each decode batch and prefill length
    assert set(doc.measured.projection_flops_per_s) == {f"{b}x128x128" for b in (1, 4, 32, 128)}
    assert GENERIC_ATTENTION == (32, 8, 128)  # what a model without attention is measured at


def test_cli_microbenchmarks_only_then_plan(tmp_path):
    profile = tmp_path / "device.json"
    done = subprocess.run(
        [*CLI, "calibrate", "--microbenchmarks-only", *TINY_CPU, "-o", str(profile)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "no model (microbenchmarks only)" in done.stdout
    assert "no model steps fitted" in done.stdout
    doc = load_calibration(profile)
    assert doc.scope == "device" and doc.command.startswith("servefit calibrate")
    assert calibrated_device(doc).name == "CPU (measured)"
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_QWEN3_NEXT))
    plan = subprocess.run(
        [*CLI, "plan", str(config), "--calibration", str(profile), *PLAN_ARGS],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert plan.returncode == 0, plan.stderr
    out = json.loads(plan.stdout)
    assert out["gpu"]["name"] == "CPU (measured)"
    assert "calibrated" in out["performance"]["efficiency_profile"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["calibrate", "--device", "cpu"], "MODEL is required"),
        (["calibrate", "--microbenchmarks-only", "--layers", "2"], "--layers"),
    ],
    ids=["no-model", "layers-without-a-stack"],
)
def test_cli_input_errors_exit_2_naming_the_flag(args, message):
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, env=ENV, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr and "--microbenchmarks-only" in done.stderr
