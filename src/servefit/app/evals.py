"""Quality evals: run a task set against a server, compare two runs, and the success rate
a cost is divided by, measured instead of typed.

* :func:`evaluate`: the task files read (``bench/eval_tasks.py``), every item answered and
  scored (``bench/evals.py``), the accuracy per task with its interval, ``eval.json``
  written beside ``items.jsonl``.
* :func:`load_eval`: a run by its history id, its ``--output`` folder or its ``eval.json``.
* :func:`compare_evals`: ``candidate - baseline`` accuracy per task and overall. Over the
  items both runs scored the difference is paired (the same questions: a bootstrap of the
  per-item differences); a task whose items differ is compared unpaired (Newcombe's
  interval). A gate (``max_drop``) fails when even the interval's best end is a larger drop.
* :func:`measured_success`: ``cost``/``report``/``recommend --success-from RUN``: the run's
  accuracy (one task's, or over all) as the task success rate, with where it came from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servefit.adapters.eval_document import (
    ALL_TASKS,
    AccuracySection,
    EvalDocument,
    document_problem,
    eval_document,
)
from servefit.core.bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, Interval
from servefit.core.evals import EvalItem, beyond_noise, paired_difference, unpaired_difference
from servefit.errors import DatasetError, InvalidArgumentError

if TYPE_CHECKING:  # the runners are imported when a run starts, not to read a document
    from servefit.bench.evals import EvalConfig, EvalRunResult, ItemRecord
    from servefit.bench.harness import HarnessRun
    from servefit.bench.interrupt import Interrupt

EVAL_FILE = "eval.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalRequest:
    config: EvalConfig
    task_files: tuple[Path, ...] = ()
    limit: int | None = None  # items per task file
    out_dir: Path | None = None
    confidence: float = DEFAULT_CONFIDENCE
    harness: HarnessRun | None = None  # lm-evaluation-harness runs the tasks instead
    sample: int | None = None  # a seeded subset of this many items (config.seed), in order


def eval_items(req: EvalRequest) -> list[EvalItem]:
    """The request's items, read and checked (a malformed file: an error, nothing sent)."""
    if req.harness is not None:
        if req.task_files:
            raise InvalidArgumentError(
                "--tasks FILE is servefit's own runner; with --harness lm-eval name the "
                "harness's tasks with --harness-tasks"
            )
        if req.sample is not None:
            raise InvalidArgumentError(
                "--sample is servefit's own runner's: give the harness --limit"
            )
        return []
    if not req.task_files:
        raise InvalidArgumentError("give at least one --tasks FILE")
    if req.limit is not None and req.limit < 1:
        raise InvalidArgumentError(f"--limit must be >= 1, got {req.limit}")
    if req.sample is not None and req.sample < 1:
        raise InvalidArgumentError(f"--sample must be >= 1, got {req.sample}")
    from servefit.bench.eval_tasks import read_tasks

    items = read_tasks(req.task_files, req.limit)
    if req.sample is None or req.sample >= len(items):
        return items
    from random import Random

    chosen = sorted(Random(req.config.seed).sample(range(len(items)), req.sample))
    return [items[i] for i in chosen]


def evaluate(
    req: EvalRequest,
    *,
    api_key: str | None,
    interrupt: Interrupt,
    items: list[EvalItem] | None = None,
    listener: Callable[[ItemRecord], None] | None = None,
) -> EvalDocument:
    """Run the items (read from the request's files unless given), write ``eval.json``."""
    from servefit.adapters.redact import write_text
    from servefit.bench.evals import run_eval
    from servefit.bench.output import prepare_output

    items = eval_items(req) if items is None else items
    if req.out_dir is not None:
        prepare_output(req.out_dir)  # an unwritable --output: refused before any request
    if req.harness is not None:
        result = _by_harness(req, req.harness, api_key)
    else:
        result = run_eval(
            items,
            req.config,
            api_key=api_key,
            out_dir=req.out_dir,
            interrupt=interrupt,
            listener=listener,
        )
    doc = eval_document(
        result,
        req.config,
        [str(p) for p in req.task_files],
        req.confidence,
        harness=None if req.harness is None else harness_label(req.harness, result),
    )
    if req.out_dir is not None:
        write_text(req.out_dir / EVAL_FILE, doc.model_dump_json(indent=2))
    return doc


def _by_harness(req: EvalRequest, run: HarnessRun, api_key: str | None) -> EvalRunResult:
    """lm-evaluation-harness over the server; its files under OUTPUT/lm_eval (or a
    temporary folder), its items in OUTPUT/items.jsonl as servefit's own runner writes them."""
    import os
    import tempfile

    from servefit.bench.evals import ITEMS_FILE, server_model
    from servefit.bench.harness import run_harness
    from servefit.bench.output import ResultWriter

    model = server_model(req.config, api_key)  # unreachable: ServerError before lm_eval runs
    env = dict(os.environ)
    if api_key:
        env["OPENAI_API_KEY"] = api_key  # the harness's variable; never on its command line
    with tempfile.TemporaryDirectory(prefix="servefit-lm-eval-") as scratch:
        out = req.out_dir / "lm_eval" if req.out_dir is not None else Path(scratch)
        result = run_harness(run, req.config, model, out, env=env)
    writer: ResultWriter[ItemRecord] = ResultWriter(req.out_dir, filename=ITEMS_FILE)
    for record in result.records:
        writer(record)
    writer.close()
    writer.check()
    return result


def harness_label(run: HarnessRun, result: EvalRunResult) -> str:
    metrics = dict.fromkeys(f"{r.task}: {r.scorer}" for r in result.records)
    return f"lm-evaluation-harness ({'; '.join(metrics)})"


def _read_document(path: Path, what: str) -> EvalDocument:
    try:
        doc = EvalDocument.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise DatasetError(f"{what}: {path} cannot be read ({exc.strerror})") from None
    except (ValueError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DatasetError(f"{what}: {path} is not a servefit eval.json ({first})") from None
    return _checked(doc, f"{what}: {path}")


def _checked(doc: EvalDocument, where: str) -> EvalDocument:
    problem = document_problem(doc)
    if problem:
        raise DatasetError(f"{where} is not an eval run servefit wrote: {problem}")
    return doc


def load_eval(ref: str, db_path: Path | None = None, *, what: str = "eval run") -> EvalDocument:
    """An eval run: a history id (digits), an ``--output`` folder, or an ``eval.json``."""
    if ref.isdigit():
        from servefit.app.history import get_run, resolve_db_path

        run = get_run(db_path or resolve_db_path(None), int(ref))
        if run is None or run.kind != "eval":
            found = "no run" if run is None else f"a {run.kind} run"
            raise InvalidArgumentError(
                f"{what} {ref}: the history holds {found} with that id; give an eval run's id "
                "(`servefit history --kind eval`), its --output folder or its eval.json"
            )
        try:
            doc = EvalDocument.model_validate(run.results)
        except ValueError as exc:
            raise DatasetError(f"{what} {ref}: not an eval document ({exc})") from None
        return _checked(doc, f"{what} {ref}")
    path = Path(ref)
    if path.is_dir():
        path = path / EVAL_FILE
    if not path.exists():
        raise InvalidArgumentError(
            f"{what} {ref}: no such history id, folder with {EVAL_FILE} or file"
        )
    return _read_document(path, what)


@dataclass(frozen=True, slots=True, kw_only=True)
class AccuracyChange:
    task: str
    baseline: AccuracySection
    candidate: AccuracySection
    change: Interval | None  # candidate - baseline, as a fraction; None: a side scored nothing
    paired: bool  # over the same items
    compared: int  # items in the comparison (paired: scored by both)
    beyond_noise: bool
    regression: bool  # a drop beyond the noise larger than max_drop


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalComparison:
    baseline: EvalDocument
    candidate: EvalDocument
    changes: tuple[AccuracyChange, ...]  # per task, then "all"
    max_drop: float | None

    @property
    def has_regression(self) -> bool:
        return any(c.regression for c in self.changes)


def _change(
    task: str,
    base: EvalDocument,
    cand: EvalDocument,
    *,
    confidence: float,
    resamples: int,
    seed: int,
    max_drop: float | None,
) -> AccuracyChange | None:
    a, b = base.accuracy_of(task), cand.accuracy_of(task)
    if a is None or b is None:
        return None
    right_a = {i.item_id: i.correct for i in base.items if task in (ALL_TASKS, i.task)}
    right_b = {i.item_id: i.correct for i in cand.items if task in (ALL_TASKS, i.task)}
    shared = [
        (bool(right_a[k]), bool(right_b[k]))
        for k in right_a
        if right_a[k] is not None and right_b.get(k) is not None
    ]
    same_items = {k for k, v in right_a.items() if v is not None} == {
        k for k, v in right_b.items() if v is not None
    }
    interval: Interval | None = None
    paired = bool(shared) and same_items
    if paired:
        interval = paired_difference(shared, confidence=confidence, resamples=resamples, seed=seed)
    elif a.scored and b.scored:
        interval = unpaired_difference((a.correct, a.scored), (b.correct, b.scored), confidence)
    noisy = interval is not None and beyond_noise(interval)
    return AccuracyChange(
        task=task,
        baseline=a,
        candidate=b,
        change=interval,
        paired=paired,
        compared=len(shared) if paired else a.scored + b.scored,
        beyond_noise=noisy,
        regression=(interval is not None and max_drop is not None and interval.high < -max_drop),
    )


def compare_evals(
    baseline: EvalDocument,
    candidate: EvalDocument,
    *,
    max_drop: float | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> EvalComparison:
    """Each task both runs have, then all tasks together."""
    if max_drop is not None and not 0 <= max_drop < 1:
        raise InvalidArgumentError(f"--max-drop must be in [0, 1), got {max_drop}")
    names = [t.task for t in baseline.tasks if candidate.accuracy_of(t.task) is not None]
    changes = [
        _change(
            name,
            baseline,
            candidate,
            confidence=confidence,
            resamples=resamples,
            seed=seed,
            max_drop=max_drop,
        )
        for name in (*names, ALL_TASKS)
    ]
    return EvalComparison(
        baseline=baseline,
        candidate=candidate,
        changes=tuple(c for c in changes if c is not None),
        max_drop=max_drop,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredSuccess:
    rate: float
    low: float
    high: float
    source: str  # where it came from, for the cost's assumptions


def split_task(ref: str) -> tuple[str, str | None]:
    """``RUN[:TASK]`` as (RUN, TASK): a colon splits off a task unless the whole is a path."""
    run, colon, task = ref.rpartition(":")
    if not colon or not task or Path(ref).exists():
        return ref, None
    return run, task


def measured_success(ref: str, db_path: Path | None = None) -> MeasuredSuccess:
    """``--success-from RUN[:TASK]``: the eval run's accuracy (one task's, or over all) as
    the task success rate."""
    ref, task = split_task(ref)
    doc = load_eval(ref, db_path, what="--success-from")
    section = doc.accuracy_of(task)
    if section is None:
        names = ", ".join(t.task for t in doc.tasks)
        raise InvalidArgumentError(f"--success-from {ref}: no task {task!r} (it has {names})")
    if section.accuracy is None or section.low is None or section.high is None:
        raise InvalidArgumentError(f"--success-from {ref}: the run scored no item")
    if section.correct == 0:
        raise InvalidArgumentError(
            f"--success-from {ref}: no item was answered right ({section.scored} scored): "
            "every task fails, so no cost per successful task exists"
        )
    label = f"eval {ref}" + ("" if section.task == ALL_TASKS else f", task {section.task}")
    return MeasuredSuccess(
        rate=section.accuracy,
        low=section.low,
        high=section.high,
        source=(
            f"measured by {label}: {section.correct}/{section.scored} right, "
            f"{section.confidence:.0%} interval {section.low:.0%}-{section.high:.0%}"
        ),
    )


def success_terms(success_rate: float, success_from: str | None) -> dict[str, Any]:
    """``--success-rate``, or the accuracy of the eval run ``--success-from`` names, with
    where it came from and its interval: the keyword arguments of a cost request."""
    if success_from is None:
        return {"success_rate": success_rate}
    if success_rate != 1.0:
        raise InvalidArgumentError("give --success-rate or --success-from, not both")
    m = measured_success(success_from)
    return {"success_rate": m.rate, "success_source": m.source, "success_range": (m.low, m.high)}
