"""vLLM's V0 engine (0.5 to 0.7) as servefit plans it (core/engine_v0.py).

The goldens are one public V0 log thread (vllm-project/vllm#10517, kaspersiminski,
2024-12-02, Llama-3.1-8B-Instruct on one RTX 3090 at gpu_memory_utilization 0.9, the
"Memory profiling results" format of vLLM 0.6.4), the vLLM sources of the releases named, and
hand arithmetic written out below.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from servefit.adapters.catalog import gpu_catalog
from servefit.adapters.model_source import load_model
from servefit.cli.main import cli
from servefit.core import engine, engine_v0
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.core.plan_settings import resolve_settings
from servefit.core.vllm_command import vllm_serve_args
from servefit.errors import InvalidArgumentError
from servefit.units import GIB_BYTES

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _plan(version: str, **settings):
    spec = load_model(LLAMA, allow_hub=False).spec
    gpu = gpu_catalog().get("RTX-3090")
    return plan_capacity(spec, gpu, ServeSettings(vllm_version=version, **settings))


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("0.6.4.post1", (0, 6, 4)),
        ("v0.7.3", (0, 7, 3)),
        ("0.6.4rc1", (0, 6, 4)),
        ("0.6", (0, 6, 6)),  # a V0 minor release without its patch: its last one
        ("0.5", (0, 5, 5)),
        ("0.19", (0, 19, 0)),
    ],
)
def test_a_release_keeps_its_patch(text, release):
    assert engine.parse_release(text) == release


def test_the_releases_before_0_8_run_the_v0_engine():
    assert engine.vllm_behaviour("0.7.3").is_v0_engine
    assert engine.vllm_behaviour("0.6.4").version == "0.6.4"
    assert not engine.vllm_behaviour("0.8").is_v0_engine
    with pytest.raises(InvalidArgumentError, match=r"from 0\.5"):
        engine.vllm_behaviour("0.4.3")


@pytest.mark.parametrize(
    ("release", "profile"),
    [
        ((0, 6, 3), engine_v0.V0Profile.FREE_MEMORY),  # init_gpu_memory - free after
        ((0, 6, 4), engine_v0.V0Profile.TORCH_PEAK),  # PR #9352: allocated_bytes.all.peak
        ((0, 6, 5), engine_v0.V0Profile.SNAPSHOT),  # PR #10511: memory_profiling
        ((0, 7, 3), engine_v0.V0Profile.SNAPSHOT),
    ],
)
def test_how_each_release_measures_the_profile(release, profile):
    assert engine_v0.v0_profile(release) is profile


def test_scheduler_defaults_by_release_and_context():
    # without chunked prefill the whole context is one batch; never under 2048
    assert engine_v0.batch_defaults((0, 6, 4), max_model_len=20000, chunked=False) == (20000, 256)
    assert engine_v0.batch_defaults((0, 6, 4), max_model_len=1024, chunked=False) == (2048, 256)
    # chunked: 512 a step up to 0.6.4, 2048 from 0.6.5
    assert engine_v0.batch_defaults((0, 6, 4), max_model_len=35000, chunked=True) == (512, 256)
    assert engine_v0.batch_defaults((0, 6, 5), max_model_len=35000, chunked=True) == (2048, 256)
    # on by itself past 32,768 tokens only, and not with a sliding window
    kw = {"has_sliding_window": False, "has_lora": False}
    assert not engine_v0.is_chunked_prefill_default(max_model_len=32768, **kw)
    assert engine_v0.is_chunked_prefill_default(max_model_len=32769, **kw)
    assert not engine_v0.is_chunked_prefill_default(
        max_model_len=65536, has_sliding_window=True, has_lora=False
    )


def test_the_profile_run_peaks_in_the_mlp_by_hand():
    """Llama-3.1-8B: I = 14,336, h = 4,096, bf16. A token holds gate/up (2 I), the activation
    (I), the down projection's output, the residual and the layer's input (3 h):
    55,296 elements, 110,592 bytes. The sampler's 256 prompts x 128,256 logits x 32 bytes
    = 1.25e9 bytes is smaller from about 11,000 tokens on."""
    spec = load_model(LLAMA, allow_hub=False).spec
    kw = {"tp": 1, "max_num_seqs": 256, "is_last_stage": True, "release": (0, 6, 4)}
    layers = range(spec.num_layers)
    for tokens, logged_gib in ((20000, 17.06 - 14.9888), (29000, 17.98 - 14.9888)):
        peak = engine_v0.activation_peak_bytes(spec, layers, max_num_batched_tokens=tokens, **kw)
        assert peak == tokens * 110_592
        # the log's peak_torch_memory minus its weights (printed to 0.005 GiB): within 1 %
        # (the inputs, positions and attention metadata are the rest)
        assert peak / GIB_BYTES == pytest.approx(logged_gib, rel=0.01)
    chunk = engine_v0.activation_peak_bytes(spec, layers, max_num_batched_tokens=512, **kw)
    assert chunk == 256 * 128_256 * 38 + 512 * 4096 * 2  # and the last hidden states


def test_the_20k_and_29k_logs_to_a_few_blocks():
    """#10517: '# GPU blocks: 1952' at 20,000 tokens (1.56x) and 1478 at 29,000, where vLLM
    refuses: 'max seq len (29000) is larger than the maximum number of tokens that can be
    stored in KV cache (23648)'. The catalog's RTX 3090 is 23.56 GiB to CUDA, the log's
    23.58: 0.02 GiB x 0.9 is 9 blocks of 2 MiB, the plan's share of the gap."""
    ok = _plan("0.6.4", max_model_len=20000, gpu_memory_utilization=0.9)
    assert ok.starts
    assert ok.num_blocks == pytest.approx(1952, rel=0.005)
    assert ok.max_concurrency == pytest.approx(1.56, abs=0.01)
    assert ok.memory.non_torch_bytes == engine_v0.NON_TORCH_DEVICE_SINGLE_GPU_BYTES
    bad = _plan("0.6.4", max_model_len=29000, gpu_memory_utilization=0.9)
    assert not bad.starts
    assert bad.kv_cache_tokens == pytest.approx(23648, rel=0.005)
    assert bad.kv_cache_tokens == bad.num_blocks * 16  # V0 counts blocks of 16 tokens
    # 35,000 tokens turns chunked prefill on (512 tokens a step): the profile shrinks and
    # the engine starts, as the thread says it did
    assert _plan("0.6.4", max_model_len=35000, gpu_memory_utilization=0.9).starts


def test_the_same_deployment_under_v1_sizes_the_profile_differently():
    v0 = _plan("0.6.4", max_model_len=29000, gpu_memory_utilization=0.9)
    v1 = _plan("0.8", max_model_len=29000, gpu_memory_utilization=0.9)
    # V1 chunks at 2048 tokens on a 24 GB card: no whole-context prefill in the profile
    assert v1.settings.max_num_batched_tokens == 2048
    assert v1.memory.activation_peak_bytes < v0.memory.activation_peak_bytes


def test_prefix_caching_is_off_by_default_and_the_command_speaks_v0():
    plan = _plan("0.6.4", max_model_len=35000, enable_chunked_prefill=False)
    assert not plan.settings.enable_prefix_caching
    asked = ServeSettings(vllm_version="0.6.4", max_model_len=35000, enable_chunked_prefill=False)
    args = vllm_serve_args(LLAMA, plan, asked)
    assert "--no-enable-prefix-caching" not in args  # V0's flag is store_true only
    assert "--enable-chunked-prefill=False" in args
    v1 = _plan("0.19", max_model_len=35000)
    v1_args = vllm_serve_args(LLAMA, v1, ServeSettings(max_model_len=35000))
    assert "--enable-chunked-prefill=False" not in v1_args


def test_a_batch_shorter_than_the_context_without_chunking_is_refused():
    spec = load_model(LLAMA, allow_hub=False).spec
    gpu = gpu_catalog().get("RTX-3090")
    s = ServeSettings(vllm_version="0.6.4", max_model_len=8192, max_num_batched_tokens=4096)
    with pytest.raises(InvalidArgumentError, match="--enable-chunked-prefill"):
        resolve_settings(spec, gpu, s)
    chunked = ServeSettings(
        vllm_version="0.6.4",
        max_model_len=8192,
        max_num_batched_tokens=4096,
        enable_chunked_prefill=True,
    )
    assert resolve_settings(spec, gpu, chunked)[0].max_num_batched_tokens == 4096


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["Qwen/Qwen3-30B-A3B", "--enable-expert-parallel"], "--enable-expert-parallel"),
        ([LLAMA, "--enable-lora"], "LoRA"),
        (["deepseek-ai/DeepSeek-V2-Lite"], "MLA"),
        (["ibm-granite/granite-4.0-h-tiny"], "Mamba"),
    ],
)
def test_what_v0_runs_differently_is_refused_by_name(args, what):
    result = CliRunner().invoke(
        cli, ["plan", *args, "--gpu", "H100", "--vllm-version", "0.6.4", "--offline"]
    )
    assert result.exit_code == 2, result.output
    assert what in result.output


def test_block_sizes_by_release():
    with pytest.raises(InvalidArgumentError, match=r"8, 16, 32$"):
        _plan("0.6.3", max_model_len=4096, block_size=64)
    assert _plan("0.6.4", max_model_len=4096, block_size=64).settings.block_size == 64


def test_check_log_reads_a_v0_log():
    lines = [
        "INFO 12-02 10:00:00 api_server.py:585] vLLM API server version 0.6.4.post1",
        "INFO 12-02 10:00:00 api_server.py:586] args: Namespace(subparser='serve', "
        f"model_tag='{LLAMA}', host=None, port=8000, model='{LLAMA}', "
        "tensor_parallel_size=1, max_model_len=20000, gpu_memory_utilization=0.9, "
        "max_num_seqs=256, enable_chunked_prefill=None, dispatch_function=<function serve>)",
        "INFO 12-02 10:00:03 model_runner.py:1077] Loading model weights took 14.9888 GB",
        "INFO 12-02 10:00:05 worker.py:232] Memory profiling results: total_gpu_memory=23.58GiB "
        "initial_memory_usage=15.34GiB peak_torch_memory=17.06GiB "
        "memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=3.81GiB "
        "gpu_memory_utilization=0.90",
        "INFO 12-02 10:00:05 gpu_executor.py:113] # GPU blocks: 1952, # CPU blocks: 2048",
        "INFO 12-02 10:00:05 gpu_executor.py:117] Maximum concurrency for 20000 tokens per "
        "request: 1.56x",
    ]
    result = CliRunner().invoke(
        cli, ["check-log", "-", "--gpu", "RTX-3090", "--offline", "--json"], input="\n".join(lines)
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["vllm_version_planned"] == "0.6.4"
    found = {c["quantity"]: c for c in doc["comparisons"]}
    assert set(found) >= {"weights_bytes", "kv_cache_memory_bytes", "kv_cache_blocks"}
    assert found["kv_cache_blocks"]["logged"] == 1952
    assert not any(c["is_finding"] for c in doc["comparisons"])


def test_0_8_to_0_10_fall_back_to_v0_below_ampere():
    """arg_utils.py _is_v1_supported_oracle (0.8.5, 0.9.2, 0.10.1): "Compute Capability < 8.0
    is not supported by the V1 Engine. Falling back to V0." A T4 (7.5) under 0.8 plans V0 (256
    sequences, blocks of 16 over every layer), an A10 (8.6) V1; 0.11 has no V0 left."""
    t4, a10 = (7, 5), (8, 6)
    assert engine.behaviour_on("0.8", t4).is_v0_engine
    assert engine.behaviour_on("0.10", t4).is_v0_engine
    assert not engine.behaviour_on("0.8", a10).is_v0_engine
    assert not engine.behaviour_on("0.11", t4).is_v0_engine
    spec = load_model("meta-llama/Llama-3.2-3B-Instruct", allow_hub=False).spec
    settings = ServeSettings(vllm_version="0.8", max_model_len=4096)
    on_t4 = plan_capacity(spec, gpu_catalog().get("T4"), settings)
    assert on_t4.settings.max_num_seqs == 256
    assert not on_t4.settings.enable_prefix_caching  # V0's default
    on_a10 = plan_capacity(spec, gpu_catalog().get("A10"), settings)
    assert on_a10.settings.enable_prefix_caching  # V1's default
