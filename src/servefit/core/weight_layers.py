"""Every weight tensor of a model, layer kind by layer kind: :func:`weight_tensors`.

Each mixer (attention, MLA, Gated DeltaNet, Mamba 1/2) and MLP (dense, MoE with router,
shared experts and gates) emits its tensor groups, named as the checkpoint names them (so
quantization ignore-lists and targets match the way the engine matches them) and marked with
how vLLM's parallel layers shard them. :mod:`servefit.core.weights` sums this list into
parameter counts and bytes per GPU.
"""

from __future__ import annotations

from functools import lru_cache

from servefit.core.model_spec import (
    AttentionSpec,
    DenseMlpSpec,
    LayerSpec,
    LinearAttentionSpec,
    MambaSpec,
    MlaSpec,
    ModelSpec,
    MoeSpec,
)
from servefit.core.weight_inventory import Role, Shard, TensorBuilder, WeightTensor, module_names
from servefit.core.weight_per_layer import per_layer_embedding, per_layer_input


def _attention(
    b: TensorBuilder, p: str, h: int, a: AttentionSpec, layer: int | None, role: Role
) -> None:
    q_out = a.num_q_heads * a.head_dim * (2 if a.has_output_gate else 1)
    b.linear(
        f"{p}.q_proj", h, q_out, role=role, shard=Shard.COLUMN, layer=layer, bias=a.has_qkv_bias
    )
    if not a.shares_kv_cache:  # a KV-shared layer has only q_proj (vLLM 0.32 Gemma4Attention)
        _kv_projections(b, p, h, a, layer, role)
    b.linear(
        f"{p}.o_proj",
        a.num_q_heads * a.value_head_dim,
        h,
        role=role,
        shard=Shard.ROW,
        layer=layer,
        bias=a.has_o_bias,
    )
    if a.has_qk_norm:  # q_norm and k_norm (a KV-shared layer has no k_norm)
        norms = (1 if a.shares_kv_cache else 2) * a.head_dim
        b.param(f"{p}.qk_norm", norms, role=Role.NORM, shard=Shard.REPLICATED, layer=layer)
    if a.has_sinks:
        b.param(f"{p}.sinks", a.num_q_heads, role=role, shard=Shard.COLUMN, layer=layer)


def _kv_projections(
    b: TensorBuilder, p: str, h: int, a: AttentionSpec, layer: int | None, role: Role
) -> None:
    """k_proj and v_proj. With K = V (Gemma 4's ``attention_k_eq_v``) the checkpoint ships
    no v_proj, yet vLLM 0.32 builds the full ``QKVParallelLinear`` and loads k_proj into both
    its K and V shards (gemma4.py ``_gemma4_layer_weights_mapper``): the V slot is loaded
    memory and computed, not a checkpoint parameter."""
    kv = a.num_kv_heads
    b.linear(
        f"{p}.k_proj",
        h,
        kv * a.head_dim,
        role=role,
        shard=Shard.KV_HEADS,
        layer=layer,
        bias=a.has_qkv_bias,
        shard_units=kv,
    )
    b.linear(
        f"{p}.v_proj",
        h,
        kv * a.value_head_dim,
        role=role,
        shard=Shard.KV_HEADS,
        layer=layer,
        bias=a.has_qkv_bias,
        shard_units=kv,
        in_checkpoint=not a.is_k_eq_v,
    )


def _mla(b: TensorBuilder, p: str, h: int, m: MlaSpec, layer: int | None, role: Role) -> None:
    qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank:
        b.linear(f"{p}.q_a_proj", h, m.q_lora_rank, role=role, shard=Shard.REPLICATED, layer=layer)
        b.param(
            f"{p}.q_a_layernorm", m.q_lora_rank, role=Role.NORM, shard=Shard.REPLICATED, layer=layer
        )
        b.linear(
            f"{p}.q_b_proj",
            m.q_lora_rank,
            m.num_heads * qk_head,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
        )
    else:
        b.linear(
            f"{p}.q_proj", h, m.num_heads * qk_head, role=role, shard=Shard.COLUMN, layer=layer
        )
    b.linear(
        f"{p}.kv_a_proj_with_mqa",
        h,
        m.kv_lora_rank + m.qk_rope_head_dim,
        role=role,
        shard=Shard.REPLICATED,
        layer=layer,
    )
    b.param(
        f"{p}.kv_a_layernorm", m.kv_lora_rank, role=Role.NORM, shard=Shard.REPLICATED, layer=layer
    )
    b.linear(
        f"{p}.kv_b_proj",
        m.kv_lora_rank,
        m.num_heads * (m.qk_nope_head_dim + m.v_head_dim),
        role=role,
        shard=Shard.COLUMN,
        layer=layer,
    )
    b.linear(f"{p}.o_proj", m.num_heads * m.v_head_dim, h, role=role, shard=Shard.ROW, layer=layer)
    if m.has_indexer:
        _indexer(b, f"{p}.indexer", h, m, layer, role)


def _indexer(b: TensorBuilder, p: str, h: int, m: MlaSpec, layer: int | None, role: Role) -> None:
    """DeepSeek-V3.2's lightning indexer, replicated on every rank (vLLM 0.32
    model_executor/models/deepseek_v2.py ``Indexer``): ``wq_b`` (q_lora -> heads x dim, the
    checkpoint's format); ``wk`` (upcast to bf16 at load) and ``weights_proj`` (built without
    a quant config) fused into one bf16 GEMM; ``k_norm`` a LayerNorm (weight and bias)."""
    d, heads = m.index_head_dim, m.index_num_heads
    b.linear(
        f"{p}.wq_b", m.q_lora_rank or h, heads * d, role=role, shard=Shard.REPLICATED, layer=layer
    )
    b.param(f"{p}.wk", h * d, role=role, shard=Shard.REPLICATED, layer=layer)
    b.param(f"{p}.weights_proj", h * heads, role=role, shard=Shard.REPLICATED, layer=layer)
    b.param(f"{p}.k_norm", 2 * d, role=Role.NORM, shard=Shard.REPLICATED, layer=layer)


def _gated_deltanet(
    b: TensorBuilder, p: str, h: int, g: LinearAttentionSpec, layer: int | None, n: dict[str, str]
) -> None:
    role = Role.MIXER
    if n["gdn_in"] == "in_proj_qkv":  # Qwen3.5 splits the projections
        b.linear(
            f"{p}.in_proj_qkv",
            h,
            2 * g.key_dim + g.value_dim,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
        )
        b.linear(f"{p}.in_proj_z", h, g.value_dim, role=role, shard=Shard.COLUMN, layer=layer)
        b.linear(f"{p}.in_proj_b", h, g.num_v_heads, role=role, shard=Shard.COLUMN, layer=layer)
        b.linear(f"{p}.in_proj_a", h, g.num_v_heads, role=role, shard=Shard.COLUMN, layer=layer)
    else:
        b.linear(
            f"{p}.in_proj_qkvz",
            h,
            2 * g.key_dim + 2 * g.value_dim,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
        )
        b.linear(
            f"{p}.in_proj_ba", h, 2 * g.num_v_heads, role=role, shard=Shard.COLUMN, layer=layer
        )
    conv_dim = 2 * g.key_dim + g.value_dim
    b.param(f"{p}.conv1d", conv_dim * g.conv_kernel, role=role, shard=Shard.COLUMN, layer=layer)
    b.param(f"{p}.dt_bias+A_log", 2 * g.num_v_heads, role=role, shard=Shard.COLUMN, layer=layer)
    b.param(f"{p}.norm", g.v_head_dim, role=Role.NORM, shard=Shard.REPLICATED, layer=layer)
    b.linear(f"{p}.out_proj", g.value_dim, h, role=role, shard=Shard.ROW, layer=layer)


def _mamba(b: TensorBuilder, p: str, h: int, m: MambaSpec, layer: int | None) -> None:
    """vLLM's MambaMixer / MambaMixer2 parameters. ``A`` is created in float32 whatever the
    model dtype (``nn.Parameter(torch.empty(..., dtype=torch.float32))``), so it is stored
    and counted in bytes as float32."""
    role = Role.MIXER
    bias = m.has_proj_bias
    conv_bias = m.conv_dim if m.has_conv_bias else 0
    if m.version == 2:
        in_out = 2 * m.d_inner + 2 * m.n_groups * m.state_size + m.num_heads
        b.linear(f"{p}.in_proj", h, in_out, role=role, shard=Shard.COLUMN, layer=layer, bias=bias)
        b.param(
            f"{p}.conv1d",
            m.conv_dim * m.conv_kernel + conv_bias,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
        )
        b.param(f"{p}.dt_bias+D", 2 * m.num_heads, role=role, shard=Shard.COLUMN, layer=layer)
        b.param(f"{p}.A", m.num_heads, role=role, shard=Shard.COLUMN, layer=layer, dtype="float32")
        if m.has_norm:
            b.param(f"{p}.norm", m.d_inner, role=Role.NORM, shard=Shard.COLUMN, layer=layer)
    else:
        b.linear(
            f"{p}.in_proj", h, 2 * m.d_inner, role=role, shard=Shard.COLUMN, layer=layer, bias=bias
        )
        b.param(
            f"{p}.conv1d",
            m.conv_dim * m.conv_kernel + conv_bias,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
        )
        b.linear(
            f"{p}.x_proj",
            m.d_inner,
            m.dt_rank + 2 * m.state_size,
            role=role,
            shard=Shard.ROW,
            layer=layer,
        )
        b.linear(
            f"{p}.dt_proj",
            m.dt_rank,
            m.d_inner,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
            bias=True,
        )
        b.param(
            f"{p}.A",
            m.d_inner * m.state_size,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
            dtype="float32",
        )
        b.param(f"{p}.D", m.d_inner, role=role, shard=Shard.COLUMN, layer=layer)
        if m.has_dt_norms:
            b.param(
                f"{p}.dt_B_C_norms",
                m.dt_rank + 2 * m.state_size,
                role=Role.NORM,
                shard=Shard.REPLICATED,
                layer=layer,
            )
    b.linear(f"{p}.out_proj", m.d_inner, h, role=role, shard=Shard.ROW, layer=layer, bias=bias)


def _dense_mlp(
    b: TensorBuilder,
    p: str,
    h: int,
    mlp: DenseMlpSpec,
    layer: int | None,
    n: dict[str, str],
    role: Role,
    *,
    copies: int = 1,
) -> None:
    i = mlp.intermediate_size
    if mlp.is_gated:
        b.linear(
            f"{p}.{n['gate']}",
            h,
            i,
            role=role,
            shard=Shard.COLUMN,
            layer=layer,
            copies=copies,
            bias=mlp.has_bias,
        )
    b.linear(
        f"{p}.{n['up']}",
        h,
        i,
        role=role,
        shard=Shard.COLUMN,
        layer=layer,
        copies=copies,
        bias=mlp.has_bias,
    )
    b.linear(
        f"{p}.{n['down']}",
        i,
        h,
        role=role,
        shard=Shard.ROW,
        layer=layer,
        copies=copies,
        bias=mlp.has_bias,
    )


def _moe(
    b: TensorBuilder,
    p: str,
    h: int,
    moe: MoeSpec,
    layer: int | None,
    n: dict[str, str],
    role: Role | None,
) -> None:
    router_role = role or Role.ROUTER
    b.linear(
        f"{p}.{n['router']}",
        h,
        moe.num_experts,
        role=router_role,
        shard=Shard.REPLICATED,
        layer=layer,
        bias=moe.has_router_bias,
    )
    if moe.has_router_scales:  # vLLM 0.32 gemma4.py Gemma4Router: scale, per_expert_scale
        b.param(f"{p}.router.scale", h, role=router_role, shard=Shard.REPLICATED, layer=layer)
        b.param(
            f"{p}.router.per_expert_scale",
            moe.num_experts,
            role=router_role,
            shard=Shard.REPLICATED,
            layer=layer,
        )
    if moe.has_score_correction_bias:
        b.param(
            f"{p}.{n['router']}.e_score_correction_bias",
            moe.num_experts,
            role=router_role,
            shard=Shard.REPLICATED,
            layer=layer,
        )
    expert = DenseMlpSpec(
        intermediate_size=moe.expert_intermediate_size,
        is_gated=moe.is_gated,
        has_bias=moe.has_expert_bias,
    )
    _dense_mlp(
        b,
        f"{p}.experts.0",
        h,
        expert,
        layer,
        n,
        role or Role.ROUTED_EXPERTS,
        copies=moe.num_experts,
    )
    if moe.shared_intermediate_size:
        shared = DenseMlpSpec(intermediate_size=moe.shared_intermediate_size, is_gated=moe.is_gated)
        _dense_mlp(b, f"{p}.{n['shared']}", h, shared, layer, n, role or Role.SHARED_EXPERTS)
    if moe.has_shared_gate:
        b.linear(
            f"{p}.shared_expert_gate", h, 1, role=router_role, shard=Shard.REPLICATED, layer=layer
        )


def _layer(
    b: TensorBuilder,
    p: str,
    h: int,
    layer: LayerSpec,
    index: int | None,
    n: dict[str, str],
    role_override: Role | None = None,
    per_layer_input_size: int = 0,
) -> None:
    for mixer in layer.mixers:  # Falcon-H1: attention and Mamba-2 side by side
        if isinstance(mixer, AttentionSpec):
            _attention(b, f"{p}.{n['attn']}", h, mixer, index, role_override or Role.ATTENTION)
        elif isinstance(mixer, MlaSpec):
            _mla(b, f"{p}.{n['attn']}", h, mixer, index, role_override or Role.ATTENTION)
        elif isinstance(mixer, LinearAttentionSpec):
            _gated_deltanet(b, f"{p}.{n['linear_attn']}", h, mixer, index, n)
        elif isinstance(mixer, MambaSpec):
            _mamba(b, f"{p}.{n['mamba']}", h, mixer, index)
    if isinstance(layer.mlp, MoeSpec):
        moe_prefix = f"{p}.{n['moe']}" if n["moe"] else p  # Gemma 4: router, experts in the layer
        _moe(b, moe_prefix, h, layer.mlp, index, n, role_override)
    elif isinstance(layer.mlp, DenseMlpSpec):
        _dense_mlp(b, f"{p}.{n['mlp']}", h, layer.mlp, index, n, role_override or Role.MLP)
    b.param(f"{p}.norms", layer.num_norms * h, role=Role.NORM, shard=Shard.REPLICATED, layer=index)
    if layer.has_layer_scalar:
        b.param(f"{p}.layer_scalar", 1, role=Role.NORM, shard=Shard.REPLICATED, layer=index)
    if per_layer_input_size:
        per_layer_input(b, p, h, per_layer_input_size, index)


@lru_cache(maxsize=256)
def weight_tensors(spec: ModelSpec) -> tuple[WeightTensor, ...]:
    """All weight tensors of the language model, its MTP layers and its vision tower."""
    n = module_names(spec.naming)
    h = spec.hidden_size
    b = TensorBuilder()
    prefix = spec.module_prefix
    b.param(
        f"{prefix}embed_tokens",
        spec.vocab_size * h,
        role=Role.EMBEDDING,
        shard=Shard.VOCAB,
        layer=None,
    )
    if spec.per_layer_input_size:
        per_layer_embedding(b, spec)
    for index, layer in enumerate(spec.layers):
        p = f"{prefix}{n['layers']}.{index}"
        _layer(b, p, h, layer, index, n, per_layer_input_size=spec.per_layer_input_size)
    b.param(f"{prefix}norm", h, role=Role.NORM, shard=Shard.REPLICATED, layer=None)
    if not spec.tie_word_embeddings:
        b.linear("lm_head", h, spec.vocab_size, role=Role.LM_HEAD, shard=Shard.VOCAB, layer=None)
    for index, layer in enumerate(spec.mtp_layers):
        p = f"mtp.layers.{index}"
        b.linear(f"{p}.eh_proj", 2 * h, h, role=Role.MTP, shard=Shard.REPLICATED, layer=None)
        b.param(f"{p}.mtp_norms", 3 * h, role=Role.MTP, shard=Shard.REPLICATED, layer=None)
        _layer(b, p, h, layer, None, n, role_override=Role.MTP)
    if spec.vision is not None:
        b.param("visual", spec.vision.num_params, role=Role.VISION, shard=Shard.COLUMN, layer=None)
    return tuple(b.tensors)
