"""What the page shows, computed by the application layer: the plan (as ``servefit plan
--json`` writes it), the report's checklist, charts and diagnosis (as ``servefit report``
builds them), the comparison (as ``servefit compare --json``) and a registered run's report.
No formula lives here: these functions call :mod:`servefit.app` and the CLI's own document
builders, and shape their answers for the page."""

from __future__ import annotations

import hashlib
import json
import shlex
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servefit.errors import DatasetError, InvalidArgumentError
from servefit.ui.query import UPLOAD_PREFIX, FieldError, PageQuery, check_model_name, cli_args

if TYPE_CHECKING:
    from servefit.adapters.model_source import LoadedModel
    from servefit.adapters.report import ReportDocument
    from servefit.app.resolve import Resolved

MAX_UPLOAD_BYTES = 4 * 2**20  # a config.json is a few KiB; a quantization config a few more
MAX_CACHED_MODELS = 32


@dataclass(slots=True)
class Run:
    """A run folder the user registered from the CLI (``servefit ui --run DIR``)."""

    run_id: str
    path: Path

    @property
    def bench_dir(self) -> Path:
        """The bench output: the folder itself, or an ``up`` run's ``bench/``."""
        if not (self.path / "summary.json").exists() and (self.path / "bench").is_dir():
            return self.path / "bench"
        return self.path

    def describe(self) -> dict[str, Any]:
        kind = "up" if (self.path / "startup.json").exists() else "bench"
        info: dict[str, Any] = {"id": self.run_id, "name": self.path.name, "kind": kind}
        plan = self.path / "plan.json"
        if plan.is_file():  # an up run: the deployment it planned, to open the run against
            try:
                doc = json.loads(plan.read_text(encoding="utf-8"))
                info["model"] = doc["model"]["id"]
                info["gpu"] = doc["gpu"]["name"]
                info["max-model-len"] = doc["settings"]["max_model_len"]
            except (OSError, ValueError, KeyError, TypeError):
                pass
        return info


@dataclass(slots=True)
class PageState:
    """What the server holds between requests: uploaded configs (parsed, in memory), the
    models already loaded, and the registered run folders."""

    runs: dict[str, Run] = field(default_factory=dict)
    history_db: Path | None = None  # the run history the CLI records into (None: not read)
    uploads: dict[str, LoadedModel] = field(default_factory=dict)
    models: OrderedDict[tuple[str, bool], LoadedModel] = field(default_factory=OrderedDict)

    def register_run(self, path: Path) -> Run:
        run = Run(run_id=str(len(self.runs) + 1), path=path)
        self.runs[run.run_id] = run
        return run

    def upload(self, data: bytes, filename: str) -> str:
        """Parse an uploaded config.json in memory; its id names it in the page's URL."""
        from servefit.adapters.model_source import model_from_config, parse_json_bytes

        if len(data) > MAX_UPLOAD_BYTES:
            raise FieldError("config", f"over {MAX_UPLOAD_BYTES // 2**20} MiB: not a config.json")
        name = Path(filename or "config.json").name[:120]
        config = parse_json_bytes(data, name)
        if not isinstance(config, dict):
            raise FieldError("config", f"{name}: a config.json is a JSON object")
        key = hashlib.sha256(data).hexdigest()[:16]
        model_name = str(config.get("_name_or_path") or name)[:120]
        self.uploads[key] = model_from_config(config, name=model_name, source=f"uploaded {name}")
        return UPLOAD_PREFIX + key

    def load(self, model: str, *, allow_hub: bool) -> LoadedModel:
        """A catalog or Hub model (never a path), or an uploaded config."""
        from servefit.adapters.model_source import load_model

        check_model_name(model)
        if model.startswith(UPLOAD_PREFIX):
            loaded = self.uploads.get(model.removeprefix(UPLOAD_PREFIX))
            if loaded is None:
                raise FieldError("model", "that uploaded config is gone (the server restarted)")
            return loaded
        key = (model, allow_hub)
        if key not in self.models:
            self.models[key] = load_model(model, allow_hub=allow_hub, allow_path=False)
            if len(self.models) > MAX_CACHED_MODELS:
                self.models.popitem(last=False)
        return self.models[key]

    def resolve(self, q: PageQuery) -> Resolved:
        from servefit.app.resolve import resolve
        from servefit.ui.query import deployment_for

        d = deployment_for(q)
        return resolve(d, loaded=self.load(q.model, allow_hub=d.allow_hub))

    def run(self, run_id: str) -> Run:
        from servefit.ui.history import HISTORY_PREFIX, history_run_folder

        if run_id.startswith(HISTORY_PREFIX):
            return Run(run_id=run_id, path=history_run_folder(self.history_db, run_id))
        run = self.runs.get(run_id)
        if run is None:
            shown = run_id if len(run_id) <= 40 else f"{run_id[:40]}..."
            raise FieldError("run", f"no registered run {shown!r} (servefit ui --run DIR)")
        return run


def report_for(state: PageState, q: PageQuery, run: Run | None = None) -> ReportDocument:
    """``servefit report`` of the query's deployment (with a registered run measured)."""
    from servefit.app.report import ReportRequest, report_deployment

    resolved = state.resolve(q)
    req = ReportRequest(
        bench_dir=str(run.bench_dir) if run else None, usd_per_gpu_hour=q.get("usd-per-gpu-hour")
    )
    return report_deployment(resolved.deployment, req, resolved=resolved)


def plan_json(report: ReportDocument) -> str:
    """The plan as ``servefit plan --json`` prints it (the same builder, the same layout)."""
    return report.plan.model_dump_json(indent=2) + "\n"


def plan_view(state: PageState, q: PageQuery) -> dict[str, Any]:
    """Everything the plan view shows, in one answer."""
    from servefit.adapters.report_rows import checklist_rows

    report = report_for(state, q)
    gpu = state.resolve(q).gpu  # the loaded model is cached: this only finds the GPU again
    return {
        "plan": report.plan.model_dump(),
        "rows": [[section, rows] for section, rows in checklist_rows(report).items()],
        "findings": [f.model_dump() for f in report.diagnosis],
        "charts": charts(report),
        "machine": {
            "memory_bytes": gpu.memory_bytes,
            "memory_bandwidth_bytes_per_s": gpu.memory_bandwidth_bytes_per_s,
            "peak_16bit_flops_per_s": gpu.bf16_flops_per_s or gpu.fp16_flops_per_s or None,
            "interconnect_bandwidth_bytes_per_s": gpu.interconnect_bandwidth_bytes_per_s,
        },
        "cli": shlex.join(["servefit", "plan", *cli_args(q)]),
    }


def capacity_view(state: PageState, q: PageQuery) -> dict[str, Any]:
    """The plan without the serving simulation (milliseconds): verdict, memory, KV cache,
    launch command and recommendation, as ``servefit plan --no-performance --json``."""
    from servefit.adapters.plan_document import outcome_document
    from servefit.app.plan import plan_deployment

    resolved = state.resolve(q)
    outcome = plan_deployment(resolved.deployment, with_performance=False, resolved=resolved)
    return {"plan": outcome_document(outcome).model_dump()}


def charts(report: ReportDocument) -> dict[str, str]:
    """The report's memory and latency-throughput charts (SVG, its text escaped by svg.py)."""
    from servefit.adapters.report_html import _charts

    found = {}
    for chart in _charts(report):
        for name in ("memory", "curve"):
            if f'id="chart-{name}"' in chart:
                found[name] = chart
    return found


def compare_view(state: PageState, q: PageQuery, models: str, gpus: str) -> dict[str, Any]:
    """``servefit compare MODELS --gpus GPUS`` with the query's flags, as its JSON."""
    from servefit.adapters.perf_document import comparison_document
    from servefit.app.compare import compare_deployments
    from servefit.ui.query import deployment_for

    model_list = [m.strip() for m in models.split(",") if m.strip()]
    gpu_list = [g.strip() for g in gpus.split(",") if g.strip()]
    if not model_list or len(model_list) > 8:
        raise FieldError("compare-models", "name 1 to 8 models, comma-separated")
    if not gpu_list or len(gpu_list) > 8:
        raise FieldError("compare-gpus", "name 1 to 8 GPUs, comma-separated")
    for m in model_list:
        check_model_name(m, "compare-models")
        if m.startswith(UPLOAD_PREFIX):
            raise FieldError("compare-models", "compare takes catalog or Hub ids")
    d = deployment_for(q, model_list[0])
    if d.hardware.memory_gib is not None:
        raise FieldError("compare-gpus", "compare takes catalog GPUs, not a custom device")
    comparison = compare_deployments(d, model_list, gpu_list)
    return comparison_document(comparison, d.describe_workload()).model_dump()


def report_html(report: ReportDocument) -> str:
    from servefit.adapters.report import render_html

    return render_html(report)


def run_report_html(state: PageState, q: PageQuery, run_id: str) -> str:
    """What ``servefit report MODEL --gpu G ... --bench DIR`` renders for a registered run."""
    run = state.run(run_id)
    if not run.bench_dir.is_dir():
        raise DatasetError(f"run {run_id} ({run.path.name}) is no longer there")
    return report_html(report_for(state, q, run))


FIT_FIELDS = ("fit-gpu", "fit-task", "fit-context", "fit-search", "fit-gguf", "fit-top")
MAX_SEARCH_CHARS = 200


def fit_view(params: dict[str, str]) -> dict[str, Any]:
    """``servefit fit --gpu G --task T [--context N] [--search S] [--gguf TYPE] --top K
    --json`` for the page's fit view (a catalog GPU; the page never detects its host)."""
    from servefit.adapters.catalog import find_gpu, model_ids
    from servefit.app.deployment import Hardware
    from servefit.app.fit import TASK_CONTEXT_TOKENS, fit_models, matching_models
    from servefit.errors import UnknownGpuError

    unknown = sorted(set(params) - set(FIT_FIELDS))
    if unknown:
        raise FieldError(unknown[0], "is not a field of the fit view")
    gpu = params.get("fit-gpu", "").strip()
    try:
        find_gpu(gpu)
    except UnknownGpuError as error:
        raise FieldError("fit-gpu", str(error).splitlines()[0]) from None
    task = params.get("fit-task", "chat")
    if task not in TASK_CONTEXT_TOKENS:
        raise FieldError("fit-task", f"choose one of {', '.join(TASK_CONTEXT_TOKENS)}")
    context = _count(params, "fit-context", 1, 10_000_000)
    top = _count(params, "fit-top", 0, 1_000)
    search = params.get("fit-search", "")
    if len(search) > MAX_SEARCH_CHARS:
        raise FieldError("fit-search", f"at most {MAX_SEARCH_CHARS} characters")
    gguf = params.get("fit-gguf", "").strip() or None
    if gguf is not None:
        from servefit.core.quant import gguf as gguf_type
        from servefit.errors import ConfigError

        try:
            gguf_type(gguf)
        except ConfigError as error:
            raise FieldError("fit-gguf", str(error)) from None
    try:
        ids = matching_models(model_ids(), search)
    except InvalidArgumentError as error:
        raise FieldError("fit-search", str(error)) from None
    outcome = fit_models(Hardware(gpu=gpu), ids, task=task, context_tokens=context, gguf=gguf)
    return outcome.document(20 if top is None else top)


def _count(params: dict[str, str], field: str, low: int, high: int) -> int | None:
    text = params.get(field, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise FieldError(field, f"{text!r} is not a whole number") from None
    if not low <= value <= high:
        raise FieldError(field, f"must be from {low} to {high:,}")
    return value
