"""Per-family parser of Hugging Face configs: NVIDIA's Nemotron-NAS (``nemotron-nas``,
``DeciLMForCausalLM``: Llama-3.3-Nemotron-Super-49B, Llama-3.1-Nemotron-Ultra-253B).

A Llama whose layers a neural architecture search made unequal: ``block_configs`` gives each
layer its own attention (``n_heads_in_group`` query heads per KV head, or ``no_op``: no
attention, no KV cache) and its own MLP (``ffn_mult`` or ``intermediate_size``, or
``no_op``). Read as vLLM 0.32 builds it (``vllm/model_executor/models/nemotron_nas.py``,
``DeciLMDecoderLayer.__init__``); fields vLLM does not build (a linear replacement, a
window, sink tokens, sparsity) are refused rather than ignored.

Pure: takes dictionaries, returns values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from servefit.core.hf_fields import Fields, build_spec, checked_int
from servefit.core.hf_values import show
from servefit.core.model_spec import AttentionSpec, DenseMlpSpec, LayerSpec, ModelSpec
from servefit.errors import ConfigError, UnsupportedArchitectureError

# DeciLM's MLP width from ffn_mult (vLLM 0.32 nemotron_nas.py _ffn_mult_to_intermediate_size):
# int(2 x ffn_mult x hidden / 3), rounded up to a multiple of 256 (_find_multiple)
FFN_MULT_ROUNDING = 256
FFN_MULT_MAX = 64.0  # published multipliers are 0.5 to 39 (Ultra-253B)
# block_configs fields vLLM 0.32 does not build: a set value would be silently ignored
UNBUILT_FIELDS = ("window_length", "num_sink_tokens", "sparsify")


def ffn_mult_to_intermediate_size(ffn_mult: float, hidden_size: int) -> int:
    """Worked example (Super-49B, hidden 8,192): ffn_mult 5.25 -> 28,672; 2.625 -> 14,336;
    1.3125 -> 7,168; 0.5 -> int(2,730.67) = 2,730 -> 2,816."""
    size = int(2 * ffn_mult * hidden_size / 3)
    return (
        size
        if size % FFN_MULT_ROUNDING == 0
        else size + FFN_MULT_ROUNDING - size % FFN_MULT_ROUNDING
    )


def _block(value: Any, where: str, part: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: {part} must be an object, got {show(value)}")
    for name in UNBUILT_FIELDS:
        if value.get(name) not in (None, False):
            raise UnsupportedArchitectureError(
                f"{where}: {part}.{name} is {show(value.get(name))}: vLLM 0.32's DeciLM layer "
                "does not build it, so servefit cannot say what vLLM would serve"
            )
    if value.get("replace_with_linear") not in (None, False):
        raise UnsupportedArchitectureError(
            f"{where}: {part}.replace_with_linear is true: vLLM 0.32's DeciLM layer has no "
            "linear replacement (it builds the full block), so this checkpoint does not load"
        )
    return value


def _flag(block: Mapping[str, Any], where: str, name: str) -> bool:
    value = block.get(name, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: {name} must be true or false, got {show(value)}")
    return value


def _ffn_mult(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: ffn_mult must be a number, got {show(value)}")
    if not 0 < value <= FFN_MULT_MAX:
        raise ConfigError(
            f"{where}: ffn_mult must be in (0, {FFN_MULT_MAX:g}], got {show(value)} "
            "(published multipliers are 0.5 to 39)"
        )
    return float(value)


def _attention(f: Fields, block: Mapping[str, Any], where: str) -> AttentionSpec:
    heads = f.int("num_attention_heads")
    group = checked_int(where, "n_heads_in_group", block.get("n_heads_in_group"))
    if group < 1 or heads % group:
        raise ConfigError(
            f"{where}: n_heads_in_group {group} must divide num_attention_heads {heads}"
        )
    h = f.int("hidden_size")
    bias = f.bool("attention_bias") or f.bool("bias")  # vLLM: either enables q/k/v/o biases
    qkv_bias = f.bool("qkv_bias", default=bias)
    return AttentionSpec(
        num_q_heads=heads,
        num_kv_heads=heads // group,  # vLLM: num_attention_heads // n_heads_in_group
        head_dim=f.optional_int("head_dim") or h // heads,
        has_qkv_bias=qkv_bias,
        has_o_bias=bias,
    )


def _mlp(f: Fields, block: Mapping[str, Any], where: str) -> DenseMlpSpec:
    if block.get("ffn_mult") is not None:
        size = ffn_mult_to_intermediate_size(
            _ffn_mult(block["ffn_mult"], where), f.int("hidden_size")
        )
    else:
        size = checked_int(where, "intermediate_size", block.get("intermediate_size"))
    act = block.get("hidden_act") or f.text("hidden_act", default="silu")
    if act != "silu":
        raise UnsupportedArchitectureError(
            f"{where}: hidden_act {act!r}: servefit plans DeciLM's gated SiLU MLP only"
        )
    return DenseMlpSpec(intermediate_size=size, has_bias=f.bool("mlp_bias"))


def parse_nemotron_nas(f: Fields, name: str) -> ModelSpec:
    """Nemotron-NAS: one layer per ``block_configs`` entry; a no-op attention keeps no KV cache
    and a no-op MLP no weights (and neither its RMSNorm)."""
    n = f.int("num_hidden_layers")
    blocks = f.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) != n:
        raise ConfigError(
            f"{f.where}: block_configs must be a list of {n} layer blocks (num_hidden_layers), "
            f"got {show(blocks)}"
        )
    f.optional_int("num_key_value_heads")  # null in the published configs: per layer instead
    layers = []
    for i, raw in enumerate(blocks):
        where = f"{f.where}: block_configs[{i}]"
        block = _block(raw, where, "block")
        attention = _block(block.get("attention"), where, "attention")
        ffn = _block(block.get("ffn"), where, "ffn")
        has_attention = not _flag(attention, where, "no_op")
        has_mlp = not _flag(ffn, where, "no_op")
        layers.append(
            LayerSpec(
                mixer=_attention(f, attention, where) if has_attention else None,
                mlp=_mlp(f, ffn, where) if has_mlp else None,
                num_norms=int(has_attention) + int(has_mlp),  # input / post-attention norms
            )
        )
    if not any(layer.mixer for layer in layers):
        raise ConfigError(f"{f.where}: every block_configs attention is no_op: no KV cache")
    return build_spec(f, name=name, layers=layers, tie_default=False)
