"""Per-family parsers of Hugging Face configs: attention-only decoders.

Dense (Llama, Mistral, Qwen2/3, Phi, Granite, OLMo ...), sliding-window (Gemma 2/3),
Mixture-of-Experts (Qwen MoE, Mixtral, gpt-oss, GLM-4.5+), MLA (DeepSeek-V2/V3, Kimi-K2) and
chunked local attention (Llama 4). Each parser *understands* its family's fields and reads
them through :class:`~servefit.core.hf_fields.Fields`, so unconsumed structural fields can be
refused. Hybrids with linear attention or Mamba are in :mod:`servefit.core.hf_hybrid`.
"""

from __future__ import annotations

from servefit.core.hf_fields import (
    HEAD_DIM,
    HEADS,
    LAYER_INDEX,
    PERIOD,
    Fields,
    attention_spec,
    build_spec,
    checked_int,
    dense_mlp_spec,
    layer_types_of,
    window_of,
)
from servefit.core.hf_values import Limit
from servefit.core.model_spec import (
    AttentionSpec,
    DenseMlpSpec,
    LayerSpec,
    MlaSpec,
    Mlp,
    ModelSpec,
    MoeSpec,
)
from servefit.errors import ConfigError

# HF's default for the Gemma 3 local:global interleave when a config omits it.
GEMMA3_DEFAULT_SLIDING_PATTERN = 6  # transformers Gemma3TextConfig.sliding_window_pattern


# Qwen2's decoder, alone or as the language model of Qwen2-VL / Qwen2.5-VL (their text
# config, flat or nested as text_config in later transformers dumps)
QWEN2_TEXT_TYPES = frozenset(
    {"qwen2", "qwen2_vl", "qwen2_5_vl", "qwen2_vl_text", "qwen2_5_vl_text"}
)


def parse_standard(f: Fields, name: str) -> ModelSpec:
    """Llama, Mistral, Qwen2/3, Phi-3/4, Granite, OLMo ...: one attention + one dense MLP."""
    model_type = f.text("model_type")
    n = f.int("num_hidden_layers")
    window: int | None = None
    qwen2 = model_type in QWEN2_TEXT_TYPES
    if qwen2 or model_type in ("qwen3", "qwen3_vl_text"):
        use_window = f.bool("use_sliding_window", default=False)
        max_window_layers = f.int("max_window_layers", default=n)
        base_window = window_of(f)  # read (and checked) even when unused
        base_window = base_window if use_window else None
    else:
        window = window_of(f)
        base_window, max_window_layers = window, 0
        f.optional_int("max_window_layers")  # a count wherever a config carries it (SmolLM3)
    types = layer_types_of(f, n)
    if model_type == "exaone4":  # "LLLG": local (sliding) and global layers, repeating
        types = _exaone4_types(f.text("sliding_window_pattern"), n, types, name)
    flags = {
        "has_qkv_bias": f.bool("attention_bias", default=qwen2),
        "has_qk_norm": model_type in ("qwen3", "qwen3_vl_text"),
    }
    if qwen2:
        flags["has_qkv_bias"] = True  # Qwen2 always has q/k/v biases (no config field)
    layers = []
    for i in range(n):
        w = base_window if i >= max_window_layers else None
        if types is not None:
            w = window_of(f) if types[i] == "sliding_attention" else None
        attn = attention_spec(f, window=w, **flags)
        layers.append(LayerSpec(mixer=attn, mlp=dense_mlp_spec(f)))
    # transformers' SmolLM3Config ties the embeddings unless told otherwise (its checkpoints
    # leave the field out); the other families here default to untied
    return build_spec(f, name=name, layers=layers, tie_default=model_type == "smollm3")


def _exaone4_types(pattern: str, n: int, types: list[str] | None, name: str) -> list[str] | None:
    """EXAONE 4's ``sliding_window_pattern`` ("LLLG": three local layers, one global) as
    layer types (transformers Exaone4Config), held to its ``layer_types`` when both are set."""
    if not pattern:
        return types
    if set(pattern) - {"L", "G"}:
        raise ConfigError(f"{name}: sliding_window_pattern {pattern!r} is not made of L and G")
    derived = [
        "full_attention" if pattern[i % len(pattern)] == "G" else "sliding_attention"
        for i in range(n)
    ]
    if types is not None and list(types) != derived:
        raise ConfigError(f"{name}: layer_types disagree with sliding_window_pattern {pattern!r}")
    return derived


def parse_gemma(f: Fields, name: str) -> ModelSpec:
    """Gemma 1/2/3: tied embeddings; Gemma 2 alternates local/global, Gemma 3 is 5:1."""
    model_type = f.text("model_type")
    n = f.int("num_hidden_layers")
    types = layer_types_of(f, n)
    window = window_of(f)
    layers = []
    for i in range(n):
        if model_type == "gemma":
            w = None
        elif types is not None:
            w = window if types[i] == "sliding_attention" else None
        elif model_type == "gemma2":
            w = window if i % 2 == 0 else None  # even layers are local (transformers Gemma2)
        else:
            pattern = f.int("sliding_window_pattern", default=GEMMA3_DEFAULT_SLIDING_PATTERN)
            w = None if (i + 1) % pattern == 0 else window
        attn = attention_spec(f, window=w, has_qk_norm=model_type.startswith("gemma3"))
        layers.append(
            LayerSpec(
                mixer=attn, mlp=dense_mlp_spec(f), num_norms=2 if model_type == "gemma" else 4
            )
        )
    # Gemma 3's local layers use their own RoPE base: a second cache
    two = model_type.startswith("gemma3") and any(
        isinstance(layer.mixer, AttentionSpec) and layer.mixer.sliding_window_tokens
        for layer in layers
    )
    return build_spec(f, name=name, layers=layers, tie_default=True, rope_caches=2 if two else 1)


def moe_from_qwen(f: Fields, *, shared_gate: bool) -> MoeSpec:
    return MoeSpec(
        # transformers 5 save_pretrained writes Qwen MoE's expert count as num_local_experts
        num_experts=f.int("num_experts", "num_local_experts"),
        num_experts_per_token=f.int("num_experts_per_tok"),
        expert_intermediate_size=f.int("moe_intermediate_size"),
        shared_intermediate_size=f.int("shared_expert_intermediate_size", default=0),
        has_shared_gate=shared_gate and f.int("shared_expert_intermediate_size", default=0) > 0,
    )


def qwen_is_sparse(f: Fields, i: int) -> bool:
    mlp_only = f.layer_indices("mlp_only_layers")
    step = f.int("decoder_sparse_step", default=1)
    experts = f.int("num_experts", "num_local_experts", default=0)
    return i not in mlp_only and experts > 0 and (i + 1) % step == 0


def parse_qwen_moe(f: Fields, name: str) -> ModelSpec:
    """Qwen2-MoE / Qwen3-MoE: sparse layers chosen by decoder_sparse_step and mlp_only_layers."""
    model_type = f.text("model_type")
    n = f.int("num_hidden_layers")
    is_qwen2 = model_type == "qwen2_moe"
    window = window_of(f)  # read (and checked) even when unused
    window = window if f.bool("use_sliding_window") else None
    layers = []
    for i in range(n):
        attn = attention_spec(f, window=window, has_qkv_bias=is_qwen2, has_qk_norm=not is_qwen2)
        mlp: Mlp = moe_from_qwen(f, shared_gate=True) if qwen_is_sparse(f, i) else dense_mlp_spec(f)
        layers.append(LayerSpec(mixer=attn, mlp=mlp))
    f.optional_int("max_window_layers")
    return build_spec(f, name=name, layers=layers)


def parse_mixtral(f: Fields, name: str) -> ModelSpec:
    n = f.int("num_hidden_layers")
    moe = MoeSpec(
        num_experts=f.int("num_local_experts"),
        num_experts_per_token=f.int("num_experts_per_tok"),
        expert_intermediate_size=f.int("intermediate_size"),
    )
    window = window_of(f)
    layers = [LayerSpec(mixer=attention_spec(f, window=window), mlp=moe) for _ in range(n)]
    return build_spec(f, name=name, layers=layers, naming="mixtral")


def parse_gpt_oss(f: Fields, name: str) -> ModelSpec:
    n = f.int("num_hidden_layers")
    types = layer_types_of(f, n) or ["full_attention"] * n
    window = window_of(f)
    moe = MoeSpec(
        num_experts=f.int("num_local_experts"),
        num_experts_per_token=f.int("num_experts_per_tok", "experts_per_token"),
        expert_intermediate_size=f.int("intermediate_size"),
        has_expert_bias=True,
        has_router_bias=True,
    )
    f.optional_int("experts_per_token")
    layers = []
    for t in types:
        attn = attention_spec(
            f,
            window=window if t == "sliding_attention" else None,
            has_qkv_bias=f.bool("attention_bias", default=True),
            has_o_bias=f.bool("attention_bias", default=True),
            has_sinks=True,
        )
        layers.append(LayerSpec(mixer=attn, mlp=moe))
    return build_spec(f, name=name, layers=layers, naming="gpt_oss")


def _mla(f: Fields, *, indexer: bool = False) -> MlaSpec:
    return MlaSpec(
        num_heads=f.int("num_attention_heads"),
        q_lora_rank=f.optional_int("q_lora_rank"),
        kv_lora_rank=f.int("kv_lora_rank"),
        qk_nope_head_dim=f.int("qk_nope_head_dim"),
        qk_rope_head_dim=f.int("qk_rope_head_dim"),
        v_head_dim=f.int("v_head_dim"),
        index_num_heads=_indexer_int(f, "index_n_heads", HEADS) if indexer else 0,
        index_head_dim=_indexer_int(f, "index_head_dim", HEAD_DIM) if indexer else 0,
    )


def _indexer_int(f: Fields, name: str, limit: Limit, default: int | None = None) -> int:
    """An ``index_*`` field, in its limit (docs/model.md's table lists them)."""
    value = f.get(name, default=default)
    if value is None:
        raise ConfigError(f"{f.where}: missing required field {name!r} (index_topk is set)")
    return checked_int(f.where, name, value, limit)


# DeepSeek-V3.2 IndexCache defaults (vLLM 0.32 deepseek_v2.py DeepseekV2MLAAttention)
INDEX_TOPK_FREQ_DEFAULT = 1
INDEX_SKIP_TOPK_OFFSET_DEFAULT = 2


def _indexer_layers(f: Fields, n: int) -> frozenset[int]:
    """The layers that build a lightning indexer (and its cache). vLLM 0.32
    (model_executor/models/deepseek_v2.py ``DeepseekV2MLAAttention.__init__``): a model is
    sparse when its config has ``index_topk``; a layer skips its indexer when
    ``index_topk_pattern[i] == "S"``, else when ``max(i - index_skip_topk_offset + 1, 0) %
    index_topk_freq != 0`` (DeepSeek-V3.2: every layer has one); MTP layers always do."""
    if f.get("index_topk") is None:
        return frozenset()
    f.int("index_topk")  # checked; the tokens each query attends to, not a cache size
    if f.get("index_topk_pattern") is not None:
        pattern = f.text("index_topk_pattern")
        return frozenset(i for i in range(n) if i >= len(pattern) or pattern[i] != "S")
    freq = _indexer_int(f, "index_topk_freq", PERIOD, INDEX_TOPK_FREQ_DEFAULT)
    offset = _indexer_int(f, "index_skip_topk_offset", LAYER_INDEX, INDEX_SKIP_TOPK_OFFSET_DEFAULT)
    return frozenset(i for i in range(n) if max(i - offset + 1, 0) % freq == 0)


def _deepseek_style_moe(f: Fields, *, default_noaux: bool = False) -> MoeSpec | None:
    num_routed = f.int("n_routed_experts", default=0)
    if not num_routed:
        return None
    moe_size = f.int("moe_intermediate_size")
    topk_method = f.text("topk_method", default="noaux_tc" if default_noaux else "")
    return MoeSpec(
        num_experts=num_routed,
        num_experts_per_token=f.int("num_experts_per_tok"),
        expert_intermediate_size=moe_size,
        shared_intermediate_size=moe_size * f.int("n_shared_experts", default=0),
        has_score_correction_bias=topk_method == "noaux_tc",
    )


def _deepseek_style_is_moe(f: Fields, i: int) -> bool:
    first_dense = f.int("first_k_dense_replace", default=0)
    freq = f.int("moe_layer_freq", default=1)
    return i >= first_dense and i % freq == 0


def parse_deepseek(f: Fields, name: str) -> ModelSpec:
    """DeepSeek-V2/V3/R1, Kimi-K2, GLM-4.7-Flash: MLA everywhere, MoE after the first
    dense layers; DeepSeek-V3.2 adds a lightning indexer to the MLA layers."""
    n = f.int("num_hidden_layers")
    # MLA: KV is the latent, not these fields (checked all the same)
    f.optional_int("num_key_value_heads")
    f.optional_int("head_dim")
    moe = _deepseek_style_moe(f, default_noaux=f.text("model_type") == "glm4_moe_lite")
    indexed = _indexer_layers(f, n)
    sparse = f.get("index_topk") is not None
    if sparse and f.optional_int("q_lora_rank") is None:
        raise ConfigError(f"{f.where}: DeepSeek sparse attention (index_topk) needs q_lora_rank")

    def layer(i: int) -> LayerSpec:
        mlp: Mlp = moe if moe and _deepseek_style_is_moe(f, i) else dense_mlp_spec(f)
        # MTP layers (i >= n) always build the indexer
        return LayerSpec(mixer=_mla(f, indexer=i in indexed or (sparse and i >= n)), mlp=mlp)

    layers = [layer(i) for i in range(n)]
    mtp = [layer(n + k) for k in range(f.int("num_nextn_predict_layers", default=0))]
    return build_spec(f, name=name, layers=layers, naming="deepseek", mtp=mtp)


def parse_glm4_moe(f: Fields, name: str) -> ModelSpec:
    """GLM-4.5/4.6/4.7: GQA attention with q/k/v bias, DeepSeek-style MoE, MTP layers."""
    n = f.int("num_hidden_layers")
    moe = _deepseek_style_moe(f, default_noaux=True)
    f.fraction("partial_rotary_factor")

    def layer(i: int) -> LayerSpec:
        attn = attention_spec(
            f,
            has_qkv_bias=f.bool("attention_bias", default=True),
            has_qk_norm=f.bool("use_qk_norm", default=False),
        )
        mlp: Mlp = moe if moe and _deepseek_style_is_moe(f, i) else dense_mlp_spec(f)
        return LayerSpec(mixer=attn, mlp=mlp)

    layers = [layer(i) for i in range(n)]
    mtp = [layer(n + k) for k in range(f.int("num_nextn_predict_layers", default=0))]
    return build_spec(f, name=name, layers=layers, naming="deepseek", mtp=mtp)


LLAMA4_NOPE_INTERVAL = 4  # transformers Llama4TextConfig: every 4th layer is global (no RoPE)


def parse_llama4(f: Fields, name: str) -> ModelSpec:
    """Llama 4 (Scout, Maverick): chunked local attention on 3 of 4 layers, MoE with one
    routed expert per token plus a shared expert, interleaved with dense layers."""
    n = f.int("num_hidden_layers")
    chunk = f.optional_int("attention_chunk_size")
    step = f.int("interleave_moe_layer_step", default=1)
    moe = MoeSpec(
        num_experts=f.int("num_local_experts"),
        num_experts_per_token=f.int("num_experts_per_tok"),
        expert_intermediate_size=f.int("intermediate_size"),
        shared_intermediate_size=f.int("intermediate_size"),
    )
    dense = DenseMlpSpec(intermediate_size=f.int("intermediate_size_mlp", "intermediate_size"))
    f.bool("use_qk_norm")  # Llama 4's QK norm is a weightless L2 norm
    layers = []
    for i in range(n):
        is_global = (i + 1) % LLAMA4_NOPE_INTERVAL == 0
        attn = attention_spec(f, attention_chunk_tokens=None if is_global else chunk)
        mlp: Mlp = moe if (i + 1) % step == 0 else dense
        layers.append(LayerSpec(mixer=attn, mlp=mlp))
    return build_spec(f, name=name, layers=layers, naming="llama4")
