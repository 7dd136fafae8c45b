"""When to send: closed-loop concurrency, or open-loop arrivals (Poisson, or gamma-bursty)
with an optional cap on requests in flight. Seeded: the same arguments give the same times."""

from __future__ import annotations

import random
from dataclasses import dataclass

from servefit.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    concurrency: int | None = None  # closed loop (or, with a rate, the cap on requests in flight)
    rate_per_s: float | None = None  # open loop: mean arrivals per second
    burstiness: float = 1.0  # gamma shape of inter-arrival times; 1 = Poisson, < 1 burstier
    seed: int = 0
    is_replay: bool = False  # send at the dataset's own timestamps (trace replay)
    time_scale: float = 1.0  # replay: 0.5 = twice as fast

    def __post_init__(self) -> None:
        if self.is_replay:
            if self.time_scale <= 0:
                raise InvalidArgumentError("--time-scale must be positive")
            return
        if self.concurrency is None and self.rate_per_s is None:
            raise InvalidArgumentError("give --concurrency, --request-rate, or both")
        if self.concurrency is not None and self.concurrency < 1:
            raise InvalidArgumentError("--concurrency must be at least 1")
        if self.rate_per_s is not None and self.rate_per_s <= 0:
            raise InvalidArgumentError("--request-rate must be positive")
        if self.burstiness <= 0:
            raise InvalidArgumentError("--burstiness must be positive")

    @property
    def is_open_loop(self) -> bool:
        return self.rate_per_s is not None or self.is_replay

    def arrival_offsets_s(self, count: int) -> list[float]:
        """Send times (seconds from the start) of ``count`` open-loop arrivals."""
        if self.rate_per_s is None:
            return [0.0] * count
        rng = random.Random(self.seed)
        shape = self.burstiness
        scale = 1.0 / (self.rate_per_s * shape)  # mean interval = 1 / rate
        t, out = 0.0, []
        for _ in range(count):
            out.append(t)
            t += rng.gammavariate(shape, scale)
        return out

    def describe(self) -> str:
        if self.is_replay:
            return f"trace replay at {1 / self.time_scale:g}x speed"
        if self.rate_per_s is None:
            return f"closed loop, concurrency {self.concurrency}"
        kind = "Poisson" if self.burstiness == 1 else f"gamma (burstiness {self.burstiness:g})"
        cap = f", at most {self.concurrency} in flight" if self.concurrency else ""
        return f"open loop, {kind} arrivals at {self.rate_per_s:g}/s{cap}"
