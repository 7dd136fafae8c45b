"""``servefit eval`` against the real vLLM (CPU) server on its tiny random-weight model.

A random model answers nothing right by chance, so the expected count is built: each
prompt's greedy answer is first asked of the server with the standard library's HTTP client
(non-streamed, independent of servefit's client); four items take that answer as their
reference and two take a text no model says. servefit, streaming the same greedy requests,
must score exactly four of six, and say so in ``eval.json``, ``items.jsonl`` and its exit code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from vllm_server import REPO_ROOT, require_installed

from servefit.core.evals import normalise, wilson_interval

pytestmark = pytest.mark.integration
MAX_TOKENS = 6
PROMPTS = [f"The {word} of the story is" for word in ("start", "end", "hero", "place", "moral")]
PROMPTS += ["Once upon a time", "One two three four", "The capital of France is"]
NEVER = "servefit-never-says-this"
CLI = [sys.executable, "-m", "servefit.cli.main"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "NO_COLOR": "1"}


def greedy(base_url: str, prompt: str, stop: list[str] | None = None) -> str:
    body = {
        "model": "tiny-llama",
        "prompt": prompt,
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "seed": 0,
    }
    if stop:
        body["stop"] = stop
    request = urllib.request.Request(
        f"{base_url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())["choices"][0]["text"]


def run_eval(url: str, *flags: str) -> dict:
    common = ["--max-tokens", str(MAX_TOKENS), "--concurrency", "1", "--json", "--no-history"]
    done = subprocess.run(
        [*CLI, "eval", url, *flags, *common],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_eval_scores_the_real_server_exactly(vllm_server, tmp_path):
    answers = [(p, greedy(vllm_server.base_url, p)) for p in PROMPTS]
    usable = [(p, a) for p, a in answers if normalise(a)][:6]  # an answer of only EOS: skip
    assert len(usable) == 6, answers
    lines = []
    for index, (prompt, answer) in enumerate(usable):
        reference = answer if index < 4 else NEVER
        lines.append(json.dumps({"id": f"p{index}", "prompt": prompt, "answer": reference}))
    tasks = tmp_path / "greedy.jsonl"
    tasks.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    doc = run_eval(vllm_server.base_url, "--tasks", str(tasks), "--output", str(out))
    assert doc["model"] == "tiny-llama"
    overall = doc["overall"]
    assert (overall["scored"], overall["correct"], overall["failed"]) == (6, 4, 0)
    expected = wilson_interval(4, 6)
    assert (overall["low"], overall["high"]) == (expected.low, expected.high)
    right = {i["item_id"] for i in doc["items"] if i["correct"]}
    assert right == {"p0", "p1", "p2", "p3"}
    records = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    by_id = {r["item_id"]: r for r in records}
    for index, (_, answer) in enumerate(usable):
        # the streamed answer is the non-streamed one, token for token
        assert by_id[f"p{index}"]["answer"] == answer
        assert by_id[f"p{index}"]["completion_tokens"] <= MAX_TOKENS


LM_EVAL = REPO_ROOT / ".venv-lmeval" / "bin" / "lm_eval"


def require_lm_eval() -> Path:
    """lm-evaluation-harness's command, or the test fails naming its install script."""
    return require_installed(LM_EVAL, "lm_eval", "scripts/lm_eval/install.sh")


TASK_YAML = """\
task: servefit_greedy
dataset_path: json
dataset_kwargs:
  data_files:
    test: {items}
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n\\n"]
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""


def test_lm_eval_harness_scores_the_same_items_the_same(vllm_server, tmp_path):
    """The same six items, once by servefit's runner and once by lm-evaluation-harness
    (`--harness lm-eval`, its local-completions model and exact_match metric) on the same
    server: the same four right, and `eval compare` pairs them to no change."""
    lm_eval = require_lm_eval()
    stop = ["\n\n"]  # the task's `until`, sent by both
    usable = [(p, a) for p in PROMPTS if normalise(a := greedy(vllm_server.base_url, p, stop))]
    assert len(usable) >= 6, usable
    tasks = tmp_path / "greedy.jsonl"
    records = [
        {"id": f"p{i}", "prompt": p, "answer": a if i < 4 else NEVER, "stop": stop}
        for i, (p, a) in enumerate(usable[:6])
    ]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in records))
    include = tmp_path / "yaml"
    include.mkdir()
    (include / "servefit_greedy.yaml").write_text(TASK_YAML.format(items=tasks))
    own = run_eval(vllm_server.base_url, "--tasks", str(tasks), "--output", str(tmp_path / "own"))
    harness = run_eval(
        vllm_server.base_url,
        "--harness",
        "lm-eval",
        "--harness-tasks",
        "servefit_greedy",
        "--harness-include",
        str(include),
        "--lm-eval",
        str(lm_eval),
        "--output",
        str(tmp_path / "harness"),
    )
    for doc in (own, harness):
        overall = doc["overall"]
        assert (overall["scored"], overall["correct"]) == (6, 4), doc
    assert harness["harness"] == "lm-evaluation-harness (servefit_greedy: exact_match)"
    # the harness's own aggregate, as it wrote it, is the 4/6 servefit read
    results = next((tmp_path / "harness" / "lm_eval").rglob("results_*.json"))
    score = json.loads(results.read_text())["results"]["servefit_greedy"]["exact_match,none"]
    assert score == pytest.approx(4 / 6)
    done = subprocess.run(
        [*CLI, "eval", "compare", str(tmp_path / "own"), str(tmp_path / "harness"), "--json"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    overall = json.loads(done.stdout)["changes"][-1]
    assert overall["paired"] and overall["items_compared"] == 6 and overall["change"] == 0
