"""servefit on questions users asked in public threads: right, wrong or cannot, per group.

    python benchmarks/questions.py            # print the table and every wrong answer
    python benchmarks/questions.py --write    # also write docs/questions.md

Each question of ``benchmarks/questions/questions.json`` holds the servefit command a user
would type, the thread it comes from and the thread's real outcome as a check:

* ``fits`` / ``does_not_fit`` (``why``: ``load``, ``kv`` or ``context``): the verdict's side,
  and for a failure the stage servefit names (loading the weights, sizing the KV cache, one
  request of max-model-len);
* ``number``: a figure of ``--json`` within a relative tolerance;
* ``faster``: of two commands, the one the thread measured faster is predicted faster.

A verdict AT THE EDGE on the other side of the thread's outcome is *edge*, not right.

An answer is *cannot* when servefit refuses the input (exit 2) or the record says why
servefit cannot express the deployment yet (``cannot``); such a question is never right.
``tests/golden/test_questions.py`` runs the corpus and holds the score.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from servefit.cli.main import cli
from servefit.units import GIB_BYTES

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "benchmarks" / "questions" / "questions.json"
DOC = ROOT / "docs" / "questions.md"


@dataclass(frozen=True)
class Answer:
    id: str
    group: str
    outcome: str  # "right", "wrong", "edge", "cannot" or "crash"
    detail: str


def run(argv: list[str]) -> tuple[int, dict[str, Any] | None, str]:
    """servefit with ``argv`` and --json, in process: exit code, document, output."""
    args = [*argv, "--json"] if "--json" not in argv else list(argv)
    result = CliRunner().invoke(cli, args)
    try:
        doc = json.loads(result.output)
    except json.JSONDecodeError:
        doc = None
    return result.exit_code, doc, result.output


def figure(doc: dict[str, Any], name: str) -> float | None:
    """One figure of a plan document by the corpus's name for it."""
    memory, perf = doc.get("memory") or {}, doc.get("performance") or {}
    load = perf.get("load") or {}
    values = {
        "kv_cache_tokens": memory.get("kv_cache_tokens"),
        "largest_max_model_len": memory.get("largest_max_model_len"),
        "max_concurrency": memory.get("max_concurrency"),
        "available_kv_cache_gib": (memory.get("kv_cache_memory_bytes") or 0) / GIB_BYTES,
        "ttft_s": perf.get("ttft_s"),  # the mean under the workload
        "tpot_s": perf.get("tpot_s"),
        "output_throughput_tok_per_s": load.get("output_throughput_tok_per_s"),
        "total_throughput_tok_per_s": load.get("total_throughput_tok_per_s"),
        "decode_tok_per_s_per_request": load.get("decode_tok_per_s"),
    }
    value = values.get(name)
    return float(value) if value is not None else None


def _failure_stage(doc: dict[str, Any]) -> str:
    reasons = " ".join((doc.get("verdict") or {}).get("reasons") or doc.get("problems") or [])
    if "while loading" in reasons:
        return "load"
    if "max_position_embeddings" in reasons or "needs more KV cache" in reasons:
        return "context"
    if "KV cache" in reasons:
        return "kv"
    return "other"


def judge(q: dict[str, Any]) -> Answer:
    e = q["expect"]
    if q.get("cannot"):
        code, doc, out = run(q["argv"])
        if code not in (0, 1, 2):
            return Answer(q["id"], q["group"], "crash", out.strip().splitlines()[-1:][0])
        return Answer(q["id"], q["group"], "cannot", q["cannot"])
    if e["kind"] == "faster":
        return _faster(q)
    code, doc, out = run(q["argv"])
    if code == 2:
        return Answer(q["id"], q["group"], "cannot", f"refused: {out.strip()[:160]}")
    if code not in (0, 1) or doc is None:
        return Answer(q["id"], q["group"], "crash", f"exit {code}: {out.strip()[-200:]}")
    verdict = doc.get("verdict") or {}
    said = f"servefit: {verdict.get('headline', '')}"
    # an at-the-edge verdict on the wrong side is a hedge, neither right nor wrong
    missed = "edge" if verdict.get("is_at_edge") else "wrong"
    if e["kind"] == "fits":
        return Answer(q["id"], q["group"], "right" if code == 0 else missed, said)
    if e["kind"] == "does_not_fit":
        if code == 0:
            return Answer(q["id"], q["group"], missed, said)
        stage = _failure_stage(doc)
        ok = stage == e["why"] or (e["why"] == "kv" and stage == "context")
        return Answer(q["id"], q["group"], "right" if ok else "wrong", f"{said} (stage {stage})")
    if e["kind"] in ("number", "max_model_len_at_most"):
        name = e.get("field", "kv_cache_tokens")
        tolerance = e.get("tolerance", 0.05)
        got = figure(doc, name)
        if got is None:
            return Answer(q["id"], q["group"], "wrong", f"{said}; no {name} predicted")
        error = (got - e["value"]) / e["value"]
        ok = abs(error) <= tolerance
        return Answer(
            q["id"],
            q["group"],
            "right" if ok else "wrong",
            f"{name}: measured {e['value']:,.4g}, servefit {got:,.4g} ({error:+.1%}, "
            f"tolerance {tolerance:.0%})",
        )
    raise ValueError(f"{q['id']}: unknown expect kind {e['kind']!r}")


def _faster(q: dict[str, Any]) -> Answer:
    e = q["expect"]
    got = []
    for side in ("a", "b"):
        code, doc, out = run(e[side]["argv"])
        if code == 2:
            return Answer(q["id"], q["group"], "cannot", f"refused: {out.strip()[:160]}")
        value = figure(doc, e["metric"]) if doc is not None else None
        if value is None:
            return Answer(q["id"], q["group"], "wrong", f"side {side}: no {e['metric']}")
        got.append(value)
    measured_a_faster = e["a"]["measured"] > e["b"]["measured"]
    predicted_a_faster = got[0] > got[1]
    return Answer(
        q["id"],
        q["group"],
        "right" if measured_a_faster == predicted_a_faster else "wrong",
        f"{e['metric']}: measured a {e['a']['measured']:,.4g} / b {e['b']['measured']:,.4g}, "
        f"servefit a {got[0]:,.4g} / b {got[1]:,.4g}",
    )


def load_questions(path: Path = CORPUS) -> list[dict[str, Any]]:
    return json.loads(path.read_text(encoding="utf-8"))["questions"]


def score(questions: list[dict[str, Any]]) -> list[Answer]:
    return [judge(q) for q in questions]


def tables(answers: list[Answer]) -> list[tuple[str, int, int, int, int, int]]:
    by_group: dict[str, Counter[str]] = defaultdict(Counter)
    for a in answers:
        by_group[a.group][a.outcome] += 1
        by_group["all"][a.outcome] += 1
    rows = []
    for group in sorted(by_group, key=lambda g: (g != "all", g)):
        c = by_group[group]
        rows.append((group, c["right"], c["wrong"], c["edge"], c["cannot"], c["crash"]))
    return rows


def render_markdown(questions: list[dict[str, Any]], answers: list[Answer]) -> str:
    lines = [
        "# Questions users asked, and servefit's answers",
        "",
        "Written by `python benchmarks/questions.py --write` from",
        "`benchmarks/questions/questions.json`: questions from public vLLM, SGLang, llama.cpp",
        "and Ollama threads, each with the thread's real outcome as an automatic check.",
        "*cannot* is a deployment servefit cannot express yet, *edge* a verdict AT THE EDGE",
        "(inside servefit's measured error) on the other side of the thread's outcome: neither",
        "is counted right.",
        "",
        "| group | right | wrong | edge | cannot | crash |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {g} | {r} | {w} | {d} | {c} | {x} |" for g, r, w, d, c, x in tables(answers)]
    lines += ["", "| question | group | answer | detail | source |", "|---|---|---|---|---|"]
    for q, a in zip(questions, answers, strict=True):
        detail = a.detail.replace("|", "/").replace("\n", " ")
        lines.append(f"| {q['question']} | {a.group} | {a.outcome} | {detail} | {q['source']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write docs/questions.md")
    args = parser.parse_args(argv)
    questions = load_questions()
    answers = score(questions)
    print(f"{'group':<18} {'right':>6} {'wrong':>6} {'edge':>5} {'cannot':>7} {'crash':>6}")
    for g, r, w, d, c, x in tables(answers):
        print(f"{g:<18} {r:>6} {w:>6} {d:>5} {c:>7} {x:>6}")
    for a in answers:
        if a.outcome in ("wrong", "crash"):
            print(f"{a.outcome}: {a.id}: {a.detail}", file=sys.stderr)
    if args.write:
        DOC.write_text(render_markdown(questions, answers), encoding="utf-8")
        print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
