"""How each serving engine admits requests into its KV cache: the rule the serving
simulation (:mod:`servefit.core.serving_sim`) applies for the engine a plan names.

The engines differ in what they keep free when they admit a request, and that decides the
batch a saturated server runs (every request queued, as ``trtllm-bench throughput`` or
``vllm bench throughput`` send them):

- **vLLM** (V1 scheduler) allocates blocks only for the tokens it schedules this step and,
  when running requests outgrow the cache, preempts the most recently admitted one and
  recomputes it later (``vllm/v1/core/sched/scheduler.py``). With 1,000/1,000-token
  requests all queued it admits about twice what fits at full length, then preempts.
- **TensorRT-LLM** schedules with ``GUARANTEED_NO_EVICT`` by default ("TensorRT-LLM
  currently supports three batch scheduler policies: GUARANTEED_NO_EVICT (default),
  MAX_UTILIZATION and STATIC_BATCH", docs/source/performance/performance-tuning-guide/
  useful-runtime-flags.md; the perf-overview runs print "Scheduling Policy: Guaranteed No
  Evict"): a request is admitted only when the cache can hold its prompt and all its
  ``max_tokens`` of output, so nothing is ever evicted and nothing recomputed.
- **SGLang** reserves ``new_token_ratio`` x each running request's remaining output when
  it admits one (``PrefillAdder``), retracting a request when the pool still runs out. The
  ratio starts at ``SGLANG_INIT_NEW_TOKEN_RATIO`` = 0.7 and decays over
  ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` = 600 decode steps to 0.7 x
  ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`` 0.14 = 0.098 (sglang/srt/environ.py); servefit
  takes the floor, where a saturated run spends its time (an assumption).
- **llama.cpp** gives each of its ``-np`` slots its own cells up front
  (:mod:`servefit.core.engines.llama_cpp`): a request holds a whole slot, as if reserved.
- **MLX** (mlx-lm) grows each request's cache as it generates: admitted on demand, as vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass

from servefit.errors import InvalidArgumentError

SGLANG_INIT_NEW_TOKEN_RATIO = 0.7  # sglang/srt/environ.py
SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR = 0.14  # sglang/srt/environ.py


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionRule:
    """What an engine keeps free when it admits a request into its KV cache."""

    engine: str
    # of every running request's output still to come, the share whose blocks stay free
    # at admission: 0 = on demand (preempt on overflow), 1 = all of it (never evicts)
    reserved_output_fraction: float
    source: str

    def __post_init__(self) -> None:
        if not 0.0 <= self.reserved_output_fraction <= 1.0:
            raise InvalidArgumentError(
                f"{self.engine}: reserved_output_fraction must be in [0, 1], got "
                f"{self.reserved_output_fraction}"
            )

    @property
    def describe(self) -> str:
        if self.reserved_output_fraction >= 1.0:
            return (
                f"{self.engine} admits a request only when the KV cache holds its prompt and "
                f"all its output (never preempts; {self.source})"
            )
        if self.reserved_output_fraction == 0.0:
            return (
                f"{self.engine} admits a request when its next tokens' KV blocks are free and "
                f"preempts (recomputes) when running requests outgrow the cache ({self.source})"
            )
        return (
            f"{self.engine} admits a request keeping {self.reserved_output_fraction:.0%} of "
            f"every running request's remaining output free in the KV cache, retracting one "
            f"when it still runs out ({self.source})"
        )


_ON_DEMAND = "vllm/v1/core/sched/scheduler.py: blocks for the scheduled tokens"
ADMISSION_RULES: dict[str, AdmissionRule] = {
    "vllm": AdmissionRule(engine="vllm", reserved_output_fraction=0.0, source=_ON_DEMAND),
    "vllm-cpu": AdmissionRule(engine="vllm-cpu", reserved_output_fraction=0.0, source=_ON_DEMAND),
    "trtllm": AdmissionRule(
        engine="trtllm",
        reserved_output_fraction=1.0,
        source="capacity scheduler policy GUARANTEED_NO_EVICT, TensorRT-LLM's default",
    ),
    "sglang": AdmissionRule(
        engine="sglang",
        reserved_output_fraction=SGLANG_INIT_NEW_TOKEN_RATIO * SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR,
        source="new_token_ratio at its floor, 0.7 x 0.14 (sglang/srt/environ.py)",
    ),
    "llama.cpp": AdmissionRule(
        engine="llama.cpp",
        reserved_output_fraction=1.0,
        source="llama-server: each -np slot owns n_ctx / np cells from startup",
    ),
    "mlx": AdmissionRule(
        engine="mlx",
        reserved_output_fraction=0.0,
        source="mlx-lm grows a request's cache as it generates",
    ),
}


def admission_rule(engine: str) -> AdmissionRule:
    """The admission rule of ``engine`` (a name of :mod:`servefit.core.engines`); an engine
    servefit does not know is scheduled as vLLM."""
    found = ADMISSION_RULES.get(engine)
    if found is None:
        return AdmissionRule(
            engine=engine,
            reserved_output_fraction=0.0,
            source=f"{engine}'s rule unknown to servefit: vLLM's assumed",
        )
    return found
