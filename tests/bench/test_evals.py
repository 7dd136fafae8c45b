"""``servefit eval`` through its command line against real null servers (in this process's
threads): one answering a task set right, one answering part of it, one answering none.
The expected counts are the answers each server was given, counted by hand below; the
intervals are core/evals.py's (checked against published examples in
tests/unit/test_evals_core.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from servefit.bench.eval_tasks import read_tasks
from servefit.bench.null_server import NullServerConfig
from servefit.core.evals import wilson_interval

from .conftest import ServerThread
from .test_bench_null_server import SERVEFIT, wait_until

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "160"}
NUM_ITEMS = 30


def task_file(path: Path, n: int = NUM_ITEMS, prompt: str = "What is {i} + {i}?") -> Path:
    # every third item a multiple choice, every third an exact text, the rest numbers
    lines = []
    for i in range(n):
        if i % 3 == 0:
            record = {"prompt": prompt.format(i=i), "answer": str(2 * i), "scorer": "number"}
        elif i % 3 == 1:
            record = {"prompt": f"Is {i} odd? ({i})", "choices": ["yes", "no"], "answer": "A"}
        else:
            record = {"prompt": f"Spell the number {i}.", "answer": f"number-{i}"}
        lines.append(json.dumps({"id": f"item-{i}", **record}))
    path.write_text("\n".join(lines) + "\n")
    return path


def answering(path: Path | None, only: int | None = None) -> ServerThread:
    """A null server answering the first ``only`` items of ``path`` right (None: all)."""
    answers = {}
    if path is not None:
        items = read_tasks([path])[:only]
        answers = {i.prompt: i.reference for i in items}
    return ServerThread(NullServerConfig(answers=answers)).start()


def servefit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SERVEFIT, *args], capture_output=True, text=True, env=env or ENV, timeout=120
    )


def evaluate(url: str, tasks: Path, out: Path, *flags: str, env=None) -> dict:
    done = servefit(
        "eval", url, "--tasks", str(tasks), "--output", str(out), "--json", *flags, env=env
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc == json.loads((out / "eval.json").read_text())  # the file is what was printed
    return doc


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    return task_file(tmp_path_factory.mktemp("tasks") / "mixed.jsonl")


@pytest.fixture(scope="module")
def runs(tasks, tmp_path_factory):
    """Three runs of the same 30 items: all right, 18 right (the first 18), none right."""
    folder = tmp_path_factory.mktemp("runs")
    out = {}
    for name, only in (("right", None), ("part", 18), ("wrong", 0)):
        server = answering(tasks, only) if only != 0 else answering(None)
        try:
            out[name] = (folder / name, evaluate(server.url, tasks, folder / name, "--no-history"))
        finally:
            server.stop()
    return out


def test_every_item_is_scored_and_counted(runs):
    for name, correct in (("right", 30), ("part", 18), ("wrong", 0)):
        folder, doc = runs[name]
        overall = doc["overall"]
        assert (overall["scored"], overall["correct"], overall["failed"]) == (30, correct, 0)
        w = wilson_interval(correct, 30)
        assert (overall["accuracy"], overall["low"], overall["high"]) == (w.point, w.low, w.high)
        lines = [json.loads(x) for x in (folder / "items.jsonl").read_text().splitlines()]
        assert sorted(x["item_id"] for x in lines) == sorted(f"item-{i}" for i in range(30))
        assert sum(x["correct"] for x in lines) == correct
        assert doc["model"] == "servefit-null" and doc["not_run"] == 0


def test_the_part_run_is_right_on_exactly_the_answered_items(runs):
    _, doc = runs["part"]
    right = {i["item_id"] for i in doc["items"] if i["correct"]}
    assert right == {f"item-{i}" for i in range(18)}


def test_compare_finds_the_drop_beyond_the_noise_and_gates_it(runs):
    right, wrong = str(runs["right"][0]), str(runs["wrong"][0])
    done = servefit("eval", "compare", right, wrong, "--max-drop", "10", "--json")
    assert done.returncode == 1, done.stderr  # -100 points: a regression past a 10 % gate
    overall = json.loads(done.stdout)["changes"][-1]
    assert overall["task"] == "all" and overall["change"] == -1.0
    assert overall["paired"] and overall["items_compared"] == 30
    assert overall["beyond_noise"] and overall["regression"]
    # the alias spelling of the issue, and no gate: reported, exit 0
    assert servefit("eval", "--compare", right, wrong).returncode == 0


def test_compare_of_a_run_with_itself_is_no_change(runs):
    part = str(runs["part"][0])
    done = servefit("eval", "compare", part, part, "--max-drop", "0", "--json")
    assert done.returncode == 0, done.stderr
    overall = json.loads(done.stdout)["changes"][-1]
    assert (overall["change"], overall["low"], overall["high"]) == (0.0, 0.0, 0.0)
    assert not overall["beyond_noise"]


def test_a_smaller_drop_on_the_same_items_is_beyond_the_noise(runs):
    # right (30/30) -> part (18/30): 12 items changed, none the other way
    done = servefit("eval", "compare", str(runs["right"][0]), str(runs["part"][0]), "--json")
    overall = json.loads(done.stdout)["changes"][-1]
    assert overall["change"] == pytest.approx(-0.4)
    assert overall["high"] < 0 and overall["beyond_noise"]


def cost_json(*flags: str, env=None) -> dict:
    done = servefit(
        "cost", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--json", *flags, env=env
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["cost"]


def test_cost_divides_by_the_measured_accuracy(runs):
    base = cost_json()
    part = cost_json("--success-from", str(runs["part"][0]))
    # 18 of 30 right: a successful task costs 30 / 18 of a task
    assert part["usd_per_successful_task"] == pytest.approx(
        base["usd_per_successful_task"] * 30 / 18, rel=1e-12
    )
    assert any("measured by eval" in a and "18/30 right" in a for a in part["assumptions"])
    # the interval's ends give the range of $/successful task
    w = wilson_interval(18, 30)
    task = base["usd_per_successful_task"]
    span = next(a for a in part["assumptions"] if a.startswith("over that interval"))
    assert f"${task / w.high:.6f}"[:6] in span


def test_success_from_refuses_what_it_cannot_use(runs):
    model = ("cost", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100")
    part, wrong = str(runs["part"][0]), str(runs["wrong"][0])
    both = servefit(*model, "--success-from", part, "--success-rate", "0.5")
    assert both.returncode == 2 and "not both" in both.stderr
    none_right = servefit(*model, "--success-from", wrong)
    assert none_right.returncode == 2 and "no item was answered right" in none_right.stderr
    no_task = servefit(*model, "--success-from", f"{part}:nope")
    assert no_task.returncode == 2 and "no task 'nope' (it has mixed)" in no_task.stderr
    assert cost_json("--success-from", f"{part}:mixed")["usd_per_successful_task"] > 0


def test_history_keeps_eval_runs_for_compare_and_cost(tasks, tmp_path):
    env = {**ENV, "SERVEFIT_DB": str(tmp_path / "history.sqlite")}
    right, part = answering(tasks), answering(tasks, 18)
    try:
        servefit("eval", right.url, "--tasks", str(tasks), env=env)
        servefit("eval", part.url, "--tasks", str(tasks), "--endpoint", "chat", env=env)
    finally:
        right.stop()
        part.stop()
    listed = servefit("history", "--kind", "eval", "--json", env=env)
    assert [r["id"] for r in json.loads(listed.stdout)] == [2, 1]
    done = servefit("eval", "compare", "1", "2", "--json", env=env)
    assert json.loads(done.stdout)["changes"][-1]["change"] == pytest.approx(-0.4)
    by_id = cost_json("--success-from", "2", env=env)
    assert "eval 2" in " ".join(by_id["assumptions"])
    not_eval = servefit("eval", "compare", "1", "7", env=env)
    assert not_eval.returncode == 2 and "candidate 7: the history holds no run" in not_eval.stderr


def test_sample_asks_the_same_seeded_subset(tasks, tmp_path):
    server = answering(tasks)
    try:
        picked = {}
        for run, seed in (("a", "1"), ("b", "1"), ("c", "2")):
            flags = ("--sample", "5", "--seed", seed, "--no-history")
            doc = evaluate(server.url, tasks, tmp_path / run, *flags)
            picked[run] = [i["item_id"] for i in doc["items"]]
    finally:
        server.stop()
    assert len(picked["a"]) == 5 and len(set(picked["a"])) == 5
    assert picked["a"] == picked["b"] != picked["c"]  # the seed decides, nothing else
    order = [f"item-{i}" for i in range(NUM_ITEMS)]
    assert picked["a"] == sorted(picked["a"], key=order.index)  # in the file's order


def test_a_failed_request_is_kept_unscored_and_fails_the_run(tmp_path):
    tasks = task_file(tmp_path / "t.jsonl", n=6)
    text = tasks.read_text().replace("What is 3 + 3?", "What is __HTTP_500__?")
    tasks.write_text(text)
    server = answering(tasks)
    try:
        done = servefit("eval", server.url, "--tasks", str(tasks), "--json", "--no-history")
    finally:
        server.stop()
    assert done.returncode == 1
    overall = json.loads(done.stdout)["overall"]
    assert (overall["scored"], overall["correct"], overall["failed"]) == (5, 5, 1)


def test_a_malformed_task_file_sends_nothing(tmp_path):
    tasks = tmp_path / "bad.jsonl"
    tasks.write_text('{"prompt": "a", "answer": "b"}\n{"prompt": "c"}\n')
    server = answering(None)
    try:
        done = servefit("eval", server.url, "--tasks", str(tasks), "--no-history")
        assert server.server.requests_total == 0
    finally:
        server.stop()
    assert done.returncode == 2
    assert "line 2: 'answer' must be a non-empty text" in done.stderr


def test_an_unreachable_server_is_an_input_error(tmp_path):
    from .conftest import free_port

    tasks = task_file(tmp_path / "t.jsonl", n=2)
    done = servefit(
        "eval", f"http://127.0.0.1:{free_port()}", "--tasks", str(tasks), "--no-history"
    )
    assert done.returncode == 2 and "cannot reach" in done.stderr


def test_sigint_keeps_what_was_scored(tmp_path):
    # three quick items, then one the server stops streaming (__HANG__), one at a time:
    # once three answers are written, the fourth is in flight and stays so
    tasks = tmp_path / "t.jsonl"
    lines = [{"id": f"q{i}", "prompt": f"quick {i}", "answer": f"a{i}"} for i in range(3)]
    lines.append({"id": "held", "prompt": "__HANG__ please", "answer": "never"})
    lines.append({"id": "later", "prompt": "never sent", "answer": "x"})
    tasks.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    server = answering(tasks)
    out = tmp_path / "out"
    flags = ["--output", str(out), "--concurrency", "1", "--max-tokens", "8", "--no-history"]
    proc = subprocess.Popen(
        [*SERVEFIT, "eval", server.url, "--tasks", str(tasks), *flags],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        items = out / "items.jsonl"
        wait_until(lambda: items.exists() and items.read_text().count("\n") == 3, "3 answers")
        wait_until(lambda: server.server.requests_total == 4, "the held request")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        server.stop()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    doc = json.loads((out / "eval.json").read_text())
    assert doc["interrupted"] == "SIGINT"
    assert (doc["overall"]["scored"], doc["overall"]["correct"], doc["not_run"]) == (3, 3, 2)
