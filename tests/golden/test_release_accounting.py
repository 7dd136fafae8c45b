"""Accounting that moved between vLLM releases, each held to a real log of that release.

Golden numbers are the logs' own "Model loading took X GiB" lines (quoted per test); the
release rules are in ``servefit.core.engine.vllm_behaviour``.
"""

from __future__ import annotations

import pytest

from servefit.core.plan import ServeSettings, plan_capacity
from servefit.units import GIB_BYTES


def _weights_gib(catalog_model, gpu, model: str, gpu_name: str, version: str) -> float:
    loaded = catalog_model(model)
    plan = plan_capacity(
        loaded.spec,
        gpu(gpu_name),
        ServeSettings(vllm_version=version, max_model_len=8192),
        with_suggestions=False,
    )
    return plan.memory.weights_bytes / GIB_BYTES


def test_mxfp4_moe_on_hopper_runs_on_marlin_before_triton_kernels_ship(catalog_model, gpu):
    # vllm-project/vllm#23278 (v0.10.1, NVIDIA H100 PCIe): "Model loading took 65.9651 GiB";
    # get_mxfp4_backend falls to MARLIN without triton_kernels, which pads the experts
    marlin = _weights_gib(catalog_model, gpu, "openai/gpt-oss-120b", "H100-PCIe", "0.10")
    assert marlin == pytest.approx(65.9651, abs=0.1)
    # from the release that installs triton_kernels the experts keep their checkpoint shape,
    # and the checkpoint's scales stay loaded beside the swizzled copy: 36 layers x 128
    # experts x (5,760 + 2,880 rows) x 90 groups = 3,583,180,800 bytes = 3.34 GiB more
    # (vllm-project/vllm#33155, v0.14.1 on an H100: "Model loading took 64.38 GiB"; the rest
    # is triton_kernels' own value padding, not in vLLM's tree)
    triton = _weights_gib(catalog_model, gpu, "openai/gpt-oss-120b", "H100-SXM", "0.14")
    assert triton == pytest.approx(64.38, abs=0.15)
    assert triton < 64.38 < marlin


def test_the_marlin_rule_is_hopper_only(catalog_model, gpu):
    # Blackwell's FlashInfer TRT-LLM layout does not depend on triton_kernels
    old = _weights_gib(catalog_model, gpu, "openai/gpt-oss-120b", "B200", "0.10")
    new = _weights_gib(catalog_model, gpu, "openai/gpt-oss-120b", "B200", "0.14")
    assert old == new


def _plan(catalog_model, gpu, model, gpu_name, version, **settings):
    loaded = catalog_model(model)
    return plan_capacity(
        loaded.spec,
        gpu(gpu_name),
        ServeSettings(vllm_version=version, **settings),
        mamba_ssm_dtype=loaded.mamba_ssm_dtype,
        with_suggestions=False,
    )


def test_an_a100_takes_the_large_batch_defaults_only_in_0_8(catalog_model, gpu):
    # v0.8.5 arg_utils._set_default_args_v1: "if device_memory >= 70 * GiB_bytes:" ->
    # (8192, 1024) for the API server; v0.9.2 adds 'and "a100" not in device_name' -> (2048, 256)
    old = _plan(catalog_model, gpu, "Qwen/Qwen3-8B", "A100-80GB-SXM", "0.8", max_model_len=8192)
    new = _plan(catalog_model, gpu, "Qwen/Qwen3-8B", "A100-80GB-SXM", "0.9", max_model_len=8192)
    assert (old.settings.max_num_batched_tokens, old.settings.max_num_seqs) == (8192, 1024)
    assert (new.settings.max_num_batched_tokens, new.settings.max_num_seqs) == (2048, 256)


def test_without_the_hybrid_manager_sliding_layers_are_full_attention(catalog_model, gpu):
    # v0.8.5 unify_hybrid_kv_cache_specs: gemma-3's sliding-window layers become full attention.
    # Hand count for google/gemma-3-27b-it (config.json: 62 layers, 16 KV heads, head_dim 128,
    # bfloat16): a 16-token block of all 62 layers is 16 x 62 x 16 x 128 x 2 (K, V) x 2 bytes
    # = 8,126,464 bytes; 10 GiB = 10,737,418,240 bytes hold 1,321 blocks = 21,136 tokens, and
    # 0.8 prints "Maximum concurrency" as tokens / max_model_len = 21,136 / 32,768
    kv = 10 * GIB_BYTES
    old = _plan(
        catalog_model,
        gpu,
        "google/gemma-3-27b-it",
        "H100-SXM",
        "0.8",
        max_model_len=32768,
        kv_cache_memory_bytes=kv,
    )
    assert old.kv_cache_tokens == 21_136
    assert old.max_concurrency == pytest.approx(21_136 / 32_768)
    # 0.9 keeps the windows: the same memory holds more requests of 32k tokens
    new = _plan(
        catalog_model,
        gpu,
        "google/gemma-3-27b-it",
        "H100-SXM",
        "0.9",
        max_model_len=32768,
        kv_cache_memory_bytes=kv,
    )
    assert new.max_concurrency > 2 * old.max_concurrency


def test_state_models_before_0_10_are_refused_not_planned_as_v1(catalog_model, gpu):
    from servefit.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="V0 engine"):
        _plan(catalog_model, gpu, "ibm-granite/granite-4.0-h-tiny", "H100-SXM", "0.9")


def test_a_release_before_the_v0_engine_it_mirrors_is_refused():
    from click.testing import CliRunner

    from servefit.cli.main import cli

    def run(version: str):
        argv = ["plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--offline", "--vllm-version", version]
        return CliRunner().invoke(cli, argv)

    assert run("0.4.3").exit_code == 2
    assert "--vllm-version 0.5" in run("0.4.3").output
    v0 = run("0.7")  # the V0 engine is planned (core/engine_v0.py)
    assert v0.exit_code == 0 and "vLLM 0.7.3" in v0.output


def test_the_token_count_comes_from_the_concurrency_from_0_21(catalog_model, gpu):
    # v0.21.0 kv_cache_utils: "num_tokens = int(max_concurrency * max_model_len)"; v0.20.0:
    # blocks x block size. Hand count for Llama-3.1-8B (131,072 bytes a token): 10 GiB is
    # 5,120 blocks of 16 tokens = 81,920 tokens; a request of 8,200 tokens takes
    # cdiv(8200, 16) = 513 blocks, so 5,120 / 513 requests and int(5,120 / 513 x 8,200) =
    # 81,840 tokens
    kv = 10 * GIB_BYTES
    old, new = (
        _plan(
            catalog_model,
            gpu,
            "meta-llama/Llama-3.1-8B",
            "H100-SXM",
            v,
            max_model_len=8200,
            kv_cache_memory_bytes=kv,
        )
        for v in ("0.20", "0.21")
    )
    assert old.kv_cache_tokens == 81_920
    assert new.kv_cache_tokens == int(5_120 / 513 * 8_200) == 81_840


def test_hybrid_prefix_caching_is_off_by_default_until_0_26(catalog_model, gpu):
    # ModelConfig.is_prefix_caching_supported, v0.25.0: "Hybrid models do not support prefix
    # caching since the feature is still experimental"; v0.26.0: True for "hybrid"
    before = _plan(catalog_model, gpu, "Qwen/Qwen3.6-27B", "H200-SXM", "0.25", max_model_len=32768)
    after = _plan(catalog_model, gpu, "Qwen/Qwen3.6-27B", "H200-SXM", "0.26", max_model_len=32768)
    assert not before.settings.enable_prefix_caching and after.settings.enable_prefix_caching
    # asked for, 0.25 keeps it ("align": two state blocks a request); 0.11 forces it off
    asked = _plan(
        catalog_model,
        gpu,
        "Qwen/Qwen3.6-27B",
        "H200-SXM",
        "0.25",
        max_model_len=32768,
        enable_prefix_caching=True,
    )
    assert asked.settings.enable_prefix_caching
    forced = _plan(
        catalog_model,
        gpu,
        "Qwen/Qwen3-Next-80B-A3B-Thinking",
        "H200-SXM",
        "0.11",
        max_model_len=32768,
        enable_prefix_caching=True,
    )
    assert not forced.settings.enable_prefix_caching


def test_the_mamba_all_mode_is_refused_until_0_28(catalog_model, gpu):
    from servefit.errors import InvalidArgumentError

    # v0.27.0 models/config.py: mamba_cache_mode = "all" for SupportsMambaPrefixCaching models
    with pytest.raises(InvalidArgumentError, match='mamba_cache_mode "all"'):
        _plan(
            catalog_model,
            gpu,
            "ibm-granite/granite-4.0-h-tiny",
            "H100-SXM",
            "0.27",
            enable_prefix_caching=True,
        )
    ok = _plan(
        catalog_model,
        gpu,
        "ibm-granite/granite-4.0-h-tiny",
        "H100-SXM",
        "0.28",
        enable_prefix_caching=True,
    )
    assert ok.settings.enable_prefix_caching
