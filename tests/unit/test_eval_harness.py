"""How `eval --harness lm-eval` calls lm-evaluation-harness and reads what it wrote
(bench/harness.py). The files here have the shape lm_eval 0.4.13 writes (a results JSON and
a samples JSONL per task, one sample line per item and filter); the real harness against a
real server is tests/integration/test_eval_vs_vllm.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servefit.bench.evals import EvalConfig
from servefit.bench.harness import HarnessRun, harness_command, read_harness_output
from servefit.errors import DatasetError, InvalidArgumentError

STAMP = "2026-12-02T13-50-07.334601"


def write_output(out: Path, results: dict, samples: dict[str, list[dict]], groups=None) -> Path:
    folder = out / "served-model"
    folder.mkdir(parents=True)
    doc = {"results": results, "group_subtasks": groups or {t: [] for t in samples}}
    (folder / f"results_{STAMP}.json").write_text(json.dumps(doc))
    for task, lines in samples.items():
        text = "".join(json.dumps(x) + "\n" for x in lines)
        (folder / f"samples_{task}_{STAMP}.jsonl").write_text(text)
    return out


def sample(doc_id: int, value: float, *, filter_name: str = "none", metric="exact_match"):
    return {
        "doc_id": doc_id,
        "doc": {"question": f"q{doc_id}"},
        "target": "7",
        "filtered_resps": [f"answer {doc_id}"],
        "filter": filter_name,
        "metrics": [metric],
        metric: value,
    }


def test_command_is_local_completions_greedy_with_samples(tmp_path):
    cfg = EvalConfig(base_url="http://127.0.0.1:8000/v1", concurrency=4, timeout_s=90, seed=3)
    run = HarnessRun(command="lm_eval", tasks=("gsm8k", "ifeval"), limit=50, max_tokens=128)
    command = harness_command(run, cfg, "qwen", tmp_path)
    assert command[:3] == ["lm_eval", "--model", "local-completions"]
    args = dict(pair.split("=", 1) for pair in command[4].split(","))
    assert args == {
        "model": "qwen",
        "base_url": "http://127.0.0.1:8000/v1/completions",
        "num_concurrent": "4",
        "tokenized_requests": "False",
        "tokenizer_backend": "None",
        "timeout": "90",
    }
    flat = " ".join(command[5:])
    assert "--tasks gsm8k,ifeval" in flat and "--log_samples" in flat
    assert "--gen_kwargs temperature=0,max_gen_toks=128" in flat and "--limit 50" in flat
    assert "--seed 3" in flat and "--apply_chat_template" not in flat


def test_chat_and_model_argument_overrides(tmp_path):
    cfg = EvalConfig(base_url="http://h:1", endpoint="chat")
    run = HarnessRun(
        command="lm_eval", tasks=("mmlu",), model_args=("tokenizer_backend=huggingface",)
    )
    command = harness_command(run, cfg, "m", tmp_path)
    assert command[2] == "local-chat-completions" and "--apply_chat_template" in command
    assert "tokenizer_backend=huggingface" in command[4]
    assert "base_url=http://h:1/v1/chat/completions" in command[4]
    assert "--gen_kwargs temperature=0 " in " ".join(command) + " "  # the task's own length
    with pytest.raises(InvalidArgumentError, match="KEY=VALUE"):
        harness_command(
            HarnessRun(command="x", tasks=("t",), model_args=("bad",)), cfg, "m", tmp_path
        )


def test_reads_the_first_metric_and_filter_per_item(tmp_path):
    # GSM8K's two filters: strict-match first (as the harness lists it), then flexible
    lines = [sample(i, float(i < 3), filter_name="strict-match") for i in range(4)]
    lines += [sample(i, 1.0, filter_name="flexible-extract") for i in range(4)]
    results = {
        "gsm8k": {
            "alias": "gsm8k",
            "exact_match,strict-match": 0.75,
            "exact_match_stderr,strict-match": 0.25,
            "exact_match,flexible-extract": 1.0,
        }
    }
    out = write_output(tmp_path, results, {"gsm8k": lines})
    result = read_harness_output(out, "m", ("gsm8k",))
    assert [r.correct for r in result.records] == [True, True, True, False]
    assert [r.item_id for r in result.records] == [f"gsm8k-{i}" for i in range(4)]
    assert {r.scorer for r in result.records} == {"exact_match"}
    assert result.records[0].answer == "answer 0"


def test_a_group_is_read_through_its_members(tmp_path):
    results = {
        "mmlu": {"acc,none": 0.5},
        "mmlu_a": {"acc,none": 1.0},
        "mmlu_b": {"acc,none": 0.0},
    }
    samples = {"mmlu_a": [sample(0, 1.0, metric="acc")], "mmlu_b": [sample(0, 0.0, metric="acc")]}
    groups = {"mmlu": ["mmlu_a", "mmlu_b"], "mmlu_a": [], "mmlu_b": []}
    out = write_output(tmp_path, results, samples, groups)
    result = read_harness_output(out, "m", ("mmlu",))
    assert [(r.task, r.correct) for r in result.records] == [("mmlu_a", True), ("mmlu_b", False)]


def test_a_graded_metric_is_refused_by_name(tmp_path):
    out = write_output(
        tmp_path, {"wmt": {"bleu,none": 31.2}}, {"wmt": [sample(0, 31.2, metric="bleu")]}
    )
    with pytest.raises(DatasetError, match=r"metric .bleu. is 31\.2 for an item, not 0 or 1"):
        read_harness_output(out, "m", ("wmt",))


def test_items_that_disagree_with_the_harness_score_are_refused(tmp_path):
    lines = [sample(0, 1.0), sample(1, 0.0)]
    out = write_output(tmp_path, {"t": {"exact_match,none": 1.0}}, {"t": lines})
    with pytest.raises(DatasetError, match=r"averages 0\.500000, the harness reports 1\.000000"):
        read_harness_output(out, "m", ("t",))


def test_no_results_is_an_error_naming_the_folder(tmp_path):
    with pytest.raises(DatasetError, match="lm_eval wrote no results_"):
        read_harness_output(tmp_path, "m", ("t",))


def test_a_url_with_user_info_is_refused_for_the_harness(tmp_path):
    from servefit.bench.harness import run_harness

    cfg = EvalConfig(base_url="http://user:secret@127.0.0.1:1")
    assert cfg.base_url == "http://127.0.0.1:1" and cfg.credentials == "user:secret"
    with pytest.raises(InvalidArgumentError, match="no user-info"):
        run_harness(HarnessRun(command="lm_eval", tasks=("t",)), cfg, "m", tmp_path, env={})
