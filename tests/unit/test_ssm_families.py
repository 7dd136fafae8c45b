"""Pure Mamba-1/2 and Granite-4.0-H, held to vLLM 0.32's accounting by hand.

Sources of every golden number:
- state shapes: ``vllm/model_executor/layers/mamba/mamba_utils.py``
  ``MambaStateShapeCalculator``: Mamba-1 conv (kernel - 1, intermediate / tp) and temporal
  (intermediate / tp, d_state); Mamba-2 conv (kernel - 1, (intermediate + 2 x groups x
  d_state) / tp), groups raised to tp when they do not divide it, temporal
  (heads / tp, head_dim, d_state); dtypes: conv and temporal in the model dtype (no
  per-architecture hook for these classes in ``model_executor/models/config.py``);
- weights: ``model_executor/models/mamba.py`` / ``mamba2.py`` / ``granitemoehybrid.py`` and
  ``layers/mamba/mamba_mixer.py`` / ``mamba_mixer2.py`` (``A`` is a float32 parameter);
- the pure-Mamba cache: ``MambaModelConfig`` (no prefix caching: one state block per
  request; attention-free models default to prefix caching off,
  ``ModelConfig.is_prefix_caching_supported``), ``MambaSpec.max_memory_usage_bytes`` and
  ``get_kv_cache_capacity`` (tokens = int(concurrency x max_model_len));
- published counts: Mistral's Codestral Mamba announcement (7,285,403,648 parameters).
"""

from __future__ import annotations

import math

import pytest

from servefit.adapters.catalog import find_catalog_model, find_gpu
from servefit.core.hf_config import spec_from_hf_config, state_dtype
from servefit.core.kv_cache import CacheSettings, layer_specs, state_bytes
from servefit.core.model_spec import AttentionSpec, DenseMlpSpec, MambaSpec, MixerKind, MoeSpec
from servefit.core.plan import ServeSettings, check_parallel_layout, plan_capacity
from servefit.core.weights import count_params, weight_bytes
from servefit.errors import ConfigError, InvalidArgumentError, UnsupportedArchitectureError
from servefit.units import GIB_BYTES

MAMBA_28B = "state-spaces/mamba-2.8b-hf"
CODESTRAL = "mistralai/Mamba-Codestral-7B-v0.1"
FALCON_MAMBA = "tiiuae/falcon-mamba-7b"

# transformers' GraniteMoeHybrid documentation example, as the docs print it (tiny, MoE
# with a shared MLP, "mamba"/"attention" layer names, no positional encoding)
TINY_GRANITE = {
    "architectures": ["GraniteMoeHybridForCausalLM"],
    "attention_bias": False,
    "hidden_act": "silu",
    "hidden_size": 512,
    "intermediate_size": 1024,
    "layer_types": ["mamba", "mamba", "mamba", "attention"] * 2,
    "mamba_chunk_size": 256,
    "mamba_conv_bias": True,
    "mamba_d_conv": 4,
    "mamba_d_head": 128,
    "mamba_d_state": 128,
    "mamba_expand": 2,
    "mamba_n_groups": 1,
    "mamba_n_heads": 8,
    "mamba_proj_bias": False,
    "max_position_embeddings": 4096,
    "model_type": "granitemoehybrid",
    "num_attention_heads": 8,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 8,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "position_embedding_type": "nope",
    "shared_intermediate_size": 512,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "vocab_size": 49152,
}


def catalog_spec(model_id: str):
    entry = find_catalog_model(model_id)
    return spec_from_hf_config(entry.config, name=model_id)


# --- parsing ---------------------------------------------------------------------------------


def test_mamba1_reads_every_shape_field():
    s = catalog_spec(MAMBA_28B)
    assert s.num_layers == 64 and s.layers_of_kind(MixerKind.MAMBA) == 64
    m = s.layers[0].mixer
    assert isinstance(m, MambaSpec) and m.version == 1
    assert (m.d_inner, m.state_size, m.conv_kernel, m.dt_rank) == (5120, 16, 4, 160)
    assert s.layers[0].mlp is None and s.tie_word_embeddings  # MambaConfig ties by default
    assert not s.is_hybrid and s.module_prefix == "backbone."


def test_falcon_mamba_intermediate_size_wins_over_expand():
    m = catalog_spec(FALCON_MAMBA).layers[0].mixer
    assert m.d_inner == 8192  # not expand 16 x 4,096
    assert not m.has_dt_norms  # vLLM builds its dt/B/C RMSNorms without weights


def test_mamba1_defaults_and_auto_rank():
    cfg = {"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 2, "vocab_size": 100}
    m = spec_from_hf_config(cfg).layers[0].mixer
    # transformers MambaConfig: intermediate = expand (2) x hidden, rank = ceil(hidden / 16)
    assert (m.d_inner, m.dt_rank, m.state_size, m.conv_kernel) == (1536, 48, 16, 4)


@pytest.mark.parametrize("rank", ["fast", 0, 1.5])
def test_mamba1_bad_time_step_rank_is_a_config_error(rank):
    cfg = {
        "model_type": "mamba",
        "hidden_size": 768,
        "num_hidden_layers": 2,
        "vocab_size": 100,
        "time_step_rank": rank,
    }
    with pytest.raises(ConfigError, match="time_step_rank"):
        spec_from_hf_config(cfg)


def test_mamba2_reads_every_shape_field():
    s = catalog_spec(CODESTRAL)
    m = s.layers[0].mixer
    assert (m.version, m.d_inner, m.num_heads, m.head_dim, m.n_groups, m.state_size) == (
        2,
        8192,
        128,
        64,
        8,
        128,
    )
    assert not s.tie_word_embeddings


def test_mamba2_width_mismatch_names_the_fields():
    cfg = {**find_catalog_model(CODESTRAL).config, "num_heads": 64}
    with pytest.raises(ConfigError, match=r"expand 2 x hidden_size 4096 = 8192.*num_heads 64"):
        spec_from_hf_config(cfg)


def test_granite_layer_types_mixers_and_mlps():
    s = spec_from_hf_config(TINY_GRANITE)
    attention = [i for i, layer in enumerate(s.layers) if isinstance(layer.mixer, AttentionSpec)]
    assert attention == [3, 7]
    assert s.is_hybrid and s.is_moe
    a = s.layers[3].mixer
    assert (a.num_q_heads, a.num_kv_heads, a.head_dim) == (8, 8, 64)  # hidden / heads
    moe = s.layers[0].mlp
    assert isinstance(moe, MoeSpec)
    assert moe.num_experts == 8 and moe.num_experts_per_token == 2
    assert moe.expert_intermediate_size == 1024
    assert moe.shared_intermediate_size == 512
    assert s.rope_cache_dims == ()  # position_embedding_type "nope": vLLM builds no RoPE


def test_granite_current_layer_type_names_and_dense_shared_mlp():
    cfg = {
        **TINY_GRANITE,
        "layer_types": ["linear_attention"] * 7 + ["full_attention"],
        "num_local_experts": 0,
        "position_embedding_type": "rope",
    }
    s = spec_from_hf_config(cfg)
    assert s.layers_of_kind(MixerKind.FULL_ATTENTION) == 1
    assert s.layers[0].mlp == DenseMlpSpec(intermediate_size=512)  # the shared MLP alone
    assert s.rope_cache_dims == (64,)


def test_granite_unknown_layer_type_is_refused():
    cfg = {**TINY_GRANITE, "layer_types": ["mamba"] * 7 + ["sliding_attention"]}
    with pytest.raises(UnsupportedArchitectureError, match="sliding_attention"):
        spec_from_hf_config(cfg)


def test_granite_mamba_width_mismatch_is_a_config_error():
    with pytest.raises(ConfigError, match="mamba_n_heads 8 x mamba_d_head 64"):
        spec_from_hf_config({**TINY_GRANITE, "mamba_d_head": 64})


def test_no_state_dtype_hook_for_these_architectures():
    for model_id in (MAMBA_28B, CODESTRAL, FALCON_MAMBA):
        assert state_dtype(find_catalog_model(model_id).config) is None
    assert state_dtype(TINY_GRANITE) is None


# --- weights ---------------------------------------------------------------------------------


def test_mamba_28b_parameters_by_hand():
    h, d, n, r, k, v = 2560, 5120, 16, 160, 4, 50280
    per_layer = (
        h * 2 * d  # in_proj (x and gate)
        + d * k
        + d  # conv1d weight + bias
        + d * (r + 2 * n)  # x_proj
        + r * d
        + d  # dt_proj + bias
        + d * n
        + d  # A, D
        + d * h  # out_proj
        + h  # norm
    )
    total = v * h + 64 * per_layer + h  # tied embedding, final norm_f
    assert total == 2_768_345_600
    assert count_params(catalog_spec(MAMBA_28B)).total == total


def test_codestral_matches_mistrals_published_count_exactly():
    assert count_params(catalog_spec(CODESTRAL)).total == 7_285_403_648


def test_mamba_a_is_stored_in_float32():
    s = catalog_spec(CODESTRAL)  # bfloat16 checkpoint
    a_params = 64 * 128  # one float32 A per head per layer
    assert weight_bytes(s).total_bytes == (count_params(s).total - a_params) * 2 + a_params * 4


# --- state per layer ---------------------------------------------------------------------------


def test_mamba1_state_bytes_by_hand():
    m = catalog_spec(MAMBA_28B).layers[0].mixer
    # conv (4 - 1) x 5,120 + temporal 5,120 x 16, bf16
    assert state_bytes(m, 1, 2, 2) == (3 * 5120 + 5120 * 16) * 2 == 194_560
    assert state_bytes(m, 2, 2, 2) == (3 * 2560 + 2560 * 16) * 2 == 97_280


def test_mamba2_state_bytes_by_hand():
    m = catalog_spec(CODESTRAL).layers[0].mixer
    # conv (4 - 1) x (8,192 + 2 x 8 x 128) / tp + temporal 128 / tp x 64 x 128, bf16
    assert state_bytes(m, 1, 2, 2) == (3 * 10240 + 128 * 64 * 128) * 2 == 2_158_592
    assert state_bytes(m, 4, 2, 2) == (3 * 10240 // 4 + 32 * 64 * 128) * 2 == 539_648


def test_granite_single_group_is_replicated_per_rank():
    m = spec_from_hf_config(TINY_GRANITE).layers[0].mixer
    # TP 2, 1 group -> 2 groups: conv (4 - 1) x (1,024 + 2 x 2 x 128) / 2; heads 8 / 2
    assert state_bytes(m, 2, 2, 2) == (3 * 1536 // 2 + 4 * 128 * 128) * 2 == 135_680


# --- capacity: one pure-Mamba model on one GPU -------------------------------------------------


def test_mamba_28b_capacity_plan_by_hand():
    spec = catalog_spec(MAMBA_28B)
    kv_bytes = 10 * GIB_BYTES
    plan = plan_capacity(
        spec,
        find_gpu("H100"),
        ServeSettings(max_model_len=4096, kv_cache_memory_bytes=kv_bytes),
    )
    page = 194_560  # one layer's state, bf16 (the checkpoint's float32 loads as bfloat16)
    blocks = kv_bytes // page // 64  # 64 layers share a block id: one group
    assert blocks == 862
    assert plan.num_blocks == blocks
    assert plan.layout.page_size_bytes == page and len(plan.layout.groups) == 1
    # no prefix caching for an attention-free model: one block per request, whatever its length
    assert plan.max_concurrency == pytest.approx(862.0)
    assert plan.kv_cache_tokens == 862 * 4096  # int(concurrency x max_model_len)
    assert plan.mamba_block_limit == 862
    assert plan.settings.block_size == 4096  # the Mamba block is max_model_len
    old = plan_capacity(  # before 0.32 vLLM printed num_blocks // groups x block_size: the same
        spec,
        find_gpu("H100"),
        ServeSettings(max_model_len=4096, kv_cache_memory_bytes=kv_bytes, vllm_version="0.30"),
    )
    assert old.kv_cache_tokens == 862 * 4096
    assert plan.state_bytes_per_sequence == 64 * page


def test_codestral_state_page_is_the_block():
    spec = catalog_spec(CODESTRAL)
    specs = layer_specs(spec, None, CacheSettings())
    assert {s.state_blocks_per_request for s in specs} == {1}
    assert {s.page_size_bytes for s in specs} == {2_158_592}


# --- tensor parallelism --------------------------------------------------------------------


def test_tp_refusals_name_heads_groups_and_widths():
    codestral = catalog_spec(CODESTRAL)
    check_parallel_layout(codestral, 8, 1)  # 128 heads, 8 groups: both split
    with pytest.raises(InvalidArgumentError, match="8 Mamba groups do not divide by 16"):
        check_parallel_layout(codestral, 16, 1)
    with pytest.raises(InvalidArgumentError, match="128 Mamba heads do not divide by 3"):
        check_parallel_layout(codestral, 3, 1)
    with pytest.raises(InvalidArgumentError, match="Mamba intermediate size 5120"):
        check_parallel_layout(catalog_spec(MAMBA_28B), 3, 1)
    granite = spec_from_hf_config(TINY_GRANITE)
    check_parallel_layout(granite, 2, 1)  # one group: replicated
    with pytest.raises(InvalidArgumentError, match="Mamba heads do not divide by 16"):
        check_parallel_layout(granite, 16, 1)


def test_granite_hybrid_capacity_by_hand():
    """Prefix caching on (a hybrid's default): ``align`` mode, and each Mamba-2 layer keeps
    2 + 1 blocks a request (vLLM 0.32 ``MambaMixer2.get_kv_cache_spec``:
    ``num_prefill_checkpoint_blocks=1``)."""
    spec = spec_from_hf_config(TINY_GRANITE)
    plan = plan_capacity(
        spec,
        find_gpu("H100"),
        ServeSettings(max_model_len=4096, kv_cache_memory_bytes=GIB_BYTES, vllm_version="0.32"),
    )
    state = (3 * (1024 + 2 * 128) + 8 * 128 * 128) * 2  # conv + temporal, bf16
    assert state == 269_824
    per_token = 8 * (64 + 64) * 2  # K and V of 8 heads of 64 dims, bf16
    block = 16 * math.ceil(state / (16 * per_token))  # raised in steps of 16
    assert block == 144 == plan.settings.block_size
    page = block * per_token  # the state page is padded to it
    # 6 Mamba + 2 attention layers: groups of 2 (6 >= 1.5 x 2), 3 Mamba groups + 1
    assert (plan.layout.group_size, len(plan.layout.groups)) == (2, 4)
    blocks = GIB_BYTES // page // 2
    assert blocks == 1820 == plan.num_blocks
    need = math.ceil(4096 / block) + 3 * 3  # attention blocks + 3 Mamba groups x 3
    assert plan.max_concurrency == pytest.approx(blocks / need)
    assert plan.kv_cache_tokens == int(blocks / need * 4096) == 196_176


def tiny_ssm_config(arch: str) -> dict:
    """``make_tiny_model.py --arch mamba2`` as written (and a Mamba-1 of the same width)."""
    common = {
        "hidden_size": 128,
        "num_hidden_layers": 2,
        "vocab_size": 1024,
        "conv_kernel": 4,
        "expand": 2,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
    }
    if arch == "mamba2":
        return {
            **common,
            "architectures": ["Mamba2ForCausalLM"],
            "model_type": "mamba2",
            "num_heads": 4,
            "head_dim": 64,
            "n_groups": 1,
            "state_size": 64,
            "tie_word_embeddings": False,
        }
    return {
        **common,
        "architectures": ["MambaForCausalLM"],
        "model_type": "mamba",
        "state_size": 16,
        "tie_word_embeddings": True,
    }


@pytest.mark.parametrize(
    ("arch", "prefix_caching", "blocks", "tokens", "concurrency"),
    [
        # CPU KV cache size: 62,697,472 tokens, ... 15307.00x (LLM(), prefix caching off)
        ("mamba2", None, 15_307, 62_697_472, 15307.00),
        ("mamba2", False, 15_307, 62_697_472, 15307.00),
        # the same checkpoint with --enable-prefix-caching: align mode, 3 blocks a request
        # ("CPU KV cache size: 20,899,157 tokens, ... 5102.33x")
        ("mamba2", True, 15_307, 20_899_157, 5102.33),
        # Mamba-1: "CPU KV cache size: 226,050,048 tokens, ... 55188.00x" (the engine then
        # stops at its first forward: the CPU build has no selective_scan_fwd)
        ("mamba", None, 55_188, 226_050_048, 55188.00),
    ],
)
def test_tiny_ssm_plans_as_the_cpu_engine_logged(arch, prefix_caching, blocks, tokens, concurrency):
    """Observed with vLLM 0.32.0 (CPU build, 1 GiB KV space, max_model_len 4096, bf16 state
    on a host without AVX-512 BF16). No flag: vLLM's default for an attention-free model,
    prefix caching off; an explicit ``--enable-prefix-caching`` stays on (align mode)."""
    from servefit.core.engines.vllm_cpu import VllmCpuEngine, cpu_device

    spec = spec_from_hf_config(tiny_ssm_config(arch))
    host = cpu_device(name="CPU", memory_bytes=8 * GIB_BYTES, isa_flags=("avx2",))
    settings = ServeSettings(
        max_model_len=4096,
        kv_cache_memory_bytes=GIB_BYTES,
        vllm_version="0.32",
        enable_prefix_caching=prefix_caching,
    )
    plan = VllmCpuEngine().plan(spec, host, settings)
    assert plan.num_blocks == blocks
    assert plan.kv_cache_tokens == tokens
    assert f"{plan.max_concurrency:.2f}" == f"{concurrency:.2f}"
    assert plan.settings.enable_prefix_caching is bool(prefix_caching)


def test_granite_dense_config_publishes_zero_experts_per_token():
    """Granite-4.0-H-1B (dense): ``num_local_experts`` 0 and ``num_experts_per_tok`` 0; every
    layer's MLP is the shared MLP alone (vLLM builds no ``block_sparse_moe``)."""
    cfg = {
        **find_catalog_model("ibm-granite/granite-4.0-h-tiny").config,
        "intermediate_size": 4096,
        "shared_intermediate_size": 4096,
        "num_local_experts": 0,
        "num_experts_per_tok": 0,
    }
    s = spec_from_hf_config(cfg)
    assert not s.is_moe and s.layers[0].mlp == DenseMlpSpec(intermediate_size=4096)
    with pytest.raises(ConfigError, match="num_experts_per_tok"):
        spec_from_hf_config({**cfg, "num_experts_per_tok": -1})


def test_granite_tiny_layout_and_active_parameters():
    s = catalog_spec("ibm-granite/granite-4.0-h-tiny")
    attention = [i for i, layer in enumerate(s.layers) if isinstance(layer.mixer, AttentionSpec)]
    assert attention == [5, 15, 25, 35]
    counts = count_params(s)
    # per MoE layer a token skips 64 - 6 experts of 3 x 1,536 x 512
    assert counts.total - counts.active == 40 * 58 * 3 * 1536 * 512


def test_tiny_granite_plans_as_the_cpu_engine_logged():
    """``make_tiny_model.py --arch granite_hybrid`` on vLLM 0.32.0's CPU build (1 GiB, prefix
    caching on): "CPU KV cache size: 2,684,354 tokens, ... 655.36x", block 256."""
    from servefit.core.engines.vllm_cpu import VllmCpuEngine, cpu_device

    cfg = {
        **TINY_GRANITE,
        "hidden_size": 128,
        "intermediate_size": 64,
        "shared_intermediate_size": 64,
        "num_local_experts": 4,
        "num_hidden_layers": 4,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],  # as transformers 5 saves
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "mamba_n_heads": 4,
        "mamba_d_head": 64,
        "mamba_d_state": 64,
        "vocab_size": 1024,
    }
    spec = spec_from_hf_config(cfg)
    assert count_params(spec).total == 1_027_108  # transformers' count of the checkpoint
    host = cpu_device(name="CPU", memory_bytes=8 * GIB_BYTES, isa_flags=("avx2",))
    settings = ServeSettings(
        max_model_len=4096, kv_cache_memory_bytes=GIB_BYTES, vllm_version="0.32"
    )
    plan = VllmCpuEngine().plan(spec, host, settings)
    assert plan.settings.block_size == 256  # 128 x ceil(35,072 / (128 x 256))
    assert (plan.layout.group_size, len(plan.layout.groups)) == (1, 4)
    assert plan.num_blocks == GIB_BYTES // (256 * 256) == 16_384
    assert plan.max_concurrency == pytest.approx(16_384 / (4096 // 256 + 3 * 3))
    assert plan.kv_cache_tokens == 2_684_354
