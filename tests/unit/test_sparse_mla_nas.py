"""Issue 13 (item 5): DeepSeek-V3.2's sparse MLA (the lightning indexer's own cache, the
fp8_ds_mla format), Nemotron-NAS's per-layer blocks, and the families still refused.

Worked examples from vLLM 0.32's source (the wheel in .venv-vllm):

* ``model_executor/layers/attention/mla_attention.py`` ``MLAAttention.get_kv_cache_spec``:
  an fp8_ds_mla latent row is 656 bytes (512 fp8 + 4 fp32 scales + 64 bf16 RoPE dims);
* ``model_executor/models/deepseek_v2.py`` ``Indexer.__init__``: the indexer key cache is
  ``index_head_dim + index_head_dim // 128 * 4`` = 132 uint8 bytes a token, one "head";
* ``v1/core/kv_cache_utils.py`` ``get_kv_cache_groups``: full-attention layers of one block
  size and different pages form one group (``UniformTypeKVCacheSpecs``) whose block costs
  the sum of the pages;
* ``v1/attention/backends/mla/indexer.py``: the indexer backend takes 64-token blocks only;
* ``model_executor/models/nemotron_nas.py``: ``num_kv_heads = heads // n_heads_in_group``,
  MLP width ``int(2 x ffn_mult x hidden / 3)`` rounded up to 256, no-op blocks build nothing.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

from servefit.adapters.catalog import find_catalog_model
from servefit.core.engines.vllm_cpu import VllmCpuEngine
from servefit.core.hardware import custom_gpu
from servefit.core.hf_config import REFUSED_MODEL_TYPES, spec_from_hf_config
from servefit.core.hf_nas import ffn_mult_to_intermediate_size
from servefit.core.kv_cache import kv_layout, layer_specs, mla_bytes_per_token
from servefit.core.model_spec import MlaSpec
from servefit.core.plan import CacheSettings, ServeSettings, plan_capacity
from servefit.core.weights import count_params
from servefit.errors import UnsupportedArchitectureError

GIB = 2**30
V32 = "deepseek-ai/DeepSeek-V3.2"
SUPER = "nvidia/Llama-3_3-Nemotron-Super-49B-v1"


def _mla(spec) -> MlaSpec:
    mixer = spec.layers[0].mixer
    assert isinstance(mixer, MlaSpec)
    return mixer


# --- DeepSeek-V3.2 ---------------------------------------------------------------------------


def test_v32_every_layer_and_the_mtp_layer_carry_an_indexer(catalog_model):
    spec = catalog_model(V32).spec
    assert all(layer.mixer.has_indexer for layer in (*spec.layers, *spec.mtp_layers))
    m = _mla(spec)
    assert (m.index_num_heads, m.index_head_dim) == (64, 128)
    assert spec.family == "sparse MLA MoE"
    # 61 indexers of 1536 x 8192 (wq_b) + 7168 x 128 (wk) + 7168 x 64 (weights_proj) + 256
    # (k_norm) on top of DeepSeek-V3.1's 671,026,435,584; + 256: the MTP layer's k_norm, a
    # norm counted with the model's norms as the MTP layer's MLA norms are
    assert count_params(spec).total == 671_026_435_584 + 61 * 13_959_424 + 256


@pytest.mark.parametrize(
    ("kv_cache_dtype", "ds_mla", "bytes_per_token"),
    [
        ("auto", False, 576 * 2 + 132),  # bf16 latent + indexer
        ("fp8_ds_mla", False, 656 + 132),
        ("fp8", True, 656 + 132),  # FLASHMLA_SPARSE (Hopper) stores fp8 as fp8_ds_mla
        ("fp8", False, 576 + 132),  # FLASHINFER_MLA_SPARSE (Blackwell) keeps plain fp8
    ],
)
def test_v32_bytes_per_token(catalog_model, kv_cache_dtype, ds_mla, bytes_per_token):
    m = _mla(catalog_model(V32).spec)
    kv_bytes = 1 if kv_cache_dtype.startswith("fp8") else 2
    ds = frozenset({kv_cache_dtype}) if ds_mla else frozenset()
    assert mla_bytes_per_token(m, kv_cache_dtype, kv_bytes, sparse_ds_mla_dtypes=ds) == (
        bytes_per_token
    )


@pytest.mark.parametrize(("gpu_name", "per_token"), [("H200-SXM", 788), ("B200", 708)])
def test_v32_plan_block_64_one_group(catalog_model, gpu, gpu_name, per_token):
    """8 GPUs, --kv-cache-dtype fp8, 40 GiB of KV cache: one group of 61 layers, 64-token
    blocks (the indexer backend's only size) of 61 x 64 x 788 = 3,076,352 bytes on Hopper,
    so 40 GiB // 3,076,352 = 13,961 blocks; a 163,840-token request needs 2,560."""
    settings = ServeSettings(
        tensor_parallel_size=8, kv_cache_dtype="fp8", kv_cache_memory_bytes=40 * GIB
    )
    plan = plan_capacity(catalog_model(V32).spec, gpu(gpu_name), settings)
    assert plan.settings.block_size == 64
    assert len(plan.layout.groups) == 1 and plan.layout.group_size == 61
    assert plan.kv_bytes_per_token == 61 * per_token
    assert plan.num_blocks == 40 * GIB // (61 * 64 * per_token)
    assert plan.max_concurrency == pytest.approx(plan.num_blocks / (163_840 // 64))
    if gpu_name == "H200-SXM":
        assert plan.num_blocks == 13_961


def test_v32_on_sm120_stores_even_auto_as_fp8_ds_mla(catalog_model, gpu):
    """12.x: FLASHINFER_MLA_SPARSE_SM120, the one sparse backend there, turns auto into
    fp8_ds_mla: 656 + 132 bytes a token a layer whatever --kv-cache-dtype auto says."""
    settings = ServeSettings(kv_cache_memory_bytes=4 * GIB, pipeline_parallel_size=1)
    plan = plan_capacity(catalog_model(V32).spec, gpu("RTX-PRO-6000-Blackwell"), settings)
    assert plan.settings.block_size == 64
    assert plan.kv_bytes_per_token == 61 * (656 + 132)


def test_index_topk_freq_leaves_layers_without_an_indexer_in_the_same_group():
    """GLM-5.2-style IndexCache (index_topk_freq 4, offset 2): layers 0, 1, 5, 9, ... keep an
    indexer, the others not. Pages differ (64 x 1,284 and 64 x 1,152 bytes), one block size:
    one group whose block costs every page (not a unified page with a doubled block)."""
    config = copy.deepcopy(find_catalog_model(V32).config)
    config.update(num_hidden_layers=8, index_topk_freq=4, index_skip_topk_offset=2)
    spec = spec_from_hf_config(config, name="freq4")
    assert [layer.mixer.has_indexer for layer in spec.layers] == [
        True,
        True,
        False,
        False,
        False,
        True,
        False,
        False,
    ]
    settings = CacheSettings(mla_block_size=64)
    layout = kv_layout(layer_specs(spec, None, settings))
    assert len(layout.groups) == 1
    assert layout.bytes_per_block == 64 * (3 * 1_284 + 5 * 1_152)


def test_v32_refused_on_the_cpu_backend(catalog_model):
    """vLLM 0.32 platforms/cpu.py: "Sparse Attention is not supported on CPU."."""
    reason = VllmCpuEngine().refusal(catalog_model(V32).spec, custom_gpu_cpu())
    assert reason and "sparse attention" in reason


def custom_gpu_cpu():
    from servefit.core.hardware import GpuSpec

    cpu = custom_gpu(memory_bytes=64 * GIB, memory_bandwidth_bytes_per_s=1e11)
    fields = {f: getattr(cpu, f) for f in cpu.__dataclass_fields__ if not f.startswith("_")}
    return GpuSpec(**{**fields, "vendor": "cpu", "name": "host cpu"})


# --- Nemotron-NAS ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ffn_mult", "width"), [(5.25, 28_672), (2.625, 14_336), (1.3125, 7_168), (0.5, 2_816)]
)
def test_ffn_mult_widths(ffn_mult, width):
    assert ffn_mult_to_intermediate_size(ffn_mult, 8_192) == width


def test_super_49b_layers(catalog_model):
    spec = catalog_model(SUPER).spec
    attention = [layer.mixer for layer in spec.layers if layer.mixer is not None]
    assert len(spec.layers) == 80 and len(attention) == 49
    assert {(a.num_q_heads, a.num_kv_heads, a.head_dim) for a in attention} == {(64, 8, 128)}
    assert count_params(spec).total == 49_867_145_216  # NVIDIA names it 49B


def test_super_49b_kv_cache_counts_only_the_attention_blocks(catalog_model, gpu):
    """49 layers x 2 x 8 heads x 128 x 2 bytes = 200,704 bytes a token (196 KiB)."""
    settings = ServeSettings(tensor_parallel_size=2, kv_cache_memory_bytes=20 * GIB)
    plan = plan_capacity(catalog_model(SUPER).spec, gpu("H100-SXM"), settings)
    assert plan.kv_bytes_per_token == 49 * 2 * 4 * 128 * 2  # 4 KV heads a rank at TP 2
    assert plan.num_blocks == 20 * GIB // (16 * 49 * 2 * 4 * 128 * 2)


TINY_NAS = {
    "architectures": ["DeciLMForCausalLM"],
    "model_type": "nemotron-nas",
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_hidden_layers": 4,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
    "block_configs": [
        {"attention": {"n_heads_in_group": 2, "no_op": False}, "ffn": {"ffn_mult": 2.0}},
        {"attention": {"n_heads_in_group": None, "no_op": True}, "ffn": {"ffn_mult": 1.0}},
        {"attention": {"n_heads_in_group": 4, "no_op": False}, "ffn": {"ffn_mult": 2.0}},
        {"attention": {"n_heads_in_group": 2, "no_op": False}, "ffn": {"no_op": True}},
    ],
}


def test_tiny_nas_plan_is_the_cpu_engines():
    """The integration test's tiny model (make_tiny_nas.py), planned as the CPU build ran it:
    pages of 32, 16 and 32 KiB in one group of 80 KiB a block, 1 GiB = 13,107 blocks, 32 a
    request: 409.59375x and 1,677,696 tokens, as vLLM 0.32 (CPU) logged; 697,216 parameters,
    as written."""
    spec = spec_from_hf_config(TINY_NAS, name="tiny-nas")
    assert count_params(spec).total == 697_216
    settings = ServeSettings(
        max_model_len=4096,
        kv_cache_memory_bytes=GIB,
        block_size=128,
        max_num_batched_tokens=2048,
        max_num_seqs=128,
        enforce_eager=True,
        vllm_version="0.32",
    )
    gpu = custom_gpu(memory_bytes=8 * GIB, memory_bandwidth_bytes_per_s=1e11)
    plan = plan_capacity(spec, gpu, settings)
    assert plan.layout.bytes_per_block == 81_920
    assert (plan.num_blocks, plan.kv_cache_tokens) == (13_107, 1_677_696)
    assert plan.max_concurrency == 409.59375


def test_a_block_of_neither_attention_nor_mlp_builds_nothing():
    """Llama-3.1-Nemotron-Ultra-253B has 81 such blocks: no weights, no norm, no cache."""
    config = copy.deepcopy(TINY_NAS)
    config["block_configs"][1]["ffn"] = {"no_op": True}
    spec = spec_from_hf_config(config, name="nas")
    empty = spec.layers[1]
    assert (empty.mixer, empty.mlp, empty.num_norms) == (None, None, 0)
    # the tiny model less block 1's 256-wide MLP (3 x 128 x 256) and its norm (128)
    assert count_params(spec).total == 697_216 - 3 * 128 * 256 - 128


@pytest.mark.parametrize(
    ("attention", "field"),
    [
        ({"n_heads_in_group": 2, "no_op": False, "replace_with_linear": True}, "replace_with"),
        ({"n_heads_in_group": 2, "no_op": False, "window_length": 4096}, "window_length"),
    ],
)
def test_nas_blocks_vllm_does_not_build_are_refused(attention, field):
    config = copy.deepcopy(TINY_NAS)
    config["block_configs"][0]["attention"] = attention
    with pytest.raises(UnsupportedArchitectureError, match=field):
        spec_from_hf_config(config, name="nas")


# --- still refused ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_type", "architecture", "why"),
    [
        ("kimi_linear", "KimiLinearForCausalLM", "Kimi Delta Attention"),
        ("gemma3n_text", "Gemma3nForCausalLM", "num_kv_shared_layers"),
        ("gemma3n", "Gemma3nForConditionalGeneration", "num_kv_shared_layers"),
    ],
)
def test_families_not_planned_are_refused_by_name(model_type, architecture, why):
    assert model_type in REFUSED_MODEL_TYPES
    config = {"architectures": [architecture], "model_type": model_type, "hidden_size": 64}
    with pytest.raises(UnsupportedArchitectureError, match=why) as raised:
        spec_from_hf_config(config, name="m")
    assert architecture in str(raised.value)


def test_cli_refusal_exits_2(tmp_path):
    config = {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "servefit.cli.main", "plan", str(tmp_path), "--gpu", "H100"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Kimi-Linear" in done.stdout + done.stderr
