"""Per-family parser of Hugging Face configs: Google's Gemma 4 (``gemma4_text``, and the text
part of ``gemma4``: ``Gemma4ForCausalLM``, ``Gemma4ForConditionalGeneration``).

Read as vLLM 0.32 builds it (``vllm/model_executor/models/gemma4.py``) from the config
transformers 5.19 makes of the file (``models/gemma4/configuration_gemma4.py``,
``Gemma4TextConfig.__post_init__``):

- ``layer_types`` (default: every 6th layer full attention), the last layer forced to full
  attention; sliding layers see ``sliding_window`` tokens (``sliding_window // 2 + 1`` when
  ``use_bidirectional_attention`` is "all");
- full-attention layers have their own head width and KV heads: ``per_layer_config`` when
  the file has it, else ``global_head_dim`` (default 512) and, when ``attention_k_eq_v``,
  ``num_global_key_value_heads`` (``Gemma4DecoderLayer``: ``config.per_layer_config[i]``);
- ``attention_k_eq_v``: non-shared full-attention layers ship k_proj only, loaded into both
  the K and V shards (``_gemma4_layer_weights_mapper``); the cache still keeps K and V;
- the last ``num_kv_shared_layers`` layers read the KV cache of the last earlier layer of
  their kind (``Gemma4Attention``: ``kv_sharing_target_layer_name``): only q_proj, q_norm
  and o_proj, no cache of their own; with ``use_double_wide_mlp`` their MLP is twice as wide
  (``Gemma4DecoderLayer``: ``layer_idx >= first_kv_shared_layer_idx > 0``);
- ``num_experts`` set: every layer adds a mixture of experts beside its dense MLP (modelled
  as the experts' always-on shared expert), top ``top_k_experts`` of ``num_experts`` experts
  of ``moe_intermediate_size``, a router with two scale vectors and three more norms;
- ``hidden_size_per_layer_input`` > 0: per-layer inputs (a second embedding table of
  ``vocab_size_per_layer_input`` rows, :mod:`servefit.core.weight_per_layer`);
- every layer carries a ``layer_scalar``; embeddings are tied; one RoPE table per layer
  kind (proportional RoPE caches the whole head, ``Gemma4RotaryEmbedding``).

Pure: takes dictionaries, returns values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from servefit.core.hf_fields import (
    HEAD_DIM,
    HEADS,
    Fields,
    build_spec,
    checked_int,
    layer_types_of,
    window_of,
)
from servefit.core.hf_values import checked_fraction, show
from servefit.core.model_spec import (
    AttentionSpec,
    DenseMlpSpec,
    LayerSpec,
    Mlp,
    ModelSpec,
    MoeSpec,
)
from servefit.errors import ConfigError, UnsupportedArchitectureError

SLIDING, FULL = "sliding_attention", "full_attention"
# transformers 5.19 Gemma4TextConfig.__post_init__: "sliding_window_pattern = 6  # by default
# 5:1" when layer_types is absent, and global_head_dim = kwargs.pop("global_head_dim", 512)
GEMMA4_DEFAULT_SLIDING_PATTERN = 6
GEMMA4_DEFAULT_GLOBAL_HEAD_DIM = 512
# Norms of width hidden_size per layer (vLLM 0.32 Gemma4DecoderLayer): input, post-attention,
# pre- and post-feedforward; the per-layer input's; the MoE block's three
NORMS = 4
PER_LAYER_INPUT_NORMS = 1
MOE_NORMS = 3
# the per_layer_config overrides vLLM 0.32 reads per layer (Gemma4DecoderLayer.__init__)
PER_LAYER_KEYS = frozenset({"head_dim", "num_key_value_heads"})


def _layer_types(f: Fields, n: int) -> list[str]:
    types = layer_types_of(f, n) or [
        SLIDING if (i + 1) % GEMMA4_DEFAULT_SLIDING_PATTERN else FULL for i in range(n)
    ]
    unknown = sorted({t for t in types if t not in (SLIDING, FULL)})
    if unknown:
        raise ConfigError(f"{f.where}: layer_types has unknown kinds {unknown}")
    return [*types[:-1], FULL]  # Gemma4TextConfig forces the last layer to full attention


def _window(f: Fields) -> int | None:
    window = window_of(f)
    if window and f.text("use_bidirectional_attention") == "all":
        window = window // 2 + 1  # Gemma4TextConfig.__post_init__ (exclusive bounds)
    return window


def _overrides(f: Fields, n: int) -> dict[int, Mapping[str, Any]] | None:
    """``per_layer_config`` by layer index, or None when the file has none."""
    raw = f.get("per_layer_config")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{f.where}: per_layer_config must be an object, got {show(raw)}")
    out: dict[int, Mapping[str, Any]] = {}
    for key, value in raw.items():
        where = f"{f.where}: per_layer_config[{key!r}]"
        if not (isinstance(key, str) and key.isdigit()) or int(key) >= n:
            raise ConfigError(f"{where}: a key must be a layer index below {n}")
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be an object, got {show(value)}")
        extra = sorted(set(value) - PER_LAYER_KEYS)
        if extra:
            raise UnsupportedArchitectureError(
                f"{where} overrides {', '.join(extra)}: servefit plans per-layer head_dim and "
                "num_key_value_heads only"
            )
        out[int(key)] = value
    return out


def _heads(f: Fields, types: list[str]) -> list[tuple[int, int]]:
    """(head_dim, KV heads) of every layer."""
    head_dim = f.int("head_dim")
    num_kv = f.int("num_key_value_heads")
    k_eq_v = f.bool("attention_k_eq_v")
    global_dim = f.int("global_head_dim", default=GEMMA4_DEFAULT_GLOBAL_HEAD_DIM)
    global_kv = f.optional_int("num_global_key_value_heads")
    overrides = _overrides(f, len(types))
    if overrides is None:  # Gemma4TextConfig builds per_layer_config from the global_* fields
        full = (global_dim, global_kv if k_eq_v and global_kv is not None else num_kv)
        return [full if t == FULL else (head_dim, num_kv) for t in types]
    heads = []
    for i in range(len(types)):
        o = overrides.get(i, {})
        where = f"{f.where}: per_layer_config[{i}]"
        heads.append(
            (
                checked_int(where, "head_dim", o.get("head_dim", head_dim), HEAD_DIM),
                checked_int(
                    where, "num_key_value_heads", o.get("num_key_value_heads", num_kv), HEADS
                ),
            )
        )
    return heads


def _first_shared(f: Fields, types: list[str]) -> int:
    """The first layer that reads another's KV cache; each shared layer's kind must occur
    before it (vLLM looks the target up with ``prev_layers[::-1].index(kind)``)."""
    n = len(types)
    shared = f.int("num_kv_shared_layers", default=0)
    if shared >= n:
        raise ConfigError(
            f"{f.where}: num_kv_shared_layers ({shared}) must be below num_hidden_layers ({n}): "
            "a shared layer reads the cache of an earlier, unshared one"
        )
    first = n - shared
    orphans = sorted(set(types[first:]) - set(types[:first]))
    if orphans:
        raise ConfigError(
            f"{f.where}: the shared layers include {orphans[0]} layers but no earlier layer "
            "is one: vLLM finds no layer to share the KV cache of"
        )
    return first


def _moe(f: Fields, dense_size: int) -> MoeSpec | None:
    f.bool("enable_moe_block")  # vLLM 0.32 builds the block when num_experts is set
    experts = f.optional_int("num_experts")
    if experts is None:  # read all the same: null in a dense model's file
        f.optional_int("moe_intermediate_size")
        f.optional_int("top_k_experts")
        return None
    return MoeSpec(
        num_experts=experts,
        num_experts_per_token=f.int("top_k_experts"),
        expert_intermediate_size=f.int("moe_intermediate_size", "expert_intermediate_size"),
        shared_intermediate_size=dense_size,  # the dense MLP beside the experts
        has_router_scales=True,
    )


def _rope_dims(f: Fields, types: list[str], heads: list[tuple[int, int]]) -> tuple[int, ...]:
    """One cos/sin table per distinct RoPE of a layer kind (vLLM's get_rope caches by head
    size, rotary dims and parameters): proportional RoPE (Gemma4RotaryEmbedding) tables the
    whole head, default RoPE head x partial_rotary_factor."""
    params = f.mapping("rope_parameters")
    dims: dict[tuple[str, int], int] = {}
    for t, (head_dim, _) in zip(types, heads, strict=True):
        kind = params.get(t, params)
        if not isinstance(kind, Mapping):
            raise ConfigError(f"{f.where}: rope_parameters.{t} must be an object")
        factor = kind.get("partial_rotary_factor")
        share = (
            1.0 if factor is None else checked_fraction(f.where, "partial_rotary_factor", factor)
        )
        proportional = kind.get("rope_type") == "proportional"
        dims[(t, head_dim)] = head_dim if proportional else int(head_dim * share)
    return tuple(dims.values())


def parse_gemma4(f: Fields, name: str) -> ModelSpec:
    """Gemma 4 text: sliding and full attention of different widths, KV sharing, K = V,
    per-layer inputs, an optional MoE beside every dense MLP."""
    n = f.int("num_hidden_layers")
    types = _layer_types(f, n)
    window = _window(f)
    heads = _heads(f, types)
    first_shared = _first_shared(f, types)
    k_eq_v = f.bool("attention_k_eq_v")
    double_wide = f.bool("use_double_wide_mlp")
    per_layer_input = f.int("hidden_size_per_layer_input", default=0)
    ple_vocab = f.int("vocab_size_per_layer_input", "vocab_size")  # vLLM's getattr fallback
    bias = f.bool("attention_bias")
    act = f.text("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
    layers = []
    for i, t in enumerate(types):
        shared = i >= first_shared
        head_dim, num_kv = heads[i]
        attention = AttentionSpec(
            num_q_heads=f.int("num_attention_heads"),
            num_kv_heads=num_kv,
            head_dim=head_dim,
            sliding_window_tokens=window if t == SLIDING else None,
            has_qkv_bias=bias,
            has_o_bias=bias,
            has_qk_norm=True,
            shares_kv_cache=shared,
            is_k_eq_v=k_eq_v and t == FULL and not shared,
        )
        size = f.int("intermediate_size") * (2 if double_wide and shared and first_shared else 1)
        moe = _moe(f, size)
        mlp: Mlp = moe if moe is not None else DenseMlpSpec(intermediate_size=size)
        norms = NORMS + (PER_LAYER_INPUT_NORMS if per_layer_input else 0)
        layers.append(
            LayerSpec(
                mixer=attention,
                mlp=mlp,
                num_norms=norms + (MOE_NORMS if moe else 0),
                has_layer_scalar=True,
            )
        )
    if act not in ("gelu_pytorch_tanh", "gelu"):
        raise UnsupportedArchitectureError(
            f"{f.where}: hidden_activation {act!r}: Gemma 4's MLP is a gated GELU"
        )
    spec = build_spec(f, name=name, layers=layers, naming="gemma4", tie_default=True)
    return replace(
        spec,
        rope_cache_dims=_rope_dims(f, types, heads),
        per_layer_input_size=per_layer_input,
        per_layer_input_vocab_size=ple_vocab if per_layer_input else 0,
    )
