"""servefit against the public fidelity corpus: how far its numbers are from what vLLM logged
and what users measured, per group, overall, and on the records no fit has seen.

    python benchmarks/fidelity.py            # print the tables
    python benchmarks/fidelity.py --write    # also write docs/fidelity.md and data/error_bands.toml
    python benchmarks/fidelity.py --save-baseline   # record today's errors as the "before"

The corpus is ``benchmarks/fidelity/``: ``startup_logs.json`` (real ``vllm serve`` start-up
logs) and ``speed.json`` (published speed measurements), each record with its source.
``tests/unit/test_error_bands.py`` holds the bundled bands equal to what this computes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from servefit.adapters.catalog import DATA_DIR
from servefit.adapters.error_bands import bands_toml
from servefit.calibrate.fidelity import CorpusScore, load_corpus, score_corpus
from servefit.core.error_band import FIGURE_LABELS, bands_from, summarise

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "benchmarks" / "fidelity"
BASELINE = CORPUS / "baseline.json"
DOC = ROOT / "docs" / "fidelity.md"


def _gpus(log) -> int:
    """The GPUs of one replica: tensor x pipeline parallel (the log's own count if larger)."""
    s = log.settings
    return max(
        log.gpu_count, (s.get("tensor_parallel_size") or 1) * (s.get("pipeline_parallel_size") or 1)
    )


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1%}"


def group_errors(score: CorpusScore) -> dict[str, dict[str, list[float]]]:
    """figure -> group label -> relative errors (signed), plus an "all" group per figure."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for c in score.capacity:
        if c.log.unmodelled:
            continue
        for label in ("all", c.hardware_class, f"vLLM {c.log.vllm_version}"):
            out["kv_cache_tokens"][label].append(c.relative_error)
        if c.log.settings.get("tensor_parallel_size", 1) not in (1, None):
            out["kv_cache_tokens"][f"{c.hardware_class} TP>1"].append(c.relative_error)
    for s in score.speed:
        m = s.measurement
        for label in ("all", f"{s.hardware_class} / {m.engine}"):
            out[s.figure][label].append(s.relative_error)
        out["speed (all figures)"]["all"].append(s.relative_error)
        out["speed (all figures)"][f"{s.hardware_class} / {m.engine}"].append(s.relative_error)
        out["speed (all figures)"]["fresh (no fit saw it)" if not m.fitted else "fitted"].append(
            s.relative_error
        )
    return out


def summary_rows(score: CorpusScore) -> list[tuple[str, str, int, float, float]]:
    rows = []
    for figure, groups in group_errors(score).items():
        for label, errors in sorted(groups.items(), key=lambda kv: (kv[0] != "all", kv[0])):
            n, median, p90 = summarise(errors)
            rows.append((FIGURE_LABELS.get(figure, figure), label, n, median, p90))
    return rows


def capacity_facts(score: CorpusScore) -> dict[str, float]:
    scored = [c for c in score.capacity if not c.log.unmodelled]
    given = [c for c in score.capacity if c.given_memory_error is not None]
    within = [c for c in scored if abs(c.relative_error) <= 0.01]
    return {
        "logs": len(scored),
        "given_memory_exact": sum(1 for c in given if c.given_memory_error == 0),
        "given_memory_cases": len(given),
        "end_to_end_within_1pct": len(within),
    }


def _table(rows, baseline: dict[str, list[float]] | None) -> list[str]:
    head = "| figure | group | n | median abs error | p90 abs error |"
    sep = "|---|---|---:|---:|---:|"
    if baseline is not None:
        head += " before: median | before: p90 |"
        sep += "---:|---:|"
    lines = [head, sep]
    for figure, label, n, median, p90 in rows:
        line = f"| {figure} | {label} | {n} | {_pct(median)} | {_pct(p90)} |"
        if baseline is not None:
            before = baseline.get(f"{figure}|{label}")
            line += f" {_pct(before[0])} | {_pct(before[1])} |" if before else " new | new |"
        lines.append(line)
    return lines


def render_markdown(score: CorpusScore, baseline: dict[str, list[float]] | None) -> str:
    facts = capacity_facts(score)
    lines = [
        "# Fidelity: servefit against what vLLM logged and what users measured",
        "",
        "Written by `python benchmarks/fidelity.py --write` from the corpus in",
        "`benchmarks/fidelity/` (each record names its source). Errors are",
        '|predicted - measured| / measured. "before" is the corpus scored when the baseline',
        "was saved (`--save-baseline`: before this round's fixes, with the 55 fitted and 46 of",
        "the fresh speed records, and only the 33 start-up logs of vLLM 0.19/0.20 on H100s, so a",
        'start-up group\'s before and after are of different logs); "new" marks a group the',
        "baseline did not have.",
        "",
        "## Capacity (KV-cache tokens)",
        "",
        f"- start-up logs scored: {facts['logs']}, on "
        f"{', '.join(sorted({c.log.gpu_catalog for c in score.capacity}))}; vLLM "
        f"{', '.join(sorted({c.log.vllm_version for c in score.capacity}, key=_version))}",
        f"- speed measurements: {len(score.speed)} on "
        f"{len({s.measurement.gpu for s in score.speed})} GPU kinds, engines "
        f"{', '.join(sorted({s.measurement.engine for s in score.speed}))}",
        f"- given the logged KV memory, the token count bracketed to the token: "
        f"{facts['given_memory_exact']} of {facts['given_memory_cases']}",
        f"- end to end (from the GPU and the flags) within 1 %: "
        f"{facts['end_to_end_within_1pct']} of {facts['logs']}",
        "",
        "## Every group",
        "",
        *_table(summary_rows(score), baseline),
        "",
        "## Start-up logs, one by one",
        "",
        "| log | GPU | vLLM | logged tokens | predicted | error | source |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for c in score.capacity:
        mark = f" (unmodelled: {c.log.unmodelled})" if c.log.unmodelled else ""
        lines.append(
            f"| {c.log.name}{mark} | {c.log.gpu_catalog} x{_gpus(c.log)} | "
            f"{c.log.vllm_version} | {c.logged_tokens:,} | {c.predicted_tokens:,} | "
            f"{c.relative_error:+.1%} | {c.log.source} |"
        )
    lines += [
        "",
        "## Speed measurements, one by one",
        "",
        "| measurement | GPU | engine | metric | measured | predicted | error | fitted |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    for s in score.speed:
        m = s.measurement
        lines.append(
            f"| [{m.id}]({m.source_url}) | {m.gpu} x{m.tp * m.pp} | {m.engine} | {m.metric} | "
            f"{m.value:.4g} | {s.predicted:.4g} | {s.relative_error:+.1%} | "
            f"{'yes' if m.fitted else 'no'} |"
        )
    if score.skipped:
        lines += ["", "## Not scored", ""] + [f"- {reason}" for reason in score.skipped]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write docs/fidelity.md and the bands")
    parser.add_argument("--save-baseline", action="store_true")
    args = parser.parse_args(argv)
    logs, measurements = load_corpus(CORPUS)
    score = score_corpus(logs, measurements)
    rows = summary_rows(score)
    print(f"{'figure':<22} {'group':<34} {'n':>4} {'median':>8} {'p90':>8}")
    for figure, label, n, median, p90 in rows:
        print(f"{figure:<22} {label[:34]:<34} {n:>4} {_pct(median):>8} {_pct(p90):>8}")
    facts = capacity_facts(score)
    print(
        f"\ncapacity: {facts['logs']} logs; given the logged KV memory "
        f"{facts['given_memory_exact']}/{facts['given_memory_cases']} to the token; end to end "
        f"{facts['end_to_end_within_1pct']}/{facts['logs']} within 1 %"
    )
    for reason in score.skipped:
        print(f"not scored: {reason}", file=sys.stderr)
    if args.save_baseline:
        BASELINE.write_text(
            json.dumps({f"{f}|{g}": [m, p] for f, g, _, m, p in rows}, indent=1) + "\n",
            encoding="utf-8",
        )
    if args.write:
        baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else None
        DOC.write_text(render_markdown(score, baseline), encoding="utf-8")
        bands = bands_from(score.scored())
        (DATA_DIR / "error_bands.toml").write_text(
            bands_toml(bands, len(score.capacity), len(score.speed)), encoding="utf-8"
        )
        print(f"wrote {DOC.relative_to(ROOT)} and {len(bands)} bands")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
