"""Read a vLLM command line with vLLM's own argument parser, where the engine is installed.

The offline reader (:mod:`servefit.preflight.vllm_args`) follows vLLM's spellings as far as
it can without vLLM; the engine's parser knows every flag, its abbreviations, ``--config``
files and the checks vLLM makes before it starts. This module asks it, in the interpreter
that will run the engine (the one the engine probe uses: ``gate.default_python``), with a
small self-contained script: it builds the ``vllm serve`` parser (``make_arg_parser`` under a
``FlexibleArgumentParser``, as ``vllm/entrypoints/cli/main.py`` does), parses the line and
prints the fields servefit models. Nothing is downloaded and no server starts.

To tell a flag the line sets from vLLM's default, the script first sets every default it
reads to a marker; what still holds the marker after parsing was not set, and stays out of
``settings`` (as in the offline reader).
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from servefit.errors import InvalidArgumentError
from servefit.preflight.vllm_args import (
    SETTING_FIELDS,
    VllmCommand,
    command_from_values,
    split_vllm_command,
)

# One parse costs one import of vLLM's argument parser: 18-43 s measured on a busy 2-core
# CPU machine (vLLM 0.32; `import vllm` alone 13 s there); the limit leaves room for a
# slower disk.
ENGINE_PARSE_TIMEOUT_S = 120.0
_MARK = "SERVEFIT-ENGINE-ARGS "
# No network, no telemetry, little logging: the script only parses.
_QUIET_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_LOGGING_LEVEL": "ERROR",
}

ENGINE_PARSE_SCRIPT = r"""
import contextlib, io, json, sys

request = json.loads(sys.stdin.read())
mark, fields = request["mark"], request["fields"]

def emit(doc):
    print(mark + json.dumps(doc, default=str), flush=True)
    sys.exit(0)

try:
    import vllm
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:  # vLLM before the launchers package
        from vllm.entrypoints.openai.cli_args import make_arg_parser
except ImportError as exc:
    emit({"is_importable": False, "error": type(exc).__name__ + ": " + str(exc)})

UNSET = object()

def build(form):
    if form == "serve":
        parser = FlexibleArgumentParser(prog="vllm")
        subparsers = parser.add_subparsers(dest="subparser")
        serve = make_arg_parser(subparsers.add_parser("serve", prog="vllm serve"))
    else:
        parser = serve = make_arg_parser(FlexibleArgumentParser(prog="api_server"))
    default_model = serve.get_default("model")
    serve.set_defaults(**{dest: UNSET for dest in [*fields, "model"]})
    return parser, default_model

def read(form, argv):
    parser, default_model = parsers.get(form) or parsers.setdefault(form, build(form))
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            args = parser.parse_args(["serve", *argv] if form == "serve" else argv)
    except SystemExit as exc:
        lines = [line for line in captured.getvalue().splitlines() if ": error: " in line]
        return {"error": lines[-1].split(": error: ", 1)[1] if lines else
                "exited with code " + str(exc.code)}
    except Exception as exc:
        return {"error": str(exc)}
    model = getattr(args, "model", UNSET)
    if form == "serve" and getattr(args, "model_tag", None) is not None:
        model = args.model_tag  # what `vllm serve` does before it starts the server
    return {
        "model": None if model is UNSET else model,
        "default_model": default_model,
        "values": {f: getattr(args, f) for f in fields if getattr(args, f, UNSET) is not UNSET},
    }

parsers = {}
answers = [read(line["form"], line["args"]) for line in request["lines"]]
emit({"is_importable": True, "version": vllm.__version__, "answers": answers})
"""


def parse_with_engine(
    args: list[str], python: str, *, timeout_s: float = ENGINE_PARSE_TIMEOUT_S
) -> VllmCommand | None:
    """The model and settings of a vLLM command line as vLLM in ``python`` reads them.

    None when the engine cannot answer there (vLLM is not importable, the interpreter does
    not start, or the parse outlasts ``timeout_s``): read the line offline instead. A line
    vLLM refuses raises :class:`InvalidArgumentError` quoting vLLM's message.
    """
    answers = parse_many_with_engine([args], python, timeout_s=timeout_s)
    if answers is None:
        return None
    if isinstance(answers[0], InvalidArgumentError):
        raise answers[0]
    return answers[0]


def parse_many_with_engine(
    commands: list[list[str]], python: str, *, timeout_s: float = ENGINE_PARSE_TIMEOUT_S
) -> list[VllmCommand | InvalidArgumentError] | None:
    """:func:`parse_with_engine` for several command lines at the price of one vLLM import:
    one answer per line, a refused line as its error (not raised). None as there."""
    lines = []
    for args in commands:
        form, rest = split_vllm_command(args)
        lines.append({"form": form, "args": rest})
    request = {"mark": _MARK, "fields": list(SETTING_FIELDS), "lines": lines}
    try:
        done = subprocess.run(
            [python, "-c", ENGINE_PARSE_SCRIPT],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **_QUIET_ENV},
            check=False,
        )
    except (subprocess.TimeoutExpired, OSError):
        return None
    replies = [line for line in done.stdout.splitlines() if line.startswith(_MARK)]
    if not replies:
        return None  # the interpreter crashed before it could answer
    doc = json.loads(replies[-1].removeprefix(_MARK))
    if not doc["is_importable"]:
        return None
    return [_answer(reply, doc["version"]) for reply in doc["answers"]]


def _answer(reply: dict[str, Any], version: str) -> VllmCommand | InvalidArgumentError:
    if "error" in reply:
        return InvalidArgumentError(f"vLLM {version} refuses the command: {reply['error']}")
    if reply["model"] is None:
        return InvalidArgumentError(
            f"the vLLM command names no model (vLLM {version} would serve its default, "
            f"{reply['default_model']})"
        )
    return command_from_values(reply["model"], reply["values"])
