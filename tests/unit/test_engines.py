"""Engines behind one capacity interface: MLX and llama.cpp on unified memory, vLLM as before.

Golden numbers are worked out by hand in each test from the config (Qwen3-30B-A3B: 48 layers,
4 KV heads x 128 dims, hidden 2048, vocab 151,936, 128 experts of width 768, top-8;
Llama-3.1-8B: 32 layers, 8 KV heads x 128 dims) and the engines' published defaults.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

import servefit.core.engines
from servefit.core.engines import (
    engine_names,
    get_engine,
    select_engine,
)
from servefit.core.engines.unified_memory import default_wired_fraction, wired_limit_mb
from servefit.core.perf import plan_performance
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.core.quant import gguf, uniform_quant
from servefit.core.vllm_command import vllm_serve_args
from servefit.core.weights import weight_bytes
from servefit.core.workload import LengthDist, Workload
from servefit.errors import InvalidArgumentError
from servefit.units import GIB_BYTES, MIB_BYTES

MLX_QWEN = "mlx-community/Qwen3-30B-A3B-4bit"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


def _texts(plan) -> list[str]:
    return [*plan.problems, *plan.warnings, *plan.assumptions, plan.memory_label, plan.budget_label]


def _gguf_llama(catalog_model):
    """A Q4_K_M GGUF of Llama-3.1-8B, described as servefit describes GGUF files
    (adapters/measurements.py: the config plus one whole-model GGUF weight format)."""
    spec = catalog_model(LLAMA_8B).spec
    return replace(spec, quant=uniform_quant(gguf("q4_k_m"), method="q4_k_m"))


# --- MLX -------------------------------------------------------------------------------


def test_mlx_checkpoint_on_m4_pro_plans_with_mlx_from_the_wired_limit(catalog_model, gpu):
    spec = catalog_model(MLX_QWEN).spec
    m4_pro = gpu("M4-Pro")
    engine = select_engine(None, m4_pro, spec)
    asked = ServeSettings()
    plan = engine.plan(spec, m4_pro, asked, mamba_ssm_dtype=None)

    assert engine.name == "mlx" and plan.engine == "mlx"
    assert not any("CUDA" in text for text in _texts(plan)), _texts(plan)
    assert engine.launch_args(MLX_QWEN, plan, asked) == ["mlx_lm.server", "--model", MLX_QWEN]

    m = plan.memory
    # 64 GiB of unified memory; macOS lets the GPU wire 3/4 of it by default: 48 GiB
    assert m.total_bytes == 64 * GIB_BYTES == 68_719_476_736
    assert m.requested_bytes == 68_719_476_736 * 3 // 4 == 51_539_607_552
    assert m.cuda_graph_bytes == 0 and m.non_torch_bytes == 0
    # activations of one 2048-token prefill step (--prefill-step-size), 32 decoding requests:
    #   sampler  3.9 x 32 requests x 151,936 vocab x 4 bytes       =  75,846,451.2
    #   dense    2048 x (0 dense MLP + 4 x 2048 hidden) x 2 bytes  =  33,554,432
    #   MoE      2048 x 8 experts x (3 x 768 + 2048) x 2 bytes     = 142,606,336
    #   max(sampler, dense) + MoE = 218,452,787
    assert m.activation_peak_bytes == 218_452_787
    # weights: the 4-bit MLX export as servefit counts any checkpoint (16-17 GiB; the
    # repository's safetensors are ~17.2 GB)
    assert m.weights_bytes == int(weight_bytes(spec).per_stage_bytes[0])
    assert 16 * GIB_BYTES < m.weights_bytes < 17 * GIB_BYTES
    assert m.kv_cache_bytes == 51_539_607_552 - m.weights_bytes - 218_452_787
    # mlx-lm grows the cache in 256-token steps: one step of all layers is
    # 2 (K, V) x 256 tokens x 4 heads x 128 dims x 2 bytes x 48 layers = 25,165,824 bytes
    assert plan.layout.bytes_per_block == 2 * 256 * 4 * 128 * 2 * 48 == 25_165_824
    assert plan.num_blocks == m.kv_cache_bytes // 25_165_824
    assert plan.settings.block_size == 256
    # one request of the model's 40,960 positions takes 40,960 / 256 = 160 steps
    assert plan.max_concurrency == pytest.approx(plan.num_blocks / 160)
    assert plan.kv_cache_tokens == plan.num_blocks * 256
    assert plan.fits


def test_mlx_target_beyond_the_wired_limit_suggests_the_sysctl(catalog_model, gpu):
    spec = catalog_model(MLX_QWEN).spec
    asked = ServeSettings(concurrency=10, context_tokens=40_960)
    plan = get_engine("mlx").plan(spec, gpu("M4-Pro"), asked, mamba_ssm_dtype=None)
    assert plan.starts and not plan.fits
    assert plan.concurrency_at_context == pytest.approx(plan.num_blocks / 160)
    assert plan.concurrency_at_context < 10
    # 10 requests x 160 steps x 25,165,824 bytes, plus weights and activations
    need = 10 * 160 * 25_165_824 + plan.memory.weights_bytes + 218_452_787
    assert need < 64 * GIB_BYTES  # so the Mac could hold it with a higher wired limit
    mb = -(-need // MIB_BYTES)
    assert any(f"sudo sysctl iogpu.wired_limit_mb={mb}" in line for line in plan.problems)
    assert not any("CUDA" in text for text in _texts(plan))
    assert not any("vLLM" in text for text in (*plan.problems, *plan.warnings))


def test_mlx_refuses_vllm_only_flags(catalog_model, gpu):
    spec = catalog_model(MLX_QWEN).spec
    with pytest.raises(InvalidArgumentError, match="--tensor-parallel-size"):
        get_engine("mlx").plan(
            spec, gpu("M4-Pro"), ServeSettings(tensor_parallel_size=2), mamba_ssm_dtype=None
        )


def test_the_mlx_plan_drives_the_performance_model(catalog_model, gpu):
    from servefit.adapters.catalog import efficiency_table

    spec = catalog_model(MLX_QWEN).spec
    m4_pro = gpu("M4-Pro")
    plan = get_engine("mlx").plan(spec, m4_pro, ServeSettings(), mamba_ssm_dtype=None)
    workload = Workload(input_len=LengthDist(mean=1024), output_len=LengthDist(mean=128))
    perf = plan_performance(plan, workload, efficiency_table().for_gpu(m4_pro, "mlx"))
    assert perf.ttft_cold_s > 0


# --- refusals and selection ------------------------------------------------------------


def test_mlx_checkpoint_on_an_a40_is_refused(catalog_model, gpu):
    spec = catalog_model(MLX_QWEN).spec
    with pytest.raises(InvalidArgumentError) as default:
        select_engine(None, gpu("A40"), spec)
    assert "MLX export" in str(default.value) and "Apple silicon" in str(default.value)
    with pytest.raises(InvalidArgumentError, match="Apple silicon only"):
        select_engine("mlx", gpu("A40"), spec)


def test_vllm_is_refused_on_apple_silicon(catalog_model, gpu):
    with pytest.raises(InvalidArgumentError, match="no Metal backend"):
        select_engine("vllm", gpu("M4-Pro"), catalog_model(LLAMA_8B).spec)


def test_16bit_checkpoint_on_an_a40_still_goes_through_vllm_unchanged(catalog_model, gpu):
    loaded = catalog_model(LLAMA_8B)
    a40 = gpu("A40")
    asked = ServeSettings(max_model_len=8192, concurrency=4)
    engine = select_engine(None, a40, loaded.spec)
    plan = engine.plan(loaded.spec, a40, asked, mamba_ssm_dtype=loaded.mamba_ssm_dtype)
    expected = plan_capacity(loaded.spec, a40, asked, mamba_ssm_dtype=loaded.mamba_ssm_dtype)
    assert engine.name == "vllm"
    assert plan == expected and plan.engine == "vllm" and plan.memory_label == "visible to CUDA"
    assert engine.launch_args(LLAMA_8B, plan, asked) == vllm_serve_args(LLAMA_8B, plan, asked)


def test_sglang_sizes_its_own_pool_and_running_cap(catalog_model, gpu):
    loaded = catalog_model(LLAMA_8B)
    a40 = gpu("A40")
    asked = ServeSettings(max_model_len=8192)
    plan = get_engine("sglang").plan(loaded.spec, a40, asked, mamba_ssm_dtype=None)
    base = plan_capacity(loaded.spec, a40, asked)
    assert plan.engine == "sglang" and "SGLang's pool" in plan.assumptions[0]
    # sglang server_args._handle_gpu_memory_settings (0.5.9), a GPU below 60 GiB:
    # chunked_prefill_size 4096, cuda_graph_max_bs 32 at tp 1; reserved = 512 + 4096 x 1.5 +
    # 32 x 2 + 1 x 1 / 8 x 1024 = 6,848 MiB; mem_fraction_static = (total - reserved) / total
    total = base.memory.total_bytes
    fraction = round((total - 6848 * 2**20) / total, 3)
    # kv_cache_configurator.py: rest = fraction x (free before loading) - weights
    rest = int(fraction * (total - base.memory.non_torch_bytes)) - base.memory.weights_bytes
    assert plan.memory.kv_cache_bytes == rest
    # resolve_max_num_reqs: min(clamp(tokens / context_len x 512, 2048, 4096), tokens // 2),
    # Llama-3.1-8B holding 32 x 8 x 128 x 2 x 2 = 131,072 bytes a token
    tokens = rest // 131_072
    running = min(max(min(int(tokens / 8192 * 512), 4096), 2048), tokens // 2)
    assert plan.settings.max_num_seqs == running
    assert plan.settings.max_num_batched_tokens == 4096
    assert get_engine("sglang").launch_args(LLAMA_8B, plan, asked)[:5] == [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        LLAMA_8B,
    ]


def test_sglang_caps_running_requests_by_its_state_slots(catalog_model, gpu):
    # Qwen3.6-27B (config.json: 48 Gated-DeltaNet layers of 16 K heads x 128 and 48 V heads x
    # 128, conv kernel 4, bf16): a slot is 48 x (3 x (2 x 2048 + 6144) x 2 bytes + 48 x 128 x
    # 128 x 4 bytes) = 48 x (61,440 + 3,145,728) = 153,944,064 bytes (mamba_utils.py
    # mamba_cache_per_req); 0.9 / 1.9 of the rest goes to slots, 5 slots a running request
    from servefit.core.engines.sglang import state_slot_bytes

    loaded = catalog_model("Qwen/Qwen3.6-27B")
    assert state_slot_bytes(loaded.spec, 1) == 153_944_064
    asked = ServeSettings(max_model_len=16384, gpu_memory_utilization=0.8)
    plan = get_engine("sglang").plan(loaded.spec, gpu("H200-SXM"), asked, mamba_ssm_dtype=None)
    slots = int(plan.memory.kv_cache_bytes * 0.9 / 1.9) // 153_944_064
    assert plan.settings.max_num_seqs == slots // 5
    with pytest.raises(InvalidArgumentError, match="NVIDIA GPUs only"):
        select_engine("trtllm", gpu("MI300X"), loaded.spec)


def test_engine_names_and_aliases():
    assert engine_names() == ("vllm", "mlx", "llama.cpp", "sglang", "trtllm", "vllm-cpu")
    assert get_engine("MLX-LM").name == "mlx" and get_engine("llama-cpp").name == "llama.cpp"
    with pytest.raises(InvalidArgumentError, match="unknown engine 'tgi'"):
        get_engine("tgi")


def test_default_wired_fraction_by_ram():
    # 16 GiB -> 10,922.67 MB and 32 GiB -> 21,845.33 MB (2/3); 64 GiB -> 49,152 MB (3/4)
    assert default_wired_fraction(16 * GIB_BYTES) == pytest.approx(2 / 3)
    assert default_wired_fraction(32 * GIB_BYTES) == pytest.approx(2 / 3)
    assert default_wired_fraction(64 * GIB_BYTES) == 0.75
    assert wired_limit_mb(48 * GIB_BYTES) == 49_152
    assert wired_limit_mb(48 * GIB_BYTES + 1) == 49_153


# --- llama.cpp ---------------------------------------------------------------------------


def test_gguf_on_m4_pro_plans_with_llama_cpp(catalog_model, gpu):
    spec = _gguf_llama(catalog_model)
    m4_pro = gpu("M4-Pro")
    engine = select_engine(None, m4_pro, spec)
    asked = ServeSettings(concurrency=4, context_tokens=8192)
    plan = engine.plan(spec, m4_pro, asked, mamba_ssm_dtype=None)
    assert engine.name == "llama.cpp" and plan.fits
    assert engine.launch_args("Llama-3.1-8B-Instruct-Q4_K_M.gguf", plan, asked) == [
        "llama-server",
        "-m",
        "Llama-3.1-8B-Instruct-Q4_K_M.gguf",
        "-c",
        "32768",  # 4 slots x 8,192 tokens
        "-np",
        "4",
        "-ngl",
        "99",
    ]
    # all 32,768 f16 cells reserved at start; one cell is
    # 2 (K, V) x 8 heads x 128 dims x 2 bytes x 32 layers = 131,072 bytes -> 4 GiB
    assert plan.kv_cache_tokens == 32_768
    assert plan.num_blocks * plan.layout.bytes_per_block == 32_768 * 131_072 == 4 * GIB_BYTES
    assert plan.memory.requested_bytes == 48 * GIB_BYTES
    assert not any("CUDA" in text or "vLLM would" in text for text in _texts(plan))


def test_llama_cpp_that_does_not_start_says_which_context_would(catalog_model, gpu):
    spec = _gguf_llama(catalog_model)
    m4 = gpu("M4")  # 32 GiB: the GPU may wire 2/3 of it
    asked = ServeSettings(concurrency=4, context_tokens=131_072)
    plan = get_engine("llama.cpp").plan(spec, m4, asked, mamba_ssm_dtype=None)
    assert not plan.starts
    assert plan.memory.requested_bytes == int(32 * GIB_BYTES * 2 / 3) == 22_906_492_245
    left = plan.memory.kv_cache_bytes  # wired share - weights - compute buffer
    # 4 x 131,072 cells x 131,072 bytes = 64 GiB asked for
    assert f"reserves {4 * 131_072 * 131_072 / GIB_BYTES:.2f} GiB" in plan.problems[0]
    # what fits: whole 256-cell steps of 256 x 131,072 = 33,554,432 bytes, split over 4 slots
    slot = left // 33_554_432 // 4 * 256
    assert any(f"-c {4 * slot:,} -np 4" in line for line in plan.problems)


def test_llama_cpp_pads_a_slot_to_256_cells(catalog_model, gpu):
    spec = _gguf_llama(catalog_model)
    asked = ServeSettings(context_tokens=10_000)
    engine = get_engine("llama.cpp")
    plan = engine.plan(spec, gpu("M4-Pro"), asked, mamba_ssm_dtype=None)
    assert plan.settings.max_model_len == 10_240  # ceil(10,000 / 256) x 256
    assert engine.launch_args("org/repo-GGUF", plan, asked)[1:7] == [
        "-hf",
        "org/repo-GGUF",
        "-c",
        "10240",
        "-np",
        "1",
    ]


def test_formats_each_engine_refuses(catalog_model, gpu):
    with pytest.raises(InvalidArgumentError, match="mlx-lm loads safetensors, not GGUF"):
        select_engine("mlx", gpu("M4-Pro"), _gguf_llama(catalog_model))
    with pytest.raises(InvalidArgumentError, match=r"llama\.cpp serves GGUF files"):
        select_engine("llama.cpp", gpu("M4-Pro"), catalog_model(LLAMA_8B).spec)


# --- the renderer and purity ------------------------------------------------------------


def test_the_terminal_plan_of_an_mlx_plan_does_not_speak_cuda(catalog_model, gpu):
    from rich.console import Console

    from servefit.cli import render

    spec = catalog_model(MLX_QWEN).spec
    plan = get_engine("mlx").plan(spec, gpu("M4-Pro"), ServeSettings(), mamba_ssm_dtype=None)
    console = Console(record=True, width=200)
    draw = getattr(render, "render_capacity", None) or render.render_plan
    kwargs = {} if draw.__name__ == "render_capacity" else {"vllm_command": ""}
    draw(plan, model_id=MLX_QWEN, console=console, **kwargs)
    text = console.export_text()
    assert "64.00 GiB unified memory" in text and "under mlx-lm" in text
    assert "CUDA" not in text


ENGINES_DIR = Path(servefit.core.engines.__file__).parent
IO_MODULES = {"os", "sys", "pathlib", "io", "socket", "subprocess", "time", "json", "rich"}


@pytest.mark.parametrize("path", sorted(ENGINES_DIR.glob("*.py")), ids=lambda p: p.name)
def test_engines_are_pure(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots = {(node.module or "").split(".")[0]}
        else:
            continue
        assert not roots & IO_MODULES, f"{path.name} imports {roots & IO_MODULES}"
