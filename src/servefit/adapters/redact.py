"""Secrets never echoed: the one redaction every printed command, JSON document and
recording goes through.

What counts as a secret:

- the value of a flag whose name has a word ``token``, ``key``, ``secret``, ``password``
  (``--api-key sk-x``, ``--api-key=sk-x``, ``--hf-token x``, ``--ssl-key-password x``);
  words, not substrings: ``--max-num-batched-tokens`` and ``--tokenizer`` are not secrets;
- the same names as keys of a mapping, in Python or JSON spelling (vLLM logs its
  non-default arguments as ``{'api_key': 'sk-x'}``) and as environment assignments
  (``HF_TOKEN=hf_x``);
- ``Authorization`` header values and ``Bearer`` credentials;
- the value of any environment variable of this process whose name is a secret name
  (``HF_TOKEN``, ``OPENAI_API_KEY``, ``VLLM_API_KEY``, ...), wherever it appears;
- strings shaped like an OpenAI or Hugging Face key (``sk-...``, ``hf_...``).

Each is replaced by :data:`REDACTED`. :func:`redact_home` replaces the home directory
with ``~`` (recordings are shared; whose machine they came from is not their business).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REDACTED = "***"
SECRET_WORDS = frozenset({"token", "key", "apikey", "secret", "password", "passwd", "credential"})
MIN_SECRET_CHARS = 6  # shorter known values ("1", "true") would redact ordinary text

_WORD_SPLIT = re.compile(r"[-_.\s]+")
_FLAG_WITH_VALUE = re.compile(
    r"(?P<flag>--?[A-Za-z][\w.-]*)(?P<sep>=|[ \t]+)(?!--)(?P<value>'[^']*'|\"[^\"]*\"|\S+)"
)
_MAPPING_ITEM = re.compile(
    r"(?P<q>['\"])(?P<name>[\w.-]+)(?P=q)(?P<sep>\s*:\s*\[?\s*)"
    r"(?P<vq>['\"])(?P<value>(?:\\.|(?!(?P=vq)).)*)(?P=vq)"
)
_ENV_ASSIGNMENT = re.compile(r"\b(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>[^\s'\"]+)")
_AUTHORIZATION = re.compile(
    r"(?P<head>authorization['\"]?\s*[:=]\s*['\"]?)(?P<value>[^'\"\r\n,}]+)", re.IGNORECASE
)
_BEARER = re.compile(r"(?P<head>\bbearer\s+)(?P<value>[^\s'\",}]+)", re.IGNORECASE)
_KEY_SHAPES = re.compile(r"\b(?:sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,})")


def is_secret_name(name: str) -> bool:
    """``--api-key``, ``api_key``, ``HF_TOKEN``, ``OpenAI-API-Key``: a word of the name is a
    secret word. ``--max-num-batched-tokens``, ``--tokenizer``, ``kv_cache``: not."""
    words = _WORD_SPLIT.split(name.strip("-").lower())
    return any(w in SECRET_WORDS for w in words)


def secret_env_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of this process's secret-named environment variables, longest first."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if is_secret_name(k) and len(v) >= MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)


def _flag(match: re.Match[str]) -> str:
    value = match["value"]
    if not is_secret_name(match["flag"]) or value.startswith("--"):
        return match[0]
    return f"{match['flag']}{match['sep']}{REDACTED}"


def _mapping(match: re.Match[str]) -> str:
    if not is_secret_name(match["name"]):
        return match[0]
    q, vq = match["q"], match["vq"]
    return f"{q}{match['name']}{q}{match['sep']}{vq}{REDACTED}{vq}"


def _assignment(match: re.Match[str]) -> str:
    if not is_secret_name(match["name"]):
        return match[0]
    return f"{match['name']}={REDACTED}"


def argv_secret_values(argv: list[str] | tuple[str, ...]) -> list[str]:
    """The values a command gives its secret-named flags (``--api-key VALUE``,
    ``--api-key=VALUE``): hidden wherever they reappear (an error that quotes one)."""
    found: list[str] = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if not arg.startswith("-") or not is_secret_name(name):
            continue
        if eq:
            found.append(value)
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            found.append(argv[i + 1])
    return [v for v in found if v]


def redact_text(
    text: str, *, environ: Mapping[str, str] | None = None, secrets: Iterable[str] = ()
) -> str:
    """A line or a document with every secret replaced by :data:`REDACTED`; ``secrets``
    are known values to hide as well (:func:`argv_secret_values` of the command)."""
    known = {*secret_env_values(environ), *(s for s in secrets if len(s) >= MIN_SECRET_CHARS)}
    for value in sorted(known, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    text = _AUTHORIZATION.sub(lambda m: f"{m['head']}{REDACTED}", text)
    text = _BEARER.sub(lambda m: f"{m['head']}{REDACTED}", text)
    text = _MAPPING_ITEM.sub(_mapping, text)
    text = _FLAG_WITH_VALUE.sub(_flag, text)
    text = _ENV_ASSIGNMENT.sub(_assignment, text)
    return _KEY_SHAPES.sub(REDACTED, text)


def redact_argv(
    argv: list[str], *, environ: Mapping[str, str] | None = None, secrets: Iterable[str] = ()
) -> list[str]:
    """A command as a list: ``--api-key VALUE`` and ``--api-key=VALUE`` keep the flag and
    lose the value; every argument is also redacted as text (headers, env values)."""
    secrets = [*secrets, *argv_secret_values(argv)]
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        name, eq, _ = arg.partition("=")
        if arg.startswith("-") and is_secret_name(name):
            if eq:
                out.append(f"{name}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_text(arg, environ=environ, secrets=secrets))
    return out


def redact_data(
    data: Any, *, environ: Mapping[str, str] | None = None, secrets: Iterable[str] = ()
) -> Any:
    """A JSON-like value (dicts, lists, strings) with secret-named keys' values and every
    string redacted; a list that looks like a command (an element starting with ``-``) is
    redacted as one."""
    secrets = list(secrets)
    if isinstance(data, str):
        return redact_text(data, environ=environ, secrets=secrets)
    if isinstance(data, Mapping):
        return {
            k: (
                REDACTED
                if isinstance(k, str) and is_secret_name(k) and isinstance(v, str) and v
                else redact_data(v, environ=environ, secrets=secrets)
            )
            for k, v in data.items()
        }
    if isinstance(data, list | tuple):
        if all(isinstance(x, str) for x in data) and any(x.startswith("-") for x in data):
            return redact_argv(list(data), environ=environ, secrets=secrets)
        return [redact_data(x, environ=environ, secrets=secrets) for x in data]
    return data


def home_directory() -> str | None:
    """This user's home directory, or None where it is unknown or the root."""
    try:
        home = str(Path.home())
    except (RuntimeError, KeyError):  # no HOME and no passwd entry
        return None
    return None if home in ("~", "/", "") else home.rstrip("/")


def redact_home(text: str, *, home: str | None = None) -> str:
    """``/home/ada/models/x`` -> ``~/models/x`` (a path only: ``/home/adam`` is not under
    ``/home/ada``)."""
    home = home_directory() if home is None else home
    if not home:
        return text
    return re.sub(re.escape(home) + r"(?![\w.-])", "~", text)
