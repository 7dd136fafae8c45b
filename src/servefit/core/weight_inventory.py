"""The vocabulary of a model's weight inventory: what one tensor group is and how it shards.

:class:`WeightTensor` is one tensor group (a linear layer, possibly ``num_copies`` experts of
one shape, or a non-linear parameter), with its checkpoint module name, its :class:`Role`
and how tensor parallelism splits it (:class:`Shard`). :data:`NAMING` holds the module names
that differ between checkpoint families, and :class:`TensorBuilder` collects tensors as the
layer walkers of :mod:`servefit.core.weight_layers` emit them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Shard(StrEnum):
    COLUMN = "column"  # split along the output dim
    ROW = "row"  # split along the input dim
    KV_HEADS = "kv_heads"  # split by KV head, replicated below one head per rank
    VOCAB = "vocab"  # split along the (padded) vocabulary
    REPLICATED = "replicated"


class Role(StrEnum):
    EMBEDDING = "embedding"
    LM_HEAD = "lm_head"
    ATTENTION = "attention"
    MIXER = "mixer"  # linear attention / Mamba projections and state parameters
    MLP = "mlp"
    ROUTED_EXPERTS = "routed_experts"
    SHARED_EXPERTS = "shared_experts"
    ROUTER = "router"
    NORM = "norm"
    VISION = "vision"
    MTP = "mtp"


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightTensor:
    """One tensor group: a linear layer (``in_features`` x ``out_features``, ``num_copies``
    experts of that shape) or a non-linear parameter (norm, conv, bias, embedding)."""

    name: str
    role: Role
    shard: Shard
    num_params: int
    in_features: int = 0
    out_features: int = 0
    num_copies: int = 1
    is_linear: bool = False
    layer_index: int | None = None  # decoder layer; None for embedding, head, final norm, vision
    shard_units: int = 0  # for KV_HEADS: the number of KV heads
    dtype: str | None = None  # stored in this dtype whatever the model's (Mamba's float32 A)
    # False for memory the engine fills from another tensor (Gemma 4's V slot, loaded from
    # k_proj): loaded and computed, but not a parameter of the checkpoint
    in_checkpoint: bool = True


# Module names by family: the parts that differ between checkpoints.
NAMING: dict[str, dict[str, str]] = {
    "default": {
        "layers": "layers",
        "attn": "self_attn",
        "linear_attn": "linear_attn",
        "mamba": "mamba",
        "mlp": "mlp",
        "moe": "mlp",
        "gate": "gate_proj",
        "up": "up_proj",
        "down": "down_proj",
        "router": "gate",
        "shared": "shared_expert",
        "gdn_in": "in_proj_qkvz",
        "gdn_ba": "in_proj_ba",
    },
    "qwen3_5": {"gdn_in": "in_proj_qkv", "gdn_ba": "in_proj_b"},
    "mixtral": {"moe": "block_sparse_moe", "gate": "w1", "down": "w2", "up": "w3"},
    "deepseek": {"shared": "shared_experts"},
    "gpt_oss": {"router": "router"},
    "llama4": {"moe": "feed_forward", "mlp": "feed_forward", "router": "router"},
    "jamba": {"mamba": "mamba", "mlp": "feed_forward", "moe": "feed_forward", "router": "router"},
    "nemotron_h": {"attn": "mixer", "mamba": "mixer", "mlp": "mixer", "moe": "mixer"},
    "mamba": {"mamba": "mixer"},
    "falcon_h1": {"mamba": "mamba", "mlp": "feed_forward"},
    # Gemma 4: the dense MLP runs beside the experts (modelled as their shared expert), the
    # router and experts sit directly in the layer (vLLM 0.32 gemma4.py Gemma4DecoderLayer)
    "gemma4": {"moe": "", "router": "router.proj", "shared": "mlp"},
    "granitemoehybrid": {
        "mamba": "mamba",
        "moe": "block_sparse_moe",
        "mlp": "shared_mlp",
        "router": "router.layer",
        "shared": "shared_mlp",
    },
}


def module_names(naming: str) -> dict[str, str]:
    return {**NAMING["default"], **NAMING.get(naming, {})}


class TensorBuilder:
    def __init__(self) -> None:
        self.tensors: list[WeightTensor] = []

    def linear(
        self,
        name: str,
        in_features: int,
        out_features: int,
        *,
        role: Role,
        shard: Shard,
        layer: int | None,
        copies: int = 1,
        bias: bool = False,
        shard_units: int = 0,
        in_checkpoint: bool = True,
    ) -> None:
        self.tensors.append(
            WeightTensor(
                name=name,
                role=role,
                shard=shard,
                num_params=in_features * out_features * copies,
                in_features=in_features,
                out_features=out_features,
                num_copies=copies,
                is_linear=True,
                layer_index=layer,
                shard_units=shard_units,
                in_checkpoint=in_checkpoint,
            )
        )
        if bias:
            bias_shard = Shard.REPLICATED if shard is Shard.ROW else shard
            self.param(
                f"{name}.bias",
                out_features * copies,
                role=role,
                shard=bias_shard,
                layer=layer,
                shard_units=shard_units,
            )

    def param(
        self,
        name: str,
        count: int,
        *,
        role: Role,
        shard: Shard,
        layer: int | None,
        shard_units: int = 0,
        dtype: str | None = None,
    ) -> None:
        if count:
            self.tensors.append(
                WeightTensor(
                    name=name,
                    role=role,
                    shard=shard,
                    num_params=count,
                    layer_index=layer,
                    shard_units=shard_units,
                    dtype=dtype,
                )
            )
