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
- strings shaped like an OpenAI or Hugging Face key (``sk-...``, ``hf_...``);
- the user-info of a URL (``http://user:TOKEN@host`` -> ``http://***@host``);
- every value this process was told is a secret (:func:`remember_secrets`: the CLI
  registers the values of its command line's secret flags and URL credentials at start).

Each is replaced by :data:`REDACTED`. :func:`redact_home` replaces the home directory
with ``~`` (recordings are shared; whose machine they came from is not their business).

Where it applies, once each (``docs/security.md`` lists them):

- stdout and stderr of the ``servefit`` command: :class:`RedactingStream` wraps both at
  start, so every printed line, table and ``--json`` document goes through it;
- every file servefit writes: :func:`write_text` (run folders, reports, manifests,
  profiles, bench documents) and :func:`redact_text` per line of ``requests.jsonl`` and the
  engine's log;
- every run the history stores (``adapters/history.py`` redacts a run's inputs and results
  as it inserts them);
- every response of the local page (the ``ui`` server's middleware).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REDACTED = "***"
SECRET_WORDS = frozenset(
    {"token", "apikey", "secret", "password", "passwd", "credential", "credentials"}
)
# "key" is a secret word only after one of these: api_key, OPENAI_API_KEY, access_key,
# private_key; a deployment_key, a sort key or {"key": "token"} (a Secret's key name) is not
KEY_QUALIFIERS = frozenset(
    {"api", "access", "private", "secret", "auth", "client", "signing", "encryption", "master"}
)
MIN_SECRET_CHARS = 6  # shorter known values ("1", "true") would redact ordinary text

_WORD_SPLIT = re.compile(r"[-_.\s]+")
_FLAG_WITH_VALUE = re.compile(
    # a flag starts a word: "time-per-output-token limit" holds no flag "-per-output-token"
    r"(?<![\w.-])(?P<flag>--?[A-Za-z][\w.-]*)(?P<sep>=|[ \t]+)(?!--)"
    # a bare value ends at a quote: in a JSON string ("... --api-key K ...") the quote closes
    # the string, and redacting it too would break the document
    r"(?P<value>'[^']*'|\"[^\"]*\"|[^\s'\"]+)"
)
_MAPPING_ITEM = re.compile(
    r"(?P<q>['\"])(?P<name>[\w.-]+)(?P=q)(?P<sep>\s*:\s*\[?\s*)"
    r"(?P<vq>['\"])(?P<value>(?:\\.|(?!(?P=vq)).)*)(?P=vq)"
)
# a flag and its value as items of a list, in JSON or Python spelling: "--api-key", "sk-x"
_LISTED_FLAG = re.compile(
    r"(?P<q>['\"])(?P<flag>--?[A-Za-z][\w.-]*)(?P=q)(?P<sep>\s*,\s*)"
    r"(?P<vq>['\"])(?P<value>(?:\\.|(?!(?P=vq)).)*)(?P=vq)"
)
_ENV_ASSIGNMENT = re.compile(r"\b(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>[^\s'\"]+)")
_AUTHORIZATION = re.compile(
    r"(?P<head>authorization['\"]?\s*[:=]\s*['\"]?)(?P<value>[^'\"\r\n,}]+)", re.IGNORECASE
)
_BEARER = re.compile(r"(?P<head>\bbearer\s+)(?P<value>[^\s'\",}]+)", re.IGNORECASE)
_KEY_SHAPES = re.compile(r"\b(?:sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,})")
# scheme://user:password@host: the user-info is what stands between :// and an @ before the
# host (RFC 3986 user-info holds no /, ?, # or @: those are percent-encoded)
_URL_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s@'\"<>]+)@"
)

# values this process was told are secrets (the command line's secret flags and URL
# credentials); one set per process, filled by the CLI at start (remember_secrets)
_REMEMBERED: set[str] = set()


def is_secret_name(name: str) -> bool:
    """``--api-key``, ``api_key``, ``HF_TOKEN``, ``OpenAI-API-Key``, ``--ssl-key-password``:
    the name's last word is a secret word (``key`` after a qualifier: ``api``, ``access``,
    ...), so the name names the secret itself. ``--max-num-batched-tokens``,
    ``--tokenizer``, ``token_source``, ``time_to_first_token_s``, ``deployment_key``,
    ``HF_TOKEN_PATH``, ``--hf-token-secret`` (a Secret's name): not."""
    words = _WORD_SPLIT.split(name.strip("-").lower())
    last, before = words[-1], (words[-2] if len(words) > 1 else "")
    if last == "key":
        return before in KEY_QUALIFIERS
    if last == "secret" and before in ("token", "key"):
        return False  # --hf-token-secret NAME: the name of a Kubernetes Secret, not one
    return last in SECRET_WORDS


def remember_secrets(values: Iterable[str]) -> None:
    """Hide these values wherever they appear in anything this process prints or writes
    (values shorter than :data:`MIN_SECRET_CHARS` are hidden only where their flag or URL
    shows them: "1" would redact ordinary numbers)."""
    _REMEMBERED.update(v for v in values if len(v) >= MIN_SECRET_CHARS)


def url_userinfo_values(text: str) -> list[str]:
    """The user-info of every URL in ``text``, and its password part: ``http://u:p@h`` ->
    ``["u:p", "p"]``."""
    found: list[str] = []
    for match in _URL_USERINFO.finditer(text):
        userinfo = match["userinfo"]
        found.append(userinfo)
        _, colon, password = userinfo.partition(":")
        if colon and password:
            found.append(password)
    return found


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


def _listed_flag(match: re.Match[str]) -> str:
    if not is_secret_name(match["flag"]) or match["value"].startswith("--"):
        return match[0]
    q, vq = match["q"], match["vq"]
    return f"{q}{match['flag']}{q}{match['sep']}{vq}{REDACTED}{vq}"


def _assignment(match: re.Match[str]) -> str:
    if not is_secret_name(match["name"]):
        return match[0]
    return f"{match['name']}={REDACTED}"


def argv_secret_values(argv: list[str] | tuple[str, ...]) -> list[str]:
    """The values a command gives its secret-named flags (``--api-key VALUE``,
    ``--api-key=VALUE``) and the credentials of the URLs it names: hidden wherever they
    reappear (an error that quotes one)."""
    found: list[str] = []
    for i, arg in enumerate(argv):
        found += url_userinfo_values(arg)
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
    known = {
        *secret_env_values(environ),
        *_REMEMBERED,
        *(s for s in secrets if len(s) >= MIN_SECRET_CHARS),
    }
    for value in sorted(known, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _AUTHORIZATION.sub(lambda m: f"{m['head']}{REDACTED}", text)
    text = _BEARER.sub(lambda m: f"{m['head']}{REDACTED}", text)
    text = _MAPPING_ITEM.sub(_mapping, text)
    text = _LISTED_FLAG.sub(_listed_flag, text)
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


def write_text(path: Path, text: str, *, secrets: Iterable[str] = ()) -> None:
    """Write a file servefit produces (a document, a report, a manifest, a run folder's
    files) with every secret redacted: the one way servefit writes a text file."""
    path.write_text(redact_text(text, secrets=secrets), encoding="utf-8")


class RedactingStream:
    """A text stream (stdout, stderr) whose every write is redacted first; everything else
    (``isatty``, ``fileno``, ``encoding``, ``flush``) is the wrapped stream's. A write is
    redacted whole: click, rich and print write a message in one call."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    @property
    def wrapped(self) -> Any:
        return self._stream

    def write(self, text: str) -> int:
        self._stream.write(redact_text(text) if isinstance(text, str) else text)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def redact_standard_streams(argv: Iterable[str]) -> None:
    """What the CLI does first: remember the command line's secrets, and route stdout and
    stderr through the redaction (idempotent)."""
    import sys

    remember_secrets(argv_secret_values(list(argv)))
    if not isinstance(sys.stdout, RedactingStream) and sys.stdout is not None:
        sys.stdout = RedactingStream(sys.stdout)
    if not isinstance(sys.stderr, RedactingStream) and sys.stderr is not None:
        sys.stderr = RedactingStream(sys.stderr)
