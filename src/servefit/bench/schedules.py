"""When to send: closed-loop concurrency, or open-loop arrivals (Poisson, or gamma-bursty)
with an optional cap on requests in flight, at a fixed rate or on a linear ramp. Seeded: the
same arguments give the same times.

A ramp (``--request-rate R0 --ramp-to R1 --ramp-duration-s D``) is an inhomogeneous process of
rate ``r(t) = R0 + (R1 - R0) t / D`` for ``t < D``, then ``R1``: the arrivals of a unit-rate
process (gamma gaps of mean 1) mapped through the inverse of the cumulative rate
``L(t) = R0 t + (R1 - R0) t^2 / 2D``, so the expected count by time ``t`` is ``L(t)``."""

from __future__ import annotations

import math
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
    ramp_to_per_s: float | None = None  # a linear ramp from rate_per_s to this ...
    ramp_s: float | None = None  # ... over this many seconds, then steady

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
        if (self.ramp_to_per_s is None) != (self.ramp_s is None):
            raise InvalidArgumentError("a ramp needs both --ramp-to and --ramp-duration-s")
        if self.ramp_to_per_s is not None and self.ramp_s is not None:
            if self.rate_per_s is None:
                raise InvalidArgumentError("--ramp-to ramps from --request-rate: give it")
            if not (self.ramp_to_per_s > 0 and self.ramp_s > 0):
                raise InvalidArgumentError("--ramp-to and --ramp-duration-s must be positive")

    @property
    def is_open_loop(self) -> bool:
        return self.rate_per_s is not None or self.is_replay

    def arrival_offsets_s(self, count: int) -> list[float]:
        """Send times (seconds from the start) of ``count`` open-loop arrivals."""
        if self.rate_per_s is None:
            return [0.0] * count
        rng = random.Random(self.seed)
        shape = self.burstiness
        if self.ramp_to_per_s is None or self.ramp_s is None:
            scale = 1.0 / (self.rate_per_s * shape)  # mean interval = 1 / rate
            t, out = 0.0, []
            for _ in range(count):
                out.append(t)
                t += rng.gammavariate(shape, scale)
            return out
        unit, out = 0.0, []  # the unit-rate process's time: the expected count so far
        for _ in range(count):
            out.append(self._ramp_time(unit))
            unit += rng.gammavariate(shape, 1.0 / shape)
        return out

    def _ramp_time(self, expected: float) -> float:
        """The time ``t`` at which the ramp's cumulative rate ``L(t)`` reaches ``expected``."""
        assert self.rate_per_s is not None and self.ramp_to_per_s is not None and self.ramp_s
        r0, r1, d = self.rate_per_s, self.ramp_to_per_s, self.ramp_s
        at_end = (r0 + r1) * d / 2
        if expected >= at_end:
            return d + (expected - at_end) / r1
        a = (r1 - r0) / (2 * d)  # L(t) = a t^2 + r0 t; the root without cancellation
        return 2 * expected / (r0 + math.sqrt(r0 * r0 + 4 * a * expected))

    def describe(self) -> str:
        if self.is_replay:
            return f"trace replay at {1 / self.time_scale:g}x speed"
        if self.rate_per_s is None:
            return f"closed loop, concurrency {self.concurrency}"
        kind = "Poisson" if self.burstiness == 1 else f"gamma (burstiness {self.burstiness:g})"
        cap = f", at most {self.concurrency} in flight" if self.concurrency else ""
        rate = f"at {self.rate_per_s:g}/s"
        if self.ramp_to_per_s is not None and self.ramp_s is not None:
            rate = (
                f"ramping {self.rate_per_s:g}/s to {self.ramp_to_per_s:g}/s over "
                f"{self.ramp_s:g} s, then steady"
            )
        return f"open loop, {kind} arrivals {rate}{cap}"
