"""The gate: collect facts (or load a recording), judge them, and run the command only
when every check passes."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from servefit import __version__
from servefit.adapters.catalog import gpu_catalog
from servefit.core.model_spec import ModelSpec
from servefit.core.plan import ServeSettings
from servefit.core.weights import weight_bytes
from servefit.errors import ConfigError, InvalidArgumentError, ServefitError
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
    try:
        return HostFacts.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidArgumentError(f"--facts {path}: cannot be read ({exc.strerror})") from None
    except ValueError as exc:
        raise ConfigError(f"--facts {path}: not a servefit facts recording: {exc}") from None


def record_facts(facts: HostFacts, path: Path) -> None:
    path.write_text(facts.model_dump_json(indent=2), encoding="utf-8")


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


def exec_command(command: list[str]) -> None:
    """Replace this process with the command: arguments verbatim, never through a shell."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(command[0], command)
