"""``up``: detect the hardware, plan, gate, launch vLLM with the plan's flags, hold its
startup log to the plan as it arrives, smoke-bench, write the run folder, then serve.

The steps, one named call each:

1. :func:`find_engine` and :func:`check_port`: the interpreter that runs vLLM, a free port;
2. :func:`servefit.adapters.detect.detect`: NVIDIA GPUs through NVML, else the CPU;
3. :func:`plan_for_launch`: the plan on that device (the recommendation instead when the
   user's flags do not fit, said so);
4. :func:`gate_checks`: the preflight chain for GPUs; for the CPU its CPU links (engine,
   PyTorch, model, weights, host memory free now). A failure launches nothing;
5. :func:`launch_command`: ``python -m vllm.entrypoints.openai.api_server`` from the engine's
   interpreter with the plan's full flags (the ``vllm`` console script is not installed by
   every build: the CPU wheel's is not);
6. :func:`serve`: the supervised child, its log teed to the run folder, each line held
   against the plan as it arrives; ``/health`` and ``/v1/models``; ``--smoke N``; the run
   folder; then serving in the foreground until Ctrl-C / SIGTERM (or stop: check only).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from servefit.adapters import launcher
from servefit.adapters.detect import DetectedHardware, detect
from servefit.adapters.redact import argv_secret_values, redact_argv, write_text
from servefit.adapters.vllm_log import LogFact, StartupLog
from servefit.app.check_log import (
    Comparison,
    compare_fact,
    explain_refusal,
    refusals_of,
    resolve_on,
)
from servefit.app.deployment import Deployment
from servefit.app.plan import PlanOutcome, capacity_for, plan_deployment
from servefit.app.resolve import Resolved, resolve
from servefit.app.up_gate import gate_checks
from servefit.app.up_probe import engine_api_key, is_ready, served_block_size
from servefit.app.up_report import (
    UpResult,
    default_run_dir,
    describe,
    eval_line,
    launch_eval,
    num,
    smoke_bench,
    write_report,
    write_startup,
)
from servefit.core.engines.vllm_cpu import KVCACHE_SPACE_ENV
from servefit.core.evals import EvalItem
from servefit.core.plan import CapacityPlan
from servefit.errors import InvalidArgumentError
from servefit.units import GIB_BYTES

HEALTH_POLL_S = 1.0
DEFAULT_STARTUP_TIMEOUT_S = 1200.0  # a large model's first load; a tiny CPU model: 1-2 min
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
ENGINE_DISTRIBUTIONS = ("vllm", "vllm-cpu")

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class UpRequest:
    deployment: Deployment
    gpu: str | None = None  # --gpu: auto (None), cpu, or a catalog name
    python: str | None = None  # the engine's interpreter; found from `vllm` on PATH otherwise
    host: str = "127.0.0.1"
    port: int = 8000
    smoke_requests: int = 0
    eval_items: tuple[EvalItem, ...] = ()  # ``--eval``: scored after the smoke bench
    is_check_only: bool = False
    run_dir: Path | None = None
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    is_version_given: bool = False  # --vllm-version given: do not take the installed one
    stop_grace_s: float = launcher.STOP_GRACE_S

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise InvalidArgumentError(f"--port must be in 1..65535, got {self.port}")
        if self.smoke_requests < 0:
            raise InvalidArgumentError("--smoke must be >= 0")


# ------------------------------------------------------------------------- 1. preliminaries


def find_engine(python: str | None) -> str:
    """The interpreter that runs vLLM: ``--python``, else the one behind ``vllm`` on PATH,
    else this one."""
    from servefit.preflight.probes import python_for_command

    if python:
        found = shutil.which(python) or (python if Path(python).exists() else None)
        if found is None:
            raise InvalidArgumentError(f"--python {python}: no such interpreter")
        return found
    return python_for_command(["vllm"]) or sys.executable


def check_port(host: str, port: int) -> None:
    """Refuse a port something already listens on (before anything starts)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise InvalidArgumentError(
                f"port {port} on {host} is in use ({exc.strerror}): pick another with --port"
            ) from None


def engine_version(facts: Any) -> str:
    """The installed vLLM's version (from the engine probe)."""
    for engine in facts.engines:
        if engine.name in ENGINE_DISTRIBUTIONS:
            return str(engine.version)
    raise InvalidArgumentError(
        f"no vLLM is installed in {facts.torch.python or 'the engine interpreter'}: install "
        "vllm (or vllm-cpu), or point --python at the interpreter that has it"
    )


# ----------------------------------------------------------------------------- 3. the plan


def deployment_here(
    d: Deployment, hw: DetectedHardware, version: str, *, is_version_given: bool
) -> tuple[Deployment, list[str]]:
    """The deployment as this machine runs it: the installed vLLM's accounting."""
    notes: list[str] = []
    if not is_version_given:
        d = d.with_settings(replace(d.settings, vllm_version=version))
    env_kv = _kv_given_by_env(hw)
    if env_kv is not None:
        notes.append(
            f"KV cache space {env_kv // GIB_BYTES} GiB from {KVCACHE_SPACE_ENV} (on vLLM's CPU "
            "backend it wins over --kv-cache-memory-bytes)"
        )
    return d, notes


def _kv_given_by_env(hw: DetectedHardware) -> int | None:
    """``VLLM_CPU_KVCACHE_SPACE`` in bytes, when set on a CPU (vllm/platforms/cpu.py reads
    it as whole GiB)."""
    space = os.environ.get(KVCACHE_SPACE_ENV, "").strip()
    if not hw.is_cpu or not space:
        return None
    if not space.isdigit():
        raise InvalidArgumentError(f"{KVCACHE_SPACE_ENV}={space!r} is not a whole number of GiB")
    return int(space) * GIB_BYTES if int(space) > 0 else None


def plan_for_launch(
    d: Deployment, hw: DetectedHardware, say: Say
) -> tuple[PlanOutcome, Resolved, int | None]:
    """The plan to launch: the user's, or the recommendation when theirs does not fit."""
    resolved = resolve(d) if d.hardware.memory_gib is not None else resolve_on(d, hw.device)
    env_kv = _kv_given_by_env(hw)
    if env_kv is not None:  # planned as given; the command keeps the user's flags
        planning = d.with_settings(replace(d.settings, kv_cache_memory_bytes=env_kv))
        resolved = replace(resolved, deployment=planning)
        outcome = plan_deployment(planning, resolved=resolved)
    else:
        outcome = plan_deployment(d, resolved=resolved)
    if not outcome.fits and outcome.recommendation is not None:
        rec = outcome.recommendation
        say("Your flags do not fit: " + "; ".join(outcome.verdict.reasons))
        say(
            "Taking the recommendation: "
            + ", ".join(f"{c.flag} {c.before} -> {c.after} ({c.gives_up})" for c in rec.changes)
        )
        chosen = outcome.deployment.with_settings(rec.settings)
        resolved = replace(resolved, deployment=chosen)
        outcome = plan_deployment(chosen, resolved=resolved)
    return outcome, resolved, env_kv


# ------------------------------------------------------------------------ 5. the command


def launch_command(outcome: PlanOutcome, python: str, host: str, port: int) -> list[str]:
    """The plan's ``vllm serve`` line as ``python -m ...api_server --model M ...``."""
    args = list(outcome.command_args)
    if args[:2] != ["vllm", "serve"]:
        raise InvalidArgumentError(
            f"servefit up launches vLLM; the plan's engine is {outcome.capacity.engine_label}"
        )
    return [python, "-m", SERVER_MODULE, "--model", args[2], *args[3:], "--host", host, "--port",
            str(port)]  # fmt: skip


def engine_env() -> dict[str, str]:
    """This environment, without servefit's own virtual environment, unbuffered."""
    env = dict(os.environ)
    for key in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(key, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


# -------------------------------------------------------------------- 6. launch and watch


@dataclass(slots=True)
class StartupWatch:
    """Holds each startup line against the plan as it arrives."""

    resolved: Resolved
    plan: CapacityPlan
    say: Say
    log: StartupLog = field(default_factory=StartupLog)
    plan_given_kv: CapacityPlan | None = None
    comparisons: dict[str, Comparison] = field(default_factory=dict)

    def feed(self, line: str) -> None:
        for fact in self.log.feed(line):
            self.hold(fact)

    def hold(self, fact: LogFact) -> None:
        if fact.quantity == "refusal":
            self.say(f"  ! engine refusal: {fact.line.strip()[:240]}")
            return
        if fact.quantity == "kv_cache_memory_bytes" and fact.value > 0:
            settings = replace(
                self.resolved.deployment.engine_settings(), kv_cache_memory_bytes=int(fact.value)
            )
            self.plan_given_kv = capacity_for(self.resolved, settings)
        if fact.quantity in self.comparisons:
            return  # each quantity once (tensor-parallel ranks repeat their lines)
        comparison = compare_fact(fact, self.plan, self.plan_given_kv)
        if comparison is None:
            return
        self.comparisons[fact.quantity] = comparison
        self.say(describe(comparison))


def _drain(lines: queue.Queue[str], watch: StartupWatch, echo: Say | None, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        timeout = deadline - time.monotonic()
        try:
            line = lines.get(timeout=max(timeout, 0.0)) if timeout > 0 else lines.get_nowait()
        except queue.Empty:
            return
        if echo is not None:
            echo(line)
        watch.feed(line)


def run_up(req: UpRequest, say: Say, echo: Say | None = None) -> UpResult:
    """Everything ``servefit up`` does; returns the exit code and what was found."""
    from servefit.adapters.plan_document import outcome_document
    from servefit.preflight import gate

    t0 = time.monotonic()
    d = req.deployment
    python = find_engine(req.python)
    check_port(req.host, req.port)
    hw = detect(req.gpu) if d.hardware.memory_gib is None else None
    if hw is None:  # a described device: planned as described
        raise InvalidArgumentError(
            "servefit up plans the hardware it runs on: use --gpu auto, cpu or a catalog name"
        )
    say(f"Hardware: {hw.description}")
    for note in hw.notes:
        say(f"  note: {note}")
    say(f"Checking the engine in {python} ...")
    facts = gate.collect_facts(d.model, python=python, allow_hub=d.allow_hub)
    version = engine_version(facts)
    d, notes = deployment_here(d, hw, version, is_version_given=req.is_version_given)
    for note in notes:
        say(f"  note: {note}")
    outcome, resolved, _ = plan_for_launch(d, hw, say)
    plan = outcome.capacity
    say(
        f"Plan ({plan.engine_label} {plan.settings.vllm_version}): "
        f"{outcome.verdict.headline}; KV cache {plan.memory.kv_cache_bytes / GIB_BYTES:.2f} GiB, "
        f"{plan.kv_cache_tokens:,} tokens, {plan.max_concurrency:.2f}x at "
        f"{plan.settings.max_model_len:,} tokens, block {plan.settings.block_size}"
    )
    result = UpResult(exit_code=1)
    if not plan.starts:
        result.explanation = "; ".join(plan.problems)
        say(f"Not launched: {result.explanation}")
        return result
    checks, passed = gate_checks(facts, outcome, hw, allow_hub=d.allow_hub)
    say("Preflight:")
    for check in checks:
        extra = f" -> {check.remedy}" if check.remedy and check.status.value == "fail" else ""
        say(f"  {check.status.value:4}  {check.name}: {check.reason}{extra}")
    if not passed:
        say("Not launched: the preflight gate failed.")
        return result

    command = launch_command(outcome, python, req.host, req.port)
    result.command = command
    run_dir = req.run_dir or default_run_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    result.run_dir = run_dir
    # what runs keeps its secrets; what is written does not
    secrets = argv_secret_values(command)
    write_text(
        run_dir / "plan.json", outcome_document(outcome).model_dump_json(indent=2), secrets=secrets
    )
    shown = redact_argv(command)
    write_text(run_dir / "command.json", json.dumps(shown, indent=2), secrets=secrets)
    say(f"Launching: {' '.join(shown)}")
    say(f"  log: {run_dir / 'vllm.log'}")

    base_url = f"http://{req.host}:{req.port}"
    env = engine_env()
    api_key = engine_api_key(command, env)
    lines: queue.Queue[str] = queue.Queue()
    watch = StartupWatch(resolved=resolved, plan=plan, say=say)
    t_launch = time.monotonic()
    try:
        with launcher.supervised(
            command,
            log_path=run_dir / "vllm.log",
            env=env,
            on_line=lines.put,
            grace_s=req.stop_grace_s,
        ) as child:
            (run_dir / "engine.pid").write_text(f"{child.pid}\n", encoding="utf-8")  # = pgid
            say(f"  engine pid {child.pid} (its own process group)")
            ready = False
            deadline = t_launch + req.startup_timeout_s
            while not ready:
                _drain(lines, watch, echo, HEALTH_POLL_S)
                if not child.is_running():
                    break
                if time.monotonic() > deadline:
                    say(f"Not ready after {req.startup_timeout_s:.0f} s: stopping the engine.")
                    break
                ready = is_ready(base_url, api_key)
            if not ready:
                child.stop(grace_s=req.stop_grace_s)
                _drain(lines, watch, echo, 0.5)
                result.refusals = list(refusals_of(watch.log))
                result.comparisons = list(watch.comparisons.values())
                if result.refusals:
                    result.explanation = explain_refusal(result.refusals[-1], outcome)
                else:
                    result.explanation = (
                        f"the engine exited with code {child.poll()} before it was ready; "
                        f"see {run_dir / 'vllm.log'}"
                    )
                say(result.explanation)
                write_startup(run_dir, result, watch.log)
                write_report(run_dir, outcome, result, hw.description)
                return result
            now = time.monotonic()
            result.ready_s, result.launch_to_ready_s = now - t0, now - t_launch
            block = served_block_size(base_url, api_key)
            if block is not None:
                watch.hold(block)
            _drain(lines, watch, echo, 0.0)
            result.comparisons = list(watch.comparisons.values())
            say(
                f"Ready at {base_url} {result.ready_s:.1f} s after the command "
                f"({result.launch_to_ready_s:.1f} s after launch)."
            )
            say("Findings: " + ("; ".join(result.findings) or "none: the engine built the plan"))
            result.exit_code = 0
            if req.smoke_requests:
                say(f"Smoke bench: {req.smoke_requests} requests of the planned workload ...")
                result.smoke = smoke_bench(
                    outcome, base_url, req.smoke_requests, run_dir / "bench", api_key=api_key
                )
                s = result.smoke
                say(
                    f"  {s['successful']} ok, {s['errored']} errors, {s['incomplete']} incomplete;"
                    f" TTFT {num(s['measured']['ttft_s'])} s (planned "
                    f"{num(s['predicted']['ttft_s'])}), TPOT {num(s['measured']['tpot_s'])} s "
                    f"(planned {num(s['predicted']['tpot_s'])})"
                )
                if s["errored"] or s["incomplete"]:
                    result.exit_code = 1
            if req.eval_items:
                say(f"Eval: {len(req.eval_items)} items, greedy ...")
                result.eval = launch_eval(
                    list(req.eval_items), base_url, run_dir / "eval", api_key=api_key
                )
                say(f"  {eval_line(result.eval)}")
                if result.eval["failed"] or not result.eval["scored"]:
                    result.exit_code = 1
            write_startup(run_dir, result, watch.log)
            write_report(run_dir, outcome, result, hw.description)
            say(f"Run folder: {run_dir}")
            if req.is_check_only:
                say("Checks done (--check-only): stopping the engine.")
                return result
            say(f"Serving at {base_url}/v1 (Ctrl-C to stop).")
            while child.is_running():
                _drain(lines, watch, echo, HEALTH_POLL_S)
            say(f"The engine exited with code {child.poll()}.")
            result.exit_code = 1
            return result
    except launcher.SignalledError as signalled:
        say(f"{signalled}: the engine was stopped and waited for; nothing is left running.")
        if result.ready_s is None:
            result.exit_code = 130
        return result
