"""The weights of Gemma 4's per-layer inputs (PLE), for :mod:`servefit.core.weight_layers`.

Besides the token embedding, Gemma 4 looks every token up in a second table that holds a
small input for each decoder layer, adds a projection of the hidden state to it, and feeds
each layer its slice through a gate and a projection back to the hidden width. The table is
large (at transformers' Gemma4TextConfig defaults, 262,144 tokens x 256 values: 67 M
parameters per decoder layer), so it is counted exactly.
"""

from __future__ import annotations

from servefit.core.model_spec import ModelSpec
from servefit.core.weight_inventory import Role, Shard, TensorBuilder


def per_layer_input(b: TensorBuilder, p: str, h: int, size: int, index: int | None) -> None:
    """A layer's share of Gemma 4's per-layer inputs: a gate from the hidden state and a
    projection back, both replicated (vLLM 0.32 gemma4.py Gemma4DecoderLayer:
    ``per_layer_input_gate``, ``per_layer_projection``: ReplicatedLinear; its norm is one of
    the layer's ``num_norms``)."""
    for name, n_in, n_out in (
        ("per_layer_input_gate", h, size),
        ("per_layer_projection", size, h),
    ):
        b.linear(f"{p}.{name}", n_in, n_out, role=Role.MLP, shard=Shard.REPLICATED, layer=index)


def per_layer_embedding(b: TensorBuilder, spec: ModelSpec) -> None:
    """Gemma 4's per-layer input table and its projection (vLLM 0.32 gemma4.py Gemma4Model:
    ``embed_tokens_per_layer`` a VocabParallelEmbedding of vocab_size_per_layer_input x
    (num_layers x hidden_size_per_layer_input); ``per_layer_model_projection`` a
    ColumnParallelLinear from hidden_size to that width; ``per_layer_projection_norm``)."""
    width = spec.num_layers * spec.per_layer_input_size
    prefix = spec.module_prefix
    b.param(
        f"{prefix}embed_tokens_per_layer",
        spec.per_layer_input_vocab_size * width,
        role=Role.EMBEDDING,
        shard=Shard.VOCAB,
        layer=None,
    )
    b.linear(
        f"{prefix}per_layer_model_projection",
        spec.hidden_size,
        width,
        role=Role.MLP,
        shard=Shard.COLUMN,
        layer=None,
    )
    b.param(
        f"{prefix}per_layer_projection_norm",
        spec.per_layer_input_size,
        role=Role.NORM,
        shard=Shard.REPLICATED,
        layer=None,
    )
