"""The supervised engine's saved log never holds the secrets of its command line (vLLM logs
its non-default arguments, an API key included), while the child gets them as given."""

from __future__ import annotations

import sys

from servefit.adapters import launcher

KEY = "sk-test-0123456789abcdef"
# what vLLM 0.32 prints at startup, and proof that the child saw the real key
ECHO = (
    "import sys; key = sys.argv[sys.argv.index('--api-key') + 1]; "
    "print(\"non-default args: {'api_key': ['\" + key + \"']}\"); "
    "print('child got the key:', key == " + repr(KEY) + ")"
)


def test_the_saved_and_streamed_log_redact_the_commands_secrets(tmp_path):
    lines: list[str] = []
    log_path = tmp_path / "vllm.log"
    child = launcher.start(
        [sys.executable, "-c", ECHO, "--api-key", KEY], log_path=log_path, on_line=lines.append
    )
    assert child.wait(timeout_s=120) == 0
    assert child.stop() == 0  # reaps the child and drains the log reader
    saved = log_path.read_text(encoding="utf-8")
    assert "child got the key: True" in saved  # the engine received its argument unchanged
    assert KEY not in saved and all(KEY not in line for line in lines)
    assert "api_key" in saved  # the line is kept, its value hidden
