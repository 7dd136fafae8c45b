"""The gate: collect facts (or load a recording), judge them, and run the command only
when every check passes.

Fail closed: a recording that is not one this servefit reads is an error (nothing is
judged), impossible facts fail the check that reads them (:mod:`servefit.preflight.facts`),
a program that cannot be found is an error before anything is executed, and recordings go
through the one redaction (:mod:`servefit.adapters.redact`: no secret, no home directory).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from servefit import __version__
from servefit.adapters.catalog import gpu_catalog
from servefit.adapters.redact import redact_data, redact_home, write_text
from servefit.core.model_spec import ModelSpec
from servefit.core.plan import ServeSettings
from servefit.core.weights import weight_bytes
from servefit.errors import InvalidArgumentError, ServefitError
from servefit.preflight import probes
from servefit.preflight.facts import HostFacts
from servefit.preflight.rules import Check, judge, verdict


@dataclass(frozen=True, slots=True, kw_only=True)
class GateResult:
    facts: HostFacts
    checks: list[Check]
    passed: bool


def collect_facts(model: str | None, *, python: str, allow_hub: bool) -> HostFacts:
    """Run every probe (each isolated, with a timeout)."""
    return HostFacts(
        servefit_version=__version__,
        provenance="probed live by servefit preflight",
        nvml=probes.probe_nvml(),
        torch=probes.probe_torch(python),
        engines=probes.probe_engines(python),
        model=probes.probe_model(model, allow_hub=allow_hub) if model else None,
        disk=probes.probe_disk(model) if model else None,
    )


def load_facts(path: Path) -> HostFacts:
    """A recording, read strictly: a file that is not one this servefit reads is an error
    naming the fields, never a partial judgement."""
    try:
        return HostFacts.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise InvalidArgumentError(f"--facts {path}: cannot be read ({exc.strerror})") from None
    except ValidationError as exc:
        raise InvalidArgumentError(
            f"--facts {path}: not a recording this servefit reads: {_summary(exc)}"
        ) from None


def _summary(exc: ValidationError, limit: int = 3) -> str:
    """ "nvml.gpus.0.memory_total_bytes: Input should be a valid integer; ..." """
    errors = exc.errors(include_url=False)
    parts = []
    for e in errors[:limit]:
        where = ".".join(str(p) for p in e["loc"]) or "the document"
        message = e["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    more = f" (and {len(errors) - limit} more)" if len(errors) > limit else ""
    return "; ".join(parts) + more


def shareable_facts_json(facts: HostFacts) -> str:
    """The recording as written: secrets redacted, the home directory as ``~``."""
    redacted = redact_data(json.loads(facts.model_dump_json()))
    return redact_home(json.dumps(redacted, indent=2))


def record_facts(facts: HostFacts, path: Path) -> None:
    try:
        write_text(path, shareable_facts_json(facts))
    except OSError as exc:
        raise InvalidArgumentError(
            f"--record {path}: cannot be written ({exc.strerror or exc})"
        ) from None


def _spec_for(facts: HostFacts, *, allow_hub: bool) -> tuple[ModelSpec | None, str | None]:
    if facts.model is None or facts.model.error:
        return None, None
    from servefit.adapters.model_source import load_model

    try:
        loaded = load_model(facts.model.model, allow_hub=allow_hub)
    except ServefitError:
        return None, None
    return loaded.spec, loaded.mamba_ssm_dtype


def run_gate(
    facts: HostFacts, settings: ServeSettings, *, strict: bool, allow_hub: bool
) -> GateResult:
    spec, ssm_dtype = _spec_for(facts, allow_hub=allow_hub)
    total = None
    if spec is not None:
        try:
            total = weight_bytes(spec).total_bytes
        except ServefitError:
            total = None
    checks = judge(
        facts,
        spec=spec,
        settings=settings,
        catalog=gpu_catalog(),
        mamba_ssm_dtype=ssm_dtype,
        weights_total_bytes=total,
    )
    return GateResult(facts=facts, checks=checks, passed=verdict(checks, strict=strict))


def default_python(command: list[str]) -> str:
    """The interpreter to probe PyTorch and the engine in."""
    return probes.python_for_command(command) or sys.executable


def find_program(command: list[str]) -> str:
    """The executable the command names, as ``execvp`` will find it; an error when none is."""
    if not command or not command[0]:
        raise InvalidArgumentError("the command after `--` is empty")
    program = shutil.which(command[0])
    if program is None:
        raise InvalidArgumentError(
            f"{command[0]!r}: no such executable (not on PATH, or not executable); nothing "
            "was run: install it or give its full path"
        )
    return program


def exec_command(command: list[str]) -> None:
    """Replace this process with the command: arguments verbatim, never through a shell."""
    find_program(command)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        raise InvalidArgumentError(
            f"{command[0]!r} could not be executed ({exc.strerror or exc}); nothing was run"
        ) from None
