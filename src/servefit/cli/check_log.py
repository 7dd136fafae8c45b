"""``servefit check-log``: a vLLM startup log someone already has, held against the plan of
the same deployment, quantity by quantity."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from servefit.adapters.vllm_settings import DESTS, FIELD_OF
from servefit.cli.engine_options import SGLANG_FLAGS, sglang_options
from servefit.cli.options import (
    build_deployment,
    hardware_options,
    model_source_options,
    serve_options,
)
from servefit.cli.output import EXIT_FAILED, EXIT_OK, emit_json, fail
from servefit.errors import InvalidArgumentError, ServefitError

# click parameter -> ServeSettings field (the flags a user sets win over the log's): the
# vLLM destinations servefit reads (one table, adapters/vllm_settings.py), the click spelling
# of --kv-cache-memory-bytes, and --vllm-version
_SETTING_OF_PARAM = {"kv_cache_memory": "kv_cache_memory_bytes", **FIELD_OF}
_SETTING_OF_PARAM.update({k: field for k, (field, _) in SGLANG_FLAGS.items()})
_SERVE_PARAMS = (
    *(dest for dest in DESTS if dest != "kv_cache_memory_bytes"),
    "kv_cache_memory",
    "vllm_version",
    *SGLANG_FLAGS,
    "sglang_version",
)


def _given_settings() -> list[str]:
    ctx = click.get_current_context()
    return [
        _SETTING_OF_PARAM.get(name, name)
        for name in _SERVE_PARAMS
        if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)
    ]


MAX_LOG_BYTES = 64 * 2**20  # a startup log is ~100 KiB; a pod's whole log may be more
MAX_LINE_BYTES = 64 * 2**10  # vLLM's longest startup line (the engine config) is ~5 KiB


def _read_lines(path: str) -> list[str]:
    """The log's lines, read one at a time: at most :data:`MAX_LOG_BYTES` of it (the startup
    comes first; the rest is not read, and that is said) and a line cut at
    :data:`MAX_LINE_BYTES` (``/dev/zero`` is read as cut lines up to the limit)."""
    try:
        stream = sys.stdin.buffer if path == "-" else Path(path).open("rb")  # noqa: SIM115
    except OSError as exc:
        raise InvalidArgumentError(f"LOG {path}: cannot be read ({exc.strerror})") from None
    lines: list[str] = []
    read_bytes = 0
    try:
        while read_bytes < MAX_LOG_BYTES:
            raw = stream.readline(MAX_LINE_BYTES)
            if not raw:
                break
            read_bytes += len(raw)
            if not raw.endswith(b"\n"):  # a cut line: skip to its end, within the limit
                while read_bytes < MAX_LOG_BYTES and (rest := stream.readline(MAX_LINE_BYTES)):
                    read_bytes += len(rest)
                    if rest.endswith(b"\n"):
                        break
            lines.append(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
        else:
            click.echo(
                f"warning: LOG {path}: only its first {MAX_LOG_BYTES // 2**20} MiB were read "
                "(a startup log is far shorter; the startup comes first)",
                err=True,
            )
    except OSError as exc:
        raise InvalidArgumentError(f"LOG {path}: cannot be read ({exc.strerror})") from None
    finally:
        if path != "-":
            stream.close()
    return lines


@click.command(name="check-log")
@click.argument("log")
@click.argument("model", required=False)
@hardware_options
@serve_options
@sglang_options
@model_source_options
@click.option("--strict", is_flag=True, help="Findings (deviations over 2 %) fail too (exit 1).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def check_log(log: str, model: str | None, strict: bool, as_json: bool, **flags: Any) -> None:
    """Hold a vLLM (or SGLang) startup LOG against servefit's plan of the same deployment.

    \b
    servefit check-log vllm.log                      # model and flags read from the log
    servefit check-log pod.log Qwen/Qwen3-8B --gpu H100 --max-model-len 8192

    The engine version, model and flags come from the log where it prints them, and from
    MODEL and the flags where it does not (flags given win). Quantities downstream of the KV
    budget are compared twice: end to end, and given the KV memory the log reports. Works
    offline. Exit 0 when the engine started (findings are printed), 1 when it refused (or,
    with --strict, when a quantity is off by more than 2 %), 2 on bad input.
    """
    from servefit.adapters.sglang_log import is_sglang_log
    from servefit.app.check_log import check_startup_log, explain_refusal
    from servefit.app.check_sglang_log import check_sglang_log

    try:
        given = _given_settings()
        d = build_deployment(model or "(from the log)", flags)
        lines = _read_lines(log)
        check = check_sglang_log if is_sglang_log(lines) else check_startup_log
        checked = check(lines, d, given_settings=given, model_given=model is not None)
    except ServefitError as error:
        fail(error)
    outcome = checked.outcome
    explanations = [explain_refusal(r, outcome) for r in checked.refusals]
    if as_json:
        emit_json(
            {
                "schema_version": 1,
                "log": log,
                "engine_version": checked.log.engine_version,
                "model": outcome.resolved.model_id,
                "device": outcome.resolved.gpu.name,
                "engine": outcome.capacity.engine,
                "vllm_version_planned": outcome.capacity.settings.vllm_version,
                "vllm_command": outcome.vllm_command,
                "comparisons": [c.as_dict() for c in checked.comparisons],
                "findings": list(checked.findings),
                "refusals": [
                    {"kind": r.kind.value, "line": r.line, "explanation": text, **r.detail}
                    for r, text in zip(checked.refusals, explanations, strict=True)
                ],
                "notes": list(checked.notes),
            }
        )
    else:
        from servefit.app.up_report import describe

        plan = outcome.capacity
        is_vllm = plan.engine.startswith("vllm")
        planned = plan.settings.vllm_version if is_vllm else plan.engine_version
        logged = checked.log.engine_version or "version not printed"
        click.echo(
            f"{outcome.resolved.model_id} on {outcome.resolved.gpu.name}, planned as "
            f"{plan.engine_label} {planned} (log: {plan.engine_label} {logged})"
        )
        click.echo(f"  the deployment: {outcome.vllm_command}")
        if not checked.comparisons:
            click.echo("  the log states none of the compared quantities")
        for comparison in checked.comparisons:
            click.echo(describe(comparison))
        for text in explanations:
            click.echo(text)
        for note in checked.notes:
            click.echo(f"  note: {note}")
        click.echo(
            "Findings: "
            + ("; ".join(checked.findings) or "none (every logged quantity within 2 %)")
        )
    failed = bool(checked.refusals) or (strict and bool(checked.findings))
    sys.exit(EXIT_FAILED if failed else EXIT_OK)
