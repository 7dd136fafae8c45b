"""``servefit eval --harness lm-eval``: EleutherAI's lm-evaluation-harness runs the tasks
(its GSM8K, MMLU, IFEval, ... or a task YAML of the user's), servefit reads its per-item
samples into the same run document as its own runner's, so the intervals, ``eval compare``,
the history and ``cost --success-from`` work on the harness's scores.

The harness is an external command (``--lm-eval PATH``, default ``lm_eval`` on PATH), run as
its README says for an OpenAI-compatible server: ``--model local-completions`` (or
``local-chat-completions --apply_chat_template`` with ``--endpoint chat``) with
``base_url``, ``model``, ``num_concurrent``, ``tokenized_requests=False`` and
``tokenizer_backend=None`` (no local tokenizer needed) and ``--log_samples``. The API key
reaches it in its own variable (``OPENAI_API_KEY``), never on its command line. Its
datasets come from the Hugging Face cache or a local ``--harness-include`` task: it runs
with the Hub offline unless ``--harness-download`` lets it fetch them.

Per task, the score is the harness's first metric (and first filter: GSM8K's
``exact_match,strict-match``), which must be 0/1 per item (``exact_match``, ``acc``): a
graded metric (BLEU, ROUGE) is refused by name. The mean of the items read must equal the
harness's own aggregate, so a misread file cannot pass as a score.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefit.bench.evals import EvalConfig, EvalRunResult, ItemRecord
from servefit.errors import DatasetError, InvalidArgumentError, ServerError

SKIPPED_KEYS = ("name", "alias", "sample_len", " ")


@dataclass(frozen=True, slots=True, kw_only=True)
class HarnessRun:
    command: str  # the lm_eval executable
    tasks: tuple[str, ...]  # its task names
    include_path: Path | None = None  # a folder of the user's task YAMLs
    limit: int | None = None
    num_fewshot: int | None = None
    max_tokens: int | None = None  # None: each task's own max_gen_toks
    model_args: tuple[str, ...] = ()  # KEY=VALUE for local-completions, over servefit's
    allow_download: bool = False  # let the harness fetch datasets from the Hub


def _model_args(run: HarnessRun, cfg: EvalConfig, model: str) -> str:
    path = "/v1/chat/completions" if cfg.endpoint == "chat" else "/v1/completions"
    args = {
        "model": model,
        "base_url": f"{cfg.base_url}{path}",
        "num_concurrent": str(cfg.concurrency),
        "tokenized_requests": "False",
        "tokenizer_backend": "None",
        "timeout": str(int(cfg.timeout_s)),
    }
    for pair in run.model_args:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise InvalidArgumentError(f"--harness-model-arg {pair!r}: give KEY=VALUE")
        args[key.strip()] = value.strip()
    return ",".join(f"{k}={v}" for k, v in args.items())


def harness_command(run: HarnessRun, cfg: EvalConfig, model: str, out: Path) -> list[str]:
    """The ``lm_eval`` command line for this server and these tasks."""
    chat = cfg.endpoint == "chat"
    gen_kwargs = "temperature=0" + (
        "" if run.max_tokens is None else f",max_gen_toks={run.max_tokens}"
    )
    command = [
        run.command,
        "--model",
        "local-chat-completions" if chat else "local-completions",
        "--model_args",
        _model_args(run, cfg, model),
        "--tasks",
        ",".join(run.tasks),
        "--output_path",
        str(out),
        "--log_samples",
        "--seed",
        str(cfg.seed),
        "--gen_kwargs",
        gen_kwargs,
    ]
    if chat:
        command.append("--apply_chat_template")
    if run.include_path is not None:
        command += ["--include_path", str(run.include_path)]
    if run.limit is not None:
        command += ["--limit", str(run.limit)]
    if run.num_fewshot is not None:
        command += ["--num_fewshot", str(run.num_fewshot)]
    return command


def find_harness(command: str) -> str:
    found = shutil.which(command)
    if found is None:
        raise InvalidArgumentError(
            f"--lm-eval {command}: no such command; install lm-evaluation-harness "
            "(pip install 'lm_eval[api]') or give the path of its lm_eval"
        )
    return found


def run_harness(
    run: HarnessRun, cfg: EvalConfig, model: str, out: Path, *, env: dict[str, str]
) -> EvalRunResult:
    """Run the harness (its output goes to this process's stderr), then read its samples."""
    if cfg.credentials is not None:
        raise InvalidArgumentError(
            "lm-eval takes no user-info in the server URL: give the server an API key "
            "(--api-key-env) instead of user:password@"
        )
    command = harness_command(run, cfg, model, out)
    command[0] = find_harness(command[0])
    if not run.allow_download:  # datasets from the Hub cache or local files, never fetched
        env = {**env, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        offline = (
            ""
            if run.allow_download
            else (
                "; it ran offline: a dataset not in the Hugging Face cache needs --harness-download"
            )
        )
        raise ServerError(
            f"lm_eval exited with {done.returncode} (its messages are above): "
            f"{' '.join(command[:2])} ... --tasks {','.join(run.tasks)}{offline}"
        )
    return read_harness_output(out, model, run.tasks)


def _primary(task: str, scores: dict[str, Any]) -> tuple[str, str, float]:
    """(metric, filter, aggregate) of a task's first score: ``exact_match,strict-match``."""
    for key, value in scores.items():
        if key in SKIPPED_KEYS or "_stderr" in key or "," not in key:
            continue
        metric, _, filter_name = key.partition(",")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return metric, filter_name, float(value)
    raise DatasetError(f"lm_eval's results hold no score for task {task!r}")


def _newest(folder: Path, pattern: str) -> Path:
    found = sorted(folder.rglob(pattern), key=lambda p: p.name)
    if not found:
        raise DatasetError(f"lm_eval wrote no {pattern} under {folder}")
    return found[-1]


def _item(task: str, sample: dict[str, Any], metric: str) -> ItemRecord:
    value = sample.get(metric)
    if not isinstance(value, int | float) or value not in (0, 1):
        raise DatasetError(
            f"lm_eval task {task!r}: metric {metric!r} is {value!r} for an item, not 0 or 1: "
            "servefit scores right-or-wrong items (exact_match, acc); use another task"
        )
    answer = sample.get("filtered_resps")
    if isinstance(answer, list):
        answer = answer[0] if len(answer) == 1 else answer
    doc = sample.get("doc")
    given = doc.get("id") if isinstance(doc, dict) else None  # a task file's own item id
    return ItemRecord(
        item_id=str(given) if given is not None else f"{task}-{sample.get('doc_id')}",
        task=task,
        scorer=metric,
        reference=str(sample.get("target")),
        answer=answer if isinstance(answer, str) else json.dumps(answer),
        correct=bool(value),
    )


def read_harness_output(out: Path, model: str, tasks: tuple[str, ...]) -> EvalRunResult:
    """The newest ``results_*.json`` under ``out`` and each task's ``samples_<task>_*.jsonl``."""
    results_path = _newest(out, "results_*.json")
    try:
        doc = json.loads(results_path.read_text(encoding="utf-8"))
        results = doc["results"]
    except (OSError, ValueError, KeyError) as exc:
        raise DatasetError(f"{results_path}: not lm_eval results ({exc})") from None
    groups = {name for name, members in (doc.get("group_subtasks") or {}).items() if members}
    records: list[ItemRecord] = []
    for task in results:
        if task in groups:
            continue  # a group's score is its members' (each has its own samples)
        metric, filter_name, aggregate = _primary(task, results[task])
        samples_path = _newest(results_path.parent, f"samples_{task}_*.jsonl")
        lines = samples_path.read_text(encoding="utf-8").splitlines()
        samples = [json.loads(line) for line in lines if line.strip()]
        kept = [s for s in samples if s.get("filter", filter_name) == filter_name]
        items = [_item(task, s, metric) for s in kept]
        if not items:
            raise DatasetError(f"{samples_path}: no item scored by {metric},{filter_name}")
        mean = sum(1 for i in items if i.correct) / len(items)
        if not math.isclose(mean, aggregate, abs_tol=1e-9):
            raise DatasetError(
                f"{samples_path}: the items' {metric} averages {mean:.6f}, the harness reports "
                f"{aggregate:.6f}: the samples were not read as the harness scored them"
            )
        records += items
    if not records:
        raise DatasetError(f"{results_path}: lm_eval scored none of {', '.join(tasks)}")
    return EvalRunResult(model=model, records=tuple(records), not_run=0, interrupted=None)
