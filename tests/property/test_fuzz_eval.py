"""Hostile input, fuzzed: a mutated ``eval.json`` makes ``servefit cost --success-from`` a
clean error naming the file (exit 2) or a cost whose numbers are finite and non-negative,
never one divided by an accuracy no run can have measured, never exit 3; a mutated task file
is an error naming the file and its line, or items that can be scored; a mutated
``vllm bench serve`` result is refused by ``history import`` naming the file, or recorded
with a measured headline of finite, non-negative figures.

The eval.json mutations, the run and the classes are ``benchmarks/fuzz_artifacts.py``'s."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from fuzz_support import DrawChooser, load_fuzz_artifacts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servefit.bench.eval_tasks import read_tasks
from servefit.core.evals import SCORERS
from servefit.errors import DatasetError

fa = load_fuzz_artifacts()
FOLDER = Path(tempfile.mkdtemp(prefix="servefit-fuzz-eval-"))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_a_mutated_eval_run_is_a_clean_error_or_a_plausible_cost(data):
    case = fa.eval_case(DrawChooser(data))
    verdict, detail = fa.run_eval_case(case, FOLDER)
    assert verdict in ("clean error", "plausible"), f"{case.description}: {verdict}: {detail}"


def test_the_unmutated_eval_run_prices_a_task():
    case = fa.ArtifactCase("eval", {"eval.json": fa.eval_json().encode()})
    assert fa.run_eval_case(case, FOLDER) == ("plausible", "")


# the seed run: gsm8k 6/6, mmlu 1/4 (and one failed request), overall 7/10
@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({("overall", "accuracy"): 0.9}, "overall.accuracy: 0.9, but 7/10 right"),
        ({("overall", "correct"): 11}, "overall: counts"),
        ({("overall", "high"): 1.5}, "does not hold 0.7 within [0, 1]"),
        (
            {("overall", "correct"): 6, ("overall", "accuracy"): 0.6},
            "overall: its counts are not the sum of the tasks'",
        ),
        ({("items", 0, "correct"): False}, "items: their scores are not the overall counts"),
        ({("overall", "confidence"): 1.0}, "a confidence is in (0, 1)"),
        ({("schema_version",): 2}, "schema_version 2"),
    ],
)
def test_an_eval_run_no_run_can_write_is_refused_naming_the_file(changes, words, tmp_path):
    doc = json.loads(fa.eval_json())
    for path, value in changes.items():
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    (tmp_path / "eval.json").write_text(json.dumps(doc))
    from servefit.app.evals import load_eval

    with pytest.raises(DatasetError, match="is not an eval run servefit wrote") as err:
        load_eval(str(tmp_path))
    assert str(tmp_path / "eval.json") in str(err.value) and words in str(err.value)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
FIELDS = ("id", "task", "prompt", "answer", "question", "choices", "scorer", "stop")


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(
        st.dictionaries(st.sampled_from(FIELDS), JSON_VALUES | st.text(max_size=12), max_size=6),
        min_size=1,
        max_size=4,
    ),
    broken_line=st.booleans(),
)
def test_a_hostile_task_file_is_an_error_naming_the_file_or_items_to_score(records, broken_line):
    lines = [json.dumps(r, allow_nan=True) for r in records]
    if broken_line:
        lines.insert(1, "{not json")
    path = FOLDER / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    try:
        items = read_tasks([path])
    except DatasetError as error:
        assert str(error).startswith(f"--tasks {path}") or "--tasks: the item id" in str(error)
        return
    assert not broken_line and len(items) == len(records)
    for item in items:
        assert item.prompt.strip() and item.reference.strip() and item.scorer in SCORERS
        if item.scorer == "choice":
            assert item.reference in item.letters


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_a_mutated_vllm_bench_result_is_a_clean_error_or_a_plausible_record(data):
    case = fa.import_case(DrawChooser(data))
    verdict, detail = fa.run_import_case(case, FOLDER)
    assert verdict in ("clean error", "plausible"), f"{case.description}: {verdict}: {detail}"


def test_the_unmutated_vllm_bench_result_is_recorded():
    case = fa.ArtifactCase("import", {"result.json": fa.seeds.vllm_bench_json().encode()})
    assert fa.run_import_case(case, FOLDER) == ("plausible", "")
