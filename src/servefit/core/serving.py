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

This module holds :func:`simulate`; the value types are in :mod:`servefit.core.serving_types`
(importable from here too), the step engine in :mod:`servefit.core.serving_sim`, the result
assembly in :mod:`servefit.core.serving_result`.
"""

from __future__ import annotations

# `X as X`: re-exported, so ``servefit.core.serving.<name>`` keeps working
from servefit.core.metrics import Stat as Stat
from servefit.core.serving_result import load_result
from servefit.core.serving_sim import MAX_STEPS_PER_JUMP as MAX_STEPS_PER_JUMP
from servefit.core.serving_sim import Simulation
from servefit.core.serving_types import BlocksFor as BlocksFor
from servefit.core.serving_types import LoadResult as LoadResult
from servefit.core.serving_types import RequestTiming as RequestTiming
from servefit.core.serving_types import ServingLimits as ServingLimits
from servefit.core.serving_types import StepTimer as StepTimer
from servefit.core.serving_types import TurnLoad as TurnLoad
from servefit.core.workload import Slo, Workload, sample_sessions
from servefit.errors import InvalidArgumentError


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
    sim = Simulation(workload, limits, timer, blocks_for, sessions)
    sim.run()
    return load_result(sim, request_overhead_s, slo)
