"""Hugging Face ``config.json`` -> :class:`ModelSpec`: HF field names become our names.

Each supported ``model_type`` has a parser that *understands* its fields: which layers are
sliding-window, linear-attention, Mamba or MoE, and how wide each part is. A config whose
``model_type`` is unknown, or that carries structural fields its parser does not consume
(say ``num_experts`` on a model type we treat as dense), is rejected with
:class:`UnsupportedArchitectureError` naming those fields: never silently treated as dense.

Pure: takes dictionaries, returns values. Reading files and the Hub is the adapters' job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from servefit.core.model_spec import (
    AttentionSpec,
    DenseMlpSpec,
    LayerSpec,
    LinearAttentionSpec,
    MambaSpec,
    MlaSpec,
    Mlp,
    ModelSpec,
    MoeSpec,
    VisionSpec,
)
from servefit.core.quant import quant_from_hf
from servefit.errors import ConfigError, UnsupportedArchitectureError

Config = Mapping[str, Any]

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
    }
)

# HF's default for the Gemma 3 local:global interleave when a config omits it.
GEMMA3_DEFAULT_SLIDING_PATTERN = 6  # transformers Gemma3TextConfig.sliding_window_pattern


# Fields a family's transformers config class defaults when config.json omits them.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers Gemma3TextConfig defaults (vocab 262,208; 5 local : 1 global)
    "gemma3_text": {"vocab_size": 262_208, "hidden_activation": "gelu_pytorch_tanh"},
    "gemma3": {"vocab_size": 262_208, "hidden_activation": "gelu_pytorch_tanh"},
}


class _Fields:
    """Read config fields, remembering which were consumed."""

    def __init__(self, config: Config, where: str) -> None:
        defaults = FAMILY_DEFAULTS.get(str(config.get("model_type", "")), {})
        self.config = {**defaults, **config}
        self.where = where
        self.used: set[str] = set()

    def get(self, *names: str, default: Any = None) -> Any:
        for name in names:
            self.used.add(name)
            if name in self.config and self.config[name] is not None:
                return self.config[name]
        return default

    def int(self, *names: str, default: int | None = None) -> int:
        value = self.get(*names, default=default)
        if value is None:
            raise ConfigError(f"{self.where}: missing required field {' / '.join(names)!r}")
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise ConfigError(f"{self.where}: field {names[0]!r} must be an integer, got {value!r}")
        return int(value)

    def optional_int(self, *names: str) -> int | None:
        value = self.get(*names)
        return None if value is None else self.int(*names)

    def unconsumed_structural(self) -> list[str]:
        return sorted(k for k in self.config if k in STRUCTURAL_FIELDS and k not in self.used)


def _text_and_vision(config: Config) -> tuple[Config, Config | None]:
    """Nested multimodal configs keep the language model under ``text_config``."""
    text = config.get("text_config")
    if isinstance(text, Mapping):
        merged = dict(text)
        for key in (
            "tie_word_embeddings",
            "torch_dtype",
            "dtype",
            "quantization_config",
            "quantization",
        ):
            if key not in merged and key in config:
                merged[key] = config[key]
        if "model_type" not in merged:
            merged["model_type"] = config.get("model_type", "")
        vision = config.get("vision_config")
        return merged, vision if isinstance(vision, Mapping) else None
    return config, None


def _dtype(f: _Fields) -> str:
    dtype = str(f.get("torch_dtype", "dtype", default="bfloat16"))
    return dtype.removeprefix("torch.")


def _attention(f: _Fields, *, window: int | None = None, **flags: bool) -> AttentionSpec:
    h = f.int("hidden_size")
    num_heads = f.int("num_attention_heads")
    num_kv = f.int("num_key_value_heads", default=num_heads)
    head_dim = f.optional_int("head_dim", "attention_head_dim") or h // num_heads
    return AttentionSpec(
        num_q_heads=num_heads,
        num_kv_heads=num_kv,
        head_dim=head_dim,
        sliding_window_tokens=window,
        **flags,
    )


def _window(f: _Fields) -> int | None:
    window = f.get("sliding_window")
    max_pos = f.get("max_position_embeddings")
    if window is None or window <= 0:
        return None
    if max_pos and window >= max_pos:  # a window as long as the context is full attention
        return None
    return int(window)


def _dense_mlp(f: _Fields, *, size_field: str = "intermediate_size") -> DenseMlpSpec:
    act = str(f.get("hidden_act", "hidden_activation", "mlp_hidden_act", default="silu"))
    return DenseMlpSpec(
        intermediate_size=f.int(size_field),
        is_gated=act not in ("relu2", "gelu_new", "gelu_fast") or bool(f.get("is_gated")),
        has_bias=bool(f.get("mlp_bias", default=False)),
    )


def _layer_types(f: _Fields, n: int) -> list[str] | None:
    types = f.get("layer_types")
    if types is None:
        return None
    if len(types) != n:
        raise ConfigError(
            f"{f.where}: layer_types has {len(types)} entries but num_hidden_layers is {n}"
        )
    return [str(t) for t in types]


def _build(
    f: _Fields,
    *,
    name: str,
    layers: list[LayerSpec],
    naming: str = "default",
    mtp: list[LayerSpec] | None = None,
    vision: VisionSpec | None = None,
    prefix: str = "model.",
    tie_default: bool = False,
    rope_caches: int = 1,
) -> ModelSpec:
    positions = f.optional_int("max_position_embeddings") or 0
    return ModelSpec(
        name=name,
        architecture="",
        model_type=str(f.get("model_type", default="")),
        hidden_size=f.int("hidden_size"),
        vocab_size=f.int("vocab_size"),
        layers=tuple(layers),
        dtype=_dtype(f),
        tie_word_embeddings=bool(f.get("tie_word_embeddings", default=tie_default)),
        max_position_embeddings=f.optional_int("max_position_embeddings"),
        mtp_layers=tuple(mtp or ()),
        vision=vision,
        module_prefix=prefix,
        naming=naming,
        rope_cache_positions=positions if rope_caches else 0,
        rope_cache_dims=(_rotary_dim(f, layers),) * rope_caches if rope_caches else (),
    )


def _rotary_dim(f: _Fields, layers: list[LayerSpec]) -> int:
    """Rotary dimensions of the first attention layer: the rope part of MLA's key, or
    head_dim x partial_rotary_factor."""
    for layer in layers:
        if isinstance(layer.mixer, MlaSpec):
            return layer.mixer.qk_rope_head_dim
        if isinstance(layer.mixer, AttentionSpec):
            params = f.get("rope_parameters") or {}
            factor = f.get("partial_rotary_factor") or (
                params.get("partial_rotary_factor") if isinstance(params, Mapping) else None
            )
            return int(layer.mixer.head_dim * float(factor or 1.0))
    return 0


# --------------------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------------------


def _parse_standard(f: _Fields, name: str) -> ModelSpec:
    """Llama, Mistral, Qwen2/3, Phi-3/4, Granite, OLMo ...: one attention + one dense MLP."""
    model_type = str(f.get("model_type"))
    n = f.int("num_hidden_layers")
    window: int | None = None
    if model_type in ("qwen2", "qwen3", "qwen3_vl_text"):
        use_window = bool(f.get("use_sliding_window", default=False))
        max_window_layers = f.int("max_window_layers", default=n)
        base_window = _window(f) if use_window else None
    else:
        window = _window(f)
        base_window, max_window_layers = window, 0
    types = _layer_types(f, n)
    flags = {
        "has_qkv_bias": bool(f.get("attention_bias", default=model_type == "qwen2")),
        "has_qk_norm": model_type in ("qwen3", "qwen3_vl_text"),
    }
    if model_type == "qwen2":
        flags["has_qkv_bias"] = True  # Qwen2 always has q/k/v biases (no config field)
    layers = []
    for i in range(n):
        w = base_window if i >= max_window_layers else None
        if types is not None:
            w = _window(f) if types[i] == "sliding_attention" else None
        attn = _attention(f, window=w, **flags)
        layers.append(LayerSpec(mixer=attn, mlp=_dense_mlp(f)))
    return _build(f, name=name, layers=layers, tie_default=False)


def _parse_gemma(f: _Fields, name: str) -> ModelSpec:
    """Gemma 1/2/3: tied embeddings; Gemma 2 alternates local/global, Gemma 3 is 5:1."""
    model_type = str(f.get("model_type"))
    n = f.int("num_hidden_layers")
    types = _layer_types(f, n)
    window = _window(f)
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
        attn = _attention(f, window=w, has_qk_norm=model_type.startswith("gemma3"))
        layers.append(
            LayerSpec(mixer=attn, mlp=_dense_mlp(f), num_norms=2 if model_type == "gemma" else 4)
        )
    # Gemma 3's local layers use their own RoPE base: a second cache
    two = model_type.startswith("gemma3") and any(
        layer.mixer.sliding_window_tokens for layer in layers
    )
    return _build(f, name=name, layers=layers, tie_default=True, rope_caches=2 if two else 1)


def _moe_from_qwen(f: _Fields, *, shared_gate: bool) -> MoeSpec:
    return MoeSpec(
        # transformers 5 save_pretrained writes Qwen MoE's expert count as num_local_experts
        num_experts=f.int("num_experts", "num_local_experts"),
        num_experts_per_token=f.int("num_experts_per_tok"),
        expert_intermediate_size=f.int("moe_intermediate_size"),
        shared_intermediate_size=f.int("shared_expert_intermediate_size", default=0),
        has_shared_gate=shared_gate and bool(f.get("shared_expert_intermediate_size")),
    )


def _qwen_is_sparse(f: _Fields, i: int) -> bool:
    mlp_only = set(f.get("mlp_only_layers", default=[]) or [])
    step = f.int("decoder_sparse_step", default=1)
    experts = f.int("num_experts", "num_local_experts", default=0)
    return i not in mlp_only and experts > 0 and (i + 1) % step == 0


def _parse_qwen_moe(f: _Fields, name: str) -> ModelSpec:
    """Qwen2-MoE / Qwen3-MoE: sparse layers chosen by decoder_sparse_step and mlp_only_layers."""
    model_type = str(f.get("model_type"))
    n = f.int("num_hidden_layers")
    is_qwen2 = model_type == "qwen2_moe"
    window = _window(f) if f.get("use_sliding_window", default=False) else None
    layers = []
    for i in range(n):
        attn = _attention(f, window=window, has_qkv_bias=is_qwen2, has_qk_norm=not is_qwen2)
        mlp: Mlp = _moe_from_qwen(f, shared_gate=True) if _qwen_is_sparse(f, i) else _dense_mlp(f)
        layers.append(LayerSpec(mixer=attn, mlp=mlp))
    f.get("max_window_layers")
    return _build(f, name=name, layers=layers)


def _parse_mixtral(f: _Fields, name: str) -> ModelSpec:
    n = f.int("num_hidden_layers")
    moe = MoeSpec(
        num_experts=f.int("num_local_experts"),
        num_experts_per_token=f.int("num_experts_per_tok"),
        expert_intermediate_size=f.int("intermediate_size"),
    )
    window = _window(f)
    layers = [LayerSpec(mixer=_attention(f, window=window), mlp=moe) for _ in range(n)]
    return _build(f, name=name, layers=layers, naming="mixtral")


def _parse_gpt_oss(f: _Fields, name: str) -> ModelSpec:
    n = f.int("num_hidden_layers")
    types = _layer_types(f, n) or ["full_attention"] * n
    window = _window(f)
    moe = MoeSpec(
        num_experts=f.int("num_local_experts"),
        num_experts_per_token=f.int("num_experts_per_tok", "experts_per_token"),
        expert_intermediate_size=f.int("intermediate_size"),
        has_expert_bias=True,
        has_router_bias=True,
    )
    f.get("experts_per_token")
    layers = []
    for t in types:
        attn = _attention(
            f,
            window=window if t == "sliding_attention" else None,
            has_qkv_bias=bool(f.get("attention_bias", default=True)),
            has_o_bias=bool(f.get("attention_bias", default=True)),
            has_sinks=True,
        )
        layers.append(LayerSpec(mixer=attn, mlp=moe))
    return _build(f, name=name, layers=layers, naming="gpt_oss")


def _mla(f: _Fields) -> MlaSpec:
    return MlaSpec(
        num_heads=f.int("num_attention_heads"),
        q_lora_rank=f.optional_int("q_lora_rank"),
        kv_lora_rank=f.int("kv_lora_rank"),
        qk_nope_head_dim=f.int("qk_nope_head_dim"),
        qk_rope_head_dim=f.int("qk_rope_head_dim"),
        v_head_dim=f.int("v_head_dim"),
    )


def _deepseek_style_moe(f: _Fields, *, default_noaux: bool = False) -> MoeSpec | None:
    num_routed = f.int("n_routed_experts", default=0)
    if not num_routed:
        return None
    moe_size = f.int("moe_intermediate_size")
    topk_method = str(f.get("topk_method", default="noaux_tc" if default_noaux else ""))
    return MoeSpec(
        num_experts=num_routed,
        num_experts_per_token=f.int("num_experts_per_tok"),
        expert_intermediate_size=moe_size,
        shared_intermediate_size=moe_size * f.int("n_shared_experts", default=0),
        has_score_correction_bias=topk_method == "noaux_tc",
    )


def _deepseek_style_is_moe(f: _Fields, i: int) -> bool:
    first_dense = f.int("first_k_dense_replace", default=0)
    freq = f.int("moe_layer_freq", default=1)
    return i >= first_dense and i % freq == 0


def _parse_deepseek(f: _Fields, name: str) -> ModelSpec:
    """DeepSeek-V2/V3/R1, Kimi-K2, GLM-4.7-Flash: MLA everywhere, MoE after the first
    dense layers."""
    n = f.int("num_hidden_layers")
    f.get("num_key_value_heads", "head_dim")  # MLA: KV is the latent, not these fields
    moe = _deepseek_style_moe(f, default_noaux=str(f.get("model_type")) == "glm4_moe_lite")

    def layer(i: int) -> LayerSpec:
        mlp: Mlp = moe if moe and _deepseek_style_is_moe(f, i) else _dense_mlp(f)
        return LayerSpec(mixer=_mla(f), mlp=mlp)

    layers = [layer(i) for i in range(n)]
    mtp = [layer(n + k) for k in range(f.int("num_nextn_predict_layers", default=0))]
    return _build(f, name=name, layers=layers, naming="deepseek", mtp=mtp)


def _parse_glm4_moe(f: _Fields, name: str) -> ModelSpec:
    """GLM-4.5/4.6/4.7: GQA attention with q/k/v bias, DeepSeek-style MoE, MTP layers."""
    n = f.int("num_hidden_layers")
    moe = _deepseek_style_moe(f, default_noaux=True)
    f.get("partial_rotary_factor")

    def layer(i: int) -> LayerSpec:
        attn = _attention(
            f,
            has_qkv_bias=bool(f.get("attention_bias", default=True)),
            has_qk_norm=bool(f.get("use_qk_norm", default=False)),
        )
        mlp: Mlp = moe if moe and _deepseek_style_is_moe(f, i) else _dense_mlp(f)
        return LayerSpec(mixer=attn, mlp=mlp)

    layers = [layer(i) for i in range(n)]
    mtp = [layer(n + k) for k in range(f.int("num_nextn_predict_layers", default=0))]
    return _build(f, name=name, layers=layers, naming="deepseek", mtp=mtp)


LLAMA4_NOPE_INTERVAL = 4  # transformers Llama4TextConfig: every 4th layer is global (no RoPE)


def _parse_llama4(f: _Fields, name: str) -> ModelSpec:
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
    f.get("use_qk_norm")  # Llama 4's QK norm is a weightless L2 norm
    layers = []
    for i in range(n):
        is_global = (i + 1) % LLAMA4_NOPE_INTERVAL == 0
        attn = _attention(f, attention_chunk_tokens=None if is_global else chunk)
        mlp: Mlp = moe if (i + 1) % step == 0 else dense
        layers.append(LayerSpec(mixer=attn, mlp=mlp))
    return _build(f, name=name, layers=layers, naming="llama4")


def _parse_qwen_hybrid(f: _Fields, name: str) -> ModelSpec:
    """Qwen3-Next, Qwen3.5/3.6 (dense and MoE): Gated DeltaNet + gated full attention."""
    model_type = str(f.get("model_type"))
    n = f.int("num_hidden_layers")
    types = _layer_types(f, n)
    if types is None:
        interval = f.int("full_attention_interval", default=4)
        types = [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)
        ]
    else:
        f.get("full_attention_interval")
    unknown = sorted(set(types) - {"full_attention", "linear_attention"})
    if unknown:
        raise UnsupportedArchitectureError(
            f"{f.where}: layer_types has entries servefit does not understand: {unknown}"
        )
    gdn = LinearAttentionSpec(
        num_k_heads=f.int("linear_num_key_heads"),
        num_v_heads=f.int("linear_num_value_heads"),
        k_head_dim=f.int("linear_key_head_dim"),
        v_head_dim=f.int("linear_value_head_dim"),
        conv_kernel=f.int("linear_conv_kernel_dim", default=4),
    )
    gated = bool(f.get("attn_output_gate", default=True))
    f.get("mamba_ssm_dtype")  # read by the KV-cache model through state_dtype()
    is_moe = f.int("num_experts", "num_local_experts", default=0) > 0
    f.get("mlp_only_layers", "decoder_sparse_step")

    def layer(i: int, kind: str) -> LayerSpec:
        mixer = (
            _attention(f, has_output_gate=gated, has_qk_norm=True)
            if kind == "full_attention"
            else gdn
        )
        mlp: Mlp = (
            _moe_from_qwen(f, shared_gate=True)
            if is_moe and _qwen_is_sparse(f, i)
            else _dense_mlp(f)
        )
        return LayerSpec(mixer=mixer, mlp=mlp)

    layers = [layer(i, t) for i, t in enumerate(types)]
    num_mtp = f.int("mtp_num_hidden_layers", "num_nextn_predict_layers", default=0)
    mtp = [layer(n, "full_attention") for _ in range(num_mtp)]
    naming = "qwen3_5" if model_type.startswith("qwen3_5") else "default"
    return _build(f, name=name, layers=layers, naming=naming, mtp=mtp)


NEMOTRON_H_SYMBOLS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


def _parse_nemotron_h(f: _Fields, name: str) -> ModelSpec:
    """Nemotron-H: ``hybrid_override_pattern`` gives one block per character."""
    pattern = str(f.get("hybrid_override_pattern", default=""))
    n = f.int("num_hidden_layers")
    if len(pattern) != n:
        raise ConfigError(
            f"{f.where}: hybrid_override_pattern has {len(pattern)} symbols but "
            f"num_hidden_layers is {n}"
        )
    unknown = sorted(set(pattern) - set(NEMOTRON_H_SYMBOLS))
    if unknown:
        raise UnsupportedArchitectureError(
            f"{f.where}: hybrid_override_pattern has symbols servefit does not understand: "
            f"{unknown} (known: {NEMOTRON_H_SYMBOLS})"
        )
    h = f.int("hidden_size")
    heads = f.int("mamba_num_heads")
    head_dim = f.int("mamba_head_dim")
    mamba = MambaSpec(
        version=2,
        d_inner=heads * head_dim,
        state_size=f.int("ssm_state_size"),
        conv_kernel=f.int("conv_kernel", default=4),
        num_heads=heads,
        head_dim=head_dim,
        n_groups=f.int("n_groups", default=1),
        has_conv_bias=bool(f.get("use_conv_bias", default=True)),
        has_proj_bias=bool(f.get("mamba_proj_bias", "use_bias", default=False)),
    )
    f.get("expand", "time_step_rank")
    layers: list[LayerSpec] = []
    for symbol in pattern:
        kind = NEMOTRON_H_SYMBOLS[symbol]
        if kind == "mamba":
            layers.append(LayerSpec(mixer=mamba, mlp=None, num_norms=1))
        elif kind == "attention":
            layers.append(LayerSpec(mixer=_attention(f), mlp=None, num_norms=1))
        elif kind == "mlp":
            layers.append(LayerSpec(mixer=None, mlp=_dense_mlp(f), num_norms=1))
        else:
            moe = MoeSpec(
                num_experts=f.int("n_routed_experts"),
                num_experts_per_token=f.int("num_experts_per_tok"),
                expert_intermediate_size=f.int("moe_intermediate_size"),
                shared_intermediate_size=f.int("moe_shared_expert_intermediate_size", default=0)
                * max(1, f.int("n_shared_experts", default=1)),
                is_gated=False,
                has_score_correction_bias=True,
            )
            layers.append(LayerSpec(mixer=None, mlp=moe, num_norms=1))
    del h
    # Nemotron-H's attention has no positional encoding (vLLM builds no RoPE for it)
    return _build(
        f, name=name, layers=layers, naming="nemotron_h", prefix="backbone.", rope_caches=0
    )


def _parse_jamba(f: _Fields, name: str) -> ModelSpec:
    """Jamba: Mamba-1 with one attention layer per ``attn_layer_period``, MoE every other."""
    n = f.int("num_hidden_layers")
    h = f.int("hidden_size")
    attn_period = f.int("attn_layer_period")
    attn_offset = f.int("attn_layer_offset")
    expert_period = f.int("expert_layer_period")
    expert_offset = f.int("expert_layer_offset")
    mamba = MambaSpec(
        version=1,
        d_inner=f.int("mamba_expand") * h,
        state_size=f.int("mamba_d_state"),
        conv_kernel=f.int("mamba_d_conv"),
        dt_rank=f.int("mamba_dt_rank"),
        has_conv_bias=bool(f.get("mamba_conv_bias", default=True)),
        has_proj_bias=bool(f.get("mamba_proj_bias", default=False)),
        has_dt_norms=True,
    )
    moe = MoeSpec(
        num_experts=f.int("num_experts"),
        num_experts_per_token=f.int("num_experts_per_tok"),
        expert_intermediate_size=f.int("intermediate_size"),
    )
    layers = []
    for i in range(n):
        mixer = _attention(f) if i % attn_period == attn_offset else mamba
        mlp: Mlp = moe if i % expert_period == expert_offset else _dense_mlp(f)
        layers.append(LayerSpec(mixer=mixer, mlp=mlp))
    return _build(f, name=name, layers=layers, naming="jamba", rope_caches=0)  # no RoPE in Jamba


_FAMILIES: dict[str, Callable[[_Fields, str], ModelSpec]] = {
    **dict.fromkeys(
        (
            "llama",
            "mistral",
            "qwen2",
            "qwen3",
            "phi3",
            "granite",
            "olmo",
            "olmo2",
            "internlm2",
            "cohere",
            "exaone",
            "starcoder2",
            "ministral",
            "qwen3_vl_text",
        ),
        _parse_standard,
    ),
    **dict.fromkeys(("gemma", "gemma2", "gemma3", "gemma3_text"), _parse_gemma),
    "qwen2_moe": _parse_qwen_moe,
    "qwen3_moe": _parse_qwen_moe,
    "qwen3_vl_moe_text": _parse_qwen_moe,
    "glm4_moe": _parse_glm4_moe,
    "glm4_moe_lite": _parse_deepseek,
    "llama4": _parse_llama4,
    "llama4_text": _parse_llama4,
    "mixtral": _parse_mixtral,
    "gpt_oss": _parse_gpt_oss,
    "deepseek_v2": _parse_deepseek,
    "deepseek_v3": _parse_deepseek,
    "kimi_k2": _parse_deepseek,
    "qwen3_next": _parse_qwen_hybrid,
    "qwen3_5": _parse_qwen_hybrid,
    "qwen3_5_text": _parse_qwen_hybrid,
    "qwen3_5_moe": _parse_qwen_hybrid,
    "qwen3_5_moe_text": _parse_qwen_hybrid,
    "nemotron_h": _parse_nemotron_h,
    "jamba": _parse_jamba,
}

SUPPORTED_MODEL_TYPES = tuple(sorted(_FAMILIES))


def _vision_params(v: Config, text_hidden: int) -> VisionSpec:
    """Parameters of a ViT-style vision tower and its projector, from ``vision_config``.

    Per block: Q/K/V/O with biases, an MLP (gated when the activation is SiLU), two norms.
    Plus the patch embedding, position embeddings and a merger/projector into the text
    width. An estimate (stated in reports): towers differ in small details.
    """
    depth = int(v.get("depth") or v.get("num_hidden_layers") or 0)
    hv = int(v.get("hidden_size") or v.get("embed_dim") or 0)
    iv = int(v.get("intermediate_size") or 4 * hv)
    if depth <= 0 or hv <= 0:
        raise ConfigError("vision_config: need depth/num_hidden_layers and hidden_size")
    gated = str(v.get("hidden_act", "gelu")) == "silu"
    block = 4 * hv * hv + 4 * hv + (3 if gated else 2) * hv * iv + iv + hv + 4 * hv
    patch = int(v.get("patch_size", 14))
    channels = int(v.get("in_channels", v.get("num_channels", 3)))
    temporal = int(v.get("temporal_patch_size", 1))
    patch_embed = channels * temporal * patch * patch * hv + hv
    if v.get("num_position_embeddings"):
        positions = int(v["num_position_embeddings"])
    elif v.get("image_size"):
        positions = (int(v["image_size"]) // patch) ** 2
    else:
        positions = 0
    merge = int(v.get("spatial_merge_size", 1))
    out = int(v.get("out_hidden_size") or text_hidden)
    merged = hv * merge * merge
    projector = (
        merged + merged * merged + merged + merged * out + out if merge > 1 else hv * out + hv
    )
    total = depth * block + patch_embed + positions * hv + 2 * hv + projector
    return VisionSpec(
        num_params=total,
        description=f"ViT {depth} x {hv} (patch {patch}), projector to {out}",
    )


def spec_from_hf_config(
    config: Config,
    *,
    name: str = "model",
    hf_quant_config: Config | None = None,
) -> ModelSpec:
    """Interpret a Hugging Face ``config.json`` (and optional ``hf_quant_config.json``)."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{name}: config.json must be a JSON object, got {type(config).__name__}")
    text, vision_config = _text_and_vision(config)
    architectures = config.get("architectures") or []
    architecture = str(architectures[0]) if architectures else ""
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    parser = _FAMILIES.get(model_type)
    if parser is None:
        structural = sorted(k for k in text if k in STRUCTURAL_FIELDS)
        detail = f"; structural fields present: {', '.join(structural)}" if structural else ""
        raise UnsupportedArchitectureError(
            f"{name}: model_type {model_type or '(missing)'!r} "
            f"(architecture {architecture or 'unknown'}) is not one servefit understands{detail}. "
            f"Supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}."
        )
    fields = _Fields(text, where=name)
    spec = parser(fields, name)
    leftover = fields.unconsumed_structural()
    if leftover:
        raise UnsupportedArchitectureError(
            f"{name}: model_type {model_type!r} carries fields servefit cannot interpret for "
            f"this family: {', '.join(leftover)}. Refusing to guess (it would mis-size the model)."
        )
    vision = _vision_params(vision_config, spec.hidden_size) if vision_config else None
    quant = quant_from_hf(
        text.get("quantization_config"), hf_quant_config, text.get("quantization")
    )
    prefix = spec.module_prefix
    if vision_config is not None and prefix == "model.":
        prefix = "model.language_model."
    return ModelSpec(
        name=name,
        architecture=architecture,
        model_type=model_type,
        hidden_size=spec.hidden_size,
        vocab_size=spec.vocab_size,
        layers=spec.layers,
        dtype=spec.dtype,
        tie_word_embeddings=spec.tie_word_embeddings,
        max_position_embeddings=spec.max_position_embeddings,
        mtp_layers=spec.mtp_layers,
        vision=vision,
        quant=quant,
        module_prefix=prefix,
        naming=spec.naming,
        rope_cache_positions=spec.rope_cache_positions,
        rope_cache_dims=spec.rope_cache_dims,
    )


def state_dtype(config: Config) -> str | None:
    """The SSM state dtype a hybrid config asks for (``mamba_ssm_dtype``), if any."""
    text, _ = _text_and_vision(config)
    value = text.get("mamba_ssm_dtype")
    return str(value) if value else None
