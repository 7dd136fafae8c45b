"""Eval task files, read from local disk (never fetched): each line of a JSONL file (or
each element of a JSON array) is one item, in one of three shapes:

* **servefit's own**: ``{"prompt": ..., "answer": ...}`` with an optional ``"id"``,
  ``"task"``, ``"scorer"`` (``exact`` by default, ``choice`` when ``"choices"`` is given,
  or ``number``), ``"choices"`` (a list of option texts; the answer is then their letter)
  and ``"stop"`` (a list of stop strings);
* **GSM8K** as its dataset card publishes it (``{"question": ..., "answer": "... #### 42"}``):
  the prompt is lm-evaluation-harness's zero-shot ``Question: ...\\nAnswer:``, generation
  stops at the next ``Question:``, and the reference is the number after ``####``;
* **multiple choice, MMLU-style** (``{"question": ..., "choices": [...], "answer": 1}``, the
  answer an index or a letter): the prompt lists the lettered choices and ends
  ``Answer:``, as the harness's MMLU prompt does.

The task is the record's ``"task"``, else the file's stem. A malformed line is an error
naming the file, the line and the field; nothing is sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from servefit.bench.traces import local_text
from servefit.core.evals import CHOICE_LETTERS, SCORERS, EvalItem
from servefit.errors import DatasetError, InvalidArgumentError

MAX_TASK_BYTES = 256 * 2**20
GSM8K_STOP = ("Question:",)  # lm-evaluation-harness's gsm8k ``until`` (besides EOS)


def _records(path: Path) -> Iterator[tuple[int, str, Any]]:
    """(position, where, record): a JSON array's elements, else one JSON value per line."""
    text = local_text(path, "--tasks", MAX_TASK_BYTES)
    if text.lstrip().startswith("["):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"--tasks {path}: not JSON (line {exc.lineno}: {exc.msg})") from None
        if not isinstance(doc, list):
            raise DatasetError(f"--tasks {path}: a JSON file of items is an array")
        for index, record in enumerate(doc, 1):
            yield index, f"item {index}", record
        return
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, f"line {number}", json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"--tasks {path}, line {number}: not JSON ({exc.msg})") from None


def _string(path: Path, where: str, record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"--tasks {path}, {where}: {key!r} must be a non-empty text")
    return value


def _strings(path: Path, where: str, record: dict[str, Any], key: str) -> tuple[str, ...]:
    value = record.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DatasetError(f"--tasks {path}, {where}: {key!r} must be a list of texts")
    return tuple(value)


def _choice_prompt(question: str, choices: tuple[str, ...]) -> str:
    lines = [question.strip()]
    lines += [f"{letter}. {text}" for letter, text in zip(CHOICE_LETTERS, choices, strict=False)]
    return "\n".join([*lines, "Answer:"])


def _choice_reference(path: Path, where: str, answer: Any, count: int) -> str:
    letters = CHOICE_LETTERS[:count]
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < count:
        return letters[answer]
    if isinstance(answer, str) and answer.strip().upper() in letters and answer.strip():
        return answer.strip().upper()
    raise DatasetError(
        f"--tasks {path}, {where}: 'answer' {answer!r} must be a choice's index (0-{count - 1}) "
        f"or letter ({', '.join(letters)})"
    )


def _item(path: Path, where: str, record: Any, default_task: str, index: int) -> EvalItem:
    if not isinstance(record, dict):
        raise DatasetError(f"--tasks {path}, {where}: an item is a JSON object")
    task = record.get("task", default_task)
    item_id = str(record.get("id", f"{task}-{index}"))
    if not isinstance(task, str) or not task:
        raise DatasetError(f"--tasks {path}, {where}: 'task' must be a non-empty text")
    choices = _strings(path, where, record, "choices")
    if len(choices) > len(CHOICE_LETTERS):
        raise DatasetError(f"--tasks {path}, {where}: at most {len(CHOICE_LETTERS)} choices")
    if "question" in record and "prompt" not in record:  # a published dataset's shape
        question = _string(path, where, record, "question")
        if choices:
            reference = _choice_reference(path, where, record.get("answer"), len(choices))
            return EvalItem(
                item_id=item_id,
                task=task,
                prompt=_choice_prompt(question, choices),
                reference=reference,
                scorer="choice",
                choices=choices,
            )
        solution = _string(path, where, record, "answer")
        if "####" not in solution:
            raise DatasetError(
                f"--tasks {path}, {where}: a GSM8K answer ends '#### <number>'; give "
                "'prompt' and 'answer' for another kind of question"
            )
        return _made(
            path,
            where,
            item_id=item_id,
            task=task,
            prompt=f"Question: {question.strip()}\nAnswer:",
            reference=solution.rsplit("####", 1)[1].strip(),
            scorer="number",
            stop=GSM8K_STOP,
        )
    scorer = record.get("scorer", "choice" if choices else "exact")
    if scorer not in SCORERS:
        raise DatasetError(f"--tasks {path}, {where}: 'scorer' {scorer!r}: one of {SCORERS}")
    answer = record.get("answer")
    reference = (
        _choice_reference(path, where, answer, len(choices))
        if scorer == "choice"
        else _string(path, where, record, "answer")
        if not isinstance(answer, int | float) or isinstance(answer, bool)
        else str(answer)
    )
    prompt = _string(path, where, record, "prompt")
    return _made(
        path,
        where,
        item_id=item_id,
        task=task,
        prompt=_choice_prompt(prompt, choices) if choices else prompt,
        reference=reference,
        scorer=scorer,
        choices=choices,
        stop=_strings(path, where, record, "stop"),
    )


def _made(path: Path, where: str, **fields: Any) -> EvalItem:
    try:
        return EvalItem(**fields)
    except InvalidArgumentError as exc:
        raise DatasetError(f"--tasks {path}, {where}: {exc}") from None


def read_tasks(paths: list[Path] | tuple[Path, ...], limit: int | None = None) -> list[EvalItem]:
    """Every item of every file, in order (at most ``limit`` from each file); ids unique."""
    items: list[EvalItem] = []
    for path in paths:
        kept = 0
        for number, where, record in _records(path):
            if limit is not None and kept >= limit:
                break
            items.append(_item(path, where, record, path.stem, number))
            kept += 1
        if kept == 0:
            raise DatasetError(f"--tasks {path}: holds no item")
    seen: set[str] = set()
    for item in items:
        if item.item_id in seen:
            raise DatasetError(f"--tasks: the item id {item.item_id!r} appears twice")
        seen.add(item.item_id)
    return items
