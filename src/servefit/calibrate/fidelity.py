"""servefit scored on the public fidelity corpus (``benchmarks/fidelity/``).

Two kinds of record, each naming its source:

* **start-up logs** (``startup_logs.json``): the flags of a real ``vllm serve`` run and the
  numbers vLLM printed. Each is planned twice: given the logged "Available KV cache memory"
  (``--kv-cache-memory-bytes``), which tests the page and block arithmetic, and end to end
  from the GPU and the flags alone, which is what a user gets;
* **speed measurements** (``speed.json``, :mod:`servefit.adapters.measurements`): a published
  TTFT, TPOT or throughput with the setup that produced it.

:func:`score_corpus` predicts every record; :func:`servefit.core.error_band.bands_from` turns
the errors into the bands every prediction carries (``data/error_bands.toml``, written by
``benchmarks/fidelity.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servefit.adapters.catalog import gpu_catalog
from servefit.adapters.measurements import Measurement, load_measurements, predict, profile_for
from servefit.adapters.model_source import LoadedModel, load_model
from servefit.adapters.speculative_config import read_speculative_config
from servefit.core.error_band import ScoredRecord, figure_of
from servefit.core.hardware import hardware_class
from servefit.core.plan import CapacityPlan, ServeSettings, plan_capacity
from servefit.errors import ConfigError, ServefitError
from servefit.units import GIB_BYTES

GIB_ROUNDING = 0.005  # logs print GiB with two decimals
# the flags of a start-up log that ServeSettings takes as they are (the rest: unmodelled)
_SETTINGS = frozenset(ServeSettings.__dataclass_fields__) - {"vllm_version"}


class LoggedFigures(BaseModel):
    """What a start-up log printed (GiB as printed, two decimals)."""

    model_config = ConfigDict(extra="forbid")

    model_weights_gib: float | None = None
    initial_free_gib: float | None = None
    total_gpu_gib: float | None = None
    available_kv_cache_gib: float | None = None
    gpu_kv_cache_tokens: int | None = Field(default=None, ge=0)
    gpu_blocks: int | None = Field(default=None, ge=0)
    max_concurrency: float | None = None
    peak_activation_gib: float | None = None
    non_torch_memory_gib: float | None = None
    cuda_graph_memory_gib: float | None = None


class StartupLog(BaseModel):
    """One real start-up log with the flags that produced it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    logged_model: str
    catalog_model: str | None
    architecture_note: str = ""
    kind: str
    source: str
    vllm_version: str
    vllm_version_full: str = ""
    engine_mode: str = "V1"
    gpu: str | None
    gpu_catalog: str
    gpu_count: int = Field(default=1, ge=1)
    interconnect: str = "unknown"
    gpu_total_gib_logged: float | None = None
    settings: dict[str, Any]
    logged: LoggedFigures
    assumed: str = ""
    unmodelled: str = ""  # a flag servefit does not plan yet (speculation, LoRA): scored apart
    fitted: bool = False
    log_lines: list[str]


def load_startup_logs(path: Path) -> list[StartupLog]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return [StartupLog.model_validate(case) for case in raw["cases"]]
    except (OSError, json.JSONDecodeError, KeyError) as exc:
        raise ConfigError(f"cannot read start-up logs {path}: {exc}") from None
    except ValidationError as exc:
        raise ConfigError(f"{path}: {exc}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityScore:
    """One start-up log planned: the logged and the predicted KV-cache size."""

    log: StartupLog
    hardware_class: str
    logged_tokens: int
    predicted_tokens: int  # end to end: from the GPU and the flags
    # given the logged KV memory: the token counts planned at both ends of its rounding
    given_memory_tokens: tuple[int, int] | None
    given_memory_concurrency: tuple[float, float] | None  # "Maximum concurrency", both ends
    predicted_kv_gib: float

    @property
    def relative_error(self) -> float:
        return (self.predicted_tokens - self.logged_tokens) / self.logged_tokens

    @property
    def given_memory_error(self) -> float | None:
        """0 when the bracket holds the logged count, else the distance to the nearer end."""
        if self.given_memory_tokens is None:
            return None
        low, high = self.given_memory_tokens
        if low <= self.logged_tokens <= high:
            return 0.0
        nearer = low if self.logged_tokens < low else high
        return (nearer - self.logged_tokens) / self.logged_tokens

    def scored(self) -> ScoredRecord:
        return ScoredRecord(
            figure="kv_cache_tokens",
            hardware_class=self.hardware_class,
            engine="vllm",
            concurrency=None,
            relative_error=self.relative_error,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeedScore:
    measurement: Measurement
    hardware_class: str
    predicted: float

    @property
    def relative_error(self) -> float:
        return (self.predicted - self.measurement.value) / self.measurement.value

    @property
    def figure(self) -> str:
        return figure_of(self.measurement.metric)

    def scored(self) -> ScoredRecord:
        return ScoredRecord(
            figure=self.figure,
            hardware_class=self.hardware_class,
            engine=self.measurement.engine,
            concurrency=self.measurement.workload.concurrency,
            relative_error=self.relative_error,
        )


def _settings(log: StartupLog, **extra: Any) -> ServeSettings:
    given = {k: v for k, v in log.settings.items() if k in _SETTINGS and v is not None}
    speculative = log.settings.get("speculative_config")
    if speculative:  # the log's dict, as vLLM printed it
        given["speculative"] = read_speculative_config(speculative, log.vllm_version)
    return ServeSettings(vllm_version=log.vllm_version, **given, **extra)


def _plan(log: StartupLog, loaded: LoadedModel, **extra: Any) -> CapacityPlan:
    return plan_capacity(
        loaded.spec,
        gpu_catalog().get(log.gpu_catalog),
        _settings(log, **extra),
        mamba_ssm_dtype=loaded.mamba_ssm_dtype,
        with_suggestions=False,
    )


def score_startup_log(log: StartupLog) -> CapacityScore | None:
    """Plan one log end to end and from its logged KV memory; None when it printed no token
    count or names no catalog model."""
    logged = log.logged.gpu_kv_cache_tokens
    if logged is None or not logged or log.catalog_model is None:
        return None
    gpu = gpu_catalog().get(log.gpu_catalog)
    loaded = load_model(log.catalog_model, allow_hub=False)
    plan = _plan(log, loaded)
    given: tuple[int, int] | None = None
    concurrency: tuple[float, float] | None = None
    kv_gib = log.logged.available_kv_cache_gib
    # a pipeline-parallel log prints one worker's memory; the engine sizes from the smallest
    if kv_gib is not None and log.settings.get("pipeline_parallel_size", 1) in (1, None):
        low, high = (
            _plan(log, loaded, kv_cache_memory_bytes=int((kv_gib + s * GIB_ROUNDING) * GIB_BYTES))
            for s in (-1, 1)
        )
        given = (low.kv_cache_tokens, high.kv_cache_tokens)
        concurrency = (low.max_concurrency, high.max_concurrency)
    return CapacityScore(
        log=log,
        hardware_class=hardware_class(gpu),
        logged_tokens=logged,
        predicted_tokens=plan.kv_cache_tokens,
        given_memory_tokens=given,
        given_memory_concurrency=concurrency,
        predicted_kv_gib=plan.memory.kv_cache_bytes / GIB_BYTES,
    )


def score_measurement(m: Measurement) -> SpeedScore:
    return SpeedScore(
        measurement=m, hardware_class=profile_for(m).hardware_class, predicted=predict(m)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CorpusScore:
    capacity: tuple[CapacityScore, ...]
    speed: tuple[SpeedScore, ...]
    skipped: tuple[str, ...]  # records that could not be scored, each with the reason

    def scored(self) -> list[ScoredRecord]:
        """The records the bands are computed from (a log with an unmodelled flag is not)."""
        rows = [c.scored() for c in self.capacity if not c.log.unmodelled]
        return rows + [s.scored() for s in self.speed]


def score_corpus(
    startup_logs: Sequence[StartupLog], measurements: Sequence[Measurement]
) -> CorpusScore:
    capacity: list[CapacityScore] = []
    skipped: list[str] = []
    for log in startup_logs:
        try:
            score = score_startup_log(log)
        except (ServefitError, ValueError, TypeError) as exc:  # servefit refuses the model or flags
            skipped.append(f"{log.name}: {str(exc).splitlines()[0]}")
            continue
        if score is None:
            skipped.append(f"{log.name}: no catalog model or no logged token count")
        else:
            capacity.append(score)
    speed = tuple(score_measurement(m) for m in measurements)
    return CorpusScore(capacity=tuple(capacity), speed=speed, skipped=tuple(skipped))


def load_corpus(directory: Path) -> tuple[list[StartupLog], list[Measurement]]:
    return (
        load_startup_logs(directory / "startup_logs.json"),
        load_measurements(directory / "speed.json"),
    )
