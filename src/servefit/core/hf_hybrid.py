"""Per-family parsers of Hugging Face configs: hybrids with linear attention or Mamba.

Qwen3-Next and Qwen3.5/3.6 (Gated DeltaNet + gated full attention), Nemotron-H (one block
per ``hybrid_override_pattern`` symbol) and Jamba (Mamba-1 with periodic attention and MoE).
Attention-only families are in :mod:`servefit.core.hf_families`.
"""

from __future__ import annotations

from servefit.core.hf_families import moe_from_qwen, qwen_is_sparse
from servefit.core.hf_fields import (
    Fields,
    attention_spec,
    build_spec,
    dense_mlp_spec,
    layer_types_of,
)
from servefit.core.model_spec import (
    LayerSpec,
    LinearAttentionSpec,
    MambaSpec,
    Mlp,
    ModelSpec,
    MoeSpec,
)
from servefit.errors import ConfigError, UnsupportedArchitectureError


def parse_qwen_hybrid(f: Fields, name: str) -> ModelSpec:
    """Qwen3-Next, Qwen3.5/3.6 (dense and MoE): Gated DeltaNet + gated full attention."""
    model_type = f.text("model_type")
    n = f.int("num_hidden_layers")
    types = layer_types_of(f, n)
    if types is None:
        interval = f.int("full_attention_interval", default=4)
        types = [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)
        ]
    else:
        f.optional_int("full_attention_interval")
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
    gated = f.bool("attn_output_gate", default=True)
    state_dtype_field(f, "mamba_ssm_dtype")  # read by the KV-cache model via state_dtype()
    is_moe = f.int("num_experts", "num_local_experts", default=0) > 0
    f.layer_indices("mlp_only_layers")
    f.optional_int("decoder_sparse_step")

    def layer(i: int, kind: str) -> LayerSpec:
        mixer = (
            attention_spec(f, has_output_gate=gated, has_qk_norm=True)
            if kind == "full_attention"
            else gdn
        )
        mlp: Mlp = (
            moe_from_qwen(f, shared_gate=True)
            if is_moe and qwen_is_sparse(f, i)
            else dense_mlp_spec(f)
        )
        return LayerSpec(mixer=mixer, mlp=mlp)

    layers = [layer(i, t) for i, t in enumerate(types)]
    num_mtp = f.int("mtp_num_hidden_layers", "num_nextn_predict_layers", default=0)
    mtp = [layer(n, "full_attention") for _ in range(num_mtp)]
    naming = "qwen3_5" if model_type.startswith("qwen3_5") else "default"
    return build_spec(f, name=name, layers=layers, naming=naming, mtp=mtp)


NEMOTRON_H_SYMBOLS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


# the recurrent state dtypes vLLM accepts (vllm/config/cache.py MambaDType, v0.32)
STATE_DTYPES = ("float32", "float16", "bfloat16")


def state_dtype_field(f: Fields, name: str) -> str:
    """A config's recurrent-state dtype field, checked (consumed here; the KV-cache model
    reads it through ``hf_config.state_dtype``)."""
    value = f.text(name)
    if value and value not in STATE_DTYPES:
        raise ConfigError(
            f"{f.where}: {name} {value!r} is not a state dtype vLLM accepts "
            f"({', '.join(STATE_DTYPES)}); fix it or remove it"
        )
    return value


def parse_nemotron_h(f: Fields, name: str) -> ModelSpec:
    """Nemotron-H: ``hybrid_override_pattern`` gives one block per character."""
    pattern = f.text("hybrid_override_pattern")
    state_dtype_field(f, "mamba_ssm_cache_dtype")  # float32 when absent (hf_config.state_dtype)
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
        has_conv_bias=f.bool("use_conv_bias", default=True),
        has_proj_bias=f.bool("mamba_proj_bias", "use_bias", default=False),
    )
    f.get("expand", "time_step_rank")
    layers: list[LayerSpec] = []
    for symbol in pattern:
        kind = NEMOTRON_H_SYMBOLS[symbol]
        if kind == "mamba":
            layers.append(LayerSpec(mixer=mamba, mlp=None, num_norms=1))
        elif kind == "attention":
            layers.append(LayerSpec(mixer=attention_spec(f), mlp=None, num_norms=1))
        elif kind == "mlp":
            layers.append(LayerSpec(mixer=None, mlp=dense_mlp_spec(f), num_norms=1))
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
    return build_spec(
        f, name=name, layers=layers, naming="nemotron_h", prefix="backbone.", rope_caches=0
    )


def parse_jamba(f: Fields, name: str) -> ModelSpec:
    """Jamba: Mamba-1 with one attention layer per ``attn_layer_period``, MoE every other."""
    n = f.int("num_hidden_layers")
    h = f.int("hidden_size")
    attn_period = f.int("attn_layer_period")
    attn_offset = f.int("attn_layer_offset")
    expert_period = f.int("expert_layer_period")
    expert_offset = f.int("expert_layer_offset")
    for offset, period, names in (
        (attn_offset, attn_period, "attn_layer_offset / attn_layer_period"),
        (expert_offset, expert_period, "expert_layer_offset / expert_layer_period"),
    ):
        if offset >= period:
            raise ConfigError(
                f"{f.where}: {names} = {offset} / {period}: an offset at or past the period "
                "selects no layer"
            )
    mamba = MambaSpec(
        version=1,
        d_inner=f.int("mamba_expand") * h,
        state_size=f.int("mamba_d_state"),
        conv_kernel=f.int("mamba_d_conv"),
        dt_rank=f.int("mamba_dt_rank"),
        has_conv_bias=f.bool("mamba_conv_bias", default=True),
        has_proj_bias=f.bool("mamba_proj_bias", default=False),
        has_dt_norms=True,
    )
    moe = MoeSpec(
        num_experts=f.int("num_experts"),
        num_experts_per_token=f.int("num_experts_per_tok"),
        expert_intermediate_size=f.int("intermediate_size"),
    )
    layers = []
    for i in range(n):
        mixer = attention_spec(f) if i % attn_period == attn_offset else mamba
        mlp: Mlp = moe if i % expert_period == expert_offset else dense_mlp_spec(f)
        layers.append(LayerSpec(mixer=mixer, mlp=mlp))
    return build_spec(
        f, name=name, layers=layers, naming="jamba", rope_caches=0
    )  # no RoPE in Jamba
