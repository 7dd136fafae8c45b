"""``servefit eval``: answer-quality of an OpenAI-compatible server on local task files, and
two runs side by side.

``servefit eval URL --tasks FILE`` scores every item (greedy sampling) and prints each
task's accuracy with its Wilson interval; ``--output DIR`` keeps ``items.jsonl`` (every
answer, written as it is scored) and ``eval.json``. Exit 0 every item was answered, 1 a
request failed (its item is not scored) or nothing was scored, 2 an input error (flags, a
malformed task file, an unreachable server), 130 / 143 stopped by SIGINT / SIGTERM (what was
scored is written, the run marked interrupted).

``servefit eval compare BASELINE CANDIDATE`` (or ``eval --compare A B``): the accuracy change
per task with its interval, paired over the items both scored; ``--max-drop 2%`` makes it a
gate (exit 1 when the drop is larger than that even at the interval's best end).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from servefit.cli.history import history_options, record_quietly
from servefit.cli.output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    emit_json,
    fail,
    progress_bar,
)
from servefit.cli.types import POSITIVE_FLOAT, RunByDefaultGroup
from servefit.errors import ServefitError


class _EvalGroup(RunByDefaultGroup):
    aliases = {"--compare": "compare"}  # noqa: RUF012 (the base declares it a ClassVar)


@click.group(cls=_EvalGroup)
def eval_() -> None:
    """Answer quality of an OpenAI-compatible server at URL on local task files (JSONL:
    servefit's prompt/answer, GSM8K, MMLU-style choices): accuracy per task with its
    interval. `eval compare A B` (or `eval --compare A B`) holds two runs side by side."""


@eval_.command("run")
@click.argument("url")
@click.option(
    "--tasks",
    "task_files",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A task file (JSONL or a JSON array); repeat for more tasks.",
)
@click.option(
    "--harness",
    type=click.Choice(["lm-eval"]),
    help="Run the tasks with lm-evaluation-harness instead (its --harness-tasks).",
)
@click.option("--harness-tasks", help="The harness's task names, comma-separated (gsm8k,...).")
@click.option(
    "--harness-include",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="A folder of your own lm-eval task YAMLs (its --include_path).",
)
@click.option("--num-fewshot", type=click.IntRange(0), help="The harness's few-shot examples.")
@click.option(
    "--harness-model-arg",
    "harness_model_args",
    multiple=True,
    metavar="KEY=VALUE",
    help="Over servefit's local-completions arguments (tokenizer_backend=huggingface, ...).",
)
@click.option(
    "--harness-download",
    is_flag=True,
    help="Let the harness fetch its datasets from the Hub [offline: the cache only].",
)
@click.option(
    "--lm-eval",
    "lm_eval_command",
    default="lm_eval",
    show_default=True,
    help="The harness's command (a path, or a name on PATH).",
)
@click.option("--model", help="Model name to request [the first one the server lists].")
@click.option(
    "--endpoint",
    type=click.Choice(["completions", "chat"]),
    default="completions",
    show_default=True,
)
@click.option("--max-tokens", type=click.IntRange(1), default=256, show_default=True)
@click.option("--concurrency", type=click.IntRange(1), default=8, show_default=True)
@click.option("--limit", type=click.IntRange(1), help="At most this many items of each file.")
@click.option(
    "--sample",
    type=click.IntRange(1),
    help="A seeded subset (--seed) of this many items of all the files, in their order.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Sent with each request.")
@click.option("--timeout-s", type=POSITIVE_FLOAT, default=600.0, show_default=True)
@click.option(
    "--api-key-env", default="OPENAI_API_KEY", show_default=True, help="Variable with the key."
)
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.95, show_default=True)
@click.option("--output", "output_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the eval document.")
@history_options
def eval_run(url: str, **flags: Any) -> None:
    """Score every item of the --tasks files against the server at URL (or run
    lm-evaluation-harness's --harness-tasks on it with --harness lm-eval)."""
    import os

    from servefit.app.evals import EvalRequest, eval_items, evaluate
    from servefit.bench.evals import EvalConfig
    from servefit.bench.interrupt import Interrupt

    as_json, db, no_history = flags.pop("as_json"), flags.pop("db"), flags.pop("no_history")
    inputs = {"url": url, **{k: str(v) if isinstance(v, Path) else v for k, v in flags.items()}}
    inputs["task_files"] = [str(p) for p in flags["task_files"]]
    try:
        cfg = EvalConfig(
            base_url=url,
            model=flags["model"],
            endpoint=flags["endpoint"],
            max_tokens=flags["max_tokens"],
            concurrency=flags["concurrency"],
            timeout_s=flags["timeout_s"],
            seed=flags["seed"],
            api_key_env=flags["api_key_env"],
        )
        request = EvalRequest(
            config=cfg,
            task_files=tuple(flags["task_files"]),
            limit=flags["limit"],
            out_dir=flags["output_dir"],
            confidence=flags["confidence"],
            harness=_harness(flags),
            sample=flags["sample"],
        )
        items = eval_items(request)  # a malformed task file: exit 2, nothing sent
        with Interrupt() as interrupt, progress_bar(as_json, len(items), "items") as listener:
            doc = evaluate(
                request,
                api_key=os.environ.get(cfg.api_key_env),
                interrupt=interrupt,
                items=items,
                listener=listener,
            )
    except ServefitError as error:
        fail(error)
    if as_json:
        emit_json(doc)
    else:
        _render(doc)
    if not no_history:
        from servefit.app.history_record import record_eval

        out = flags["output_dir"]
        record_quietly(db, lambda path: record_eval(path, doc, inputs, out))
    if doc.interrupted:
        sys.exit(EXIT_INTERRUPTED if doc.interrupted == "SIGINT" else EXIT_TERMINATED)
    failed = doc.overall.failed > 0 or doc.overall.scored == 0
    sys.exit(EXIT_FAILED if failed else EXIT_OK)


def _harness(flags: dict[str, Any]) -> Any:
    """The lm-evaluation-harness run of ``--harness lm-eval``, or None."""
    from servefit.bench.harness import HarnessRun
    from servefit.errors import InvalidArgumentError

    names = [t.strip() for t in (flags["harness_tasks"] or "").split(",") if t.strip()]
    if flags["harness"] is None:
        if (
            names
            or flags["harness_include"]
            or flags["harness_model_args"]
            or flags["harness_download"]
        ):
            raise InvalidArgumentError("--harness-tasks and its options need --harness lm-eval")
        return None
    if not names:
        raise InvalidArgumentError("--harness lm-eval needs --harness-tasks NAME[,NAME...]")
    given = click.get_current_context().get_parameter_source("max_tokens")
    return HarnessRun(
        command=flags["lm_eval_command"],
        tasks=tuple(names),
        include_path=flags["harness_include"],
        limit=flags["limit"],
        num_fewshot=flags["num_fewshot"],
        max_tokens=flags["max_tokens"] if given is click.core.ParameterSource.COMMANDLINE else None,
        model_args=tuple(flags["harness_model_args"]),
        allow_download=flags["harness_download"],
    )


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _render(doc: Any) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    confidence = doc.overall.confidence
    table = Table(title=f"{escape(doc.model)} at {escape(doc.url)} ({confidence:.0%} intervals)")
    for column in ("task", "right", "scored", "failed", "accuracy", "interval"):
        table.add_column(column, justify="left" if column == "task" else "right")
    for section in (*doc.tasks, doc.overall):
        interval = "-" if section.low is None else f"{section.low:.1%} - {section.high:.1%}"
        table.add_row(
            escape(section.task),
            str(section.correct),
            str(section.scored),
            str(section.failed),
            _percent(section.accuracy),
            interval,
        )
    console = Console()
    console.print(table)
    if doc.harness:
        console.print(f"scored by {escape(doc.harness)}")
    if doc.overall.failed:
        console.print(f"{doc.overall.failed} request(s) failed: their items are not scored")
    if doc.interrupted:
        console.print(f"interrupted by {doc.interrupted}: {doc.not_run} item(s) not run")


@eval_.command("compare")
@click.argument("baseline")
@click.argument("candidate")
@click.option(
    "--max-drop",
    type=click.FloatRange(0, 100, max_open=True),
    help="PERCENT: exit 1 when an accuracy drops by more than this even at the interval's "
    "best end.",
)
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.95, show_default=True)
@click.option("--resamples", type=click.IntRange(100, 100_000), default=2000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Of the bootstrap draws.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--db", help="The run history database [$SERVEFIT_DB, else the user's data dir].")
def eval_compare(
    baseline: str,
    candidate: str,
    max_drop: float | None,
    confidence: float,
    resamples: int,
    seed: int,
    as_json: bool,
    db: str | None,
) -> None:
    """BASELINE and CANDIDATE are eval runs: history ids, --output folders or eval.json
    files. Exit 0: no accuracy fell beyond --max-drop; 1: one did; 2: unreadable input."""
    from servefit.app.evals import compare_evals, load_eval
    from servefit.app.history import resolve_db_path

    try:
        path = resolve_db_path(db)
        result = compare_evals(
            load_eval(baseline, path, what="baseline"),
            load_eval(candidate, path, what="candidate"),
            max_drop=None if max_drop is None else max_drop / 100,
            confidence=confidence,
            resamples=resamples,
            seed=seed,
        )
    except ServefitError as error:
        fail(error)
    if as_json:
        emit_json(_comparison_json(result))
    else:
        _render_comparison(result)
    sys.exit(EXIT_FAILED if result.has_regression else EXIT_OK)


def _comparison_json(result: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "baseline": {"model": result.baseline.model, "url": result.baseline.url},
        "candidate": {"model": result.candidate.model, "url": result.candidate.url},
        "max_drop": result.max_drop,
        "changes": [
            {
                "task": c.task,
                "baseline_accuracy": c.baseline.accuracy,
                "candidate_accuracy": c.candidate.accuracy,
                "change": None if c.change is None else c.change.point,
                "low": None if c.change is None else c.change.low,
                "high": None if c.change is None else c.change.high,
                "confidence": None if c.change is None else c.change.confidence,
                "paired": c.paired,
                "items_compared": c.compared,
                "beyond_noise": c.beyond_noise,
                "regression": c.regression,
            }
            for c in result.changes
        ],
    }


def _render_comparison(result: Any) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="candidate vs baseline accuracy")
    for column in ("task", "baseline", "candidate", "change", "interval", "items", "verdict"):
        table.add_column(column, justify="left" if column in ("task", "verdict") else "right")
    for c in result.changes:
        if c.change is None:
            interval, verdict = "-", "a side scored nothing"
        else:
            interval = f"{c.change.low:+.1%} .. {c.change.high:+.1%}"
            verdict = (
                "REGRESSION"
                if c.regression
                else ("beyond the noise" if c.beyond_noise else "within the noise")
            )
        table.add_row(
            escape(c.task),
            _percent(c.baseline.accuracy),
            _percent(c.candidate.accuracy),
            "-" if c.change is None else f"{c.change.point:+.1%}",
            interval,
            f"{c.compared} {'paired' if c.paired else 'unpaired'}",
            verdict,
        )
    Console().print(table)
