"""Serving under load: a step-level simulation of continuous batching with chunked prefill.

The scheduler mirrors vLLM's V1 scheduler in the parts that decide latency and throughput:

1. each step has a token budget (``max_num_batched_tokens``) and at most ``max_num_seqs``
   running requests;
2. running requests are served first, in admission order: one token for each decoding
   request, then the next chunk of each unfinished prompt (chunked prefill);
3. waiting requests are admitted first-come-first-served while the budget, the sequence
   limit and the KV cache allow (a prompt's cached prefix costs nothing to compute);
4. when decoding requests outgrow the KV cache, the most recently admitted request is
   preempted: its blocks are freed and it is recomputed later (vLLM's recompute
   preemption). Requests beyond the KV capacity therefore *queue*, and their TTFT grows with
   the queue, as on a real server past saturation;
5. a prefill step samples the request's first token; every decode step one more.

Runs of identical decode steps (no arrival, no admission, no prefill) are advanced together,
timed at their mid-point context, so a simulation costs a few steps per request rather than
one per output token. Step times come from :func:`servefit.core.roofline.step_time`.

Metrics follow ``vllm bench serve``: TTFT from the moment a request is sent; TPOT =
(last token - first token) / (output tokens - 1); throughput = tokens / (last completion -
first send).

**Agent sessions** (``Workload.turns > 1``). The unit of load becomes the session
(:func:`servefit.core.workload.sample_sessions`): ``concurrency`` sessions in flight, or
sessions arriving at ``request_rate_per_s``. A session's turn ``t`` is sent the moment turn
``t - 1`` finishes; its prompt is the previous prompt, its answer and a new message. With
prefix caching the previous turn's prompt and answer are a cache hit in whole blocks
(:func:`servefit.core.agent.cached_history_tokens`, with the granularity
``ServingLimits.history_block_tokens``: 0 for a hybrid model without vLLM's hybrid prefix
caching); the history is assumed not to be evicted between turns. Request metrics are over
all turns; session throughput = sessions / (last completion - first send). Turn 1 is
scheduled exactly as a single-turn request, so ``turns == 1`` is the plain workload.

**GPU time by phase.** Each step's time is split between the prefill and the decode work it
does, for the cost of input and output tokens (:mod:`servefit.core.cost`):

- a step with only prefill chunks is prefill time, a step with only decodes decode time;
- a mixed step of time ``T`` is split in proportion to what each part costs alone through
  the same step timer (the roofline): ``prefill = T x T_p / (T_p + T_d)`` with ``T_p`` the
  step of its prefill chunks alone and ``T_d`` the step of its decodes alone. The weights
  read once for both and the fixed step overhead are thus shared in proportion to the
  phases' stand-alone costs.

A prefill step that completes a prompt samples that request's first token: that token is
prefill work (it is what TTFT waits for). A prompt's cached tokens are not computed, so
they cost no prefill time; a preempted request's recompute is prefill time. The totals add
up to the busy time: ``prefill_gpu_s + decode_gpu_s = busy_s`` (the simulated time minus
the idle gaps of an open loop).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from servefit.core import metrics
from servefit.core.agent import cached_history_tokens
from servefit.core.metrics import Stat
from servefit.core.ops import StepShape
from servefit.core.roofline import Bound, StepTime
from servefit.core.workload import SessionSpec, Slo, Workload, sample_sessions
from servefit.errors import InvalidArgumentError

StepTimer = Callable[[StepShape], StepTime]
BlocksFor = Callable[[int], int]  # KV blocks one request holds at a given length

# Fast-forward at most this many decode steps at once, so context growth is tracked.
MAX_STEPS_PER_JUMP = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingLimits:
    max_num_seqs: int
    max_num_batched_tokens: int
    num_kv_blocks: int
    block_size: int  # tokens of prefix reusable per cache block
    enable_prefix_caching: bool = True
    # a session's history is reused in blocks of this many tokens (0: not at all; see
    # servefit.core.agent.history_block_tokens); None: block_size when caching is on
    history_block_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise InvalidArgumentError("max_num_seqs and max_num_batched_tokens must be >= 1")
        if self.history_block_tokens is not None and self.history_block_tokens < 0:
            raise InvalidArgumentError("history_block_tokens must be >= 0")

    @property
    def history_reuse_block_tokens(self) -> int:
        """The granularity of a session's history reuse; 0: every turn prefills it all."""
        if self.history_block_tokens is not None:
            return self.history_block_tokens
        return self.block_size if self.enable_prefix_caching else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestTiming:
    sent_s: float
    first_token_s: float
    finish_s: float
    input_len: int
    output_len: int
    cached_tokens: int
    num_preemptions: int

    # the formulas the benchmark measures with (servefit.core.metrics)
    @property
    def ttft_s(self) -> float:
        return metrics.ttft_s(sent_s=self.sent_s, first_token_s=self.first_token_s)

    @property
    def e2e_s(self) -> float:
        return metrics.e2e_s(sent_s=self.sent_s, done_s=self.finish_s)

    @property
    def tpot_s(self) -> float | None:
        return metrics.tpot_s(
            first_token_s=self.first_token_s, done_s=self.finish_s, output_tokens=self.output_len
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnLoad:
    """The requests of one turn of the sessions (all requests when turns == 1)."""

    turn: int  # 1-based
    num_requests: int
    mean_input_len: float  # the whole prompt, history included
    mean_cached_tokens: float  # of which found in the prefix cache
    ttft_s: Stat
    e2e_s: Stat


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadResult:
    """One simulated benchmark: the workload at one load level."""

    concurrency: int | None
    request_rate_per_s: float | None
    num_requests: int
    duration_s: float
    ttft_s: Stat
    tpot_s: Stat
    e2e_s: Stat
    output_throughput_tok_per_s: float
    total_throughput_tok_per_s: float
    request_throughput_per_s: float
    goodput_per_s: float | None
    mean_batch: float  # running requests per step, time-weighted
    max_batch: int
    num_preemptions: int
    kv_blocked_fraction: float  # of the time, requests waited for KV cache
    bound: Bound
    time_by_bound_s: dict[str, float]
    busy_s: float  # time with a step running: the duration less idle gaps
    prefill_gpu_s: float  # of busy_s, prefill work (the module docstring's rule)
    decode_gpu_s: float  # of busy_s, decode work
    num_input_tokens: int  # all prompts (every turn's history included)
    num_cached_tokens: int  # of which found in the prefix cache
    num_output_tokens: int
    turns: int  # per session; 1: every request is a session of its own
    num_sessions: int
    session_throughput_per_s: float  # sessions / duration
    session_e2e_s: Stat  # first turn sent -> last turn finished
    by_turn: tuple[TurnLoad, ...]  # one entry per turn

    @property
    def decode_tok_per_s(self) -> float:
        """Per request: the inverse of the mean time per output token."""
        return 1.0 / self.tpot_s.mean if self.tpot_s.mean else 0.0

    @property
    def prefill_share(self) -> float:
        """Of the busy GPU time, the prefill part (0 when nothing ran)."""
        busy = self.prefill_gpu_s + self.decode_gpu_s
        return self.prefill_gpu_s / busy if busy > 0 else 0.0


class _Req:
    __slots__ = (
        "cached",
        "computed",
        "finish",
        "first",
        "generated",
        "history_hit",
        "index",
        "preemptions",
        "prompt",
        "sent",
        "session",
        "spec",
    )

    def __init__(
        self, session: SessionSpec, index: int, sent: float, history_block_tokens: int
    ) -> None:
        spec = session.turns[index]
        self.session = session
        self.index = index  # 0-based turn
        self.spec = spec
        self.sent = sent
        # the previous turn's prompt and answer, found in the cache (0 for turn 1)
        self.history_hit = cached_history_tokens(
            turn=index + 1,
            prompt_tokens=spec.input_len,
            history_tokens=session.history_tokens(index),
            block=history_block_tokens,
        )
        self.prompt = spec.input_len
        self.cached = 0
        self.computed = 0  # tokens with KV in the cache (prompt and generated)
        self.generated = 0
        self.first = -1.0
        self.finish = -1.0
        self.preemptions = 0

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prompt

    @property
    def length(self) -> int:
        return self.computed


def simulate(
    workload: Workload,
    limits: ServingLimits,
    timer: StepTimer,
    blocks_for: BlocksFor,
    *,
    request_overhead_s: float = 0.0,
    slo: Slo | None = None,
) -> LoadResult:
    """Run ``workload`` through the scheduler; every completed request is timed."""
    sessions = sample_sessions(workload)
    longest = max(t.input_len + t.output_len for s in sessions for t in s.turns)
    if blocks_for(longest) > limits.num_kv_blocks:
        raise InvalidArgumentError(
            f"a request of {longest} tokens needs {blocks_for(longest)} KV blocks but the "
            f"cache holds {limits.num_kv_blocks}: shorten --input-len/--output-len or give "
            "the model more memory"
        )
    sim = _Simulation(workload, limits, timer, blocks_for, sessions)
    sim.run()
    return sim.result(request_overhead_s, slo)


class _Simulation:
    def __init__(
        self,
        w: Workload,
        limits: ServingLimits,
        timer: StepTimer,
        blocks_for: BlocksFor,
        sessions: tuple[SessionSpec, ...],
    ) -> None:
        self.w = w
        self.limits = limits
        self.timer = timer
        # blocks one request holds at each length it can reach (a list: the hot path)
        longest = max(t.input_len + t.output_len for s in sessions for t in s.turns)
        longest += MAX_STEPS_PER_JUMP + 1
        self.table = [blocks_for(length) for length in range(longest + 1)]
        self.pending = deque(sessions)
        self.num_requests = sum(len(s.turns) for s in sessions)
        self.history_block = limits.history_reuse_block_tokens
        self.waiting: deque[_Req] = deque()
        self.running: list[_Req] = []
        self.done: list[_Req] = []
        self.t = 0.0
        self.in_flight = 0  # sessions started and not finished (closed loop / cap)
        self.cap = w.concurrency if w.concurrency is not None else len(sessions)
        self.prefix_ready = False
        bs = max(limits.block_size, 1)
        self.prefix_tokens = (w.prefix_len // bs) * bs if limits.enable_prefix_caching else 0
        self.batch_time = 0.0
        self.max_batch = 0
        self.preemptions = 0
        self.kv_blocked_s = 0.0
        self.by_bound: dict[str, float] = {}
        self.busy_s = 0.0
        self.prefill_s = 0.0  # of busy_s, prefill work
        self.used = 0  # KV blocks the running requests hold

    def blocks(self, length: int) -> int:
        return self.table[length]

    def growth_blocks(self, decodes: list[_Req], chunks: list[tuple[_Req, int]]) -> int:
        """Blocks the running requests need beyond what they hold, after this step."""
        t = self.table
        grow = 0
        for r in decodes:
            c = r.computed
            grow += t[c + 1] - t[c]
        for r, n in chunks:
            grow += t[r.computed + n] - t[r.computed]
        return grow

    def set_computed(self, r: _Req, tokens: int) -> None:
        """Change a running request's cached tokens, keeping the block count current."""
        self.used += self.table[tokens] - self.table[r.computed]
        r.computed = tokens

    # arrivals --------------------------------------------------------------------------
    def send_arrivals(self) -> None:
        while self.pending and self.in_flight < self.cap:
            nxt = self.pending[0]
            if nxt.arrival_s is not None and nxt.arrival_s > self.t:
                break
            self.pending.popleft()
            sent = self.t if nxt.arrival_s is None else max(nxt.arrival_s, 0.0)
            self.waiting.append(_Req(nxt, 0, sent, self.history_block))
            self.in_flight += 1

    def next_arrival_s(self) -> float | None:
        if not self.pending or self.in_flight >= self.cap:
            return None
        return self.pending[0].arrival_s

    # one step --------------------------------------------------------------------------
    def schedule(self) -> tuple[list[_Req], list[tuple[_Req, int]], bool]:
        budget = self.limits.max_num_batched_tokens
        decodes: list[_Req] = []
        chunks: list[tuple[_Req, int]] = []
        for r in self.running:
            if budget <= 0:
                break
            if r.prefilling:
                n = min(r.prompt - r.computed, budget)
                chunks.append((r, n))
                budget -= n
            else:
                decodes.append(r)
                budget -= 1
        kv_blocked = False
        # an upper bound of the growth first (blocks(a + b) - blocks(a) <= blocks(b));
        # the exact sum only when the bound does not fit
        grow = self.growth_bound(decodes, chunks) if self.waiting else 0
        is_exact = False
        capacity = self.limits.num_kv_blocks
        while self.waiting and len(self.running) < self.limits.max_num_seqs and budget > 0:
            r = self.waiting[0]
            start = r.computed
            hit = max(self.prefix_tokens if self.prefix_ready else 0, r.history_hit)
            if (self.prefix_ready or r.history_hit) and r.preemptions == 0 and hit < r.prompt:
                r.cached = hit
                start = max(r.computed, hit)
            n = min(r.prompt - start, budget)
            if self.used + grow + self.blocks(start + n) > capacity and not is_exact:
                grow, is_exact = self.growth_blocks(decodes, chunks), True
            if self.used + grow + self.blocks(start + n) > capacity:
                kv_blocked = True
                r.cached = 0
                break
            self.waiting.popleft()
            self.running.append(r)
            r.computed = 0
            self.set_computed(r, start)
            grow += self.blocks(start + n) - self.blocks(start)
            chunks.append((r, n))
            budget -= n
        return decodes, chunks, kv_blocked

    def growth_bound(self, decodes: list[_Req], chunks: list[tuple[_Req, int]]) -> int:
        return len(decodes) * self.blocks(1) + sum(self.blocks(n) for _, n in chunks)

    def preempt_until_fits(self, decodes: list[_Req], chunks: list[tuple[_Req, int]]) -> None:
        if self.used + self.growth_bound(decodes, chunks) <= self.limits.num_kv_blocks:
            return
        while len(self.running) > 1:
            if self.used + self.growth_blocks(decodes, chunks) <= self.limits.num_kv_blocks:
                return
            victim = self.running.pop()
            self.preemptions += 1
            victim.preemptions += 1
            self.set_computed(victim, 0)
            victim.cached = 0
            # its prompt and what it generated are recomputed as one longer prompt
            victim.prompt = victim.spec.input_len + victim.generated
            self.waiting.appendleft(victim)
            decodes[:] = [d for d in decodes if d is not victim]
            chunks[:] = [(c, n) for c, n in chunks if c is not victim]

    def finish(self, r: _Req) -> None:
        r.finish = self.t
        self.set_computed(r, 0)
        self.running.remove(r)
        self.done.append(r)
        if r.index + 1 < len(r.session.turns):  # the session's next turn, sent at once
            self.waiting.append(_Req(r.session, r.index + 1, self.t, self.history_block))
        else:
            self.in_flight -= 1

    def prefill_part_s(
        self, st: StepTime, decodes: list[_Req], chunks: list[tuple[_Req, int]], finishing: int
    ) -> float:
        """Of one step, the prefill work's time: all of a prefill-only step, a share of a
        mixed one in proportion to each part's stand-alone time."""
        if not chunks:
            return 0.0
        if not decodes:
            return st.time_s
        alone_p = self.timer(
            StepShape(
                prefill_chunks=tuple((n, r.computed) for r, n in chunks),
                num_finishing_prefills=finishing,
            )
        ).time_s
        alone_d = self.timer(StepShape(decode_contexts=tuple(r.length for r in decodes))).time_s
        both = alone_p + alone_d
        return st.time_s * alone_p / both if both > 0 else 0.0

    def account(self, st: StepTime, batch: int, steps: int, kv_blocked: bool) -> None:
        dt = st.time_s * steps
        self.busy_s += dt
        self.batch_time += batch * dt
        self.max_batch = max(self.max_batch, batch)
        if kv_blocked:
            self.kv_blocked_s += dt
        for name, value in (
            (Bound.COMPUTE, st.compute_s),
            (Bound.MEMORY, st.memory_s),
            (Bound.INTERCONNECT, st.comm_s),
            (Bound.OVERHEAD, st.overhead_s),
        ):
            self.by_bound[name.value] = self.by_bound.get(name.value, 0.0) + value * steps

    def run(self) -> None:
        total = self.num_requests
        while len(self.done) < total:
            self.send_arrivals()
            if not self.running and not self.waiting:
                nxt = self.next_arrival_s()
                if nxt is None:  # pragma: no cover - closed loop always has a request ready
                    raise RuntimeError("simulation stalled")
                self.t = max(self.t, nxt)
                continue
            decodes, chunks, kv_blocked = self.schedule()
            self.preempt_until_fits(decodes, chunks)
            if not decodes and not chunks:  # pragma: no cover - guarded by the fit check
                raise RuntimeError("scheduler made no progress")
            if not chunks and self.can_jump(kv_blocked, decodes):
                self.jump(decodes, kv_blocked)
                continue
            finishing = sum(1 for r, n in chunks if r.computed + n >= r.prompt)
            shape = StepShape(
                decode_contexts=tuple(r.length for r in decodes),
                prefill_chunks=tuple((n, r.computed) for r, n in chunks),
                num_finishing_prefills=finishing,
            )
            st = self.timer(shape)
            self.t += st.time_s
            self.account(st, len(decodes) + len(chunks), 1, kv_blocked)
            self.prefill_s += self.prefill_part_s(st, decodes, chunks, finishing)
            for r, n in chunks:
                self.set_computed(r, r.computed + n)
                if r.computed >= r.prompt:
                    if r.generated == 0:
                        r.first = self.t
                    r.generated += 1
                    if not self.prefix_ready and r.computed >= self.prefix_tokens:
                        self.prefix_ready = True
                    if r.generated >= r.spec.output_len:
                        self.finish(r)
            for r in decodes:
                self.set_computed(r, r.computed + 1)
                r.generated += 1
                if r.generated >= r.spec.output_len:
                    self.finish(r)

    def can_jump(self, kv_blocked: bool, decodes: list[_Req]) -> bool:
        if self.waiting and not kv_blocked and len(self.running) < self.limits.max_num_seqs:
            return False
        if self.used + self.growth_blocks(decodes, []) > self.limits.num_kv_blocks:
            return False  # the next step preempts: take it step by step
        return all(not r.prefilling for r in self.running)

    def jump(self, decodes: list[_Req], kv_blocked: bool) -> None:
        steps = min(r.spec.output_len - r.generated for r in decodes)
        steps = max(1, min(steps, MAX_STEPS_PER_JUMP))
        # stay within the KV cache: the growth bound len(decodes) x blocks(steps) first,
        # the exact growth when the bound is too coarse
        free = self.limits.num_kv_blocks - self.used
        if len(decodes) * self.blocks(steps) > free:
            t = self.table
            while steps > 1 and sum(t[r.computed + steps] - t[r.computed] for r in decodes) > free:
                steps //= 2
        mid = (steps - 1) // 2
        shape = StepShape(decode_contexts=tuple(r.length + mid for r in decodes))
        st = self.timer(shape)
        arrival = self.next_arrival_s()
        if arrival is not None and self.t + steps * st.time_s > arrival:
            steps = max(1, int((arrival - self.t) / st.time_s) + 1)
        self.t += steps * st.time_s
        self.account(st, len(decodes), steps, kv_blocked)
        for r in decodes:
            self.set_computed(r, r.computed + steps)
            r.generated += steps
        for r in [r for r in decodes if r.generated >= r.spec.output_len]:
            self.finish(r)

    # results ---------------------------------------------------------------------------
    def result(self, request_overhead_s: float, slo: Slo | None) -> LoadResult:
        timings = [
            RequestTiming(
                sent_s=r.sent,
                first_token_s=r.first + request_overhead_s,
                finish_s=r.finish + request_overhead_s,
                input_len=r.spec.input_len,
                output_len=r.spec.output_len,
                cached_tokens=r.cached,
                num_preemptions=r.preemptions,
            )
            for r in self.done
        ]
        start = min(t.sent_s for t in timings)
        end = max(t.finish_s for t in timings)
        duration = max(end - start, 1e-12)
        out_tokens = sum(t.output_len for t in timings)
        in_tokens = sum(t.input_len for t in timings)
        num_sessions = sum(1 for r in self.done if r.index + 1 == len(r.session.turns))
        goodput = None
        if slo is not None:
            goodput = metrics.goodput_per_s(slo, timings, duration)
        busy = self.t if self.t > 0 else 1e-12
        kv_fraction = self.kv_blocked_s / busy
        parts = dict(self.by_bound)
        bound = (
            Bound.CAPACITY
            if kv_fraction > 0.25 or self.preemptions
            else Bound(max(parts, key=lambda k: parts[k]))
        )
        return LoadResult(
            concurrency=self.w.concurrency,
            request_rate_per_s=self.w.request_rate_per_s,
            num_requests=len(timings),
            duration_s=duration,
            ttft_s=Stat.of([t.ttft_s for t in timings]),
            tpot_s=Stat.of([v for t in timings if (v := t.tpot_s) is not None]),
            e2e_s=Stat.of([t.e2e_s for t in timings]),
            output_throughput_tok_per_s=out_tokens / duration,
            total_throughput_tok_per_s=(out_tokens + in_tokens) / duration,
            request_throughput_per_s=len(timings) / duration,
            goodput_per_s=goodput,
            mean_batch=self.batch_time / busy,
            max_batch=self.max_batch,
            num_preemptions=self.preemptions,
            kv_blocked_fraction=kv_fraction,
            bound=bound,
            time_by_bound_s=parts,
            busy_s=self.busy_s,
            prefill_gpu_s=self.prefill_s,
            decode_gpu_s=self.busy_s - self.prefill_s,
            num_input_tokens=in_tokens,
            num_cached_tokens=sum(t.cached_tokens for t in timings),
            num_output_tokens=out_tokens,
            turns=self.w.turns,
            num_sessions=num_sessions,
            session_throughput_per_s=num_sessions / duration,
            session_e2e_s=self.session_e2e(request_overhead_s),
            by_turn=self.by_turn(timings),
        )

    def session_e2e(self, request_overhead_s: float) -> Stat:
        first_sent: dict[int, float] = {}
        last_finish: dict[int, float] = {}
        for r in self.done:
            key = id(r.session)
            if r.index == 0:
                first_sent[key] = r.sent
            if r.index + 1 == len(r.session.turns):
                last_finish[key] = r.finish + request_overhead_s
        return Stat.of([last_finish[k] - first_sent[k] for k in last_finish])

    def by_turn(self, timings: list[RequestTiming]) -> tuple[TurnLoad, ...]:
        groups: dict[int, list[RequestTiming]] = {}
        for r, t in zip(self.done, timings, strict=True):
            groups.setdefault(r.index + 1, []).append(t)
        return tuple(
            TurnLoad(
                turn=turn,
                num_requests=len(ts),
                mean_input_len=sum(t.input_len for t in ts) / len(ts),
                mean_cached_tokens=sum(t.cached_tokens for t in ts) / len(ts),
                ttft_s=Stat.of([t.ttft_s for t in ts]),
                e2e_s=Stat.of([t.e2e_s for t in ts]),
            )
            for turn, ts in sorted(groups.items())
        )
