"""Per-family parsers of Hugging Face configs: state-space models.

Pure Mamba-1 (``mamba``, ``falcon_mamba``), pure Mamba-2 (``mamba2``), IBM's Granite-4.0-H
(``granitemoehybrid``: Mamba-2 and attention layers per ``layer_types``, each with a MoE,
a shared MLP or both) and TII's Falcon-H1 (``falcon_h1``: attention and Mamba-2 in parallel
in every layer). Each reads the fields vLLM 0.32's model class reads
(``vllm/model_executor/models/mamba.py``, ``mamba2.py``, ``granitemoehybrid.py``,
``falcon_h1.py``) with the
defaults transformers' config class gives a field the file omits.

The other hybrids (Nemotron-H, Jamba, Qwen3-Next/3.5) are in :mod:`servefit.core.hf_hybrid`.
"""

from __future__ import annotations

import math
from dataclasses import replace

from servefit.core.hf_fields import EXPERTS, Fields, build_spec, checked_int
from servefit.core.hf_values import show
from servefit.core.model_spec import (
    AttentionSpec,
    DenseMlpSpec,
    LayerSpec,
    MambaSpec,
    Mlp,
    ModelSpec,
    MoeSpec,
)
from servefit.errors import ConfigError, UnsupportedArchitectureError

# transformers maps the older layer_types names onto the current ones
# (configuration_utils._LEGACY_LAYER_TYPE_REMAP): "mamba" is "linear_attention",
# "attention" is "full_attention"; vLLM's GraniteMoeHybrid model reads the current names.
GRANITE_LAYER_TYPES = {
    "mamba": "mamba",
    "linear_attention": "mamba",
    "attention": "attention",
    "full_attention": "attention",
}


def _time_step_rank(f: Fields, hidden: int) -> int:
    """``time_step_rank``: an integer, or "auto" (transformers: ceil(hidden_size / 16))."""
    value = f.get("time_step_rank", default="auto")
    if value == "auto":
        return math.ceil(hidden / 16)
    if isinstance(value, str):
        raise ConfigError(
            f'{f.where}: time_step_rank must be an integer or "auto", got {show(value)}'
        )
    return f.int("time_step_rank")


def parse_mamba(f: Fields, name: str) -> ModelSpec:
    """Mamba-1 (``MambaForCausalLM``, ``FalconMambaForCausalLM``): one Mamba mixer and one
    RMSNorm per layer, no MLP, no attention. Falcon-Mamba's extra dt/B/C RMSNorms carry no
    weight in vLLM (``rms_norm_has_weight=False``), so they add no parameters."""
    h = f.int("hidden_size")
    expand = f.int("expand", default=2)
    # transformers sets intermediate_size = expand x hidden_size, then lets the file's own
    # intermediate_size win (Falcon-Mamba-7B: expand 16 but intermediate_size 8,192)
    d_inner = f.optional_int("intermediate_size") or expand * h
    mamba = MambaSpec(
        version=1,
        d_inner=d_inner,
        state_size=f.int("state_size", default=16),
        conv_kernel=f.int("conv_kernel", default=4),
        dt_rank=_time_step_rank(f, h),
        has_conv_bias=f.bool("use_conv_bias", default=True),
        has_proj_bias=f.bool("use_bias", default=False),
    )
    n = f.int("num_hidden_layers")
    layers = [LayerSpec(mixer=mamba, mlp=None, num_norms=1) for _ in range(n)]
    # transformers' MambaConfig and FalconMambaConfig tie the LM head by default
    return build_spec(
        f,
        name=name,
        layers=layers,
        naming="mamba",
        prefix="backbone.",
        tie_default=True,
        rope_caches=0,
    )


def parse_mamba2(f: Fields, name: str) -> ModelSpec:
    """Mamba-2 (``Mamba2ForCausalLM``): one Mamba-2 mixer and one RMSNorm per layer."""
    h = f.int("hidden_size")
    expand = f.int("expand", default=2)
    heads = f.int("num_heads", default=128)
    head_dim = f.int("head_dim", default=64)
    d_inner = expand * h
    # vLLM sizes the mixer by intermediate_size when the file has one and the state by
    # expand x hidden_size; transformers requires expand x hidden_size == heads x head_dim
    intermediate = f.optional_int("intermediate_size")
    if heads * head_dim != d_inner or (intermediate is not None and intermediate != d_inner):
        detail = f", intermediate_size {intermediate}" if intermediate is not None else ""
        raise ConfigError(
            f"{f.where}: expand {expand} x hidden_size {h} = {d_inner} must equal num_heads "
            f"{heads} x head_dim {head_dim} = {heads * head_dim}{detail} (transformers' "
            "Mamba2Config refuses the mismatch)"
        )
    mamba = MambaSpec(
        version=2,
        d_inner=d_inner,
        state_size=f.int("state_size", default=128),
        conv_kernel=f.int("conv_kernel", default=4),
        num_heads=heads,
        head_dim=head_dim,
        n_groups=f.int("n_groups", default=8),
        has_conv_bias=f.bool("use_conv_bias", default=True),
        has_proj_bias=f.bool("use_bias", default=False),
    )
    _time_step_rank(f, h)  # read for its check: Mamba-2 has no dt projection to size
    n = f.int("num_hidden_layers")
    layers = [LayerSpec(mixer=mamba, mlp=None, num_norms=1) for _ in range(n)]
    return build_spec(
        f,
        name=name,
        layers=layers,
        naming="mamba",
        prefix="backbone.",
        tie_default=False,  # transformers' Mamba2Config default
        rope_caches=0,
    )


def _granite_mamba(f: Fields, h: int) -> MambaSpec:
    expand = f.int("mamba_expand", default=2)
    d_inner = expand * h
    heads = f.int("mamba_n_heads", default=128)
    head_dim_value = f.get("mamba_d_head", default="auto")
    head_dim = d_inner // heads if head_dim_value == "auto" else f.int("mamba_d_head")
    if heads * head_dim != d_inner:
        raise ConfigError(
            f"{f.where}: mamba_expand {expand} x hidden_size {h} = {d_inner} must equal "
            f"mamba_n_heads {heads} x mamba_d_head {head_dim} = {heads * head_dim}"
        )
    return MambaSpec(
        version=2,
        d_inner=d_inner,
        state_size=f.int("mamba_d_state", default=256),
        conv_kernel=f.int("mamba_d_conv", default=4),
        num_heads=heads,
        head_dim=head_dim,
        n_groups=f.int("mamba_n_groups", default=1),
        has_conv_bias=f.bool("mamba_conv_bias", default=True),
        has_proj_bias=f.bool("mamba_proj_bias", default=False),
    )


def _granite_mlp(f: Fields) -> Mlp | None:
    """A MoE (``num_local_experts`` > 0) plus a gated shared MLP
    (``shared_intermediate_size`` > 0), either alone, or nothing."""
    experts = f.int("num_local_experts", default=0)
    shared = f.int("shared_intermediate_size", default=1024)  # transformers' default
    if experts:
        return MoeSpec(
            num_experts=experts,
            num_experts_per_token=f.int("num_experts_per_tok"),
            expert_intermediate_size=f.int("intermediate_size"),
            shared_intermediate_size=shared,
        )
    top_k = f.get("num_experts_per_tok")
    if top_k is not None:  # the dense Granite-4.0-H configs publish 0 here
        checked_int(f.where, "num_experts_per_tok", top_k, EXPERTS)
    return DenseMlpSpec(intermediate_size=shared) if shared else None


def parse_granite_hybrid(f: Fields, name: str) -> ModelSpec:
    """Granite-4.0-H (``GraniteMoeHybridForCausalLM``): ``layer_types`` names each layer's
    mixer (Mamba-2 or attention; all Mamba when absent); every layer has the same MLP."""
    n = f.int("num_hidden_layers")
    h = f.int("hidden_size")
    types = f.texts("layer_types")
    if types is None:
        types = ["mamba"] * n
    if len(types) != n:
        raise ConfigError(
            f"{f.where}: layer_types has {len(types)} entries but num_hidden_layers is {n}"
        )
    unknown = sorted(set(types) - set(GRANITE_LAYER_TYPES))
    if unknown:
        raise UnsupportedArchitectureError(
            f"{f.where}: layer_types has entries servefit does not understand: {unknown} "
            f"(known: {sorted(GRANITE_LAYER_TYPES)})"
        )
    mamba = _granite_mamba(f, h)
    heads = f.int("num_attention_heads")
    if h % heads:
        raise ConfigError(
            f"{f.where}: hidden_size {h} does not divide by num_attention_heads {heads} "
            "(vLLM's Granite attention takes head_dim = hidden_size / heads)"
        )
    f.optional_int("head_dim")  # vLLM ignores it: head_dim is hidden_size / heads
    bias = f.bool("attention_bias", default=False)
    attention = AttentionSpec(
        num_q_heads=heads,
        num_kv_heads=f.int("num_key_value_heads", default=heads),
        head_dim=h // heads,
        has_qkv_bias=bias,
        has_o_bias=bias,
    )
    mlp = _granite_mlp(f)
    layers = [
        LayerSpec(mixer=attention if GRANITE_LAYER_TYPES[t] == "attention" else mamba, mlp=mlp)
        for t in types
    ]
    # vLLM builds RoPE only for position_embedding_type "rope" (Granite-4.0-H: "nope")
    rope = f.text("position_embedding_type") == "rope"
    return build_spec(
        f, name=name, layers=layers, naming="granitemoehybrid", rope_caches=1 if rope else 0
    )


def _present_or(f: Fields, name: str, absent: int | None) -> int | None:
    """A field transformers defaults to ``absent`` when the file omits it, where an explicit
    null means "derive it" (None)."""
    if name not in f.config:
        f.get(name)  # consumed
        return absent
    return f.optional_int(name)


def parse_falcon_h1(f: Fields, name: str) -> ModelSpec:
    """Falcon-H1 (``FalconH1ForCausalLM``): attention and Mamba-2 side by side in every layer
    (their outputs summed), then a gated MLP. vLLM registers each layer's attention and its
    Mamba as two cache layers."""
    h = f.int("hidden_size")
    n = f.int("num_hidden_layers")
    # transformers' FalconH1Config: mamba_d_ssm 1,024 when absent; null means expand x hidden
    d_ssm = _present_or(f, "mamba_d_ssm", 1024) or f.int("mamba_expand", default=2) * h
    f.optional_int("mamba_expand")
    heads = f.int("mamba_n_heads", default=128)
    head_dim_value = f.get("mamba_d_head", default="auto")
    head_dim = d_ssm // heads if head_dim_value == "auto" else f.int("mamba_d_head")
    if heads * head_dim != d_ssm:
        raise ConfigError(
            f"{f.where}: mamba_n_heads {heads} x mamba_d_head {head_dim} = {heads * head_dim} "
            f"must equal the Mamba width {d_ssm} (mamba_d_ssm, else mamba_expand x hidden_size)"
        )
    mamba = MambaSpec(
        version=2,
        d_inner=d_ssm,
        state_size=f.int("mamba_d_state", default=256),
        conv_kernel=f.int("mamba_d_conv", default=4),
        num_heads=heads,
        head_dim=head_dim,
        n_groups=f.int("mamba_n_groups", default=1),
        has_conv_bias=f.bool("mamba_conv_bias", default=True),
        has_proj_bias=f.bool("mamba_proj_bias", default=False),
        has_norm=f.bool("mamba_rms_norm", default=False),  # no weight without the norm
    )
    q_heads = f.int("num_attention_heads")
    kv_heads = _present_or(f, "num_key_value_heads", 8) or q_heads  # transformers' default 8
    attn_head_dim = f.optional_int("head_dim") or h // q_heads
    if attn_head_dim < 1:
        raise ConfigError(f"{f.where}: hidden_size {h} / num_attention_heads {q_heads} is 0")
    # vLLM builds q/k/v/o and the MLP without biases whatever attention_bias/mlp_bias say
    attention = AttentionSpec(num_q_heads=q_heads, num_kv_heads=kv_heads, head_dim=attn_head_dim)
    activation = f.text("hidden_act", default="silu")
    if activation != "silu":
        raise ConfigError(
            f"{f.where}: hidden_act {activation!r}: vLLM's Falcon-H1 MLP takes only silu"
        )
    mlp = DenseMlpSpec(intermediate_size=f.int("intermediate_size"))
    layers = [LayerSpec(mixer=attention, parallel_mixer=mamba, mlp=mlp) for _ in range(n)]
    spec = build_spec(f, name=name, layers=layers, naming="falcon_h1", tie_default=False)
    rotary = f.optional_int("attn_rotary_emb") or attn_head_dim  # vLLM: partial rotary
    return replace(spec, rope_cache_dims=(rotary,))
