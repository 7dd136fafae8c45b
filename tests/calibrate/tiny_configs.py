"""Tiny Hugging Face configs of every layer kind servefit plans, for calibrating on a CPU."""

from __future__ import annotations

from typing import Any

_COMMON: dict[str, Any] = {
    "hidden_size": 128,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
}

# Qwen3-Next: three Gated DeltaNet layers, then one gated full-attention layer; MoE MLPs
TINY_QWEN3_NEXT: dict[str, Any] = {
    **_COMMON,
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "num_hidden_layers": 4,
    "full_attention_interval": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "partial_rotary_factor": 0.25,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 32,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
}

# Nemotron-H (Nemotron 3 Nano): Mamba-2 layers, MoE-only layers and attention-only layers
TINY_NEMOTRON_H: dict[str, Any] = {
    **_COMMON,
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "num_hidden_layers": 6,
    "hybrid_override_pattern": "MEM*EM",
    "mamba_num_heads": 8,
    "mamba_head_dim": 16,
    "n_groups": 2,
    "ssm_state_size": 16,
    "conv_kernel": 4,
    "expand": 2,
    "use_conv_bias": True,
    "mamba_proj_bias": False,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "attention_bias": False,
    "mlp_hidden_act": "relu2",
    "mlp_bias": False,
    "intermediate_size": 64,
    "moe_intermediate_size": 64,
    "moe_shared_expert_intermediate_size": 64,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
}

# Jamba: Mamba-1 layers (dense and MoE MLPs) and one attention layer in eight
TINY_JAMBA: dict[str, Any] = {
    **_COMMON,
    "architectures": ["JambaForCausalLM"],
    "model_type": "jamba",
    "num_hidden_layers": 8,
    "attn_layer_offset": 4,
    "attn_layer_period": 8,
    "expert_layer_offset": 1,
    "expert_layer_period": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 256,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "mamba_d_conv": 4,
    "mamba_d_state": 8,
    "mamba_dt_rank": 16,
    "mamba_expand": 2,
    "mamba_conv_bias": True,
    "mamba_proj_bias": False,
}

# DeepSeek-V2-Lite: MLA, one dense layer then MoE layers
TINY_DEEPSEEK: dict[str, Any] = {
    **_COMMON,
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "num_hidden_layers": 3,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": None,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "intermediate_size": 256,
    "moe_intermediate_size": 32,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "greedy",
    "scoring_func": "softmax",
    "attention_bias": False,
}

# gpt-oss: sliding-window (16 tokens) and full attention layers, MoE MLPs, sinks
TINY_GPT_OSS: dict[str, Any] = {
    **_COMMON,
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "num_hidden_layers": 2,
    "layer_types": ["sliding_attention", "full_attention"],
    "sliding_window": 16,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "attention_bias": True,
    "intermediate_size": 64,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "experts_per_token": 2,
}

# Falcon-H1: attention and Mamba-2 in parallel in every layer, dense MLPs
TINY_FALCON_H1: dict[str, Any] = {
    **_COMMON,
    "architectures": ["FalconH1ForCausalLM"],
    "model_type": "falcon_h1",
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 256,
    "mamba_d_ssm": 256,
    "mamba_n_heads": 4,
    "mamba_d_head": 64,
    "mamba_d_state": 16,
    "mamba_n_groups": 1,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_conv_bias": True,
    "mamba_proj_bias": False,
    "mamba_rms_norm": False,
    "attention_bias": False,
    "mlp_bias": False,
    "hidden_act": "silu",
}
