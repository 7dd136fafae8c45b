"""``servefit preflight``: the dependency chain, checked; the command runs only if it passes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from servefit.adapters.redact import argv_secret_values, redact_argv, redact_data, redact_text
from servefit.cli.options import model_source_options, pop_serve_settings, serve_options
from servefit.cli.output import EXIT_DOES_NOT_FIT, EXIT_OK, emit_json, fail
from servefit.errors import InvalidArgumentError, ServefitError


@click.command(context_settings={"ignore_unknown_options": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@serve_options
@model_source_options
@click.option(
    "--from-vllm-args",
    is_flag=True,
    help="Read the model and flags from the vLLM command after `--`.",
)
@click.option("--strict", is_flag=True, help="Warnings fail the gate too.")
@click.option("--python", "python", help="Interpreter to probe PyTorch and the engine in.")
@click.option(
    "--record", "record", type=click.Path(dir_okay=False), help="Write the probed facts here."
)
@click.option(
    "--facts",
    "facts_file",
    type=click.Path(dir_okay=False, exists=True),
    help="Judge a recording instead of probing this machine.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
def preflight(
    args: tuple[str, ...],
    from_vllm_args: bool,
    strict: bool,
    python: str | None,
    record: str | None,
    facts_file: str | None,
    as_json: bool,
    **flags: Any,
) -> None:
    """Check driver -> CUDA -> PyTorch -> engine -> model -> plan; run COMMAND only if all pass.

    \b
    servefit preflight MODEL [flags] [-- COMMAND ...]
    servefit preflight --from-vllm-args -- vllm serve MODEL --tensor-parallel-size 2 ...

    Exit code 0 when every check passes, 1 otherwise (COMMAND is then never run), 2 for
    bad input (an unreadable recording, an unwritable --record, a COMMAND not on PATH).
    Secrets in COMMAND (API keys, tokens, Authorization headers) are never printed.
    """
    try:
        code, command = _preflight(
            list(args), from_vllm_args, strict, python, record, facts_file, as_json, flags
        )
        if code == EXIT_OK and command:
            from servefit.preflight.gate import exec_command

            exec_command(command)
    except ServefitError as error:
        fail(error)
    raise SystemExit(code)


def _preflight(
    args: list[str],
    from_vllm_args: bool,
    strict: bool,
    python: str | None,
    record: str | None,
    facts_file: str | None,
    as_json: bool,
    flags: dict[str, Any],
) -> tuple[int, list[str]]:
    from servefit.preflight import gate

    offline = flags.pop("offline", False)
    flags.pop("revision", None)
    if from_vllm_args:
        parsed = read_vllm_command(args, python or gate.default_python(args))
        model, command = parsed.model, args
        flags = {**flags, **parsed.settings}
        if "kv_cache_memory_bytes" in flags:
            flags["kv_cache_memory"] = str(flags.pop("kv_cache_memory_bytes"))
    else:
        if not args and not facts_file:
            raise InvalidArgumentError(
                "name a MODEL (or use --from-vllm-args -- vllm serve MODEL ...)"
            )
        model, command = (args[0] if args else None), args[1:]
    if facts_file and command:
        raise InvalidArgumentError("--facts judges a recording; it never runs a command")
    settings = pop_serve_settings(flags)
    for key in ("acceptance_rate", "acceptance_from"):  # speed: preflight judges the start
        flags.pop(key, None)
    if facts_file:
        facts = gate.load_facts(Path(facts_file))
        if model and (facts.model is None or facts.model.model != model):
            from servefit.preflight.probes import probe_model

            facts = facts.model_copy(update={"model": probe_model(model, allow_hub=not offline)})
    else:
        facts = gate.collect_facts(
            model, python=python or gate.default_python(command), allow_hub=not offline
        )
    if record:
        gate.record_facts(facts, Path(record))
    result = gate.run_gate(facts, settings, strict=strict, allow_hub=not offline)
    # what is shown is redacted; what runs is the command as given
    secrets = argv_secret_values(command)
    checks = [
        replace(
            c,
            reason=redact_text(c.reason, secrets=secrets),
            remedy=redact_text(c.remedy, secrets=secrets),
        )
        for c in result.checks
    ]
    shown = redact_argv(command)
    if as_json:
        emit_json(
            {
                "schema_version": 1,
                "passed": result.passed,
                "strict": strict,
                "checks": [
                    {
                        "name": c.name,
                        "status": c.status.value,
                        "reason": c.reason,
                        "remedy": c.remedy,
                    }
                    for c in checks
                ],
                "command": shown,
                "facts": redact_data(json.loads(result.facts.model_dump_json()), secrets=secrets),
            }
        )
    else:
        from rich.console import Console

        from servefit.cli.render import render_checks

        render_checks(checks, passed=result.passed, command=shown, console=Console(stderr=False))
    return (EXIT_OK if result.passed else EXIT_DOES_NOT_FIT), command


def read_vllm_command(args: list[str], python: str) -> Any:
    """The vLLM line as the engine that will run it reads it (its own argument parser, in
    its interpreter), or, where vLLM is not importable there, as servefit's offline reader
    does; the integration tests hold the two to the same answers."""
    from servefit.preflight.engine_args import parse_with_engine
    from servefit.preflight.vllm_args import parse_vllm_command

    return parse_with_engine(args, python) or parse_vllm_command(args)
