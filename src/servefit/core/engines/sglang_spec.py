"""Speculative decoding as SGLang runs it: its flags, the tokens its pool adds for drafts,
and where the drafter's memory lives. Read in SGLang's source (``server_args.py``
``_handle_speculative_decoding`` / ``auto_choose_speculative_params`` /
``_handle_gpu_memory_settings``, ``model_executor/model_runner.py`` ``init_memory_pool``),
the same from 0.4.x to 0.5.x where read:

* **the flags**: ``--speculative-algorithm`` EAGLE, EAGLE3, NEXTN (DeepSeek's MTP layers,
  run as EAGLE with the checkpoint itself as the draft) or STANDALONE (a draft model);
  ``--speculative-num-steps`` (draft passes a step), ``--speculative-eagle-topk``
  (branches per draft pass) and ``--speculative-num-draft-tokens`` (the tree's tokens the
  target verifies per request). Left out, they are auto-chosen: (3, 1, 4) for DeepSeek
  V2/V3 checkpoints, (5, 4, 8) for every other; with a top-k of 1 the verified tokens are
  ``steps + 1``.
* **running requests**: without ``--max-running-requests``, EAGLE, EAGLE3 and STANDALONE
  set it to 48 ("Max running requests is reset to 48 for speculative decoding").
* **the pool**: the target profiles its pool from its own weights and KV cells alone, then
  grows it by headroom for the drafts of every running request: ``max_total_num_tokens +
  max_num_reqs x steps x topk + max_num_reqs x draft_tokens + 100``, the size the draft
  worker's own KV pool takes too (``draft_runner_cache_size``). The drafter's weights and
  KV cells are allocated after the target's pool, so they live in the memory
  ``--mem-fraction-static`` leaves out; the default fraction reserves 2 GiB more for an
  EAGLE-family drafter and 6 GiB more for a standalone draft model (0.4.9 on).
* **speed**: a step runs ``steps`` draft passes over ``topk`` branches of every decoding
  request, then verifies ``draft_tokens`` per request in one target pass. A tree (topk > 1)
  accepts at least what its top-1 chain accepts; servefit plans the chain's acceptance.
"""

from __future__ import annotations

from dataclasses import replace

from servefit.core import drafter
from servefit.core.kv_cache import resolve_kv_dtype_bytes
from servefit.core.kv_pages import attention_bytes_per_token, mla_bytes_per_token
from servefit.core.memory import MemoryBreakdown
from servefit.core.model_spec import AttentionSpec, LayerSpec, MlaSpec, ModelSpec
from servefit.core.plan import CapacityPlan
from servefit.core.plan_verdict import STARTUP
from servefit.core.speculative import DraftNetwork, SpecMethod, SpeculativeConfig
from servefit.errors import InvalidArgumentError
from servefit.units import GIB_BYTES

# SGLang's --speculative-algorithm -> the method servefit plans it as
ALGORITHMS: dict[str, SpecMethod] = {
    "EAGLE": SpecMethod.EAGLE,
    "EAGLE3": SpecMethod.EAGLE3,
    "NEXTN": SpecMethod.MTP,
    "STANDALONE": SpecMethod.DRAFT_MODEL,
}
NOT_PLANNED = {
    "NGRAM": "SGLang's n-gram proposer keeps its own trie and buffers, which are not modelled",
    "LOOKAHEAD": "SGLang's lookahead proposer is not modelled",
}
SPEC_MAX_RUNNING_REQUESTS = 48  # server_args._handle_speculative_decoding
POOL_BUFFER_TOKENS = 100  # model_runner.init_memory_pool: "# buffer"
# _handle_gpu_memory_settings: "draft model and larger cuda graph buffers"
EAGLE_RESERVE_BYTES = 2 * GIB_BYTES  # 2 * 1024 MB, MB counted as MiB
STANDALONE_RESERVE_BYTES = 6 * GIB_BYTES
_DEEPSEEK_AUTO = (3, 1, 4)  # auto_choose_speculative_params: DeepseekV3/V2ForCausalLM
_OTHER_AUTO = (5, 4, 8)  # every other architecture


def sglang_speculative_config(
    algorithm: str,
    *,
    draft_model_path: str | None,
    num_steps: int | None,
    eagle_topk: int | None,
    num_draft_tokens: int | None,
    is_deepseek: bool = False,
) -> SpeculativeConfig:
    """SGLang's speculative flags as the config servefit plans, auto-choosing what is left
    out as SGLang does; a value SGLang would refuse is refused here, naming the flag."""
    name = algorithm.strip().upper()
    if name in NOT_PLANNED:
        raise InvalidArgumentError(
            f"--speculative-algorithm {algorithm}: not planned: {NOT_PLANNED[name]}"
        )
    if name not in ALGORITHMS:
        raise InvalidArgumentError(
            f"--speculative-algorithm {algorithm!r}: SGLang takes "
            f"{', '.join([*ALGORITHMS, *NOT_PLANNED])}"
        )
    method = ALGORITHMS[name]
    is_deepseek = is_deepseek or name == "NEXTN"  # NEXTN runs DeepSeek's MTP layers
    if name == "EAGLE" and not draft_model_path:
        # SGLang sets the draft to the checkpoint itself for DeepSeek-V3 / GLM-4-MoE (its MTP
        # layers, as NEXTN); another checkpoint without them is refused where it is planned
        method, is_deepseek = SpecMethod.MTP, True
    for flag, value in (
        ("--speculative-num-steps", num_steps),
        ("--speculative-eagle-topk", eagle_topk),
        ("--speculative-num-draft-tokens", num_draft_tokens),
    ):
        if value is not None and value < 1:
            raise InvalidArgumentError(f"{flag} {value}: give a positive integer")
    if num_steps is None:
        if eagle_topk is not None or num_draft_tokens is not None:
            raise InvalidArgumentError(
                "--speculative-eagle-topk / --speculative-num-draft-tokens need "
                "--speculative-num-steps (SGLang auto-chooses the three together)"
            )
        num_steps, eagle_topk, num_draft_tokens = _DEEPSEEK_AUTO if is_deepseek else _OTHER_AUTO
    topk = eagle_topk or 1
    tokens = num_draft_tokens or num_steps + 1
    if topk == 1:
        tokens = num_steps + 1  # "speculative_num_draft_tokens is adjusted to steps + 1"
    if method is not SpecMethod.MTP and not draft_model_path:
        raise InvalidArgumentError(
            f"--speculative-algorithm {name} needs --speculative-draft-model-path (the draft "
            "checkpoint's Hub id or path)"
        )
    return SpeculativeConfig(
        method=method,
        method_name=method.value,
        num_speculative_tokens=num_steps,
        model=draft_model_path if method is not SpecMethod.MTP else None,
        eagle_topk=topk,
        num_draft_tokens=tokens,
        sglang_algorithm=name,
    )


def default_running_requests(sc: SpeculativeConfig) -> int | None:
    """``--max-running-requests`` SGLang sets for this speculation when none is given."""
    return SPEC_MAX_RUNNING_REQUESTS if sc.method.runs_on_gpu else None


def reserve_bytes(algorithm: str | None) -> float:
    """What the default ``--mem-fraction-static`` keeps out of the pool for the drafter."""
    if algorithm is None:
        return 0.0
    return STANDALONE_RESERVE_BYTES if algorithm == "STANDALONE" else EAGLE_RESERVE_BYTES


def draft_pool_tokens(sc: SpeculativeConfig, running: int) -> int:
    """The tokens the pool grows by beyond the profiled ones (``draft_runner_cache_size``
    less ``max_total_num_tokens``)."""
    topk = sc.eagle_topk or 1
    return running * sc.k * topk + running * sc.verify_tokens + POOL_BUFFER_TOKENS


def draft_kv_bytes_per_token(
    spec: ModelSpec, layers: tuple[LayerSpec, ...], tp: int, kv_cache_dtype: str
) -> int:
    """One token of the draft worker's KV pool on one GPU: its attention layers' K and V
    (an MTP layer's latent, not split by TP)."""
    element = resolve_kv_dtype_bytes(spec, kv_cache_dtype)
    total = 0
    for layer in layers:
        for m in layer.mixers:
            if isinstance(m, AttentionSpec):
                total += attention_bytes_per_token(m, tp, element)
            elif isinstance(m, MlaSpec):
                total += mla_bytes_per_token(m, kv_cache_dtype, element)
    return total


def static_reserve(memory: MemoryBreakdown, fraction: float) -> tuple[float, int]:
    """(what --mem-fraction-static ``fraction`` leaves out of the memory free before loading,
    what the activations and CUDA graphs take of it): the room SGLang's later allocations
    (the request-to-token table, a drafter) have."""
    reserve = (memory.total_bytes - memory.non_torch_bytes) * (1.0 - fraction)
    return reserve, memory.activation_peak_bytes + memory.cuda_graph_bytes


def with_sglang_drafter(
    plan: CapacityPlan,
    spec: ModelSpec,
    sc: SpeculativeConfig,
    draft: DraftNetwork | None,
    profiled_tokens: int,
    extra_tokens: int,
    fraction: float,
    *,
    taken_bytes: int = 0,
) -> CapacityPlan:
    """``plan`` (the target's pool, grown by ``extra_tokens``) with the drafter SGLang loads
    after it: its weights and KV pool in the memory ``fraction`` leaves out, beside the
    activations, CUDA graphs and ``taken_bytes`` allocated before it (the request-to-token
    table); a drafter that does not fit there stops the start."""
    r, memory = plan.settings, plan.memory
    tp = r.tensor_parallel_size
    layers = drafter.cache_layers(spec, sc, draft)
    weights = drafter.weight_bytes_per_gpu(
        spec,
        sc,
        draft,
        tp=tp,
        capability=plan.gpu.compute_capability_tuple,
        has_triton_kernels=plan.behaviour.ships_triton_kernels,
    )
    pool = profiled_tokens + extra_tokens
    kv = pool * draft_kv_bytes_per_token(spec, layers, tp, r.kv_cache_dtype)
    reserve, beside = static_reserve(memory, fraction)
    beside += taken_bytes
    headroom = extra_tokens * plan.kv_bytes_per_token
    needed = beside + headroom + weights + kv
    note = (
        f"{sc.describe()}: the pool holds "
        f"{profiled_tokens:,} profiled tokens + {extra_tokens:,} for the drafts of "
        f"{r.max_num_seqs:,} running requests (x {sc.k} steps x top-{sc.eagle_topk} + x "
        f"{sc.verify_tokens} verified + {POOL_BUFFER_TOKENS}); the drafter's "
        f"{weights / GIB_BYTES:.2f} GiB of weights and {kv / GIB_BYTES:.2f} GiB KV pool "
        f"({pool:,} tokens in {len(layers)} layer(s)) load after it, in the "
        f"{reserve / GIB_BYTES:.2f} GiB --mem-fraction-static {fraction:g} leaves out, beside "
        f"{beside / GIB_BYTES:.2f} GiB of activations, CUDA graphs and the request table "
        "(model_runner.py "
        "init_memory_pool, server_args.py)"
    )
    problems = plan.problems
    starts = plan.starts
    if beside <= reserve < needed:
        problems = (
            *problems,
            f"{STARTUP}SGLang runs out of memory loading the drafter: its weights "
            f"({weights / GIB_BYTES:.2f} GiB), KV pool ({kv / GIB_BYTES:.2f} GiB) and the "
            f"pool's draft headroom ({headroom / GIB_BYTES:.2f} GiB) need "
            f"{(needed - beside) / GIB_BYTES:.2f} GiB beside the activations, and "
            f"--mem-fraction-static {fraction:g} leaves {(reserve - beside) / GIB_BYTES:.2f} "
            "GiB: lower --mem-fraction-static or --max-running-requests",
        )
        starts = False
    return replace(
        plan,
        weights_total_bytes=plan.weights_total_bytes + weights * r.num_gpus,
        starts=starts,
        meets_target=plan.meets_target and starts,
        problems=problems,
        assumptions=(note, *plan.assumptions),
    )
