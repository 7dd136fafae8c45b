"""HF config.json -> ModelSpec: each family understood, never guessed."""

import copy

import pytest

from servefit.adapters.catalog import find_catalog_model
from servefit.core.hf_config import spec_from_hf_config
from servefit.core.model_spec import (
    AttentionSpec,
    LinearAttentionSpec,
    MambaSpec,
    MixerKind,
    MlaSpec,
    MoeSpec,
)
from servefit.errors import ConfigError, UnsupportedArchitectureError


def config(model_id):
    return copy.deepcopy(find_catalog_model(model_id).config)


def spec(model_id):
    entry = find_catalog_model(model_id)
    return spec_from_hf_config(entry.config, name=model_id, hf_quant_config=entry.hf_quant_config)


def test_llama_is_dense_gqa():
    s = spec("meta-llama/Llama-3.1-8B")
    a = s.layers[0].mixer
    assert isinstance(a, AttentionSpec)
    assert (a.num_q_heads, a.num_kv_heads, a.head_dim) == (32, 8, 128)
    assert s.mixer_kinds == {MixerKind.FULL_ATTENTION} and not s.is_moe


def test_qwen36_hybrid_has_kv_in_16_of_64_layers():
    # DESIGN.md lesson 1: 64 layers = 16 x (3 Gated DeltaNet + 1 gated full attention)
    s = spec("Qwen/Qwen3.6-27B-FP8")
    assert s.num_layers == 64
    assert s.layers_of_kind(MixerKind.FULL_ATTENTION) == 16
    assert s.layers_of_kind(MixerKind.LINEAR_ATTENTION) == 48
    kinds = [layer.mixer.kind for layer in s.layers[:4]]
    assert kinds == [MixerKind.LINEAR_ATTENTION] * 3 + [MixerKind.FULL_ATTENTION]
    attn = s.layers[3].mixer
    assert (attn.num_kv_heads, attn.head_dim, attn.has_output_gate) == (4, 256, True)
    gdn = s.layers[0].mixer
    assert isinstance(gdn, LinearAttentionSpec) and gdn.conv_kernel == 4 and gdn.num_v_heads == 48
    assert s.vision is not None and len(s.mtp_layers) == 1
    assert s.quant.method == "fp8"


def test_qwen3_next_interval_without_layer_types():
    cfg = config("Qwen/Qwen3-Next-80B-A3B-Thinking")
    s = spec_from_hf_config(cfg, name="next")
    assert (
        s.layers_of_kind(MixerKind.FULL_ATTENTION) == 12
    )  # full_attention_interval 4 over 48 layers
    assert all(isinstance(layer.mlp, MoeSpec) for layer in s.layers)
    assert s.layers[0].mlp.num_experts == 512 and s.layers[0].mlp.has_shared_gate


def test_gemma2_alternates_and_gemma3_is_five_to_one():
    g2 = spec("google/gemma-2-9b")
    assert [layer.mixer.sliding_window_tokens for layer in g2.layers[:4]] == [
        4096,
        None,
        4096,
        None,
    ]
    g3 = spec("google/gemma-3-27b-it")
    full = [i for i, layer in enumerate(g3.layers) if layer.mixer.kind is MixerKind.FULL_ATTENTION]
    assert full == list(range(5, 62, 6)) and len(full) == 10
    assert g3.vocab_size == 262_208  # transformers' Gemma3TextConfig default; the file omits it


def test_gpt_oss_layer_types_and_moe():
    s = spec("openai/gpt-oss-20b")
    assert s.layers_of_kind(MixerKind.SLIDING_WINDOW) == 12
    assert s.layers[0].mixer.sliding_window_tokens == 128
    moe = s.layers[0].mlp
    assert (moe.num_experts, moe.num_experts_per_token) == (32, 4)
    assert s.quant.method == "mxfp4"


def test_deepseek_v3_mla_dense_first_layers_and_mtp():
    s = spec("deepseek-ai/DeepSeek-V3")
    assert all(isinstance(layer.mixer, MlaSpec) for layer in s.layers)
    assert [isinstance(layer.mlp, MoeSpec) for layer in s.layers[:4]] == [False, False, False, True]
    assert s.layers[3].mlp.shared_intermediate_size == 2048  # 1 shared expert x 2048
    assert len(s.mtp_layers) == 1


def test_deepseek_v2_lite_has_no_q_lora():
    assert spec("deepseek-ai/DeepSeek-V2-Lite").layers[0].mixer.q_lora_rank is None


def test_nemotron_h_pattern_one_block_per_symbol():
    s = spec("nvidia/Nemotron-H-56B-Base-8K")
    cfg = config("nvidia/Nemotron-H-56B-Base-8K")
    pattern = cfg["hybrid_override_pattern"]
    assert s.layers_of_kind(MixerKind.MAMBA) == pattern.count("M")
    assert s.layers_of_kind(MixerKind.FULL_ATTENTION) == pattern.count("*")
    assert sum(1 for layer in s.layers if layer.mixer is None) == pattern.count("-")
    assert isinstance(s.layers[0].mixer, MambaSpec) and s.layers[0].mixer.version == 2


def test_jamba_periods():
    s = spec("ai21labs/AI21-Jamba-1.5-Mini")
    attention = [i for i, layer in enumerate(s.layers) if isinstance(layer.mixer, AttentionSpec)]
    assert attention == [4, 12, 20, 28]  # attn_layer_period 8, offset 4
    moe = [i for i, layer in enumerate(s.layers) if isinstance(layer.mlp, MoeSpec)]
    assert moe == list(range(1, 32, 2))  # expert_layer_period 2, offset 1


def test_unknown_model_type_names_fields():
    cfg = {
        "model_type": "frobnicator",
        "architectures": ["FrobForCausalLM"],
        "num_experts": 8,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "vocab_size": 100,
    }
    with pytest.raises(UnsupportedArchitectureError, match=r"frobnicator.*num_experts"):
        spec_from_hf_config(cfg, name="x")


def test_structural_field_on_a_dense_family_is_refused():
    cfg = config("meta-llama/Llama-3.1-8B")
    cfg["num_local_experts"] = 8  # an MoE field on a llama config: never silently dense
    with pytest.raises(UnsupportedArchitectureError, match="num_local_experts"):
        spec_from_hf_config(cfg, name="x")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.pop("hidden_size"), "missing required field 'hidden_size'"),
        (lambda c: c.update(num_hidden_layers="32"), "must be an integer"),
        (lambda c: c.update(num_key_value_heads=7), "not a multiple"),
        (lambda c: c.update(intermediate_size=-1), "must be positive"),
    ],
)
def test_malformed_configs_give_clear_errors(mutate, message):
    # gpt-oss: a family without transformers shape defaults in hf_defaults (a Llama config
    # without hidden_size takes LlamaConfig's 4096, as transformers does:
    # test_transformers_defaults.py)
    cfg = config("openai/gpt-oss-20b")
    mutate(cfg)
    with pytest.raises(ConfigError, match=message):
        spec_from_hf_config(cfg, name="x")


def test_layer_types_length_mismatch():
    cfg = config("openai/gpt-oss-20b")
    cfg["layer_types"] = cfg["layer_types"][:-1]
    with pytest.raises(ConfigError, match="layer_types has 23 entries"):
        spec_from_hf_config(cfg, name="x")


def test_not_a_mapping():
    with pytest.raises(ConfigError, match="must be a JSON object"):
        spec_from_hf_config([1, 2], name="x")  # type: ignore[arg-type]


def test_qwen_moe_expert_count_in_either_spelling():
    # transformers 5 save_pretrained writes num_local_experts (Qwen3MoeConfig.attribute_map)
    cfg = config("Qwen/Qwen3-30B-A3B")
    cfg["num_local_experts"] = cfg.pop("num_experts")
    s = spec_from_hf_config(cfg, name="x")
    assert s.layers[0].mlp.num_experts == 128
