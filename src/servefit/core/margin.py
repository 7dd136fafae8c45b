"""How far a plan is from the edge, against how wrong its KV-cache figure can be.

Every capacity verdict is a comparison: the KV cache holds ``held`` requests of some length
and ``needed`` must fit at once (one request of max-model-len for vLLM to start; the
workload's requests in flight; the ``--target-concurrency``). The KV cache grows with its
memory, so the plan is ``1 - needed / held`` of its KV cache from the edge, in GiB and in
tokens. servefit's KV-cache tokens are off by up to the band's p90 on the fidelity corpus
(:mod:`servefit.core.error_band`); a plan closer to the edge than that is *at the edge*: the
engine may start or not, and the verdict says so instead of a bare FITS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servefit.core.error_band import ErrorBand
from servefit.units import GIB_BYTES


@dataclass(frozen=True, slots=True, kw_only=True)
class Constraint:
    """One comparison a verdict makes: ``needed`` requests of ``tokens`` must fit, the KV
    cache holds ``held``."""

    what: str  # "one request of max-model-len 32,768 tokens"
    held: float
    needed: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Margin:
    """The tightest constraint's distance from the edge, and the error it is judged against."""

    constraint: Constraint
    kv_cache_bytes: int
    kv_cache_tokens: int
    band: ErrorBand | None  # None: the KV figure of this group is unvalidated

    @property
    def relative(self) -> float:
        """Share of the KV cache to spare (negative: short by that share)."""
        c = self.constraint
        return 1 - c.needed / c.held if c.held > 0 else -math.inf

    @property
    def bytes(self) -> int:
        return int(self.relative * self.kv_cache_bytes) if self.constraint.held > 0 else 0

    @property
    def tokens(self) -> int:
        return int(self.relative * self.kv_cache_tokens) if self.constraint.held > 0 else 0

    @property
    def is_at_edge(self) -> bool:
        """Closer to the edge (either side) than the measured p90 error of the KV figure."""
        return self.band is not None and abs(self.relative) <= self.band.p90_rel

    def describe(self) -> str:
        """``6.2% of the KV cache to spare (1.48 GiB, 10,784 tokens) for one request of ...``."""
        side = "to spare" if self.relative >= 0 else "short"
        share = abs(self.relative)
        amount = (f"{share:.2%}" if share < 0.01 else f"{share:.1%}") + (
            f" of the KV cache {side} ({abs(self.bytes) / GIB_BYTES:,.2f} "
            f"GiB, {abs(self.tokens):,} tokens) for {self.constraint.what}"
        )
        if self.band is None:
            return f"{amount}; servefit's KV figure is unvalidated on this hardware"
        judged = "inside" if self.is_at_edge else "outside"
        return (
            f"{amount}; {judged} servefit's measured KV error here "
            f"(+-{self.band.p90_rel:.1%} p90 over {self.band.records} start-up logs)"
        )


def tightest_margin(
    constraints: list[Constraint], kv_cache_bytes: int, kv_cache_tokens: int, band: ErrorBand | None
) -> Margin | None:
    """The margin of the tightest constraint (the least ``held / needed``); None when the
    KV cache has no memory at all (then the verdict is a failure, no margin to speak of)."""
    usable = [c for c in constraints if c.needed > 0]
    if not usable or kv_cache_bytes <= 0:
        return None
    tightest = min(usable, key=lambda c: c.held / c.needed)
    return Margin(
        constraint=tightest,
        kv_cache_bytes=kv_cache_bytes,
        kv_cache_tokens=kv_cache_tokens,
        band=band,
    )
