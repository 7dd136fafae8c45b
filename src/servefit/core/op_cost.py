"""The value types of the operator model: one step's shape and one operator's cost row.

:class:`StepShape` is what one engine step computes (decoding sequences and prefill chunks);
:class:`OpCost` is one operator of that step on one GPU, in the few numbers the roofline
needs (:mod:`servefit.core.roofline`); :func:`total` sums rows. The conventions the rows
follow are in :mod:`servefit.core.ops`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from servefit.errors import InvalidArgumentError


class OpKind(StrEnum):
    GEMM = "gemm"  # weight-stationary matrix multiplies (projections, MLP, experts, LM head)
    ATTENTION = "attention"  # softmax attention over the cached context
    STATE = "state"  # linear attention / Mamba recurrent state update
    ELEMENTWISE = "elementwise"  # norms, residuals, activations, rotary, MoE permutation
    COMM = "comm"  # tensor/expert-parallel collectives, pipeline transfers


@dataclass(frozen=True, slots=True, kw_only=True)
class OpCost:
    """One operator of one step on one GPU (already multiplied by its number of layers)."""

    name: str
    kind: OpKind
    compute_dtype: str  # the dtype the kernel computes in, before hardware fallback
    flops: float = 0.0
    weight_bytes: float = 0.0
    activation_in_bytes: float = 0.0
    activation_out_bytes: float = 0.0
    kv_read_bytes: float = 0.0
    kv_write_bytes: float = 0.0
    comm_bytes: float = 0.0  # payload per collective x collectives
    num_collectives: int = 0
    num_moe_layers: int = 0  # routed-expert rows: MoE layers (routing, sorting, permutation)
    is_low_bit: bool = False  # weights stored in fewer than 8 bits (dequantized on the fly)
    link: str = ""  # "intra" (NVLink/PCIe between TP ranks) or "inter" (between nodes)

    @property
    def memory_bytes(self) -> float:
        return (
            self.weight_bytes
            + self.activation_in_bytes
            + self.activation_out_bytes
            + self.kv_read_bytes
            + self.kv_write_bytes
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StepShape:
    """What one engine step computes: decoding sequences (their cached tokens) and prefill
    chunks (new tokens, tokens already cached before the chunk)."""

    decode_contexts: tuple[int, ...] = ()
    prefill_chunks: tuple[tuple[int, int], ...] = ()
    num_finishing_prefills: int | None = None  # prefills that sample a token (default: all)
    # tokens each decoding sequence runs: 1, or 1 + k when speculative decoding verifies k
    # drafts (every one sampled; its attention reads the sequence's keys once)
    decode_query_tokens: int = 1
    _memo: dict[int | None, int] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if self.decode_contexts and min(self.decode_contexts) < 0:  # min(): in C, per step
            raise InvalidArgumentError("decode contexts must be >= 0")
        for n, c in self.prefill_chunks:  # a loop: any() over a generator costs more here
            if n <= 0 or c < 0:
                raise InvalidArgumentError("prefill chunks need > 0 new tokens and >= 0 cached")

    def decode_keys(self, window: int | None) -> int:
        """Keys the decoding sequences attend (and read): sum of min(context + 1, W)."""
        keys = self._memo.get(window)
        if keys is None:
            if window is None:
                keys = sum(self.decode_contexts) + len(self.decode_contexts)
            else:
                keys = sum(min(c + 1, window) for c in self.decode_contexts)
            self._memo[window] = keys
        return keys

    @property
    def num_tokens(self) -> int:
        return len(self.decode_contexts) * self.decode_query_tokens + sum(
            n for n, _ in self.prefill_chunks
        )

    @property
    def num_seqs(self) -> int:
        return len(self.decode_contexts) + len(self.prefill_chunks)

    @property
    def num_sampled(self) -> int:
        finishing = self.num_finishing_prefills
        return len(self.decode_contexts) * self.decode_query_tokens + (
            len(self.prefill_chunks) if finishing is None else finishing
        )


def decode_step(batch: int, context: int) -> StepShape:
    """``batch`` sequences decoding one token each, all with ``context`` cached tokens."""
    return StepShape(decode_contexts=(context,) * batch)


def prefill_step(new_tokens: int, cached_tokens: int = 0) -> StepShape:
    return StepShape(prefill_chunks=((new_tokens, cached_tokens),))


def total(rows: Iterable[OpCost]) -> OpCost:
    """All rows summed into one (for "bytes per token" style summaries)."""
    flops = wb = ai = ao = kr = kw = cb = 0.0
    n = 0
    for r in rows:
        flops += r.flops
        wb += r.weight_bytes
        ai += r.activation_in_bytes
        ao += r.activation_out_bytes
        kr += r.kv_read_bytes
        kw += r.kv_write_bytes
        cb += r.comm_bytes
        n += r.num_collectives
    return OpCost(
        name="total",
        kind=OpKind.GEMM,
        compute_dtype="mixed",
        flops=flops,
        weight_bytes=wb,
        activation_in_bytes=ai,
        activation_out_bytes=ao,
        kv_read_bytes=kr,
        kv_write_bytes=kw,
        comm_bytes=cb,
        num_collectives=n,
    )
