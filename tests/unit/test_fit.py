"""``servefit fit``: the bundled models this hardware serves, ranked, each row what ``plan``
says of the same model, weights and context (issue 26: "which models can I run here?")."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from servefit.cli.main import cli


def _fit(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["fit", *args, "--json"])
    return result.exit_code, json.loads(result.output) if result.output.startswith("{") else {}


def _plan(model: str, gpu: str, *args: str) -> dict:
    result = CliRunner().invoke(
        cli, ["plan", model, "--gpu", gpu, *args, "--offline", "--no-performance", "--json"]
    )
    return json.loads(result.output)


@pytest.fixture(scope="module")
def qwen3_on_4090() -> dict:
    code, doc = _fit("--gpu", "RTX-4090", "--search", "qwen3", "--top", "0")
    assert code == 0
    return doc


def test_every_row_is_what_plan_says_of_it(qwen3_on_4090):
    rows = qwen3_on_4090["rows"]
    fitting = [r for r in rows if r["fits"]]
    failing = [r for r in rows if not r["fits"]]
    assert fitting and failing
    # the largest that fit, the smallest that fits, and the largest that does not
    for row in (fitting[0], fitting[-1], failing[0]):
        doc = _plan(row["model"], "RTX-4090", *row["plan_args"])
        assert doc["verdict"]["fits"] == row["fits"], row
        assert doc["memory"]["largest_max_model_len"] == row["largest_context_tokens"]
        assert doc["memory"]["max_concurrency"] == pytest.approx(row["max_concurrency"])
        assert doc["settings"]["max_model_len"] == row["context_tokens"]


def test_rows_are_ranked_fitting_then_largest_then_fastest(qwen3_on_4090):
    keys = [
        (r["fits"], r["total_params"], r["decode_tok_per_s"] or 0.0) for r in qwen3_on_4090["rows"]
    ]
    assert keys == sorted(keys, reverse=True)
    assert qwen3_on_4090["gpu"] == "RTX-4090" and qwen3_on_4090["task"] == "chat"


def test_fp8_is_tried_only_where_the_gpu_computes_it():
    # RTX 4090 (compute capability 8.9) computes fp8: a 16-bit checkpoint gets an fp8 row
    _, ada = _fit("--gpu", "RTX-4090", "--search", "qwen3-8b", "--top", "0")
    assert {r["weights"] for r in ada["rows"] if r["model"] == "Qwen/Qwen3-8B"} == {
        "bfloat16",
        "fp8 on load",
    }
    # an A100 (8.0) does not: the checkpoint alone
    _, ampere = _fit("--gpu", "A100-80GB-SXM", "--search", "qwen3-8b", "--top", "0")
    assert {r["weights"] for r in ampere["rows"] if r["model"] == "Qwen/Qwen3-8B"} == {"bfloat16"}


def test_the_task_sets_the_context_capped_at_the_model_s_own():
    _, doc = _fit("--gpu", "H100-SXM", "--search", "qwen3-8b", "--task", "agent", "--top", "0")
    row = next(r for r in doc["rows"] if r["model"] == "Qwen/Qwen3-8B")
    # agent asks 65,536 tokens; Qwen3-8B's config allows 40,960 positions
    assert row["context_tokens"] == 40_960
    _, doc = _fit("--gpu", "H100-SXM", "--search", "qwen3-8b", "--context", "2048")
    assert {r["context_tokens"] for r in doc["rows"]} == {2048}


def test_nothing_fits_exits_1_and_bad_input_exits_2():
    code, doc = _fit(
        *("--gpu-memory-gib", "2", "--gpu-bandwidth-gbps", "100"),
        *("--search", "llama-3.1-70b", "--top", "0"),
    )
    assert code == 1 and doc["rows"] and not any(r["fits"] for r in doc["rows"])
    assert all(r["problem"] for r in doc["rows"])
    bad = CliRunner().invoke(cli, ["fit", "--gpu", "RTX-4090", "--search", "no-such-model-xyz"])
    assert bad.exit_code == 2 and "matches no bundled model" in bad.output
    assert CliRunner().invoke(cli, ["fit", "--task", "poetry"]).exit_code == 2
    assert CliRunner().invoke(cli, ["fit", "--gpu", "RTX-4090", "--context", "0"]).exit_code == 2
