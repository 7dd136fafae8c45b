"""Secrets never echoed: the redaction rules, and the outputs that go through them
(preflight's JSON, checklist and recordings; up's printed command, command.json, report.md
and streamed engine log)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from servefit.adapters.redact import (
    REDACTED,
    argv_secret_values,
    is_secret_name,
    redact_argv,
    redact_data,
    redact_home,
    redact_text,
)

KEY = "sk-live-0123456789abcdefXYZ"  # shaped like an OpenAI key
PLAIN = "s3cr3t-value"  # not shaped like anything: only its flag gives it away
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWx"
ENV = {"HF_TOKEN": "plain-token-value", "OPENAI_API_KEY": "another-value", "SHORT_KEY": "1"}
RECORDINGS = Path(__file__).parent.parent / "golden" / "preflight"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("--api-key", True),
        ("--hf-token", True),
        ("api_key", True),
        ("HF_TOKEN", True),
        ("OPENAI_API_KEY", True),
        ("--ssl-key-password", True),
        ("client_secret", True),
        ("--max-num-batched-tokens", False),
        ("--tokenizer", False),
        ("--kv-cache-dtype", False),
        ("--ssl-keyfile", False),  # a path to a key, not the key
        ("TOKENIZERS_PARALLELISM", False),
        ("deployment_key", False),  # the history's key of a deployment, not a secret
        ("key", False),  # a Kubernetes Secret's key name ({"name": "hf-token", "key": "token"})
        ("AWS_SECRET_ACCESS_KEY", True),
        ("token_source", False),  # a bench record's field: where its token counts came from
        ("time_to_first_token_s", False),
        ("HF_TOKEN_PATH", False),  # a path to a token, not the token
        ("--hf-token-secret", False),  # deploy: the name of the Kubernetes Secret
        ("GITHUB_TOKEN", True),
        ("ssh_private_key", True),
    ],
)
def test_secret_names_are_words_not_substrings(name, secret):
    assert is_secret_name(name) is secret


def test_argv_keeps_flags_and_drops_values():
    argv = [
        "vllm",
        "serve",
        "m",
        "--api-key",
        PLAIN,
        f"--api-key={PLAIN}",
        "--hf-token",
        "--port",  # a flag with no value before the next flag: the next flag stays
        "8000",
        "--max-num-batched-tokens",
        "8192",
        "-H",
        f"Authorization: Bearer {PLAIN}",
    ]
    assert redact_argv(argv, environ={}) == [
        "vllm",
        "serve",
        "m",
        "--api-key",
        REDACTED,
        f"--api-key={REDACTED}",
        "--hf-token",
        "--port",
        "8000",
        "--max-num-batched-tokens",
        "8192",
        "-H",
        f"Authorization: {REDACTED}",
    ]


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"Launching: python -m vllm --api-key {PLAIN} --port 8000", PLAIN),
        (f"--enforce-eager --api-key={PLAIN}", PLAIN),
        (f"--api-key '{PLAIN} with spaces'", "with spaces"),
        (f"non-default args: {{'model': 'm', 'api_key': ['{PLAIN}']}}", PLAIN),
        (f'{{"hf_token": "{PLAIN}"}}', PLAIN),
        (f"HF_TOKEN={PLAIN} vllm serve m", PLAIN),
        (f"curl -H 'Authorization: Bearer {PLAIN}'", PLAIN),
        (f'{{"authorization": "Basic {PLAIN}"}}', PLAIN),
        (f"the server said: invalid key {KEY}", KEY),
        (f"token {HF} rejected", HF),
        ("HF_TOKEN was plain-token-value", "plain-token-value"),
        ("and another-value too", "another-value"),
    ],
)
def test_text_loses_every_secret(text, secret):
    out = redact_text(text, environ=ENV)
    assert secret not in out and REDACTED in out


@pytest.mark.parametrize(
    "text",
    [
        "vllm serve m --max-num-batched-tokens 8192 --tokenizer org/tok --port 1",
        "a basic check: the key point is the token count, 8192 tokens",
        "driver 580.95.05 supports CUDA 13.0; value 1 of SHORT_KEY stays",
        "Goodput: time-per-output-token limit in ms",  # a word with dashes is no flag
        "deployment_key: Qwen/Qwen3-8B|H100|tp=1",
    ],
)
def test_ordinary_text_is_left_alone(text):
    assert redact_text(text, environ=ENV) == text


def test_data_redacts_secret_keys_strings_and_commands():
    doc = {
        "api_key": PLAIN,
        "command": ["vllm", "serve", "m", "--api-key", PLAIN],
        "nested": [{"note": f"Bearer {PLAIN}"}],
        "count": 3,
    }
    out = redact_data(doc, environ={})
    assert PLAIN not in json.dumps(out)
    assert out["count"] == 3 and out["command"][:4] == ["vllm", "serve", "m", "--api-key"]


def test_home_becomes_tilde_only_as_a_path():
    text = "/home/ada/models/x and /home/adam/y and /home/ada"
    assert redact_home(text, home="/home/ada") == "~/models/x and /home/adam/y and ~"


# ------------------------------------------------------------------ preflight, end to end


def _healthy(monkeypatch):
    from servefit.preflight import gate
    from servefit.preflight.facts import HostFacts

    facts = HostFacts.model_validate_json((RECORDINGS / "healthy_h200.json").read_bytes())
    monkeypatch.setattr(gate, "collect_facts", lambda *a, **k: facts)
    return gate, facts


def test_preflight_json_and_checklist_never_show_the_key(monkeypatch, tmp_path):
    from servefit.cli.preflight import preflight

    gate, _ = _healthy(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ran: list[list[str]] = []

    def execvp(program: str, argv: list[str]) -> None:
        ran.append(argv)
        raise SystemExit(0)

    monkeypatch.setattr(gate.os, "execvp", execvp)
    command = [sys.executable, "-c", "pass", "--api-key", PLAIN, f"--hf-token={PLAIN}"]
    args = ["Qwen/Qwen3-32B-FP8", "--tensor-parallel-size", "2", "--max-model-len", "32768"]

    as_json = CliRunner().invoke(preflight, [*args, "--json", "--", *command])
    assert as_json.exit_code == 0, as_json.output
    assert PLAIN not in as_json.output
    assert json.loads(as_json.stdout)["command"][3:] == ["--api-key", REDACTED, "--hf-token=***"]

    terminal = CliRunner().invoke(preflight, [*args, "--", *command])
    assert terminal.exit_code == 0
    assert "PREFLIGHT PASSED: running" in terminal.output and PLAIN not in terminal.output
    assert ran == [command, command]  # what runs keeps its arguments


def test_recordings_hold_no_secret_and_no_home(monkeypatch, tmp_path):
    from servefit.preflight.facts import TorchFacts

    gate, facts = _healthy(monkeypatch)
    home = str(Path.home())
    monkeypatch.setenv("HF_TOKEN", "plain-token-value")
    torch = facts.torch.model_copy(
        update={
            "python": f"{home}/venvs/vllm/bin/python",
            "warnings": ["HF_TOKEN is plain-token-value; Authorization: Bearer abc"],
        }
    )
    assert isinstance(torch, TorchFacts)
    recording = tmp_path / "facts.json"
    gate.record_facts(facts.model_copy(update={"torch": torch}), recording)
    text = recording.read_text()
    assert home not in text and "~/venvs/vllm/bin/python" in text
    assert "plain-token-value" not in text and "Bearer abc" not in text
    assert gate.load_facts(recording).torch.python == "~/venvs/vllm/bin/python"


# --------------------------------------------------------------------------- up


class _DeadChild:
    pid = 4242

    def is_running(self) -> bool:
        return False

    def stop(self, grace_s: float) -> None:
        pass

    def poll(self) -> int:
        return 1


def test_up_prints_and_writes_the_command_without_its_key(monkeypatch, tmp_path):
    """servefit up on this CPU, the engine replaced by one that logs its arguments (as vLLM
    does: "non-default args: {... 'api_key': ...}") and exits."""
    from servefit.app import up as up_mod
    from servefit.cli.up import up
    from servefit.preflight import gate
    from servefit.preflight.facts import EngineFacts, HostFacts, NvmlFacts, TorchFacts

    facts = HostFacts(
        nvml=NvmlFacts(error="no NVIDIA driver found"),
        torch=TorchFacts(python=sys.executable, is_installed=True, version="2.8.0+cpu"),
        engines=[EngineFacts(name="vllm", version="0.10.2")],
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(up_mod, "find_engine", lambda python: sys.executable)
    monkeypatch.setattr(up_mod, "check_port", lambda host, port: None)
    monkeypatch.setattr(gate, "collect_facts", lambda *a, **k: facts)
    monkeypatch.setattr(up_mod, "gate_checks", lambda *a, **k: ([], True))
    launched: list[list[str]] = []

    @contextlib.contextmanager
    def supervised(command, *, on_line, **kwargs):
        launched.append(command)
        on_line(f"INFO non-default args: {{'model': 'm', 'api_key': ['{PLAIN}']}}")
        yield _DeadChild()

    monkeypatch.setattr(up_mod.launcher, "supervised", supervised)
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(
        up,
        ["Qwen/Qwen3-0.6B", "--gpu", "cpu", "--run-dir", str(run_dir), "--", "--api-key", PLAIN],
    )
    assert launched and PLAIN in launched[0]  # the engine gets its key
    assert "Launching:" in result.output and "non-default args" in result.output
    assert PLAIN not in result.output
    written = json.loads((run_dir / "command.json").read_text())
    assert "--api-key" in written and PLAIN not in written
    assert PLAIN not in (run_dir / "report.md").read_text()


def test_a_secret_flag_value_is_never_read_as_the_model():
    from servefit.errors import InvalidArgumentError
    from servefit.preflight.vllm_args import parse_vllm_command

    with pytest.raises(InvalidArgumentError, match="names no model") as caught:
        parse_vllm_command(["vllm", "serve", "--api-key", PLAIN])
    assert PLAIN not in str(caught.value)
    parsed = parse_vllm_command(["vllm", "serve", "--api-key", PLAIN, "Qwen/Qwen3-8B"])
    assert parsed.model == "Qwen/Qwen3-8B"


def test_values_of_secret_flags_are_hidden_wherever_they_reappear():
    argv = ["vllm", "serve", "m", "--api-key", PLAIN, "--hf-token=hf-short-1", "--port", "8"]
    assert argv_secret_values(argv) == [PLAIN, "hf-short-1"]
    said = f"model config: {PLAIN!r} is neither a path nor an id; hf-short-1 too; port 8"
    out = redact_text(said, environ={}, secrets=argv_secret_values(argv))
    assert PLAIN not in out and "hf-short-1" not in out and "port 8" in out
    # values too short to be told from ordinary words are hidden only at their flag
    assert redact_text("x marks", environ={}, secrets=["x"]) == "x marks"
