"""What each command records in the run history: its deployment key, inputs, results (the
document it writes) and headline numbers, predicted and measured.

=========  ===============================  ============================================
kind       predicted                        measured
=========  ===============================  ============================================
plan       the plan's performance and KV    -
bench      ``--plan-model``'s prediction    the summary (a sweep: the best level's)
up         the launched plan (``plan.json``)  KV tokens vLLM logged; the ``--smoke`` bench
report     the report's plan                its ``--bench`` run
eval       -                                - (its accuracy is in the results document)
=========  ===============================  ============================================

A bench of a server whose flags servefit did not see keys on the model and the ``--gpu``
and ``--plan-tp`` given; plan, up and report key on the resolved vLLM settings too.

:func:`record_or_warn` is how a command records: a history that cannot be written costs
one warning line, never the command's result or exit code.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servefit.adapters.history import Headline
from servefit.app.history import DeploymentKey, record_run
from servefit.core.stats import percentile
from servefit.errors import ServefitError

if TYPE_CHECKING:
    from servefit.adapters.eval_document import EvalDocument
    from servefit.adapters.plan_document import PlanDocument
    from servefit.adapters.report_document import ReportDocument
    from servefit.bench.metrics import Summary
    from servefit.bench.runner import BenchResult
    from servefit.bench.search import SweepResult


def record_or_warn(record: Callable[[], int]) -> str | None:
    """Run ``record``; None when it recorded, else the one warning line to print."""
    try:
        record()
    except (ServefitError, OSError, sqlite3.Error) as error:
        return f"warning: this run was not recorded in the history: {error}"
    except Exception as error:  # recording must never fail a finished command
        return (
            f"warning: this run was not recorded in the history ({type(error).__name__}: "
            f"{error}): a servefit bug, please report it"
        )
    return None


def as_json(doc: Any) -> dict[str, Any]:
    """A document (pydantic or :class:`servefit.adapters.document.FrozenDoc`) as the JSON
    value its command writes."""
    data: dict[str, Any] = json.loads(doc.model_dump_json())
    return data


# ---------------------------------------------------------------------------------------
# plan, report: a plan document


def plan_key(doc: PlanDocument) -> DeploymentKey:
    s = doc.settings
    return DeploymentKey(
        model=doc.model.id,
        gpu=doc.gpu.name,
        tensor_parallel_size=s.tensor_parallel_size,
        pipeline_parallel_size=s.pipeline_parallel_size,
        max_model_len=s.max_model_len,
        max_num_seqs=s.max_num_seqs,
        kv_cache_dtype=s.kv_cache_dtype,
        gpu_memory_utilization=s.gpu_memory_utilization,
    )


def plan_headline(doc: PlanDocument) -> Headline:
    """What the plan predicts: throughput and latency under its workload, the KV tokens."""
    perf = doc.performance
    if perf is None:
        return Headline(kv_cache_tokens=doc.memory.kv_cache_tokens)
    return Headline(
        output_tok_per_s=perf.output_throughput_tok_per_s,
        ttft_mean_s=perf.ttft_s,
        ttft_p50_s=perf.load.ttft_s.p50,
        ttft_p90_s=perf.load.ttft_s.p90,
        tpot_mean_s=perf.tpot_s,
        kv_cache_tokens=doc.memory.kv_cache_tokens,
    )


def record_plan(db_path: Path, doc: PlanDocument, inputs: dict[str, Any]) -> int:
    """``plan --save``: the ``--json`` document and its predictions."""
    results = as_json(doc)
    return record_run(db_path, "plan", plan_key(doc), inputs, results, plan_headline(doc))


def record_report(
    db_path: Path, doc: ReportDocument, inputs: dict[str, Any], bench_dir: str | None
) -> int:
    """A report: its plan's predictions next to its ``--bench`` run's measurements."""
    m = doc.measured
    measured = None
    if m is not None:
        ttfts = sorted(m.ttft_values_s)
        measured = Headline(
            output_tok_per_s=m.output_throughput_tok_per_s,
            ttft_mean_s=m.ttft_s,
            ttft_p50_s=percentile(ttfts, 50) if ttfts else None,
            ttft_p90_s=percentile(ttfts, 90) if ttfts else None,
            tpot_mean_s=m.tpot_s,
        )
    return record_run(
        db_path,
        "report",
        plan_key(doc.plan),
        inputs,
        as_json(doc),
        plan_headline(doc.plan),
        measured,
        run_dir=bench_dir,
    )


# ---------------------------------------------------------------------------------------
# bench


def summary_headline(s: Summary) -> Headline:
    return Headline(
        output_tok_per_s=s.output_throughput_tok_per_s,
        ttft_mean_s=s.ttft_s.mean,
        ttft_p50_s=s.ttft_s.p50,
        ttft_p90_s=s.ttft_s.p90,
        tpot_mean_s=s.tpot_s.mean,
    )


def _prediction_headline(prediction: dict[str, Any] | None) -> Headline | None:
    """``bench --plan-model``'s prediction (mean TTFT and TPOT, no percentiles)."""
    if not prediction:
        return None
    return Headline(
        output_tok_per_s=prediction.get("output_throughput_tok_per_s"),
        ttft_mean_s=prediction.get("ttft_s"),
        tpot_mean_s=prediction.get("tpot_s"),
        kv_cache_tokens=prediction.get("kv_cache_tokens"),
    )


def bench_key(result: BenchResult, gpu: str | None, tp: int | None) -> DeploymentKey:
    p = result.prediction or {}
    model = p.get("model") or result.server.get("model") or result.config.get("model") or "?"
    return DeploymentKey(
        model=str(model),
        gpu=p.get("gpu") or gpu,
        tensor_parallel_size=p.get("tensor_parallel_size") or (tp if gpu else None),
    )


def record_bench(
    db_path: Path,
    result: BenchResult | SweepResult,
    inputs: dict[str, Any],
    run_dir: Path | str | None,
    gpu: str | None = None,
    tp: int | None = None,
) -> int:
    """One bench run: its summary document (``--json``'s), measured next to any prediction;
    a sweep or search as :func:`record_sweep`."""
    from servefit.bench.search import SweepResult

    if isinstance(result, SweepResult):
        return record_sweep(db_path, result, inputs, run_dir, gpu, tp)
    return record_run(
        db_path,
        "bench",
        bench_key(result, gpu, tp),
        inputs,
        as_json(result),
        _prediction_headline(result.prediction),
        summary_headline(result.summary),
        run_dir=run_dir,
    )


def record_sweep(
    db_path: Path,
    sweep: SweepResult,
    inputs: dict[str, Any],
    run_dir: Path | str | None,
    gpu: str | None = None,
    tp: int | None = None,
) -> int:
    """A sweep or an SLO search as one run (``sweep.json``); its headline is the level the
    search found (a plain sweep's levels are all in the results)."""
    if not sweep.levels:
        key = DeploymentKey(model=str(inputs.get("model_name") or "?"), gpu=gpu)
        return record_run(db_path, "bench", key, inputs, as_json(sweep))
    best = next((lv for lv in sweep.levels if lv.concurrency == sweep.best_concurrency), None)
    return record_run(
        db_path,
        "bench",
        bench_key(sweep.levels[0].result, gpu, tp),
        inputs,
        as_json(sweep),
        measured=summary_headline(best.result.summary) if best is not None else None,
        run_dir=run_dir,
    )


# ---------------------------------------------------------------------------------------
# up: the run folder


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def record_up(
    db_path: Path,
    run_dir: Path,
    inputs: dict[str, Any],
    *,
    exit_code: int,
    smoke: dict[str, Any] | None,
    evaluation: dict[str, Any] | None = None,
) -> int:
    """A launched ``up`` run, from its run folder: the plan it launched (``plan.json``), the
    startup log held against it (``startup.json``) and the smoke bench."""
    from servefit.adapters.plan_document import PlanDocument

    plan_data = _read_json(run_dir / "plan.json")
    if plan_data is None:
        raise ServefitError(f"the run folder {run_dir} has no readable plan.json")
    doc = PlanDocument.model_validate(plan_data)
    startup = _read_json(run_dir / "startup.json") or {}
    logged_kv = next(
        (
            c.get("logged")
            for c in startup.get("comparisons", [])
            if c.get("quantity") == "kv_cache_tokens"
        ),
        None,
    )
    m = (smoke or {}).get("measured", {})
    measured = Headline(
        output_tok_per_s=m.get("output_throughput_tok_per_s"),
        ttft_mean_s=m.get("ttft_s"),
        tpot_mean_s=m.get("tpot_s"),
        kv_cache_tokens=logged_kv,
    )
    results = {"exit_code": exit_code, "plan": plan_data, "startup": startup, "smoke": smoke}
    if evaluation is not None:
        results["eval"] = evaluation
    return record_run(
        db_path, "up", plan_key(doc), inputs, results, plan_headline(doc), measured, run_dir
    )


# ---------------------------------------------------------------------------------------
# eval


def record_eval(
    db_path: Path, doc: EvalDocument, inputs: dict[str, Any], run_dir: Path | str | None
) -> int:
    """An eval run: its document (accuracy per task, every item's score); keyed on the
    model the server answered as (no headline: accuracy is not a speed)."""
    return record_run(
        db_path,
        "eval",
        DeploymentKey(model=doc.model),
        inputs,
        as_json(doc),
        run_dir=None if run_dir is None else str(run_dir),
    )


# ---------------------------------------------------------------------------------------
# another tool's result file


def record_import(db_path: Path, path: Path, fmt: str) -> int:
    """Another load tool's result (``servefit history import FILE --format``) as a measured
    bench run of its model, its figures as the measured headline."""
    from servefit.adapters.foreign_results import read_result

    run = read_result(path, fmt)
    measured = Headline(
        output_tok_per_s=run.output_tok_per_s,
        ttft_mean_s=run.ttft_mean_s,
        ttft_p50_s=run.ttft_p50_s,
        ttft_p90_s=run.ttft_p90_s,
        tpot_mean_s=run.tpot_mean_s,
    )
    inputs = {"imported_from": str(path), "format": fmt, "tool": run.tool}
    results = {"imported": {"tool": run.tool, "format": fmt}, "summary": run.summary}
    return record_run(
        db_path, "bench", DeploymentKey(model=run.model), inputs, results, measured=measured
    )
