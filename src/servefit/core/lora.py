"""LoRA serving as vLLM allocates it: ``--enable-lora --max-loras N --max-lora-rank R``.

vLLM wraps every linear layer of the model (``get_supported_lora_modules``: "In vLLM, all
linear layers support LoRA"), the input embedding and the LM head (the model's
``embedding_modules``), and gives each wrapper ``max_loras`` zeroed slots at load time, in
the LoRA dtype (the model's with ``--lora-dtype auto``), before the KV cache is sized: the
slots are model memory ("Model loading took"). Read in vLLM 0.32 ``vllm/lora/layers/``:

- a column-parallel linear (q/k/v, gate/up, each slice its own stack):
  ``lora_a`` = ``max_loras x R x in`` per slice, ``lora_b`` = ``max_loras x out/TP x R``;
- a row-parallel linear (o, down): ``lora_a`` = ``max_loras x R x in/TP``,
  ``lora_b`` = ``max_loras x out x R``; a replicated one: ``R x in`` and ``out x R``;
- the embedding: ``max_loras x vocab x R`` and ``max_loras x hidden x R``;
- the LM head: ``max_loras x R x hidden`` and ``max_loras x vocab x R``.

Routed experts take LoRA through the fused-MoE wrapper, whose slots servefit does not lay
out: a MoE model with ``--enable-lora`` is refused. The adapters' effect on speed (the
shrink/expand kernels of every wrapped layer) is not modelled."""

from __future__ import annotations

from dataclasses import dataclass

from servefit.core.model_spec import ModelSpec
from servefit.core.weight_inventory import Role, Shard
from servefit.core.weight_layers import weight_tensors
from servefit.errors import InvalidArgumentError
from servefit.units import dtype_bytes

# vllm/config/lora.py MaxLoRARanks (v0.32)
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_MAX_LORA_RANK = 16
DEFAULT_MAX_LORAS = 1
# the decoder's linear layers (MTP layers are loaded only for speculation; a vision tower's
# layers take LoRA only with --enable-tower-connector-lora)
_WRAPPED_ROLES = frozenset({Role.ATTENTION, Role.MIXER, Role.MLP, Role.SHARED_EXPERTS, Role.ROUTER})


@dataclass(frozen=True, slots=True, kw_only=True)
class LoraSettings:
    """``--max-loras`` and ``--max-lora-rank`` of a deployment with ``--enable-lora``."""

    max_loras: int = DEFAULT_MAX_LORAS
    max_lora_rank: int = DEFAULT_MAX_LORA_RANK

    def __post_init__(self) -> None:
        if self.max_loras < 1:
            raise InvalidArgumentError(f"--max-loras must be at least 1, got {self.max_loras}")
        if self.max_lora_rank not in MAX_LORA_RANKS:
            raise InvalidArgumentError(
                f"--max-lora-rank {self.max_lora_rank}: vLLM takes "
                f"{', '.join(map(str, MAX_LORA_RANKS))}"
            )

    def describe(self) -> str:
        return f"{self.max_loras} LoRA slot(s) of rank {self.max_lora_rank}"


def lora_settings(
    enabled: bool, max_loras: int | None, max_lora_rank: int | None
) -> LoraSettings | None:
    """``--enable-lora`` and its sizes as vLLM takes them (the sizes need the switch)."""
    if not enabled:
        if max_loras is not None or max_lora_rank is not None:
            raise InvalidArgumentError("--max-loras and --max-lora-rank need --enable-lora")
        return None
    return LoraSettings(
        max_loras=DEFAULT_MAX_LORAS if max_loras is None else max_loras,
        max_lora_rank=DEFAULT_MAX_LORA_RANK if max_lora_rank is None else max_lora_rank,
    )


def lora_bytes_per_gpu(spec: ModelSpec, lora: LoraSettings, tp: int) -> int:
    """The LoRA slots one GPU holds (one pipeline stage: the whole model)."""
    if spec.is_moe:
        raise InvalidArgumentError(
            f"--enable-lora on {spec.name}: the routed experts take LoRA through vLLM's "
            "fused-MoE wrapper, whose slots servefit does not lay out; plan without it"
        )
    rank, slots = lora.max_lora_rank, lora.max_loras
    elements = 0
    for t in weight_tensors(spec):
        if t.role in (Role.EMBEDDING, Role.LM_HEAD) or not t.is_linear:
            continue
        if t.role not in _WRAPPED_ROLES:
            continue
        copies = t.num_copies
        if t.shard is Shard.ROW:
            elements += copies * rank * (t.in_features // tp + t.out_features)
        elif t.shard in (Shard.COLUMN, Shard.KV_HEADS):
            elements += copies * rank * (t.in_features + t.out_features // tp)
        else:  # replicated (routers, small projections)
            elements += copies * rank * (t.in_features + t.out_features)
    h, vocab = spec.hidden_size, spec.vocab_size
    elements += rank * (vocab + h)  # the input embedding's slots
    elements += rank * (h + vocab)  # the LM head's
    return int(slots * elements * dtype_bytes(spec.dtype))
