"""SGLang's own memory pool and scheduler defaults, read from its source (the sglang
0.5.9 and 0.5.11-0.5.16 wheels; file and line per rule below).

What SGLang decides differently from vLLM, and servefit mirrors:

* **the pool**: ``--mem-fraction-static`` is the share of the memory free before loading that
  weights and pools may take; the rest of that share after the weights is the pool
  (``mem_cache/kv_cache_configurator.py``: ``rest = free_after_weights - pre_model_load_free x
  (1 - mem_fraction_static)``). Its default (``server_args._handle_gpu_memory_settings``,
  0.5.9) reserves ``512 + max(chunked_prefill_size, 2048) x 1.5 + cuda_graph_max_bs x 2 +
  tp x pp / 8 x 1024`` MB, at least 10 GiB on a GPU of more than 60 GiB;
* **linear-attention and Mamba state** lives in a pool of its own: ``mamba_full_memory_ratio``
  (0.9, ``server_args.py``) of the rest goes to it as ``0.9 / 1.9``; each request's slot holds
  the conv window in the model dtype and the SSM state in float32 (``configs/mamba_utils.py``
  ``mamba_cache_per_req``); the full-attention KV pool gets what the slots leave;
* **running requests**: ``resolve_max_num_reqs`` (``kv_cache_configurator.py``) takes
  ``min(clamp(tokens / context_len x 512, 2048, 4096), tokens // 2)`` and, with state, at most
  ``mamba slots // 5`` (3 slots a running request plus the ping-pong pair of the
  ``extra_buffer`` radix strategy that "auto" picks from 0.5.14 with overlap scheduling on);
* **chunked prefill**: ``chunked_prefill_size`` by the GPU's memory: 2048 below 35 GiB, 4096
  below 60, 8192 below 160, 16384 from 160 (``_handle_gpu_memory_settings``);
* **the request-to-token table**: ``(max_num_reqs + 1) x (context_len + 4)`` int32, allocated
  after the pool is sized, in the memory the static share leaves (``request_table_bytes``).

The weights, activation and runtime estimates stay vLLM's (the plan says so); SGLang's
admission into the KV cache is :mod:`servefit.core.engine_scheduling`'s ``sglang`` rule.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from servefit.core.engines.sglang_spec import (
    default_running_requests,
    draft_pool_tokens,
    reserve_bytes,
    static_reserve,
    with_sglang_drafter,
)
from servefit.core.engines.vllm import VllmAccountedEngine
from servefit.core.hardware import GpuSpec
from servefit.core.kv_pages import state_bytes
from servefit.core.model_spec import LinearAttentionSpec, MambaSpec, ModelSpec
from servefit.core.plan import CapacityPlan, ServeSettings, plan_capacity
from servefit.core.plan_verdict import STARTUP
from servefit.core.speculative import SpecMethod
from servefit.errors import InvalidArgumentError
from servefit.units import GIB_BYTES, MIB_BYTES, dtype_bytes

MAMBA_FULL_MEMORY_RATIO = 0.9  # server_args.py mamba_full_memory_ratio default
MAMBA_SLOTS_PER_RUNNING_REQUEST = 5  # 3 + 2 (extra_buffer with overlap scheduling, 0.5.14+)
SSM_STATE_BYTES = 4  # float32 temporal state (the config's mamba_ssm_dtype)
MAX_RUNNING_FLOOR, MAX_RUNNING_CEILING = 2048, 4096  # resolve_max_num_reqs clamp
LARGE_GPU_RESERVE_BYTES = 10 * GIB_BYTES  # the reserve's floor on a GPU of more than 60 GiB
REQ_TO_TOKEN_SLOT_BYTES = 4  # ReqToTokenPool.req_to_token is int32
REQ_TO_TOKEN_EXTRA_SLOTS = 4  # max_context_len = model_config.context_len + 4

# (below this much memory, chunked_prefill_size, cuda_graph_max_bs at tp < 4, at tp >= 4)
_GPU_TIERS = (
    (20 * GIB_BYTES, 2048, 8, 8),
    (35 * GIB_BYTES, 2048, 24, 80),
    (60 * GIB_BYTES, 4096, 32, 160),
    (90 * GIB_BYTES, 8192, 256, 512),
    (160 * GIB_BYTES, 8192, 256, 512),
)
_LARGEST_TIER = (16384, 512, 512)


def gpu_defaults(total_bytes: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks for a GPU of ``total_bytes``."""
    for below, chunk, graphs_small_tp, graphs_large_tp in _GPU_TIERS:
        if total_bytes < below:
            return chunk, graphs_small_tp if tp < 4 else graphs_large_tp
    chunk, graphs_small_tp, graphs_large_tp = _LARGEST_TIER
    return chunk, graphs_small_tp if tp < 4 else graphs_large_tp


# The releases whose server_args.py servefit read for the default --mem-fraction-static
# (the PyPI wheels): each rule holds from its release to the next one read. 0.5.3-0.5.8
# were not read: they plan with 0.5.2's rule, and the plan says so.
DEFAULT_SGLANG_VERSION = "0.5.16"
RULE_RELEASES = ((0, 3, 6), (0, 4, 6), (0, 4, 9), (0, 5, 9))
_BY_TP = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87))  # 0.3.6-0.4.6: tp >= n -> fraction


def parse_sglang_version(version: str) -> tuple[int, int, int]:
    """ "0.4.6.post1" -> (0, 4, 6); a release before the first one read is refused."""
    from servefit.errors import InvalidArgumentError

    parts = version.strip().lstrip("v").split(".")
    try:
        release = tuple(int(x) for x in parts[:3]) + (0,) * (3 - len(parts[:3]))
    except ValueError:
        raise InvalidArgumentError(
            f"--sglang-version {version!r}: give a release such as 0.4.6 or 0.5.9"
        ) from None
    major, minor, patch = release[:3]
    if (major, minor, patch) < RULE_RELEASES[0]:
        raise InvalidArgumentError(
            f"--sglang-version {version}: servefit mirrors SGLang from 0.3.6 on"
        )
    return major, minor, patch


def rule_release(version: str) -> tuple[int, int, int]:
    """The release whose default rule ``version`` runs (the latest one read at or before it)."""
    v = parse_sglang_version(version)
    return max(r for r in RULE_RELEASES if r <= v)


def default_mem_fraction_static(
    total_bytes: float,
    tp: int,
    pp: int,
    version: str = DEFAULT_SGLANG_VERSION,
    *,
    drafter_reserve_bytes: float = 0.0,
    dp_attention_ranks: int = 0,
) -> float:
    """SGLang's default ``--mem-fraction-static`` for this GPU and layout, by release
    (``ServerArgs.__post_init__`` / ``_handle_gpu_memory_settings`` in server_args.py):

    - 0.3.6 to 0.4.5 by TP size alone: 0.88 on one GPU, 0.87 from TP 2, 0.85 from 4, 0.81
      from 8 (0.82 in 0.3.x), 0.79 from 16;
    - 0.4.6 the same up to 80 GiB; a larger GPU keeps 13 GiB: ``(mem - 13 GiB) / mem``;
    - 0.4.9 to 0.5.2 by the GPU's memory: it keeps 2.8 + TP x PP / 10 GiB below 35 GiB,
      9.5 + TP x PP / 2 below 90, 12 + TP x PP / 2 below 160, 32 above;
    - 0.5.9 on: 512 MB + 1.5 x the chunked-prefill size + 2 x the CUDA-graph batch + TP x PP
      / 8 GiB, at least 10 GiB above 60 GiB (MB counted as MiB).

    From 0.4.9 a speculative drafter keeps ``drafter_reserve_bytes`` more out
    (:func:`servefit.core.engines.sglang_spec.reserve_bytes`), and DP attention over
    ``dp_attention_ranks`` ranks 4 GiB more (0.4.9 to 0.5.2) or 3 MB per CUDA-graph batch
    entry and rank (4.5 MB above a graph batch of 300; 0.5.9 on, before the 10 GiB floor);
    the TP-only rules before 0.4.9 keep none. ``tp`` is SGLang's --tp-size (every GPU of a
    DP-attention deployment)."""
    rule = rule_release(version)
    if rule == (0, 3, 6) or (rule == (0, 4, 6) and total_bytes <= 80 * GIB_BYTES):
        eight = 0.82 if parse_sglang_version(version)[1] < 4 else 0.81
        for at_least, fraction in _BY_TP:
            if tp >= at_least:
                return eight if at_least == 8 else fraction
        return 0.88
    if rule == (0, 4, 6):
        return (total_bytes - 13 * GIB_BYTES) / total_bytes
    if rule == (0, 4, 9):
        world = tp * pp
        if total_bytes < 35 * GIB_BYTES:
            kept = 2.8 + world / 10
        elif total_bytes < 90 * GIB_BYTES:
            kept = 9.5 + world / 2
        elif total_bytes < 160 * GIB_BYTES:
            kept = 12 + world / 2
        else:
            kept = 32
        if dp_attention_ranks:
            kept += 4
        return round((total_bytes - kept * GIB_BYTES - drafter_reserve_bytes) / total_bytes, 3)
    chunk, graphs = gpu_defaults(total_bytes, tp)
    reserved_mb = 512 + max(chunk, 2048) * 1.5 + graphs * 2 + tp * pp / 8 * 1024
    if dp_attention_ranks:  # "DP attention needs more padding for some operations"
        reserved_mb += graphs * dp_attention_ranks * (3 + (1.5 if graphs > 300 else 0))
    reserved = reserved_mb * MIB_BYTES
    if total_bytes > 60 * GIB_BYTES:
        reserved = max(reserved, LARGE_GPU_RESERVE_BYTES)
    return round((total_bytes - reserved - drafter_reserve_bytes) / total_bytes, 3)


def pool_tokens(
    free_before_load_bytes: float, weights_bytes: float, fraction: float, bytes_per_token: int
) -> int:
    """``max_total_num_tokens`` of a pool without state (model_runner.py
    ``profile_max_num_token``): the memory free after loading, less the
    ``1 - mem_fraction_static`` share of the memory free before it, over a token's KV."""
    rest = fraction * free_before_load_bytes - weights_bytes
    return max(int(rest // bytes_per_token), 0) if bytes_per_token else 0


def state_slot_bytes(spec: ModelSpec, tp: int) -> int:
    """One request's linear-attention / Mamba state on one GPU, as SGLang sizes its slot."""
    conv = dtype_bytes(spec.dtype)
    return sum(
        state_bytes(m, tp, conv, SSM_STATE_BYTES)
        for layer in spec.layers
        for m in layer.mixers
        if isinstance(m, LinearAttentionSpec | MambaSpec)
    )


def request_table_bytes(running_requests: int, context_len: int) -> int:
    """SGLang's request-to-token table on one GPU (``ReqToTokenPool``,
    mem_cache/memory_pool.py): an int32 row of ``context_len + 4`` token slots for each of
    ``max_num_reqs + 1`` requests (model_runner.py ``init_memory_pool``), allocated after the
    pool is sized, so out of what ``--mem-fraction-static`` leaves. It grows with the
    context, not with the tokens held: Llama 4 Scout's default 10,485,760-token context at
    the 2,048-request floor is 80.04 GiB (sgl-project/sglang#5755: "Tried to allocate
    80.04 GiB")."""
    return (
        (running_requests + 1)
        * (context_len + REQ_TO_TOKEN_EXTRA_SLOTS)
        * (REQ_TO_TOKEN_SLOT_BYTES)
    )


def with_request_table(plan: CapacityPlan, fraction: float) -> tuple[CapacityPlan, int]:
    """``plan`` with SGLang's request-to-token table in the reserve beside the activations
    and CUDA graphs, and a start stopped by name where the table is what does not fit;
    with the table's bytes, which a drafter loaded after it finds taken."""
    r, memory = plan.settings, plan.memory
    table = request_table_bytes(r.max_num_seqs, r.max_model_len)
    reserve, beside = static_reserve(memory, fraction)
    note = (
        f"SGLang's request-to-token table: {r.max_num_seqs + 1:,} rows of "
        f"{r.max_model_len + REQ_TO_TOKEN_EXTRA_SLOTS:,} int32 slots = "
        f"{table / GIB_BYTES:,.2f} GiB per GPU, in the {reserve / GIB_BYTES:,.2f} GiB "
        f"--mem-fraction-static {fraction:g} leaves out (model_runner.py init_memory_pool)"
    )
    problems = plan.problems
    starts = plan.starts
    if beside <= reserve < beside + table:
        problems = (
            *problems,
            f"{STARTUP}SGLang runs out of memory allocating its request-to-token table: "
            f"{r.max_num_seqs + 1:,} requests x {r.max_model_len + REQ_TO_TOKEN_EXTRA_SLOTS:,} "
            f"int32 slots = {table / GIB_BYTES:,.2f} GiB, and --mem-fraction-static "
            f"{fraction:g} leaves {(reserve - beside) / GIB_BYTES:,.2f} GiB beside the "
            "activations and CUDA graphs: lower --context-length or --max-running-requests",
        )
        starts = False
    plan = replace(
        plan,
        starts=starts,
        meets_target=plan.meets_target and starts,
        problems=problems,
        assumptions=(note, *plan.assumptions),
    )
    return plan, table


@dataclass(frozen=True, slots=True, kw_only=True)
class SglangPool:
    """SGLang's split of its static memory on one GPU."""

    mem_fraction_static: float
    rest_bytes: int  # the share after the weights: state slots + KV pool
    state_slots: int  # max_mamba_cache_size (0: no state)
    kv_pool_bytes: int
    kv_tokens: int  # full-attention tokens the KV pool holds
    max_running_requests: int


def sglang_pool(
    plan: CapacityPlan, spec: ModelSpec, fraction: float, asked_running: int | None
) -> SglangPool:
    """The pool and running-request cap of a vLLM-accounted ``plan`` under SGLang's rules."""
    memory, r = plan.memory, plan.settings
    free_before_load = memory.total_bytes - memory.non_torch_bytes
    rest = max(int(fraction * free_before_load) - memory.weights_bytes, 0)
    per_slot = state_slot_bytes(spec, r.tensor_parallel_size)
    slots = 0
    if per_slot:
        share = MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO)
        slots = int(rest * share) // per_slot
    kv_pool = rest - slots * per_slot
    if slots:
        tokens = kv_pool // plan.kv_bytes_per_token if plan.kv_bytes_per_token else 0
    else:
        tokens = pool_tokens(
            free_before_load, memory.weights_bytes, fraction, plan.kv_bytes_per_token
        )
    estimated = int(tokens / r.max_model_len * 512) if r.max_model_len else MAX_RUNNING_FLOOR
    running = max(min(estimated, MAX_RUNNING_CEILING), MAX_RUNNING_FLOOR)
    if asked_running is not None:
        running = asked_running
    running = min(running, tokens // 2)
    if slots:
        running = min(running, slots // MAMBA_SLOTS_PER_RUNNING_REQUEST)
    return SglangPool(
        mem_fraction_static=fraction,
        rest_bytes=rest,
        state_slots=slots,
        kv_pool_bytes=kv_pool,
        kv_tokens=tokens,
        max_running_requests=max(running, 1),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SglangEngine(VllmAccountedEngine):
    """SGLang: vLLM's estimates of what loading takes, SGLang's own pool, running-request
    cap and chunked-prefill size."""

    name: str = "sglang"
    label: str = "SGLang"

    def plan(
        self,
        spec: ModelSpec,
        gpu: GpuSpec,
        settings: ServeSettings,
        *,
        mamba_ssm_dtype: str | None = None,
        with_suggestions: bool = True,
    ) -> CapacityPlan:
        sc = settings.speculative
        if sc is not None and sc.sglang_algorithm is None:
            raise InvalidArgumentError(
                "--speculative-config is vLLM's flag; SGLang speculates with "
                "--speculative-algorithm EAGLE|EAGLE3|NEXTN|STANDALONE and "
                "--speculative-draft-model-path (plan them as SGLang spells them)"
            )
        if sc is not None and sc.method is SpecMethod.MTP and not spec.mtp_layers:
            raise InvalidArgumentError(
                f"--speculative-algorithm {sc.sglang_algorithm} without "
                f"--speculative-draft-model-path runs the checkpoint's own MTP layers, and "
                f"{spec.name} has none: give the draft's path"
            )
        if settings.sglang_dp_attention and not spec.is_moe:
            raise InvalidArgumentError(
                f"--enable-dp-attention on {spec.name}: servefit plans SGLang's DP attention "
                "for MoE models (attention per rank, the experts over every GPU)"
            )
        # the target alone: SGLang sizes its pool before the drafter loads
        target = replace(settings, speculative=None, draft=None) if sc else settings
        base = VllmAccountedEngine.plan(
            self, spec, gpu, target, mamba_ssm_dtype=mamba_ssm_dtype, with_suggestions=False
        )
        if settings.kv_cache_memory_bytes is not None or not base.layout.groups:
            return base  # a pool the user sized, or nothing to pool: vLLM's answer stands
        r = base.settings
        dp_attention = r.data_parallel_size if settings.sglang_dp_attention else 0
        sglang_tp = r.tensor_parallel_size * (dp_attention or 1)  # SGLang's --tp-size
        if sc is not None and state_slot_bytes(spec, r.tensor_parallel_size):
            raise InvalidArgumentError(
                f"--speculative-algorithm {sc.sglang_algorithm} on {spec.name}: SGLang's "
                "speculative state slots of linear-attention / Mamba layers are not planned"
            )
        chunk, _ = gpu_defaults(base.memory.total_bytes, sglang_tp)
        version = settings.sglang_version or DEFAULT_SGLANG_VERSION
        fraction = settings.gpu_memory_utilization or default_mem_fraction_static(
            base.memory.total_bytes,
            sglang_tp,
            r.pipeline_parallel_size,
            version,
            drafter_reserve_bytes=reserve_bytes(sc.sglang_algorithm if sc else None),
            dp_attention_ranks=dp_attention,
        )
        asked_running = settings.max_num_seqs or (default_running_requests(sc) if sc else None)
        pool = sglang_pool(base, spec, fraction, asked_running)
        extra_tokens = draft_pool_tokens(sc, pool.max_running_requests) if sc else 0
        # the memory outside the pool (activations, graphs, runtime) lives in SGLang's
        # (1 - mem_fraction_static) reserve; it is estimated at vLLM's batch size, and the
        # running cap replaces max_num_seqs once the pool is planned
        own = replace(
            target,
            kv_cache_memory_bytes=pool.rest_bytes + extra_tokens * base.kv_bytes_per_token,
            max_num_seqs=settings.max_num_seqs or r.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens or chunk,
        )
        plan = plan_capacity(
            spec, gpu, own, mamba_ssm_dtype=mamba_ssm_dtype, with_suggestions=with_suggestions
        )
        # SGLang's budget: the static share of the memory free before loading
        free_before_load = plan.memory.total_bytes - plan.memory.non_torch_bytes
        plan = replace(
            plan,
            settings=replace(
                plan.settings,
                max_num_seqs=pool.max_running_requests,
                gpu_memory_utilization=fraction,
                speculative=sc,
            ),
            memory=replace(
                plan.memory,
                gpu_memory_utilization=fraction,
                requested_bytes=int(fraction * free_before_load),
                is_kv_cache_given=False,
            ),
            budget_label="mem_fraction_static",
        )
        slot_mib = state_slot_bytes(spec, r.tensor_parallel_size) / MIB_BYTES
        state = (
            f"; {pool.state_slots:,} state slots of {slot_mib:,.1f} MiB "
            f"({MAMBA_FULL_MEMORY_RATIO:g}/{1 + MAMBA_FULL_MEMORY_RATIO:g} of it), at most "
            f"{pool.state_slots // MAMBA_SLOTS_PER_RUNNING_REQUEST:,} running requests "
            f"({MAMBA_SLOTS_PER_RUNNING_REQUEST} slots each)"
            if pool.state_slots
            else ""
        )
        note = (
            f"SGLang's pool: --mem-fraction-static {fraction:g} of the memory free before "
            f"loading, less the weights: {pool.rest_bytes / GIB_BYTES:,.2f} GiB per GPU{state}; "
            f"{pool.kv_tokens:,} full-attention tokens; --max-running-requests "
            f"{pool.max_running_requests:,}, --chunked-prefill-size "
            f"{own.max_num_batched_tokens:,} (sglang kv_cache_configurator.py, server_args.py); "
            "weights, activations and runtime buffers are vLLM's estimates"
        )
        plan, table = with_request_table(plan, fraction)
        if sc is not None:
            plan = with_sglang_drafter(
                plan,
                spec,
                sc,
                settings.draft,
                pool.kv_tokens,
                extra_tokens,
                fraction,
                taken_bytes=table,
            )
        if dp_attention:
            note += (
                f"; DP attention: {dp_attention} attention ranks of {r.tensor_parallel_size} "
                f"GPU(s), each with its requests' KV and whole attention weights, the experts "
                f"over all {sglang_tp} GPUs (planned as expert parallelism: the same bytes a GPU; "
                "SGLang's all-gather / reduce-scatter timed as EP's exchange)"
            )
        rule = ".".join(map(str, rule_release(version)))
        read = (
            ""
            if rule_release(version) == parse_sglang_version(version)
            else (
                f"; SGLang {version}'s default --mem-fraction-static is taken as {rule}'s, the "
                "latest release servefit read before it"
            )
        )
        return replace(
            plan,
            engine=self.name,
            engine_label=self.label,
            engine_version=version,
            assumptions=(note + read, *plan.assumptions),
        )
