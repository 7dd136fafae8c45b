"""``--enable-prefix-caching`` as vLLM resolves it: None (not given) is vLLM's default for the
model, an explicit flag is kept as given.

vLLM 0.32: ``EngineArgs.enable_prefix_caching`` is None unless given (engine/arg_utils.py);
``EngineArgs._set_default_chunked_prefill_and_prefix_caching_args`` fills in
``ModelConfig.is_prefix_caching_supported`` (config/model.py): False for an
"attention_free" model (pure Mamba), True otherwise. ``MambaModelConfig.
verify_and_update_config`` (model_executor/models/config.py) then runs the state in "align"
mode with mamba_block_size = the cache block size when prefix caching is on, else "none"
with mamba_block_size = max_model_len.

The real engine, observed once with vLLM 0.32.0's CPU build on the tiny Mamba-2 of
tests/integration/test_planner_ssm.py (``make_tiny_model.py --arch mamba2``, 1 GiB of KV
space, ``--max-model-len 4096 --max-num-batched-tokens 2048 --max-num-seqs 128
--enforce-eager --enable-prefix-caching``, bf16 state: a host without AVX-512 BF16)::

    Mamba cache mode is set to 'align' for Mamba2ForCausalLM by default when prefix
        caching is enabled
    CPU KV cache size: 20,899,157 tokens, Maximum concurrency for 4,096 tokens per
        request: 5102.33x

and ``vllm:cache_config_info``: num_gpu_blocks 15307, block_size 16, mamba_block_size 16,
mamba_cache_mode align. By hand: 15,307 blocks (35,072-byte state page, 2 layers, 1 GiB),
3 blocks a request (2 + MambaMixer2's prefill checkpoint): 15,307 / 3 = 5102.33x,
int(5102.33... x 4,096) = 20,899,157 tokens. The startup is enough: the CPU Mamba-2 path then
fails on the first request in align mode, so no server test runs it (each real server costs
~60 s of a CI run near its budget; tests/integration/test_planner_ssm.py keeps serving the
default, prefix caching off: 15307.00x).
"""

from __future__ import annotations

import json
import shlex

import pytest
from test_ssm_families import tiny_ssm_config

from servefit.adapters.catalog import find_catalog_model, find_gpu
from servefit.app.deployment import Deployment, Hardware, deployment_from_vllm_command
from servefit.app.plan import plan_deployment
from servefit.cli.options import pop_serve_settings
from servefit.core.engines.vllm_cpu import VllmCpuEngine, cpu_device
from servefit.core.hf_config import spec_from_hf_config
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.preflight.vllm_args import parse_vllm_command
from servefit.units import GIB_BYTES

TINY_MAMBA2 = tiny_ssm_config("mamba2")  # make_tiny_model.py --arch mamba2, as written
GRANITE = "ibm-granite/granite-4.0-h-tiny"  # a Mamba-2 + attention hybrid in the catalog
CODESTRAL = "mistralai/Mamba-Codestral-7B-v0.1"  # a pure Mamba-2 in the catalog
MODEL_LEN = 4096


def _tiny_cpu_plan(prefix_caching: bool | None):
    host = cpu_device(name="CPU", memory_bytes=8 * GIB_BYTES, isa_flags=("avx2",))
    settings = ServeSettings(
        max_model_len=MODEL_LEN,
        max_num_batched_tokens=2048,
        max_num_seqs=128,
        kv_cache_memory_bytes=GIB_BYTES,
        enable_prefix_caching=prefix_caching,
        vllm_version="0.32",
    )
    return VllmCpuEngine().plan(spec_from_hf_config(TINY_MAMBA2), host, settings)


def test_explicit_prefix_caching_on_a_pure_mamba_plans_as_the_engine_logged():
    """vLLM 0.32.0 CPU, ``--enable-prefix-caching``: "CPU KV cache size: 20,899,157 tokens,
    Maximum concurrency for 4,096 tokens per request: 5102.33x" (the module docstring)."""
    plan = _tiny_cpu_plan(True)
    assert plan.settings.enable_prefix_caching
    assert plan.num_blocks == 15_307
    assert {g.spec.state_blocks_per_request for g in plan.layout.groups} == {3}
    assert plan.max_concurrency == pytest.approx(15_307 / 3, rel=1e-12)
    assert f"{plan.max_concurrency:.2f}" == "5102.33"
    assert plan.kv_cache_tokens == 20_899_157 == int(15_307 / 3 * MODEL_LEN)
    # cache_config_info's block_size 16 (the CPU platform's 128 comes after the Mamba block
    # is fixed)
    assert plan.settings.block_size == 16


@pytest.mark.parametrize("prefix_caching", [None, False], ids=["no-flag", "explicit-off"])
def test_pure_mamba_without_the_flag_or_with_it_off_keeps_one_block_a_request(prefix_caching):
    """vLLM 0.32.0 CPU, no flag or ``--no-enable-prefix-caching``: "CPU KV cache size:
    62,697,472 tokens, ... 15307.00x", the block max_model_len (test_planner_ssm.py)."""
    plan = _tiny_cpu_plan(prefix_caching)
    assert not plan.settings.enable_prefix_caching
    assert (plan.num_blocks, plan.kv_cache_tokens) == (15_307, 62_697_472)
    assert f"{plan.max_concurrency:.2f}" == "15307.00"
    assert plan.settings.block_size == MODEL_LEN


def test_pure_mamba_block_with_prefix_caching_is_the_cache_block_on_cuda():
    """Align mode: mamba_block_size = cache_config.block_size (MambaModelConfig), which on
    CUDA stays CacheConfig.DEFAULT_BLOCK_SIZE (16) for a model with no attention backend
    (Platform.update_block_size_for_backend returns when _find_non_ssm_backends is empty),
    or the user's --block-size."""
    spec = spec_from_hf_config(TINY_MAMBA2)
    h100 = find_gpu("H100")
    base = {"max_model_len": MODEL_LEN, "kv_cache_memory_bytes": GIB_BYTES, "vllm_version": "0.32"}
    on = plan_capacity(spec, h100, ServeSettings(**base, enable_prefix_caching=True))
    assert on.settings.block_size == 16
    assert f"{on.max_concurrency:.2f}" == "5102.33" and on.kv_cache_tokens == 20_899_157
    given = plan_capacity(
        spec, h100, ServeSettings(**base, enable_prefix_caching=True, block_size=32)
    )
    assert given.settings.block_size == 32
    off = plan_capacity(spec, h100, ServeSettings(**base))
    assert off.settings.block_size == MODEL_LEN and not off.settings.enable_prefix_caching


def test_the_default_is_vllms_per_model():
    from servefit.core.plan_settings import default_prefix_caching, is_attention_free

    assert is_attention_free(spec_from_hf_config(TINY_MAMBA2))
    assert not default_prefix_caching(spec_from_hf_config(TINY_MAMBA2))
    assert default_prefix_caching(spec_from_hf_config(find_catalog_model(GRANITE).config))


def test_hybrids_keep_prefix_caching_on_by_default():
    """A hybrid's default is on (is_prefix_caching_supported: "hybrid"): no flag plans as
    ``--enable-prefix-caching`` (align mode, 3 blocks a Mamba-2 group), off as before."""
    spec = spec_from_hf_config(find_catalog_model(GRANITE).config)
    h100 = find_gpu("H100")
    base = {"max_model_len": MODEL_LEN, "kv_cache_memory_bytes": GIB_BYTES, "vllm_version": "0.32"}
    default = plan_capacity(spec, h100, ServeSettings(**base))
    on = plan_capacity(spec, h100, ServeSettings(**base, enable_prefix_caching=True))
    off = plan_capacity(spec, h100, ServeSettings(**base, enable_prefix_caching=False))
    assert default.settings == on.settings and default.settings.enable_prefix_caching
    assert (default.kv_cache_tokens, default.max_concurrency) == (
        on.kv_cache_tokens,
        on.max_concurrency,
    )
    state = {g.spec.state_blocks_per_request for g in default.layout.groups if g.spec.is_state}
    assert state == {3}
    assert not off.settings.enable_prefix_caching
    assert off.max_concurrency > default.max_concurrency


def _codestral(args: list[str]):
    d = deployment_from_vllm_command(
        ["vllm", "serve", CODESTRAL, "--max-model-len", "8192", *args],
        hardware=Hardware(gpu="H100"),
        allow_hub=False,
    )
    return plan_deployment(d, with_performance=False)


def test_from_vllm_args_and_the_printed_command_keep_the_explicit_flag():
    """``preflight --from-vllm-args``'s reader and the printed ``vllm serve`` line: an
    explicit --enable-prefix-caching on a pure Mamba is planned on and printed, and the
    printed line read back plans the same; no flag stays vLLM's default (off, printed as
    such, as before)."""
    on = _codestral(["--enable-prefix-caching"])
    default = _codestral([])
    assert on.capacity.settings.enable_prefix_caching
    assert not default.capacity.settings.enable_prefix_caching
    assert "--enable-prefix-caching" in shlex.split(on.vllm_command)
    assert "--no-enable-prefix-caching" in shlex.split(default.vllm_command)
    assert on.capacity.max_concurrency == pytest.approx(default.capacity.max_concurrency / 3)
    again = parse_vllm_command(shlex.split(on.vllm_command))
    assert again.settings["enable_prefix_caching"] is True
    replanned = plan_deployment(
        Deployment(
            model=CODESTRAL,
            hardware=Hardware(gpu="H100"),
            settings=ServeSettings(**again.settings),
            allow_hub=False,
        ),
        with_performance=False,
    )
    assert replanned.capacity.settings == on.capacity.settings


def test_a_dense_models_command_stays_as_before():
    """No flag on a dense model: on, and nothing printed (vLLM's default is the same)."""
    out = plan_deployment(
        Deployment(model="meta-llama/Llama-3.1-8B", hardware=Hardware(gpu="H100"), allow_hub=False),
        with_performance=False,
    )
    assert out.capacity.settings.enable_prefix_caching
    assert "prefix-caching" not in out.vllm_command


@pytest.mark.parametrize(
    ("argv", "expected"),
    [([], None), (["--enable-prefix-caching"], True), (["--no-enable-prefix-caching"], False)],
)
def test_cli_flags_map_to_the_tri_state(argv, expected):
    """servefit's --enable-prefix-caching/--no-enable-prefix-caching (cli/options.py), left
    out = None; preflight --from-vllm-args merges the parsed line over the same defaults."""
    import click
    from click.testing import CliRunner

    from servefit.cli.options import SERVE_OPTIONS

    seen: list[ServeSettings] = []

    def command(**flags):
        seen.append(pop_serve_settings(flags))

    for option in reversed(SERVE_OPTIONS):
        command = option(command)
    command = click.command()(command)

    result = CliRunner().invoke(command, argv)
    assert result.exit_code == 0, result.output
    assert seen[0].enable_prefix_caching is expected
    parsed = parse_vllm_command(["vllm", "serve", CODESTRAL, *argv]).settings
    assert parsed.get("enable_prefix_caching") is expected


def test_plan_json_settings_key_is_the_resolved_value():
    """The plan document's settings.enable_prefix_caching (a key other tools read) stays a
    bool: what vLLM runs with, never None."""
    from servefit.adapters.plan_document import outcome_document

    for args, expected in (([], False), (["--enable-prefix-caching"], True)):
        doc = json.loads(outcome_document(_codestral(args)).model_dump_json())
        assert doc["settings"]["enable_prefix_caching"] is expected
