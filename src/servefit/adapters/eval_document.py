"""``eval.json``: what ``servefit eval`` measured, the document ``--json`` prints, the run
history keeps and ``eval compare`` and ``cost --success-from`` read back.

Per task and over all tasks: the items scored, right, failed (no answer) and not run, the
accuracy with its Wilson interval; and every item's id with whether it was right, which
is what a paired comparison of two runs needs (the answers themselves are in
``items.jsonl``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from servefit.adapters.document import FrozenDoc
from servefit.core.bootstrap import DEFAULT_CONFIDENCE
from servefit.core.evals import wilson_interval

if TYPE_CHECKING:  # read without the bench client (``cost --success-from`` loads documents)
    from servefit.bench.evals import EvalConfig, EvalRunResult, ItemRecord

SCHEMA_VERSION = 1
ALL_TASKS = "all"


class AccuracySection(FrozenDoc):
    task: str  # a task's name, or "all"
    scored: int
    correct: int
    failed: int  # requests that gave no complete answer: not scored
    accuracy: float | None  # None: nothing scored
    low: float | None
    high: float | None
    confidence: float


class ItemScore(FrozenDoc):
    item_id: str
    task: str
    correct: bool | None  # None: the request failed


class EvalDocument(FrozenDoc):
    schema_version: int = SCHEMA_VERSION
    url: str
    model: str
    endpoint: str
    max_tokens: int
    seed: int
    task_files: list[str]
    tasks: list[AccuracySection]
    overall: AccuracySection
    items: list[ItemScore]
    not_run: int
    interrupted: str | None = None
    harness: str | None = None  # who ran the tasks when servefit's own runner did not

    def accuracy_of(self, task: str | None) -> AccuracySection | None:
        """One task's section (None or "all": the overall one)."""
        if task in (None, ALL_TASKS):
            return self.overall
        return next((t for t in self.tasks if t.task == task), None)


def accuracy_section(
    task: str, records: list[ItemRecord], confidence: float = DEFAULT_CONFIDENCE
) -> AccuracySection:
    scored = [r for r in records if r.correct is not None]
    correct = sum(1 for r in scored if r.correct)
    interval = wilson_interval(correct, len(scored), confidence) if scored else None
    return AccuracySection(
        task=task,
        scored=len(scored),
        correct=correct,
        failed=len(records) - len(scored),
        accuracy=None if interval is None else interval.point,
        low=None if interval is None else interval.low,
        high=None if interval is None else interval.high,
        confidence=confidence,
    )


def eval_document(
    result: EvalRunResult,
    cfg: EvalConfig,
    task_files: list[str],
    confidence: float = DEFAULT_CONFIDENCE,
    harness: str | None = None,
) -> EvalDocument:
    records = list(result.records)
    names = list(dict.fromkeys(r.task for r in records))
    return EvalDocument(
        url=cfg.base_url,
        model=result.model,
        endpoint=cfg.endpoint,
        max_tokens=cfg.max_tokens,
        seed=cfg.seed,
        task_files=task_files,
        tasks=[
            accuracy_section(name, [r for r in records if r.task == name], confidence)
            for name in names
        ],
        overall=accuracy_section(ALL_TASKS, records, confidence),
        items=[ItemScore(item_id=r.item_id, task=r.task, correct=r.correct) for r in records],
        not_run=result.not_run,
        interrupted=result.interrupted,
        harness=harness,
    )


def _section_problem(where: str, a: AccuracySection) -> str | None:
    counts = {"scored": a.scored, "correct": a.correct, "failed": a.failed}
    if any(n < 0 for n in counts.values()) or a.correct > a.scored:
        return f"{where}: counts {counts} (0 <= correct <= scored, failed >= 0)"
    if not (math.isfinite(a.confidence) and 0 < a.confidence < 1):
        return f"{where}.confidence: {a.confidence} (a confidence is in (0, 1))"
    figures = (a.accuracy, a.low, a.high)
    if a.scored == 0:
        return None if figures == (None, None, None) else f"{where}: figures with nothing scored"
    if a.accuracy is None or a.low is None or a.high is None:
        return f"{where}: {a.scored} items scored without an accuracy and its interval"
    if not all(math.isfinite(v) for v in (a.accuracy, a.low, a.high)):
        return f"{where}: accuracy {a.accuracy}, interval {a.low}-{a.high} are not all finite"
    if not math.isclose(a.accuracy, a.correct / a.scored, abs_tol=1e-9):
        return f"{where}.accuracy: {a.accuracy}, but {a.correct}/{a.scored} right"
    if not 0 <= a.low <= a.accuracy <= a.high <= 1:
        return f"{where}: the interval {a.low}-{a.high} does not hold {a.accuracy} within [0, 1]"
    return None


def document_problem(doc: EvalDocument) -> str | None:
    """What no eval run can have written (counts that do not add up, an accuracy that is not
    correct / scored, an interval outside [0, 1]); None for a consistent document."""
    if doc.schema_version != SCHEMA_VERSION:
        return f"schema_version {doc.schema_version} (this servefit reads {SCHEMA_VERSION})"
    if doc.not_run < 0:
        return f"not_run: {doc.not_run}"
    for index, section in enumerate(doc.tasks):
        problem = _section_problem(f"tasks[{index}]", section)
        if problem:
            return problem
    problem = _section_problem("overall", doc.overall)
    if problem:
        return problem
    o = doc.overall
    if (o.scored, o.correct) != (
        sum(t.scored for t in doc.tasks),
        sum(t.correct for t in doc.tasks),
    ):
        return "overall: its counts are not the sum of the tasks'"
    ids = [i.item_id for i in doc.items]
    if len(set(ids)) != len(ids):
        return "items: an item id appears twice"
    scored = [i for i in doc.items if i.correct is not None]
    if (len(scored), sum(1 for i in scored if i.correct)) != (o.scored, o.correct):
        return "items: their scores are not the overall counts"
    return None
