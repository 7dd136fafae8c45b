"""Gemma 4 (``gemma4_text``, the text part of ``gemma4``) planned as vLLM 0.32 builds it.

**The engine's numbers.** ``make_tiny_model.py --arch gemma4`` (transformers 5.19.0, seed 0)
wrote the config below (``TINY``): 5 layers of kinds sliding, sliding, full, sliding, full
(window 64), sliding layers 2 KV heads of 32 dims, full layers 1 KV head of 128 with K = V,
the last 2 layers reading layers 1 and 2's KV cache, per-layer inputs of 16 a layer, bf16.
Served on 2026-11-30 by the vLLM 0.32.0 CPU build (``tests/integration/vllm_server.py
DIR --arch gemma4 --max-num-batched-tokens 512 --max-num-seqs 128``: ``--max-model-len
4096 --enforce-eager --enable-prefix-caching``, ``VLLM_CPU_KVCACHE_SPACE=1``), its log::

    Resolved architecture: Gemma4ForCausalLM
    Gemma4 model has heterogeneous head dimensions {'sliding_attention': 32,
        'full_attention': 128}. FA4 not available, forcing TRITON_ATTN backend.
    Cannot use AttentionBackendEnum.TRITON_ATTN backend on CPU.
    Using LBHNC KV cache layout.
    Explicitly set (1.0/20.21) GiB for KV cache on node 0.
    CPU KV cache size: 1,677,721 tokens, Maximum concurrency for 4,096 tokens per
        request: 409.60x
    kv cache group sizes (256, 256, 128)

and ``/metrics``: ``num_gpu_blocks`` 16384, ``block_size`` 128, ``kv_cache_max_concurrency``
409.6; the server completed a 4-token request. (The CPU build prints no model-loading
memory line.) The checkpoint's tensors sum to 1,345,333 elements (1,345,328 parameters and
the 5 ``layer_scalar`` buffers ``save_pretrained`` writes).

By hand: only layers 0-2 keep a cache (vLLM 0.32 ``gpu_model_runner.py get_kv_cache_spec``
skips an Attention with a ``kv_sharing_target_layer_name``). At the CPU's 128-token block a
sliding page is 128 x 2 heads x 2 (K, V) x 32 x 2 bytes = 32 KiB, the full page 128 x 1 x 2
x 128 x 2 = 64 KiB: the sliding blocks grow to 256 tokens (``unify_kv_cache_spec_page_size``)
and 2 sliding + 1 full layer make 3 groups of 1 (2 is not under 1.5 x 1): 2**30 // 65,536 =
16,384 blocks. A 4,096-token request needs 32 full blocks + 2 x (cdiv(min(63 + 512, 4096),
256) + 1 = 4) sliding ones = 40: 409.6x, printed as int(409.6 x 4,096) = 1,677,721 tokens.
Were every layer caching (no sharing): 3 sliding + 2 full layers in groups of 2 (3 is not
under 1.5 x 2), 3 groups of 2, 8,192 blocks and 204.80x.

Not served here, checked against transformers 5.19's own model instead (the parameter count
of ``Gemma4ForCausalLM``'s state dict, built on the meta device): the MoE block, the
double-wide MLP and the defaults a config leaves out.
"""

from __future__ import annotations

import copy

import pytest

from servefit.core.engines.vllm_cpu import VllmCpuEngine, cpu_device
from servefit.core.hf_config import REFUSED_MODEL_TYPES, spec_from_hf_config
from servefit.core.kv_cache import CacheSettings, attention_bytes_per_token, layer_specs
from servefit.core.model_spec import AttentionSpec, ModelSpec
from servefit.core.plan import ServeSettings
from servefit.core.weights import count_params, weight_bytes, weight_tensors
from servefit.errors import ConfigError, UnsupportedArchitectureError

GIB = 2**30
SLIDING, FULL = "sliding_attention", "full_attention"
ROPE = {
    FULL: {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
    SLIDING: {"rope_theta": 10000.0, "rope_type": "default"},
}
# config.json as make_tiny_model.py --arch gemma4 wrote it (transformers 5.19.0)
TINY = {
    "architectures": ["Gemma4ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attention_k_eq_v": True,
    "bos_token_id": 1,
    "dtype": "bfloat16",
    "enable_moe_block": False,
    "eos_token_id": 2,
    "final_logit_softcapping": None,
    "head_dim": 32,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 128,
    "hidden_size_per_layer_input": 16,
    "initializer_range": 0.02,
    "intermediate_size": 256,
    "layer_types": [SLIDING, SLIDING, FULL, SLIDING, FULL],
    "max_position_embeddings": 4096,
    "model_type": "gemma4_text",
    "moe_intermediate_size": None,
    "num_attention_heads": 4,
    "num_experts": None,
    "num_hidden_layers": 5,
    "num_key_value_heads": 2,
    "num_kv_shared_layers": 2,
    "pad_token_id": 0,
    "per_layer_config": {
        "2": {"head_dim": 128, "num_key_value_heads": 1},
        "4": {"head_dim": 128, "num_key_value_heads": 1},
    },
    "rms_norm_eps": 1e-06,
    "rope_parameters": ROPE,
    "sliding_window": 64,
    "tie_word_embeddings": True,
    "top_k_experts": None,
    "torch_dtype": "bfloat16",
    "transformers_version": "5.19.0",
    "use_bidirectional_attention": None,
    "use_cache": True,
    "use_double_wide_mlp": True,
    "vocab_size": 1024,
    "vocab_size_per_layer_input": 1024,
}
# the numbers vLLM 0.32.0 CPU logged for TINY (the module docstring)
ENGINE_BLOCKS = 16_384
ENGINE_TOKENS = 1_677_721
ENGINE_CONCURRENCY = 409.6
CHECKPOINT_ELEMENTS = 1_345_333


def _spec(config: dict) -> ModelSpec:
    return spec_from_hf_config(config, name="gemma4")


def _with(**changes) -> dict:
    config = copy.deepcopy(TINY)
    config.update(changes)
    return config


def _cpu_plan(spec: ModelSpec):
    settings = ServeSettings(
        max_model_len=4096,
        kv_cache_memory_bytes=1 * GIB,
        max_num_batched_tokens=512,
        max_num_seqs=128,
        vllm_version="0.32",
    )
    host = cpu_device(name="test CPU", memory_bytes=64 * GIB)
    return VllmCpuEngine().plan(spec, host, settings)


def _names(spec: ModelSpec, layer: int) -> set[str]:
    prefix = f"model.layers.{layer}."
    return {t.name.removeprefix(prefix) for t in weight_tensors(spec) if t.layer_index == layer}


def test_gemma4_is_planned_not_refused():
    assert "gemma4" not in REFUSED_MODEL_TYPES and "gemma4_text" not in REFUSED_MODEL_TYPES
    assert "gemma3n" in REFUSED_MODEL_TYPES  # its AltUp / Laurel blocks are still not modelled


def test_tiny_gemma4_plans_what_vllm_032_cpu_allocated():
    plan = _cpu_plan(_spec(TINY))
    assert plan.settings.block_size == 128
    assert plan.num_blocks == ENGINE_BLOCKS
    assert plan.kv_cache_tokens == ENGINE_TOKENS
    assert plan.max_concurrency == pytest.approx(ENGINE_CONCURRENCY, rel=1e-12)
    # "kv cache group sizes (256, 256, 128)": two sliding groups at the grown block, one full
    assert sorted(g.spec.block_size for g in plan.layout.groups) == [128, 256, 256]
    assert plan.layout.group_size == 1


def test_parameter_count_is_the_checkpoints():
    assert count_params(_spec(TINY)).total == CHECKPOINT_ELEMENTS


def test_a_kv_shared_layer_allocates_no_cache():
    shared = _spec(TINY)
    unshared = _spec(_with(num_kv_shared_layers=0))
    assert len(layer_specs(shared, None, CacheSettings(block_size=128))) == 3  # layers 0-2
    assert len(layer_specs(unshared, None, CacheSettings(block_size=128))) == 5
    plan = _cpu_plan(unshared)  # every layer caching: 3 sliding + 2 full, 3 groups of 2
    assert (plan.num_blocks, round(plan.max_concurrency, 2)) == (8_192, 204.8)


def test_a_kv_shared_layer_has_only_its_query_and_output_weights():
    spec = _spec(TINY)
    attention = {n for n in _names(spec, 3) if n.startswith("self_attn.")}
    assert attention == {"self_attn.q_proj", "self_attn.o_proj", "self_attn.qk_norm"}
    norm = next(t for t in weight_tensors(spec) if t.name == "model.layers.3.self_attn.qk_norm")
    assert norm.num_params == 32  # q_norm only
    assert "self_attn.k_proj" in _names(spec, 1)


def test_shared_layers_need_an_earlier_layer_of_their_kind():
    """vLLM 0.32 Gemma4Attention finds a shared layer's target with
    ``prev_layers[::-1].index(kind)``: a kind no unshared layer has fails to start."""
    spec = _spec(_with(num_kv_shared_layers=1))
    assert [layer.mixer.shares_kv_cache for layer in spec.layers] == [0, 0, 0, 0, 1]
    with pytest.raises(ConfigError, match="no earlier layer"):
        _spec(_with(num_kv_shared_layers=3))  # layers 2-4: no full layer before layer 2
    with pytest.raises(ConfigError, match="num_kv_shared_layers"):
        _spec(_with(num_kv_shared_layers=5))


def test_k_eq_v_loads_a_v_slot_the_checkpoint_does_not_have():
    """Layer 2 ships k_proj only; vLLM loads it into both the K and V shards of qkv_proj:
    128 x 128 more bf16 elements in memory, none in the parameter count, and the cache still
    keeps K and V (1 head x (128 + 128) x 2 bytes a token)."""
    spec = _spec(TINY)
    v = next(t for t in weight_tensors(spec) if t.name == "model.layers.2.self_attn.v_proj")
    assert not v.in_checkpoint and v.num_params == 128 * 128
    loaded = weight_bytes(spec).total_bytes
    assert loaded == (count_params(spec).total + 128 * 128) * 2
    full = spec.layers[2].mixer
    assert isinstance(full, AttentionSpec) and full.is_k_eq_v
    assert attention_bytes_per_token(full, 1, 2) == 512
    sliding = spec.layers[1].mixer
    assert isinstance(sliding, AttentionSpec) and not sliding.is_k_eq_v
    off = _spec(_with(attention_k_eq_v=False))
    assert count_params(off).total == CHECKPOINT_ELEMENTS + 128 * 128  # a real v_proj


def test_per_layer_inputs_weights():
    """The table: 1,024 tokens x (5 layers x 16); its projection 128 -> 80; per layer a gate
    128 -> 16 and a projection 16 -> 128 (and one more norm)."""
    spec = _spec(TINY)
    by_name = {t.name: t for t in weight_tensors(spec)}
    assert by_name["model.embed_tokens_per_layer"].num_params == 1024 * 5 * 16
    assert by_name["model.per_layer_model_projection"].num_params == 128 * 80
    assert by_name["model.per_layer_projection_norm"].num_params == 16
    assert by_name["model.layers.0.per_layer_input_gate"].num_params == 128 * 16
    assert by_name["model.layers.0.per_layer_projection"].num_params == 16 * 128
    without = _spec(_with(hidden_size_per_layer_input=0))
    ple = 1024 * 80 + 128 * 80 + 16 + 5 * (2 * 128 * 16 + 128)
    assert count_params(spec).total - count_params(without).total == ple
    assert weight_bytes(spec).total_bytes - weight_bytes(without).total_bytes == ple * 2


def test_double_wide_mlp_on_shared_layers_only():
    spec = _spec(TINY)
    sizes = [layer.mlp.intermediate_size for layer in spec.layers]
    assert sizes == [256, 256, 256, 512, 512]


def test_rope_tables_one_per_layer_kind():
    """Sliding: default RoPE over the 32-dim head; full: proportional RoPE caches the whole
    128-dim head (Gemma4RotaryEmbedding passes rotary_dim = head_size)."""
    spec = _spec(TINY)
    assert spec.rope_cache_dims == (32, 128) and spec.rope_cache_positions == 4096


# Checked against transformers 5.19: sum of Gemma4ForCausalLM(Gemma4TextConfig(**kwargs))'s
# state-dict tensors (meta device), the tied lm_head left out.
MOE = {
    "model_type": "gemma4_text",
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 96,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "global_head_dim": 64,
    "num_global_key_value_heads": 1,
    "attention_k_eq_v": True,
    "num_kv_shared_layers": 0,
    "hidden_size_per_layer_input": 0,
    "enable_moe_block": True,
    "num_experts": 8,
    "top_k_experts": 2,
    "moe_intermediate_size": 48,
    "sliding_window": 64,
    "max_position_embeddings": 4096,
}
DOUBLE_WIDE = {
    "model_type": "gemma4_text",
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 7,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "global_head_dim": 64,
    "attention_k_eq_v": False,
    "num_kv_shared_layers": 3,
    "use_double_wide_mlp": True,
    "hidden_size_per_layer_input": 8,
    "vocab_size_per_layer_input": 512,
    "layer_types": [SLIDING, SLIDING, FULL, SLIDING, SLIDING, SLIDING, FULL],
    "sliding_window": 64,
    "max_position_embeddings": 4096,
}
# no layer_types (every 6th full, the last forced full), no global_head_dim (512), per-layer
# inputs on by default (256 a layer over 262,144 tokens)
DEFAULTS = {
    "model_type": "gemma4_text",
    "vocab_size": 1024,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 8,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "attention_k_eq_v": True,
    "num_global_key_value_heads": 2,
    "num_kv_shared_layers": 2,
    "max_position_embeddings": 2048,
}


@pytest.mark.parametrize(
    ("config", "transformers_count"),
    [(MOE, 1_569_398), (DOUBLE_WIDE, 1_505_231), (DEFAULTS, 537_928_360)],
    ids=["moe", "double-wide", "defaults"],
)
def test_parameters_match_transformers(config, transformers_count):
    assert count_params(_spec(config)).total == transformers_count


def test_moe_block_beside_the_dense_mlp():
    spec = _spec(MOE)
    moe = spec.layers[0].mlp
    assert spec.is_moe and moe.shared_intermediate_size == 96  # the dense MLP, always on
    names = _names(spec, 0)
    assert {"router.proj", "router.scale", "router.per_expert_scale", "mlp.gate_proj"} <= names
    routed = 6 * 6 * 3 * 128 * 48  # 6 of 8 experts idle a token, 3 matrices each
    assert count_params(spec).active == count_params(spec).total - routed


def test_defaults_as_transformers_fills_them():
    spec = _spec(DEFAULTS)
    kinds = [(layer.mixer.head_dim, layer.mixer.num_kv_heads) for layer in spec.layers]
    assert kinds == [(32, 1)] * 5 + [(512, 2), (32, 1), (512, 2)]
    assert spec.per_layer_input_size == 256 and spec.per_layer_input_vocab_size == 262_144


def test_bidirectional_attention_halves_the_window():
    spec = _spec(_with(use_bidirectional_attention="all"))
    assert spec.layers[0].mixer.sliding_window_tokens == 64 // 2 + 1


def test_nested_text_config_plans_the_text_model():
    nested = {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "model_type": "gemma4",
        "text_config": TINY,
        "audio_config": None,
        "tie_word_embeddings": True,
    }
    spec = spec_from_hf_config(nested, name="gemma4")
    assert count_params(spec).total == CHECKPOINT_ELEMENTS
    assert _cpu_plan(spec).kv_cache_tokens == ENGINE_TOKENS


def test_an_audio_tower_is_refused():
    nested = {"model_type": "gemma4", "text_config": TINY, "audio_config": {"hidden_size": 1024}}
    with pytest.raises(UnsupportedArchitectureError, match="audio tower"):
        spec_from_hf_config(nested, name="gemma4")


def test_per_layer_config_overrides_other_than_heads_are_refused():
    config = _with(per_layer_config={"2": {"head_dim": 128, "sliding_window": 8}})
    with pytest.raises(UnsupportedArchitectureError, match="sliding_window"):
        _spec(config)


def test_gemma_4_31b_from_the_catalog():
    """google/gemma-4-31B-it (the catalog's text decoder): 30.70 B parameters, the model
    card's 30.7 B. KV by hand, one H100 with 20 GiB of KV cache, ``--max-model-len 32768
    --max-num-batched-tokens 2048``, block 16: 50 sliding layers of 16 KV heads x 256 dims
    (a page of 16 x 16 x 2 x 256 x 2 = 262,144 bytes), 10 full layers of 4 KV heads x 512
    (131,072 bytes: their block grows to 32). 50 and 10 layers make groups of 10 (50 is not
    under 1.5 x 10): 5 sliding groups and 1 full, a block id costing 10 x 262,144 bytes, so
    20 GiB holds 8,192 blocks. A 32,768-token request needs 32,768 / 32 = 1,024 full blocks
    and 5 x (cdiv(1,023 + 2,048, 16) + 1 = 193) sliding ones = 1,989: 4.12x, 134,960 tokens."""
    from servefit.adapters.model_source import load_model
    from servefit.core.hardware import custom_gpu
    from servefit.core.plan import plan_capacity

    model = load_model("google/gemma-4-31B-it", allow_hub=False)
    total = count_params(model.spec).total
    assert abs(total - 30.7e9) <= 0.01 * 30.7e9
    assert model.catalog_confidence == "medium"
    gpu = custom_gpu(memory_bytes=80 * GIB, memory_bandwidth_bytes_per_s=3.35e12)
    settings = ServeSettings(
        max_model_len=32_768,
        kv_cache_memory_bytes=20 * GIB,
        max_num_batched_tokens=2048,
        vllm_version="0.32",
    )
    plan = plan_capacity(model.spec, gpu, settings)
    assert (plan.settings.block_size, plan.layout.page_size_bytes) == (16, 262_144)
    assert (len(plan.layout.groups), plan.layout.group_size) == (6, 10)
    assert plan.num_blocks == 8_192
    assert plan.max_concurrency == pytest.approx(8_192 / 1_989, rel=1e-12)
    assert plan.kv_cache_tokens == 134_960
