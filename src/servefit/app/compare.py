"""``compare``: the same workload for several models on several GPUs, each cell planned by
:func:`servefit.app.plan.plan_deployment` (so a cell says what ``plan`` says), and why one
machine decodes faster than another."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from servefit.adapters.catalog import gpu_catalog
from servefit.adapters.model_source import load_model
from servefit.app.deployment import Deployment
from servefit.app.plan import PlanOutcome, plan_deployment
from servefit.app.resolve import resolve
from servefit.core.hardware import GpuSpec
from servefit.core.perf import PerformancePlan
from servefit.core.weights import count_params
from servefit.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True, kw_only=True)
class CompareCell:
    model: str
    gpu: str
    gpu_spec: GpuSpec  # the four numbers of the machine, even when the pairing is refused
    active_params: int  # parameters one token reads (the model's, whatever the machine)
    outcome: PlanOutcome | None  # None when this pairing cannot even be planned
    problem: str  # why it does not fit (the verdict's first reason), or ""

    @property
    def fits(self) -> bool:
        return self.outcome is not None and self.outcome.fits


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    cells: tuple[CompareCell, ...]
    explanation: tuple[str, ...]


def compare_deployments(
    d: Deployment, models: Sequence[str], gpu_names: Sequence[str]
) -> Comparison:
    """Plan ``d`` for every model x GPU. A model that cannot be loaded is an error; a
    pairing the engine refuses (a checkpoint format, a TP size) is a cell that does not fit."""
    if not gpu_names:
        raise InvalidArgumentError("--gpus needs at least one GPU name")
    if d.hardware.calibration_path is not None and len(gpu_names) > 1:
        raise InvalidArgumentError(
            "--calibration describes one device: compare a single GPU with it"
        )
    cells = []
    for model in models:
        loaded = load_model(model, revision=d.revision, allow_hub=d.allow_hub)
        active = count_params(loaded.spec).active
        for name in gpu_names:
            cell_d = replace(d, model=model, hardware=replace(d.hardware, gpu=name))
            gpu_spec = gpu_catalog().get(name)  # an unknown GPU is an input error
            try:  # the engine may refuse the pairing (a checkpoint format, a TP size)
                resolved = resolve(cell_d, loaded=loaded)
                outcome = plan_deployment(cell_d, resolved=resolved)
            except InvalidArgumentError as error:
                cells.append(
                    CompareCell(
                        model=loaded.spec.name,
                        gpu=gpu_spec.name,
                        gpu_spec=gpu_spec,
                        active_params=active,
                        outcome=None,
                        problem=str(error),
                    )
                )
                continue
            problem = "" if outcome.fits else (outcome.verdict.reasons or ("does not fit",))[0]
            cells.append(
                CompareCell(
                    model=loaded.spec.name,
                    gpu=resolved.gpu.name,
                    gpu_spec=resolved.gpu,
                    active_params=active,
                    outcome=outcome,
                    problem=problem,
                )
            )
    return Comparison(cells=tuple(cells), explanation=tuple(explain_decode(cells)))


def explain_decode(cells: Sequence[CompareCell]) -> list[str]:
    """Why one machine decodes faster than another: bandwidth over bytes read per token."""
    runs: list[tuple[str, str, PerformancePlan, float]] = [
        (
            c.model,
            c.gpu,
            c.outcome.performance,
            c.outcome.resolved.gpu.memory_bandwidth_bytes_per_s,
        )
        for c in cells
        if c.outcome is not None and c.outcome.performance is not None and c.outcome.fits
    ]
    lines = []
    for model, gpu_name, perf, bw in runs:
        lines.append(
            f"{model} on {gpu_name}: one decode step reads {perf.decode_bytes_per_token / 1e9:.2f}"
            f" GB per GPU ({perf.weight_bytes_per_token / 1e9:.2f} GB of weights); "
            f"{bw / 1e9:,.0f} GB/s / {perf.decode_bytes_per_token / 1e9:.2f} GB = "
            f"{bw / perf.decode_bytes_per_token:,.0f} tok/s ceiling, "
            f"{1 / perf.tpot_batch1_s:,.0f} tok/s predicted at batch 1 "
            f"({perf.decode.bound.value}-bound)"
        )
    for f_model, f_gpu, f_perf, f_bw in runs:
        for s_model, s_gpu, s_perf, s_bw in runs:
            if not (f_perf.tpot_batch1_s < s_perf.tpot_batch1_s and f_bw < s_bw):
                continue
            lines.append(
                f"{f_model} on {f_gpu} decodes "
                f"{s_perf.tpot_batch1_s / f_perf.tpot_batch1_s:.1f}x faster than {s_model} on "
                f"{s_gpu} although {s_gpu} has {s_bw / f_bw:.1f}x the bandwidth: it reads "
                f"{s_perf.decode_bytes_per_token / f_perf.decode_bytes_per_token:.1f}x fewer "
                f"bytes per token ({f_perf.decode_bytes_per_token / 1e9:.2f} GB vs "
                f"{s_perf.decode_bytes_per_token / 1e9:.2f} GB: active parameters x bytes per "
                "parameter, plus the KV cache)"
            )
    return lines
