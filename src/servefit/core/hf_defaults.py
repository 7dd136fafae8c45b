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

# Fields a family's transformers config class defaults when config.json omits them.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers Gemma3TextConfig defaults (vocab 262,208; 5 local : 1 global)
    "gemma3_text": {"vocab_size": 262_208, "hidden_activation": "gelu_pytorch_tanh"},
    "gemma3": {"vocab_size": 262_208, "hidden_activation": "gelu_pytorch_tanh"},
    "gemma4_text": _GEMMA4_DEFAULTS,
    "gemma4": _GEMMA4_DEFAULTS,
}
