"""The serving simulation's engine: continuous batching with chunked prefill, step by step,
as :mod:`servefit.core.serving` describes it -- arrivals (closed loop, open loop, a session's
next turn), scheduling under the token budget, the sequence limit and the KV cache,
recompute preemption, runs of identical decode steps advanced together, and each step's
time accounted by bound and by phase. :mod:`servefit.core.serving_result` turns a finished
run into a :class:`~servefit.core.serving_types.LoadResult`."""

from __future__ import annotations

from collections import deque
from functools import lru_cache

from servefit.core.ops import StepShape
from servefit.core.roofline import Bound, StepTime
from servefit.core.serving_types import BlocksFor, ServingLimits, StepTimer
from servefit.core.turn_reuse import cached_history_tokens
from servefit.core.workload import SessionSpec, Workload

# Fast-forward at most this many decode steps at once, so context growth is tracked.
MAX_STEPS_PER_JUMP = 256
# the bounds' names, looked up once (an enum member's .value is a descriptor call per step)
_COMPUTE = Bound.COMPUTE.value
_MEMORY = Bound.MEMORY.value
_INTERCONNECT = Bound.INTERCONNECT.value
_OVERHEAD = Bound.OVERHEAD.value


@lru_cache(maxsize=16)
def blocks_table(blocks_for: BlocksFor, longest: int) -> tuple[int, ...]:
    """``blocks_for`` at every length up to ``longest``, built once for the simulations of
    one plan (its curve points reach the same lengths); ``blocks_for`` is a pure function
    of the length."""
    return tuple([blocks_for(length) for length in range(longest + 1)])


class _Req:
    """One request (one turn of a session) as the scheduler tracks it."""

    __slots__ = (
        "cached",
        "computed",
        "finish",
        "first",
        "generated",
        "history_hit",
        "index",
        "output",
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
        self.output = spec.output_len  # spec.output_len, one lookup less in the hot loops
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


class Simulation:
    """One run of the scheduler over sampled sessions; :meth:`run` steps it to the end."""

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
        # blocks one request holds at each length it can reach (a tuple: the hot path)
        longest = max(t.input_len + t.output_len for s in sessions for t in s.turns)
        self.table = blocks_table(blocks_for, longest + MAX_STEPS_PER_JUMP + 1)
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
        # KV blocks the running requests will hold at their full length (prompt + output)
        self.final_blocks = 0
        self.reserve = limits.reserved_output_fraction

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

    def final_blocks_of(self, r: _Req) -> int:
        return self.table[r.spec.input_len + r.spec.output_len]

    def admits(self, grow: int, new_blocks: int, new_final_blocks: int) -> bool:
        """Whether a request holding ``new_blocks`` after this step (``new_final_blocks`` at
        its full length) fits beside the running ones (growing by ``grow``), with the
        engine's reserved share of every request's output still to come kept free."""
        held: float = self.used + grow + new_blocks
        if self.reserve:
            to_come = self.final_blocks + new_final_blocks - held
            held += self.reserve * max(to_come, 0)
        return held <= self.limits.num_kv_blocks

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
        for r in self.running:  # r.prefilling, inlined: the hot loop
            if budget <= 0:
                break
            if r.computed < r.prompt:
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
        while self.waiting and len(self.running) < self.limits.max_num_seqs and budget > 0:
            r = self.waiting[0]
            start = r.computed
            hit = max(self.prefix_tokens if self.prefix_ready else 0, r.history_hit)
            if (self.prefix_ready or r.history_hit) and r.preemptions == 0 and hit < r.prompt:
                r.cached = hit
                start = max(r.computed, hit)
            n = min(r.prompt - start, budget)
            final = self.final_blocks_of(r)
            if not is_exact and not self.admits(grow, self.blocks(start + n), final):
                grow, is_exact = self.growth_blocks(decodes, chunks), True
            if not self.admits(grow, self.blocks(start + n), final):
                kv_blocked = True
                r.cached = 0
                break
            self.waiting.popleft()
            self.running.append(r)
            self.final_blocks += final
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
            self.final_blocks -= self.final_blocks_of(victim)
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
        self.final_blocks -= self.final_blocks_of(r)
        self.done.append(r)
        if r.index + 1 < len(r.session.turns):  # the session's next turn, sent at once
            self.waiting.append(_Req(r.session, r.index + 1, self.t, self.history_block))
        else:
            self.in_flight -= 1

    def prefill_part_s(self, st: StepTime, shape: StepShape) -> float:
        """Of one step, the prefill work's time: all of a prefill-only step, a share of a
        mixed one in proportion to each part's stand-alone time."""
        if not shape.prefill_chunks:
            return 0.0
        if not shape.decode_contexts:
            return st.time_s
        alone_p = self.timer(
            StepShape(
                prefill_chunks=shape.prefill_chunks,
                num_finishing_prefills=shape.num_finishing_prefills,
            )
        ).time_s
        alone_d = self.timer(StepShape(decode_contexts=shape.decode_contexts)).time_s
        both = alone_p + alone_d
        return st.time_s * alone_p / both if both > 0 else 0.0

    def account(self, st: StepTime, batch: int, steps: int, kv_blocked: bool) -> None:
        dt = st.time_s * steps
        self.busy_s += dt
        self.batch_time += batch * dt
        self.max_batch = max(self.max_batch, batch)
        if kv_blocked:
            self.kv_blocked_s += dt
        by_bound = self.by_bound
        for name, value in (
            (_COMPUTE, st.compute_s),
            (_MEMORY, st.memory_s),
            (_INTERCONNECT, st.comm_s),
            (_OVERHEAD, st.overhead_s),
        ):
            by_bound[name] = by_bound.get(name, 0.0) + value * steps

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
                decode_contexts=tuple([r.computed for r in decodes]),
                prefill_chunks=tuple([(n, r.computed) for r, n in chunks]),
                num_finishing_prefills=finishing,
            )
            st = self.timer(shape)
            self.t += st.time_s
            self.account(st, len(decodes) + len(chunks), 1, kv_blocked)
            self.prefill_s += self.prefill_part_s(st, shape)
            table = self.table
            grow = 0  # the decodes' new blocks, added to self.used once (integers: exact)
            for r, n in chunks:
                self.set_computed(r, r.computed + n)
                if r.computed >= r.prompt:
                    if r.generated == 0:
                        r.first = self.t
                    r.generated += 1
                    if not self.prefix_ready and r.computed >= self.prefix_tokens:
                        self.prefix_ready = True
                    if r.generated >= r.output:
                        self.finish(r)
            for r in decodes:  # set_computed(r, r.computed + 1), inlined: the hot loop
                c = r.computed
                grow += table[c + 1] - table[c]
                r.computed = c + 1
                r.generated += 1
                if r.generated >= r.output:
                    self.finish(r)
            self.used += grow

    def can_jump(self, kv_blocked: bool, decodes: list[_Req]) -> bool:
        if self.waiting and not kv_blocked and len(self.running) < self.limits.max_num_seqs:
            return False
        if self.used + self.growth_blocks(decodes, []) > self.limits.num_kv_blocks:
            return False  # the next step preempts: take it step by step
        return all(r.computed >= r.prompt for r in self.running)  # none prefilling

    def jump(self, decodes: list[_Req], kv_blocked: bool) -> None:
        steps = min(r.output - r.generated for r in decodes)
        steps = max(1, min(steps, MAX_STEPS_PER_JUMP))
        # stay within the KV cache: the growth bound len(decodes) x blocks(steps) first,
        # the exact growth when the bound is too coarse
        free = self.limits.num_kv_blocks - self.used
        if len(decodes) * self.blocks(steps) > free:
            t = self.table
            while steps > 1 and sum(t[r.computed + steps] - t[r.computed] for r in decodes) > free:
                steps //= 2
        mid = (steps - 1) // 2
        shape = StepShape(decode_contexts=tuple([r.computed + mid for r in decodes]))
        st = self.timer(shape)
        arrival = self.next_arrival_s()
        if arrival is not None and self.t + steps * st.time_s > arrival:
            steps = max(1, int((arrival - self.t) / st.time_s) + 1)
        self.t += steps * st.time_s
        self.account(st, len(decodes), steps, kv_blocked)
        t = self.table
        for r in decodes:  # set_computed(r, r.computed + steps), inlined
            c = r.computed
            self.used += t[c + steps] - t[c]
            r.computed = c + steps
            r.generated += steps
        for r in [r for r in decodes if r.generated >= r.output]:
            self.finish(r)
