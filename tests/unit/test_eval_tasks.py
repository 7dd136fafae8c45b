"""Eval task files (bench/eval_tasks.py): the three shapes and what a bad line says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servefit.bench.eval_tasks import read_tasks
from servefit.errors import DatasetError


def write(path: Path, records: list, *, array: bool = False) -> Path:
    text = json.dumps(records) if array else "\n".join(json.dumps(r) for r in records) + "\n"
    path.write_text(text)
    return path


def test_gsm8k_lines_as_the_dataset_publishes_them(tmp_path):
    # the shape of GSM8K's main split (openai/grade-school-math, test.jsonl)
    path = write(
        tmp_path / "gsm8k.jsonl",
        [
            {
                "question": "Janet has 3 apples and buys 4 more. How many does she have?",
                "answer": "She has 3 + 4 = <<3+4=7>>7 apples.\n#### 7",
            },
            {"question": "What is 500 + 500?", "answer": "500 + 500 = 1000\n#### 1,000"},
        ],
    )
    first, second = read_tasks([path])
    assert first.task == "gsm8k" and first.item_id == "gsm8k-1"
    assert first.prompt == (
        "Question: Janet has 3 apples and buys 4 more. How many does she have?\nAnswer:"
    )
    assert (first.reference, first.scorer, first.stop) == ("7", "number", ("Question:",))
    assert second.reference == "1,000"


def test_multiple_choice_lines_letter_the_choices(tmp_path):
    path = write(
        tmp_path / "mmlu.jsonl",
        [
            {"question": "2 + 2 =", "choices": ["3", "4", "5", "22"], "answer": 1},
            {"question": "Largest?", "choices": ["x", "y"], "answer": "a"},
        ],
    )
    first, second = read_tasks([path])
    assert first.prompt == "2 + 2 =\nA. 3\nB. 4\nC. 5\nD. 22\nAnswer:"
    assert (first.reference, first.scorer, first.letters) == ("B", "choice", "ABCD")
    assert second.reference == "A"


def test_own_shape_with_task_id_scorer_and_stop_in_a_json_array(tmp_path):
    path = write(
        tmp_path / "mixed.json",
        [
            {"id": "q1", "task": "capitals", "prompt": "Capital of Peru?", "answer": "Lima"},
            {"prompt": "6 x 7?", "answer": 42, "scorer": "number", "stop": ["\n"]},
        ],
        array=True,
    )
    capital, product = read_tasks([path])
    assert (capital.item_id, capital.task, capital.scorer) == ("q1", "capitals", "exact")
    assert (product.item_id, product.task, product.reference) == ("mixed-2", "mixed", "42")
    assert product.stop == ("\n",)


def test_limit_takes_the_first_items_of_each_file(tmp_path):
    a = write(tmp_path / "a.jsonl", [{"prompt": f"p{i}", "answer": "x"} for i in range(5)])
    b = write(tmp_path / "b.jsonl", [{"prompt": f"q{i}", "answer": "y"} for i in range(5)])
    items = read_tasks([a, b], limit=2)
    assert [i.item_id for i in items] == ["a-1", "a-2", "b-1", "b-2"]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"prompt": "x", "answer": "y"}', "{not json"], "line 2: not JSON"),
        (['{"prompt": "x"}'], "line 1: 'answer' must be a non-empty text"),
        (['{"question": "q", "answer": "no marker"}'], "line 1: a GSM8K answer ends '#### "),
        (['{"question": "q", "choices": ["a", "b"], "answer": 5}'], "line 1: 'answer' 5 must"),
        (['{"prompt": "x", "answer": "y", "scorer": "regex"}'], "line 1: 'scorer' 'regex'"),
        (['{"prompt": "x", "answer": "seven", "scorer": "number"}'], "line 1: item"),
        (['{"prompt": "x", "answer": "y"}', '"a text"'], "line 2: an item is a JSON object"),
        (
            ['{"id": 1, "prompt": "x", "answer": "y"}', '{"id": 1, "prompt": "z", "answer": "w"}'],
            "the item id '1' appears twice",
        ),
        ([""], "holds no item"),
    ],
)
def test_a_bad_file_names_the_line_and_the_field(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match="--tasks") as info:
        read_tasks([path])
    assert message in str(info.value)


def test_a_missing_or_binary_file_is_a_dataset_error(tmp_path):
    with pytest.raises(DatasetError, match="cannot be read"):
        read_tasks([tmp_path / "absent.jsonl"])
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DatasetError, match="not UTF-8"):
        read_tasks([binary])
