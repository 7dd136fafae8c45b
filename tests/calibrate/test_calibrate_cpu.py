"""servefit calibrate on the CPU with tiny shapes (PyTorch's CPU build): structure, units,
and that the fitted factors reproduce the measured steps."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch", reason="the calibrate extra (PyTorch) is not installed")

from servefit.adapters.catalog import efficiency_table, gpu_catalog  # noqa: E402
from servefit.calibrate.measure import Budget, measure_matmul, pick_device  # noqa: E402
from servefit.calibrate.profile import (  # noqa: E402
    calibrated_device,
    calibrated_profile,
    load_calibration,
)
from servefit.calibrate.run import (  # noqa: E402
    Plan,
    measure_steps,
    measured_device_spec,
    run_calibration,
)
from servefit.calibrate.synthetic import SyntheticModel  # noqa: E402
from servefit.core.calibration import (  # noqa: E402
    Ceilings,
    StepPoint,
    efficiencies_from_ceilings,
    fit_profile,
)
from servefit.core.hf_config import spec_from_hf_config  # noqa: E402
from servefit.core.ops import StepShape, model_coeffs  # noqa: E402
from servefit.core.roofline import step_time  # noqa: E402
from servefit.errors import ConfigError  # noqa: E402

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
}
TINY_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
}


@pytest.fixture(scope="module")
def cpu_clock():
    """One intra-op thread timed by its own CPU clock: what a step costs this CPU, not how long
    a busy machine's scheduler kept it waiting (on a shared 2-core machine the wall clock of a
    2-thread step swings 10x with the neighbours' load; its thread CPU time does not)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield time.thread_time
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def doc(cpu_clock):
    spec = spec_from_hf_config(TINY_LLAMA, name="tiny-llama")
    start = efficiency_table().for_gpu(gpu_catalog().get("H100"))
    return run_calibration(spec, start, device_name="cpu", plan_name="tiny", clock=cpu_clock)


def test_profile_structure_and_units(doc):
    assert doc.schema_version == 1
    assert doc.device.backend == "cpu" and doc.device.catalog_gpu is None
    m = doc.measured
    # a CPU streams somewhere between 0.1 and 1000 GB/s and multiplies at 1e8..1e14 FLOP/s
    assert 1e8 < m.read_bandwidth_bytes_per_s < 1e12
    assert 1e8 < m.copy_bandwidth_bytes_per_s < 1e12
    assert {"fp32", "bf16"} <= set(m.matmul_flops_per_s)
    assert all(1e8 < v < 1e14 for v in m.matmul_flops_per_s.values())
    assert 0 < m.launch_overhead_s < 1e-2
    # the model's gate/up projection (hidden 256 -> 2 x 512) at each decode batch and prefill
    assert set(m.projection_flops_per_s) == {
        "1x256x1024",
        "4x256x1024",
        "32x256x1024",
        "128x256x1024",
    }
    assert all(v > 1e6 for v in m.projection_flops_per_s.values())
    assert 1e7 < m.decode_attention_bytes_per_s < 1e12
    kinds = [p.kind for p in doc.points]
    assert kinds.count("decode") == 2 and kinds.count("prefill") == 2
    for p in doc.points:
        assert p.measured_s > 0 and p.predicted_after_s > 0
        assert p.layers_built <= p.layers_total == 4
    f = doc.profile
    assert 0 < f.gemm_efficiency <= 1 and 0 < f.memory_efficiency <= 1
    assert f.step_overhead_s >= 0


def _shape(point) -> StepShape:
    if point.kind == "decode":
        return StepShape(decode_contexts=(point.context,) * point.batch)
    return StepShape(prefill_chunks=((point.tokens, point.context),) * point.batch)


def test_the_fit_recovers_a_known_overhead_and_scale(doc):
    """No clock: steps made from the model itself at a known step overhead and efficiency scale
    (over this CPU's measured ceilings); the fit finds both and reproduces every step."""
    spec = spec_from_hf_config(TINY_LLAMA, name="tiny-llama")
    ceilings = Ceilings(**doc.measured.model_dump())
    gpu = measured_device_spec(pick_device("cpu"), ceilings)
    start = efficiency_table().for_gpu(gpu)
    m = model_coeffs(spec)
    memory, gemm, attention = efficiencies_from_ceilings(
        ceilings,
        datasheet_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
        datasheet_peak_flops_per_s=ceilings.matmul_flops_per_s["fp32"],
        dtype="fp32",
    )
    bare = replace(
        start,
        memory_efficiency=memory,
        gemm_efficiency=gemm,
        attention_efficiency=attention,
        step_overhead_s=0.0,
        per_seq_overhead_s=0.0,
        is_calibrated=True,
    )
    overhead_s, scale = 0.004, 3.0  # the truth the fit must find
    shapes = [_shape(p) for p in doc.points]
    points = [
        StepPoint(
            label=p.label,
            shape=shape,
            measured_s=overhead_s + scale * step_time(m, shape, gpu, bare).time_s,
        )
        for p, shape in zip(doc.points, shapes, strict=True)
    ]
    fit = fit_profile(
        start,
        ceilings,
        points,
        lambda profile, shape, _: step_time(m, shape, gpu, profile).time_s,
        datasheet_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
        datasheet_peak_flops_per_s=ceilings.matmul_flops_per_s["fp32"],
        dtype="fp32",
    )
    assert fit.profile.step_overhead_s == pytest.approx(overhead_s, rel=1e-6)
    assert fit.profile.gemm_efficiency == pytest.approx(gemm / scale, rel=1e-6)
    assert fit.profile.memory_efficiency == pytest.approx(memory / scale, rel=1e-6)
    assert fit.after_s == pytest.approx([p.measured_s for p in points], rel=1e-6)
    assert fit.median_error_after == pytest.approx(0.0, abs=1e-6)


def test_fitted_factors_reproduce_the_measured_steps(doc, cpu_clock):
    # two fitted numbers (a step overhead, one efficiency scale) for prefill and decode steps
    # of very different sizes: every step within 60 %, half of them within 35 %. A fit is only
    # as good as its data: the same steps measured again in this run disagree by `noise`, and
    # the errors may exceed those bounds by twice it (the step itself, and its pull on the two
    # fitted numbers). On a quiet machine the noise is a few per cent.
    spec = spec_from_hf_config(TINY_LLAMA, name="tiny-llama")
    plan = Plan.named(doc.plan)
    plan = replace(plan, budget=replace(plan.budget, clock=cpu_clock))
    again = measure_steps(pick_device("cpu"), spec, plan)
    assert [t.label for t in again] == [p.label for p in doc.points]
    noise = [abs(t.model_step_s / p.measured_s - 1) for p, t in zip(doc.points, again, strict=True)]
    errors = [abs(p.predicted_after_s / p.measured_s - 1) for p in doc.points]
    assert doc.median_error_after <= 0.35 + 2 * statistics.median(noise), (errors, noise)
    assert max(errors) <= 0.6 + 2 * max(noise), (errors, noise)


def test_profile_round_trips_and_feeds_plans(doc, tmp_path):
    path = tmp_path / "cpu.json"
    path.write_text(doc.model_dump_json())
    loaded = load_calibration(path)
    assert loaded == doc
    device = calibrated_device(loaded)
    assert device.name == "CPU (measured)"
    assert device.memory_bandwidth_bytes_per_s == doc.datasheet.memory_bandwidth_bytes_per_s
    engine = efficiency_table().for_gpu(device)
    profile = calibrated_profile(loaded, engine, str(path))
    assert profile.is_calibrated and "calibrated" in profile.label
    assert profile.gemm_efficiency == doc.profile.gemm_efficiency
    assert profile.step_overhead_s == engine.step_overhead_s  # the engine's own overheads


def test_a_bad_profile_is_a_config_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(ConfigError, match="servefit calibrate --output"):
        load_calibration(bad)


def test_moe_layers_build_and_run():
    spec = spec_from_hf_config(TINY_MOE, name="tiny-moe")
    device = pick_device("cpu")
    model = SyntheticModel(spec, device, num_layers=2, max_batch=2, max_ctx=64)
    t = model.time_step(batch=2, tokens=1, context=16, budget=Budget.named("tiny"))
    assert t.stack_s > 0 and t.model_step_s > t.stack_s * 0.99


def test_matmul_timing_counts_flops(cpu_clock):
    device = pick_device("cpu")
    budget = replace(Budget.named("tiny"), clock=cpu_clock)
    flops = measure_matmul(device, "fp32", 64, 64, 64, budget)
    assert 1e6 < flops < 1e14


def test_cli_calibrate_then_plan_with_the_profile(tmp_path):
    """The whole path through the real entry point: calibrate on the CPU, then plan with it."""
    import subprocess
    import sys

    from tests.unit.test_cli import OFFLINE

    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    profile = tmp_path / "cpu.json"
    cli = [sys.executable, "-m", "servefit.cli.main"]
    done = subprocess.run(
        [*cli, "calibrate", str(config), "--device", "cpu", "--plan", "tiny", "-o", str(profile)],
        capture_output=True,
        text=True,
        env=OFFLINE,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Ceilings: measured vs datasheet" in done.stdout
    assert json.loads(profile.read_text())["device"]["backend"] == "cpu"
    plan = subprocess.run(
        [
            *cli,
            "plan",
            str(config),
            "--calibration",
            str(profile),
            "--max-model-len",
            "2048",
            "--input-len",
            "256",
            "--output-len",
            "64",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=OFFLINE,
        timeout=120,
    )
    assert plan.returncode == 0, plan.stderr
    doc = json.loads(plan.stdout)
    assert doc["gpu"]["name"] == "CPU (measured)"
    assert "calibrated" in doc["performance"]["efficiency_profile"]
    wrong = subprocess.run(
        [*cli, "plan", str(config), "--gpu", "H100", "--calibration", str(profile)],
        capture_output=True,
        text=True,
        env=OFFLINE,
        timeout=120,
    )
    assert wrong.returncode == 2 and "measured on CPU (measured), not H100-SXM" in wrong.stderr
