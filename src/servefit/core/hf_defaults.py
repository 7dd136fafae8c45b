"""What a Hugging Face config means where it says nothing, and which of its fields shape a
model: the two tables :class:`servefit.core.hf_fields.Fields` reads with.

Pure: data only.
"""

from __future__ import annotations

from typing import Any

# Fields that change the shape of a model. A parser must consume every one present, or the
# config is rejected: an MoE or hybrid field we ignore would silently mis-size the model.
STRUCTURAL_FIELDS = frozenset(
    {
        "num_experts",
        "num_local_experts",
        "n_routed_experts",
        "moe_intermediate_size",
        "num_experts_per_tok",
        "experts_per_token",
        "n_shared_experts",
        "shared_expert_intermediate_size",
        "first_k_dense_replace",
        "moe_layer_freq",
        "decoder_sparse_step",
        "mlp_only_layers",
        "kv_lora_rank",
        "q_lora_rank",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "layer_types",
        "full_attention_interval",
        "linear_num_value_heads",
        "linear_num_key_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel_dim",
        "hybrid_override_pattern",
        "attn_layer_period",
        "attn_layer_offset",
        "expert_layer_period",
        "expert_layer_offset",
        "mamba_d_state",
        "mamba_d_conv",
        "mamba_expand",
        "mamba_dt_rank",
        "mamba_num_heads",
        "mamba_head_dim",
        "ssm_state_size",
        "sliding_window_pattern",
        "attention_chunk_size",
        "interleave_moe_layer_step",
        "num_nextn_predict_layers",
        "mtp_num_hidden_layers",
        "block_configs",
        "attn_output_gate",
        "mamba_ssm_dtype",
        "mamba_ssm_cache_dtype",
        "state_size",
        "mamba_n_heads",
        "mamba_n_groups",
        "index_topk",  # DeepSeek sparse attention; the other index_* fields follow it
        # Gemma 4 (and 3n): KV sharing, per-layer head widths, K = V, per-layer inputs
        "num_kv_shared_layers",
        "per_layer_config",
        "global_head_dim",
        "num_global_key_value_heads",
        "attention_k_eq_v",
        "hidden_size_per_layer_input",
        "use_double_wide_mlp",
        "top_k_experts",
    }
)


# transformers 5.19 Gemma4TextConfig defaults: per-layer inputs are on (256 a layer over
# 262,144 tokens) unless the file says hidden_size_per_layer_input 0
_GEMMA4_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_144,
    "head_dim": 256,
    "sliding_window": 512,
    "max_position_embeddings": 131_072,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size_per_layer_input": 256,
    "vocab_size_per_layer_input": 262_144,
}

# The shape fields of transformers 5.19's config classes (the release vLLM 0.32's CPU build
# installs), read from each class's declared defaults: a config.json that leaves them out is
# loaded with these by transformers, and so by vLLM (a LLaVA-1.5 text_config names only its
# model type, vocabulary and context). Defaults that depend on another field (a None
# num_key_value_heads = num_attention_heads, a None head_dim = hidden_size / heads) are
# servefit's own rules and left out, as are the sliding-window switches and the expert
# counts (spelled num_experts or num_local_experts: a default of one spelling would clash
# with a file that gives the other, as transformers' attribute_map allows).
_LLAMA_SHAPE: dict[str, Any] = {  # LlamaConfig
    "vocab_size": 32_000,
    "hidden_size": 4096,
    "intermediate_size": 11_008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "max_position_embeddings": 2048,
    "hidden_act": "silu",
}
_MISTRAL_SHAPE: dict[str, Any] = {  # MistralConfig (MixtralConfig adds its experts)
    "vocab_size": 32_000,
    "hidden_size": 4096,
    "intermediate_size": 14_336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 131_072,
    "hidden_act": "silu",
}
_QWEN2_SHAPE: dict[str, Any] = {  # Qwen2Config (Qwen3Config adds head_dim 128)
    "vocab_size": 151_936,
    "hidden_size": 4096,
    "intermediate_size": 22_016,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 32_768,
    "hidden_act": "silu",
}
_TRANSFORMERS_SHAPES: dict[str, dict[str, Any]] = {
    "llama": _LLAMA_SHAPE,
    "mistral": _MISTRAL_SHAPE,
    "mixtral": {**_MISTRAL_SHAPE, "num_experts_per_tok": 2},
    "qwen2": _QWEN2_SHAPE,
    "qwen3": {**_QWEN2_SHAPE, "head_dim": 128},
    "qwen2_moe": {  # Qwen2MoeConfig
        **_QWEN2_SHAPE,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "decoder_sparse_step": 1,
    },
    "qwen3_moe": {  # Qwen3MoeConfig
        **_QWEN2_SHAPE,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "decoder_sparse_step": 1,
    },
    "phi3": {  # Phi3Config
        "vocab_size": 32_064,
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "max_position_embeddings": 4096,
        "hidden_act": "silu",
    },
    "gemma": {  # GemmaConfig
        "vocab_size": 256_000,
        "hidden_size": 3072,
        "intermediate_size": 24_576,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 256,
        "max_position_embeddings": 8192,
        "hidden_act": "gelu_pytorch_tanh",
    },
    "gemma2": {  # Gemma2Config
        "vocab_size": 256_000,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 8192,
        "hidden_activation": "gelu_pytorch_tanh",
    },
}

# Fields a family's transformers config class defaults when config.json omits them.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    **_TRANSFORMERS_SHAPES,
    # transformers Gemma3TextConfig defaults (vocab 262,208; 5 local : 1 global)
    "gemma3_text": {"vocab_size": 262_208, "hidden_activation": "gelu_pytorch_tanh"},
    "gemma3": {"vocab_size": 262_208, "hidden_activation": "gelu_pytorch_tanh"},
    "gemma4_text": _GEMMA4_DEFAULTS,
    "gemma4": _GEMMA4_DEFAULTS,
}
