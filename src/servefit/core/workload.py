"""What is asked of the server: an arrival process crossed with length distributions and a
prefix-sharing structure.

- *Arrivals*: a closed loop of ``concurrency`` users (each sends its next request when the
  previous one finishes; ``vllm bench serve --max-concurrency``) or an open Poisson process
  of ``request_rate_per_s`` (``--request-rate``), optionally capped by ``concurrency``.
- *Lengths*: input and output tokens, fixed or uniform within ``mean x (1 +/- range_ratio)``
  (``--random-range-ratio``).
- *Prefix*: ``prefix_len`` tokens shared by every request (a system prompt, tool
  definitions), which a prefix cache computes once.
- *Turns*: an agent session of ``turns`` turns re-sends its whole history each turn. With
  ``turns > 1`` the unit of load is the *session*: ``concurrency`` sessions in flight (closed
  loop), or sessions arriving at ``request_rate_per_s`` (open loop). Turn ``t`` is sent when
  turn ``t - 1`` finishes (no think time) with the prompt
  ``P + u_1 + o_1 + ... + u_(t-1) + o_(t-1) + u_t``: the previous prompt, its answer and a
  new message of ``u_t`` tokens (``P`` = ``prefix_len``; a turn's ``u`` is a sampled input
  length minus ``P``, its ``o`` a sampled output length). Fixed lengths give
  ``P + t u + (t - 1) o``; turn 1 is drawn exactly as a single-turn request.

Sampling uses a seeded generator: the same workload gives the same requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from servefit.core.metrics import Slo as Slo  # re-exported: the one Slo, with the metrics
from servefit.errors import InvalidArgumentError

if TYPE_CHECKING:
    from random import Random

# Bounds on what one simulation is asked for: its cost grows with the requests in flight and
# the requests simulated (4,096 concurrent take ~8 s, 50,000 requests ~4 s on one core).
# Beyond vLLM's largest default --max-num-seqs (1,024) extra requests in flight only queue.
MAX_CONCURRENCY = 4_096
MAX_NUM_REQUESTS = 100_000  # requests (all turns of all sessions) simulated
MAX_TURNS = 1_000  # turns of one agent session


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthDist:
    """Tokens per request: ``mean`` fixed, or uniform in ``mean x (1 +/- range_ratio)``."""

    mean: int
    range_ratio: float = 0.0

    def __post_init__(self) -> None:
        if self.mean < 0:
            raise InvalidArgumentError(f"token lengths must be >= 0, got {self.mean}")
        if not 0 <= self.range_ratio < 1:  # NaN fails too
            raise InvalidArgumentError(f"--range-ratio must be in [0, 1), got {self.range_ratio}")

    def sample(self, rng: Random) -> int:
        if not self.range_ratio:
            return self.mean
        low = int(self.mean * (1 - self.range_ratio))
        high = int(self.mean * (1 + self.range_ratio))
        return rng.randint(low, high)


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """The traffic a deployment is asked to serve: lengths, concurrency or rate, prefix, turns."""

    input_len: LengthDist  # tokens of each prompt, the shared prefix included
    output_len: LengthDist
    concurrency: int | None = 1
    request_rate_per_s: float | None = None
    num_requests: int | None = None  # None: enough to reach a steady state
    prefix_len: int = 0
    turns: int = 1
    seed: int = 0
    # a recorded trace's requests (``--dataset``), simulated as they are instead of drawn
    # from the lengths above (which then hold the trace's means); with arrival times and
    # neither a concurrency nor a rate, replayed at those times
    requests: tuple[RequestSpec, ...] = ()

    def __post_init__(self) -> None:
        if self.requests:
            if self.turns != 1 or self.prefix_len:
                raise InvalidArgumentError(
                    "--dataset's requests are single prompts: drop --turns and --prefix-len"
                )
            if self.num_requests is not None and self.num_requests != len(self.requests):
                raise InvalidArgumentError(
                    f"--num-requests {self.num_requests} but --dataset holds "
                    f"{len(self.requests)}: give one"
                )
        if self.concurrency is not None and self.concurrency < 1:
            raise InvalidArgumentError(f"--concurrency must be >= 1, got {self.concurrency}")
        if self.concurrency is not None and self.concurrency > MAX_CONCURRENCY:
            raise InvalidArgumentError(
                f"--concurrency {self.concurrency:,} is over servefit's {MAX_CONCURRENCY:,}: "
                "4x vLLM's largest default --max-num-seqs (1,024), beyond which requests only "
                "queue, while the simulation's cost grows with each one in flight"
            )
        rate = self.request_rate_per_s
        if rate is not None and not 0 < rate < float("inf"):  # NaN fails too
            raise InvalidArgumentError(f"--request-rate must be positive, got {rate}")
        if self.concurrency is None and self.request_rate_per_s is None and not self.is_replay:
            raise InvalidArgumentError("a workload needs --concurrency or --request-rate")
        if self.output_len.mean < 1:
            raise InvalidArgumentError("--output-len must be >= 1 (a request makes a token)")
        if self.input_len.mean < 1:
            raise InvalidArgumentError("--input-len must be >= 1")
        if self.prefix_len < 0:
            raise InvalidArgumentError(f"--prefix-len must be >= 0, got {self.prefix_len}")
        if self.prefix_len >= self.input_len.mean * (1 - self.input_len.range_ratio):
            raise InvalidArgumentError(
                f"--prefix-len ({self.prefix_len}) must be shorter than the prompt "
                f"(--input-len {self.input_len.mean}): the prefix is part of the prompt"
            )
        if self.turns < 1:
            raise InvalidArgumentError(f"--turns must be >= 1, got {self.turns}")
        if self.num_requests is not None and self.num_requests < 1:
            raise InvalidArgumentError("--num-requests must be >= 1")
        if self.turns > MAX_TURNS:
            raise InvalidArgumentError(
                f"--turns {self.turns:,} is over servefit's {MAX_TURNS:,} turns per session"
            )
        simulated = self.resolved_num_sessions() * self.turns
        if simulated > MAX_NUM_REQUESTS:
            raise InvalidArgumentError(
                f"the workload simulates {simulated:,} requests, over servefit's "
                f"{MAX_NUM_REQUESTS:,} (a steady state needs a few per user; each costs "
                "simulation time): lower --num-requests, --turns or --concurrency"
            )

    @property
    def is_replay(self) -> bool:
        """A trace sent at its own arrival times (no concurrency, no rate given)."""
        return (
            bool(self.requests)
            and self.concurrency is None
            and self.request_rate_per_s is None
            and all(r.arrival_s is not None for r in self.requests)
        )

    @property
    def is_closed_loop(self) -> bool:
        return self.request_rate_per_s is None and not self.is_replay

    def longest_request_tokens(self) -> int:
        """The most tokens one request holds: a trace's longest, else prompt and output at
        the top of their ranges, or, for agent sessions, the last turn's whole history."""
        if self.requests:
            return max(r.input_len + r.output_len for r in self.requests)
        if self.turns > 1:
            per_turn = self.input_len.mean - self.prefix_len + self.output_len.mean
            return self.prefix_len + self.turns * per_turn
        top_in = int(self.input_len.mean * (1 + self.input_len.range_ratio))
        top_out = int(self.output_len.mean * (1 + self.output_len.range_ratio))
        return top_in + top_out

    def resolved_num_requests(self) -> int:
        """Enough requests for a steady state: every user sends several (a trace: all of
        its requests)."""
        if self.requests:
            return len(self.requests)
        if self.num_requests is not None:
            return self.num_requests
        users = self.concurrency or 1
        return max(24, 4 * users) if self.is_closed_loop else max(64, 4 * users)

    def resolved_num_sessions(self) -> int:
        """Sessions to simulate when ``turns > 1``: ``num_requests`` turns in all when given,
        else as many requests as a single-turn workload and at least two sessions per
        user (so that sessions overlap in every phase, as in a steady state; an uncapped
        open loop counts as 8 users)."""
        if self.num_requests is not None:
            return max(1, -(-self.num_requests // self.turns))
        users = self.concurrency or 8
        return max(-(-self.resolved_num_requests() // self.turns), 2 * users)

    def describe(self) -> str:
        def length(d: LengthDist) -> str:
            return f"{d.mean}" + (f" (+/-{d.range_ratio:.0%})" if d.range_ratio else "")

        if self.requests:
            load = (
                "replayed at the trace's arrival times"
                if self.is_replay
                else f"{self.concurrency} concurrent"
                if self.is_closed_loop
                else f"Poisson {self.request_rate_per_s:g} req/s"
            )
            return (
                f"{len(self.requests):,} requests of a trace (mean {self.input_len.mean} in / "
                f"{self.output_len.mean} out tokens), {load}"
            )
        load = (
            f"{self.concurrency} concurrent"
            if self.is_closed_loop
            else f"Poisson {self.request_rate_per_s:g} req/s"
            + (f", at most {self.concurrency} concurrent" if self.concurrency else "")
        )
        text = f"{length(self.input_len)} in / {length(self.output_len)} out tokens, {load}"
        if self.prefix_len:
            text += f", {self.prefix_len}-token shared prefix"
        if self.turns > 1:
            text += f", {self.turns}-turn sessions"
        return text


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestSpec:
    """One sampled request: when it is sent and its input and output lengths."""

    arrival_s: float | None  # None: closed loop (sent when a user is free)
    input_len: int
    output_len: int


def sample_requests(w: Workload) -> tuple[RequestSpec, ...]:
    from random import Random  # imported here: a capacity-only plan never samples

    rng = Random(w.seed)  # seeded: the same workload gives the same requests
    if w.requests:  # a trace: its requests, at its times only when replayed
        if w.is_replay:
            return w.requests
        out, t = [], 0.0
        for r in w.requests:
            arrival = None
            if w.request_rate_per_s is not None:
                t += rng.expovariate(w.request_rate_per_s)
                arrival = t
            out.append(
                RequestSpec(arrival_s=arrival, input_len=r.input_len, output_len=r.output_len)
            )
        return tuple(out)
    out = []
    t = 0.0
    for _ in range(w.resolved_num_requests()):
        arrival = None
        if w.request_rate_per_s is not None:
            t += rng.expovariate(w.request_rate_per_s)
            arrival = t
        out.append(
            RequestSpec(
                arrival_s=arrival,
                input_len=max(1, w.input_len.sample(rng)),
                output_len=max(1, w.output_len.sample(rng)),
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSpec:
    """One user's session: its turns, each prompt holding the previous turns' history."""

    arrival_s: float | None  # None: closed loop (started when a user is free)
    turns: tuple[RequestSpec, ...]  # turns[i].input_len: the whole prompt of turn i + 1

    def __post_init__(self) -> None:
        if not self.turns:
            raise InvalidArgumentError("a session needs at least one turn")

    def history_tokens(self, index: int) -> int:
        """Tokens turn ``index`` (0-based) inherits: the previous prompt and its answer."""
        if index == 0:
            return 0
        before = self.turns[index - 1]
        return before.input_len + before.output_len


def sample_sessions(w: Workload) -> tuple[SessionSpec, ...]:
    """The workload as sessions. One turn: each request of :func:`sample_requests` is a
    session of its own (the same draws). More turns: sessions of ``w.turns`` turns."""
    if w.turns == 1:
        return tuple(SessionSpec(arrival_s=r.arrival_s, turns=(r,)) for r in sample_requests(w))
    from random import Random

    rng = Random(w.seed)
    out = []
    t = 0.0
    for _ in range(w.resolved_num_sessions()):
        arrival = None
        if w.request_rate_per_s is not None:
            t += rng.expovariate(w.request_rate_per_s)
            arrival = t
        turns: list[RequestSpec] = []
        for i in range(w.turns):
            drawn = max(1, w.input_len.sample(rng))
            output = max(1, w.output_len.sample(rng))
            if i == 0:
                prompt = drawn  # turn 1: exactly a single-turn request
            else:
                message = max(1, drawn - w.prefix_len)
                prompt = turns[-1].input_len + turns[-1].output_len + message
            turns.append(RequestSpec(arrival_s=None, input_len=prompt, output_len=output))
        out.append(SessionSpec(arrival_s=arrival, turns=tuple(turns)))
    return tuple(out)


def fixed_workload(
    input_len: int,
    output_len: int,
    *,
    concurrency: int | None = 1,
    request_rate_per_s: float | None = None,
    num_requests: int | None = None,
    prefix_len: int = 0,
    turns: int = 1,
    range_ratio: float = 0.0,
) -> Workload:
    """A workload of fixed (or ``range_ratio``-spread) lengths."""
    return Workload(
        input_len=LengthDist(mean=input_len, range_ratio=range_ratio),
        output_len=LengthDist(mean=output_len, range_ratio=range_ratio),
        concurrency=concurrency,
        request_rate_per_s=request_rate_per_s,
        num_requests=num_requests,
        prefix_len=prefix_len,
        turns=turns,
    )
