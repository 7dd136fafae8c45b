"""Scaling out: which layout of N GPUs serves a workload best, and the commands for it.

Layouts are tensor parallel (TP, within a node: NVLink or PCIe) x pipeline parallel (PP,
across nodes) x data-parallel replicas (DP), plus expert parallelism (EP) for MoE models
(``--enable-expert-parallel``: experts are spread whole over the TP ranks instead of being
sliced). A MoE model's DP ranks can also be one vLLM engine (``--data-parallel-size``, within
a node): its experts are then spread over all TP x DP GPUs (sliced, or whole with EP = TP x
DP), the layout users run for large MoE models (TP1 x DP8 + EP). For a dense model the ranks
of one engine are replicas, so only replicas are tried. Each layout is planned (does it
fit?) and simulated under its share of the load (concurrency or request rate divided by the
ranks); the best one is picked for the objective:

- ``throughput``: most output tokens/s over all GPUs, among layouts meeting the SLO;
- ``latency``: lowest time per output token (then TTFT), among layouts meeting the SLO.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from servefit.core.data_parallel import rank_workload as replica_workload
from servefit.core.hardware import GpuSpec
from servefit.core.model_spec import ModelSpec
from servefit.core.plan import CapacityPlan, ServeSettings, plan_capacity
from servefit.core.serving import LoadResult
from servefit.core.workload import Slo, Workload
from servefit.errors import ServefitError

OBJECTIVES = ("throughput", "latency")


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    tp: int
    pp: int
    dp: int
    ep: bool = False
    # the DP ranks are one vLLM engine (--data-parallel-size), not separate replicas
    one_engine: bool = False

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def expert_parallel_size(self) -> int:
        """The GPUs an expert layer's whole experts are spread over (1 without EP)."""
        if not self.ep:
            return 1
        return self.tp * self.dp if self.one_engine else self.tp

    @property
    def label(self) -> str:
        text = f"TP{self.tp} x PP{self.pp} x DP{self.dp}"
        text += " in one engine" if self.one_engine else ""
        return text + (" + EP" if self.ep else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class LayoutResult:
    layout: Layout
    plan: CapacityPlan | None
    load: LoadResult | None  # one replica under its share of the workload
    problem: str = ""

    @property
    def fits(self) -> bool:
        return self.load is not None

    @property
    def output_throughput_tok_per_s(self) -> float:
        return self.load.output_throughput_tok_per_s * self.layout.dp if self.load else 0.0

    def meets(self, slo: Slo | None) -> bool:
        if self.load is None:
            return False
        if slo is None:
            return True
        ttft_ok = slo.ttft_s is None or self.load.ttft_s.mean <= slo.ttft_s
        tpot_ok = slo.tpot_s is None or self.load.tpot_s.mean <= slo.tpot_s
        return ttft_ok and tpot_ok


def candidate_layouts(
    num_gpus: int, gpus_per_node: int, *, is_moe: bool, max_pp: int = 8
) -> tuple[Layout, ...]:
    """Every TP x PP x DP that uses exactly ``num_gpus``: TP a power of two within a node,
    PP across nodes (only when TP fills a node), DP the rest; for a MoE model, DP ranks
    within a node also as one engine, with and without EP."""
    if num_gpus < 1 or gpus_per_node < 1:
        raise ServefitError("--num-gpus and --gpus-per-node must be >= 1")
    out = []
    tp = 1
    while tp <= min(gpus_per_node, num_gpus):
        pp = 1
        while tp * pp <= num_gpus and pp <= max_pp:
            if num_gpus % (tp * pp) == 0 and (pp == 1 or tp == gpus_per_node):
                dp = num_gpus // (tp * pp)
                out.append(Layout(tp=tp, pp=pp, dp=dp))
                if is_moe and tp > 1:
                    out.append(Layout(tp=tp, pp=pp, dp=dp, ep=True))
                if is_moe and pp == 1 and dp > 1 and tp * dp <= gpus_per_node:
                    out.append(Layout(tp=tp, pp=1, dp=dp, one_engine=True))
                    out.append(Layout(tp=tp, pp=1, dp=dp, one_engine=True, ep=True))
            pp *= 2
        tp *= 2
    return tuple(out)


Simulate = Callable[[CapacityPlan, Workload, int], LoadResult]  # (plan, workload, ep size)


def plan_scaling(
    spec: ModelSpec,
    gpu: GpuSpec,
    settings: ServeSettings,
    workload: Workload,
    simulate: Simulate,
    *,
    num_gpus: int,
    gpus_per_node: int,
    mamba_ssm_dtype: str | None = None,
) -> tuple[LayoutResult, ...]:
    """Plan and simulate every candidate layout of ``num_gpus``."""
    results = []
    for layout in candidate_layouts(num_gpus, gpus_per_node, is_moe=spec.is_moe):
        s = replace(
            settings,
            tensor_parallel_size=layout.tp,
            pipeline_parallel_size=layout.pp,
            data_parallel_size=layout.dp if layout.one_engine else 1,
            concurrency=None,
            enable_expert_parallel=layout.ep,
        )
        try:
            plan = plan_capacity(
                spec, gpu, s, mamba_ssm_dtype=mamba_ssm_dtype, with_suggestions=False
            )
        except ServefitError as error:
            results.append(LayoutResult(layout=layout, plan=None, load=None, problem=str(error)))
            continue
        if not plan.starts:
            results.append(
                LayoutResult(layout=layout, plan=plan, load=None, problem=plan.problems[0])
            )
            continue
        try:
            load = simulate(
                plan, replica_workload(workload, layout.dp), layout.expert_parallel_size
            )
        except ServefitError as error:
            results.append(LayoutResult(layout=layout, plan=plan, load=None, problem=str(error)))
            continue
        results.append(LayoutResult(layout=layout, plan=plan, load=load))
    return tuple(results)


def choose_layout(
    results: tuple[LayoutResult, ...], objective: str, slo: Slo | None = None
) -> LayoutResult | None:
    if objective not in OBJECTIVES:
        raise ServefitError(f"--objective must be one of {', '.join(OBJECTIVES)}, got {objective}")
    ok = [r for r in results if r.meets(slo)] or [r for r in results if r.fits]
    if not ok:
        return None
    if objective == "throughput":
        return max(ok, key=lambda r: (r.output_throughput_tok_per_s, -r.layout.tp))
    return min(ok, key=lambda r: (r.load.tpot_s.mean, r.load.ttft_s.mean) if r.load else (0, 0))


def layout_commands(
    model_id: str,
    layout: Layout,
    gpus_per_node: int,
    *,
    serve_args: Sequence[str] | None = None,
    is_moe: bool = False,
) -> tuple[str, ...]:
    """The commands that realise a layout with vLLM (Ray across nodes). ``serve_args`` is
    the full ``vllm serve`` line of one replica, or of the one engine (the user's flags and
    the layout's TP/PP/DP/EP); without it, a bare line with the layout's flags. Replicas of
    a MoE model are separate servers: ``--data-parallel-size`` would make them one engine,
    whose experts are spread differently."""
    if serve_args is None:
        flags = ["vllm", "serve", model_id, "--tensor-parallel-size", str(layout.tp)]
        if layout.pp > 1:
            flags += ["--pipeline-parallel-size", str(layout.pp)]
        if layout.one_engine:
            flags += ["--data-parallel-size", str(layout.dp)]
        if layout.ep:
            flags.append("--enable-expert-parallel")
        serve_args = flags
    serve = shlex.join(serve_args)
    if layout.one_engine:
        return (serve,)
    per_replica_gpus = layout.tp * layout.pp
    if per_replica_gpus > gpus_per_node:
        nodes = -(-per_replica_gpus // gpus_per_node)
        return (
            "# on the head node:",
            "ray start --head --port 6379",
            f"# on each of the other {nodes - 1} node(s):",
            "ray start --address <head-node-ip>:6379",
            "# then, on the head node, once `ray status` shows all GPUs:",
            serve + " --distributed-executor-backend ray",
            *(
                (f"# x {layout.dp} replicas behind a load balancer (one Ray cluster each)",)
                if layout.dp > 1
                else ()
            ),
        )
    if layout.dp > 1 and layout.dp * per_replica_gpus <= gpus_per_node and not is_moe:
        return (serve + f" --data-parallel-size {layout.dp}",)
    if layout.dp > 1:
        return (
            serve,
            f"# x {layout.dp} replicas (one per {per_replica_gpus} GPUs) behind a load balancer",
        )
    return (serve,)
