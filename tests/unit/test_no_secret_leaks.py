"""Planted secrets, walked through every output (issue 28, F1 and F2): an API key, a Hugging
Face token, an environment secret and a URL's user-info are given to the real commands
(``python -m servefit.cli.main`` in subprocesses) - bench against a real null server, plan,
deploy, preflight, report, history and the page - and then every byte they printed and every
file they wrote (the run folders, the manifests, the report, the history database) is
searched for them. ``tests/integration/test_up.py`` does the same for ``up`` against the
real vLLM.

And the other way round: output that holds no secret is not touched (the help of every
command, a plan), so the redaction does not eat ordinary words.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from tests.null_server_cli import CLI, null_server, page
from tests.unit.test_cli import OFFLINE

from servefit.cli.main import COMMANDS

# Not shaped like any known key (no sk-/hf_ prefix): only where they are given away them.
API_KEY = "planted-api-key-0451"
HF_TOKEN = "planted-hf-token-7719"
ENV_SECRET = "planted-env-secret-3302"
URL_PASSWORD = "planted-url-password-8841"
URL_USER = "benchuser"
PLANTED = (API_KEY, HF_TOKEN, ENV_SECRET, URL_PASSWORD)
BASIC = base64.b64encode(f"{URL_USER}:{URL_PASSWORD}".encode()).decode()
MODEL = "Qwen/Qwen3-8B"
TIMEOUT_S = 180


def _env(db: Path) -> dict[str, str]:
    return {
        **OFFLINE,
        "SERVEFIT_DB": str(db),
        "OPENAI_API_KEY": API_KEY,  # bench's --api-key-env default
        "MY_SERVICE_TOKEN": ENV_SECRET,  # a secret-named variable of the environment
    }


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=env, timeout=TIMEOUT_S, check=False
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _leaks(text: str | bytes) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [s for s in (*PLANTED, BASIC) if s.encode() in data]


def _walk(folder: Path) -> dict[str, list[str]]:
    """Every file under ``folder`` that holds a planted secret, with the ones it holds."""
    found = {}
    for path in folder.rglob("*"):
        if path.is_file() and (leaked := _leaks(path.read_bytes())):
            found[str(path.relative_to(folder))] = leaked
    return found


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Every command run once with the planted secrets; what each printed, by command."""
    root = tmp_path_factory.mktemp("secrets")
    db = root / "history.sqlite"
    env = _env(db)
    printed: dict[str, str] = {}

    def record(name: str, done: subprocess.CompletedProcess, *codes: int) -> None:
        assert done.returncode in (codes or (0,)), (name, done.stdout, done.stderr)
        printed[name] = done.stdout + done.stderr

    with null_server() as url:
        with_user = url.replace("http://", f"http://{URL_USER}:{URL_PASSWORD}@")
        bench_flags = ["--num-requests", "4", "--concurrency", "2", "--input-len", "16"]
        record(
            "bench (URL user-info)",
            _run(
                {k: v for k, v in env.items() if k != "OPENAI_API_KEY"},
                "bench", with_user, *bench_flags, "--output", str(root / "bench-url"), "--json",
            ),
        )  # fmt: skip
        record(
            "bench (API key)",
            _run(env, "bench", url, *bench_flags, "--output", str(root / "bench-key")),
        )
        tasks = root / "tasks.jsonl"
        tasks.write_text('{"prompt": "Say yes", "answer": "yes"}\n')
        no_key = {k: v for k, v in env.items() if k != "OPENAI_API_KEY"}
        for name, target, run_env in (("url", with_user, no_key), ("key", url, env)):
            out = str(root / f"eval-{name}")
            done = _run(run_env, "eval", target, "--tasks", str(tasks), "--output", out)
            record(f"eval ({name})", done)
    extra = ["--", "--api-key", API_KEY, "--hf-token", HF_TOKEN]
    record("plan --json", _run(env, "plan", MODEL, "--gpu", "H100", "--save", "--json"))
    # plan takes no engine flags: click's usage error quotes them, and is redacted too
    record("plan (usage error)", _run(env, "plan", MODEL, "--gpu", "H100", *extra), 2)
    record(
        "deploy",
        _run(env, "deploy", MODEL, "--gpu", "H100", "--emit", str(root / "deploy"), *extra),
        0,
        2,  # a command carrying a secret is refused: nothing written, and nothing shown
    )
    record(
        "preflight",
        _run(env, "preflight", MODEL, "--gpu", "H100", "--", "vllm", "serve", MODEL, *extra[1:]),
        0,
        1,
        2,
    )
    record(
        "report",
        _run(
            env, "report", MODEL, "--gpu", "H100", "--bench", str(root / "bench-url"),
            "--output", str(root / "report.html"), "--format", "html",
        ),
    )  # fmt: skip
    listed = _run(env, "history", "--json")
    record("history", listed)
    for run in json.loads(listed.stdout):
        record(f"history show {run['id']}", _run(env, "history", "show", str(run["id"])))
    page = _page(env, root / "bench-url", [r["id"] for r in json.loads(listed.stdout)])
    return root, db, printed, page


def _page(env: dict[str, str], run_dir: Path, ids: list[int]) -> dict[str, str]:
    """What the page answers about the runs: the history, a registered run's report."""
    answers = {}
    with page("--run", str(run_dir), env=env) as base:
        query = f"model={MODEL}&gpu=H100"
        paths = ["api/history", "api/catalog", f"api/report.html?{query}&run=1"]
        paths += [f"api/report.html?{query}&run=h{i}" for i in ids]
        for path in paths:
            try:
                with urllib.request.urlopen(base + path, timeout=120) as response:
                    answers[path] = response.read().decode()
            except urllib.error.HTTPError as error:  # a history run without a folder: 400
                answers[path] = error.read().decode()
    return answers


def test_no_command_prints_a_planted_secret(world):
    _, _, printed, _ = world
    assert {name: _leaks(text) for name, text in printed.items() if _leaks(text)} == {}
    assert any("***" in text for text in printed.values())  # they were seen, and hidden


def test_no_file_holds_a_planted_secret(world):
    root, _, _, _ = world
    assert (root / "bench-url" / "summary.json").exists()
    assert (root / "bench-key" / "requests.jsonl").exists()
    assert (root / "eval-url" / "items.jsonl").exists()
    assert json.loads((root / "eval-url" / "eval.json").read_text())["url"].startswith("http://127")
    assert _walk(root) == {}


def test_the_history_database_holds_no_planted_secret(world):
    _, db, _, _ = world
    assert db.stat().st_size > 0
    assert _leaks(db.read_bytes()) == []
    for wal in db.parent.glob(db.name + "-*"):  # a write-ahead log, where one is left
        assert _leaks(wal.read_bytes()) == []


def test_the_page_shows_no_planted_secret(world):
    _, _, _, page = world
    assert "api/history" in page and page["api/history"].startswith("{")
    assert {path: _leaks(text) for path, text in page.items() if _leaks(text)} == {}


def test_bench_keeps_the_url_without_its_user_info_and_still_authenticates(world):
    root, _, printed, _ = world
    summary = json.loads((root / "bench-url" / "summary.json").read_text())
    urls = json.dumps(summary)
    assert URL_USER not in urls and "@" not in summary["server"]["base_urls"][0]
    assert summary["summary"]["successful"] == 4  # the credentials were sent, as a header
    assert "***@" in printed["history"] or URL_USER not in printed["history"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_text_is_left_alone(command):
    """No false positive: help mentions tokens, keys and flags; none of it is a secret."""
    done = subprocess.run(
        [sys.executable, "-m", "servefit.cli.main", command, "--help"],
        capture_output=True,
        text=True,
        env=OFFLINE,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "***" not in done.stdout


def test_a_plan_without_secrets_is_printed_unchanged(tmp_path):
    """The same plan in process (no redacting stream) and through the CLI: byte-equal."""
    from click.testing import CliRunner

    from servefit.cli.plan import plan

    args = [MODEL, "--gpu", "H100", "--json", "--no-performance"]
    direct = CliRunner().invoke(plan, args)
    through = subprocess.run(
        [*CLI, "plan", *args], capture_output=True, text=True, env=OFFLINE, timeout=TIMEOUT_S
    )
    assert through.returncode == direct.exit_code == 0
    assert json.loads(through.stdout) == json.loads(direct.output)
