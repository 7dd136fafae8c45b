"""What one benchmark is, and the command line's spellings turned into it.

- *Base URLs*: ``http://host:8000``, ``http://host:8000/v1`` and ``http://host:8000/v1/``
  name the same server; the client appends ``/v1/...`` (and ``/metrics``, ``/tokenize``,
  which vLLM serves at the root). A URL without ``http://`` or ``https://`` is refused with
  the spelling to use.
- *SLO limits* in milliseconds, as ``vllm bench serve`` takes them:
  ``--slo-ttft-ms 500 --slo-tpot-ms 50 --slo-e2el-ms 9000``, or vLLM's own
  ``--goodput "ttft:500 tpot:50 e2el:9000"`` (keys ``ttft``, ``tpot``, ``e2el``; values in
  ms, non-negative; source: ``vllm/benchmarks/serve.py``, ``parse_goodput`` and
  ``check_goodput_args``).
- *Load levels*: ``--concurrency 4`` or a sweep ``--concurrency 1,4,16`` (likewise
  ``--request-rate``), or ``--search-slo`` for the highest concurrency meeting the SLOs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

from servefit.bench.schedules import Schedule
from servefit.bench.workloads import TIMED_KINDS, WorkloadConfig
from servefit.core.metrics import Slo
from servefit.errors import InvalidArgumentError

GOODPUT_KEYS = ("ttft", "tpot", "e2el")  # vLLM's names; the values are milliseconds
_T = TypeVar("_T", int, float)


def base_url(url: str) -> str:
    """The server's root URL: scheme and host kept, a trailing ``/v1`` and slashes dropped."""
    text = url.strip()
    if "://" not in text:
        raise InvalidArgumentError(
            f"server URL {url!r} has no scheme: write it as http://{text.rstrip('/')} "
            "(or https://...)"
        )
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise InvalidArgumentError(
            f"server URL {url!r}: servefit bench speaks HTTP; write it as "
            f"http://host:port (or https://host:port), not {parts.scheme}://"
        )
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if not parts.hostname or not port_ok or parts.query or parts.fragment:
        raise InvalidArgumentError(
            f"server URL {url!r} is not a base URL: write it as http://host:port "
            "(optionally ending in /v1)"
        )
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")].rstrip("/")
    # user-info never stays in the URL: it is kept apart (url_credentials) and sent as a
    # header, so no document, line or history row that shows the URL shows it
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, path, "", ""))


def url_credentials(url: str) -> str | None:
    """``http://user:pa%40ss@host`` -> ``"user:pa@ss"`` (percent-decoded, as HTTP Basic
    authentication sends it), or None for a URL without user-info."""
    parts = urlsplit(url.strip())
    if parts.username is None:
        return None
    return f"{unquote(parts.username)}:{unquote(parts.password or '')}"


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    base_urls: tuple[str, ...]  # server roots (normalised by base_url: no /v1, no slash)
    workload: WorkloadConfig
    schedule: Schedule
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 600.0
    warmup_requests: int = 0
    duration_s: float | None = None
    slo: Slo | None = None
    session_affinity: bool = False
    tokenizer_path: str | None = None  # count prompt tokens locally instead of /tokenize
    workers: int = 1  # client processes (each its own event loop) for rates one core cannot drive
    max_error_rate: float = 0.0  # the run fails (exit 1) when more of its requests failed
    # --lora-modules: the adapters' names the server serves (vllm serve --lora-modules);
    # request i asks for adapter i mod N by its name, the base model none of them
    lora_modules: tuple[str, ...] = ()
    # "user:password" from the URLs' user-info, sent as HTTP Basic authentication; never
    # shown (repr) and never in a document (the URLs above are stored without it)
    credentials: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.base_urls:
            raise InvalidArgumentError("give the server's base URL (http://host:port)")
        given = {c for c in map(url_credentials, self.base_urls) if c is not None}
        if len(given) > 1:
            raise InvalidArgumentError(
                "the server URLs carry different user-info: give every replica the same "
                "credentials (or put them behind one proxy)"
            )
        # frozen: the normalised URLs replace the given spellings once, here
        object.__setattr__(self, "base_urls", tuple(base_url(u) for u in self.base_urls))
        if given:
            object.__setattr__(self, "credentials", given.pop())
        if self.warmup_requests < 0:
            raise InvalidArgumentError("--warmup must not be negative")
        # 0 is no limit to aiohttp: a timeout of 0 would wait forever, so it is refused
        for name, seconds in (("--timeout-s", self.timeout_s), ("--duration-s", self.duration_s)):
            if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
                raise InvalidArgumentError(
                    f"{name} must be a positive number of seconds, got {seconds:g}"
                )
        if not (math.isfinite(self.max_error_rate) and 0 <= self.max_error_rate <= 1):
            raise InvalidArgumentError(
                f"--max-error-rate is a fraction of the requests, from 0 to 1; got "
                f"{self.max_error_rate:g}"
            )
        if self.workers > 1 and self.workload.kind == "agent":
            raise InvalidArgumentError(
                "--workers applies to flat workloads; agent sessions run in one process"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadLevels:
    """The levels to measure: one run, a sweep, or the search for the SLOs' limit."""

    concurrencies: tuple[int, ...] = ()
    rates: tuple[float, ...] = ()
    is_search: bool = False
    slo_percentile: int = 90  # the percentile the SLO limits apply to (search)

    def __post_init__(self) -> None:
        if any(c < 1 for c in self.concurrencies):
            raise InvalidArgumentError("--concurrency must be at least 1")
        if any(r <= 0 for r in self.rates):
            raise InvalidArgumentError("--request-rate must be positive")

    @property
    def is_sweep(self) -> bool:
        return self.is_search or len(self.concurrencies) > 1 or len(self.rates) > 1


MAX_LEVELS = 64  # a sweep longer than this is a typo (1:1000:+1), not a plan


def _range(flag: str, part: str, kind: Callable[[str], _T]) -> list[_T]:
    """``START:STOP:xFACTOR`` (geometric) or ``START:STOP:+STEP`` (linear), ``STOP`` included
    when a step lands on it: ``1:64:x2`` -> 1, 2, 4, ..., 64; ``10:40:+10`` -> 10, 20, 30, 40."""
    start_text, stop_text, step_text = (p.strip() for p in part.split(":"))
    start, stop = float(kind(start_text)), float(kind(stop_text))
    how, step = step_text[:1], float(step_text[1:])
    if how not in ("x", "+") or not (start > 0 and stop >= start):
        raise ValueError(part)
    if (how == "x" and step <= 1) or (how == "+" and step <= 0):
        raise ValueError(part)
    values, value = [], start
    while value <= stop * (1 + 1e-9):
        values.append(kind(f"{value:g}" if kind is float else str(round(value))))
        if len(values) > MAX_LEVELS:
            raise InvalidArgumentError(f"{flag} {part}: more than {MAX_LEVELS} levels")
        value = value * step if how == "x" else value + step
    return values


def parse_levels(flag: str, text: str | None, kind: Callable[[str], _T]) -> tuple[_T, ...]:
    """``"4"`` -> (4,); ``"1,4,16"`` -> (1, 4, 16) (a sweep); a part may be a range,
    ``START:STOP:xFACTOR`` or ``START:STOP:+STEP`` (``"1:64:x2"``, ``"2:10:+2"``)."""
    if text is None:
        return ()
    values: list[_T] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            values += _range(flag, part, kind) if part.count(":") == 2 else [kind(part)]
        except ValueError:
            raise InvalidArgumentError(
                f"{flag} takes a number, a comma-separated list or a range START:STOP:xFACTOR / "
                f"START:STOP:+STEP (1:64:x2), got {text!r}"
            ) from None
    if not values:
        raise InvalidArgumentError(f"{flag} is empty")
    return tuple(dict.fromkeys(values))  # a level given twice is measured once


def parse_goodput(texts: Sequence[str]) -> dict[str, float]:
    """vLLM's ``--goodput`` ``KEY:VALUE`` pairs (ms), space-separated in one or more values."""
    limits: dict[str, float] = {}
    for pair in (p for text in texts for p in text.split()):
        name, sep, value = pair.partition(":")
        try:
            ms = float(value) if sep and ":" not in value else None
        except ValueError:
            ms = None
        if ms is None:
            raise InvalidArgumentError(
                f"--goodput {pair!r}: write KEY:VALUE pairs, the value in milliseconds, "
                'e.g. --goodput "ttft:500 tpot:50"'
            )
        if name not in GOODPUT_KEYS:
            raise InvalidArgumentError(
                f"--goodput {pair!r}: the key must be one of {', '.join(GOODPUT_KEYS)}"
            )
        if ms < 0:
            raise InvalidArgumentError(f"--goodput {pair!r}: the limit must be non-negative")
        limits[name] = ms
    return limits


def slo_from_flags(
    *,
    ttft_ms: float | None = None,
    tpot_ms: float | None = None,
    e2el_ms: float | None = None,
    goodput: Sequence[str] = (),
) -> Slo | None:
    """The SLO of ``--slo-*-ms`` and ``--goodput`` together (each limit given once)."""
    limits = parse_goodput(goodput)
    for name, value in (("ttft", ttft_ms), ("tpot", tpot_ms), ("e2el", e2el_ms)):
        if value is None:
            continue
        if name in limits and limits[name] != value:
            raise InvalidArgumentError(
                f"--slo-{name}-ms {value:g} and --goodput {name}:{limits[name]:g} disagree: "
                "give each limit once"
            )
        limits[name] = value
    if not limits:
        return None
    return Slo(ttft_ms=limits.get("ttft"), tpot_ms=limits.get("tpot"), e2el_ms=limits.get("e2el"))


def local_token_counter(path: str) -> Any:
    """An async token counter over a local ``tokenizer.json`` (the ``tokenizers`` library),
    counting special tokens as servers do in ``usage.prompt_tokens``."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise InvalidArgumentError(
            "--tokenizer needs the 'tokenizers' package: pip install 'servefit[tokenizer]'"
        ) from None
    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.json"
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as exc:  # the library raises its own exception types
        raise InvalidArgumentError(
            f"--tokenizer {path}: cannot load a tokenizer.json ({exc})"
        ) from None

    async def count(text: str) -> int:
        return len(tokenizer.encode(text).ids)

    return count


def lora_names(given: Sequence[str]) -> tuple[str, ...]:
    """``--lora-modules a b`` or ``a,b`` (vLLM bench's spelling: names; ``name=path`` as
    ``vllm serve`` takes them is read as its name)."""
    names = [n.split("=", 1)[0].strip() for item in given for n in item.split(",")]
    names = [n for n in names if n]
    if len(names) != len(set(names)):
        raise InvalidArgumentError(f"--lora-modules names an adapter twice: {', '.join(names)}")
    return tuple(names)


def bench_setup(
    *,
    url: str,
    replicas: Sequence[str] = (),
    session_affinity: bool = False,
    model_name: str | None = None,
    endpoint: str = "completions",
    api_key_env: str = "OPENAI_API_KEY",
    workload: str = "random",
    input_len: int = 256,
    output_len: int = 128,
    num_requests: int = 100,
    concurrency: str | None = None,
    request_rate: str | None = None,
    search_slo: bool = False,
    slo_percentile: int = 90,
    burstiness: float = 1.0,
    ramp_to: float | None = None,
    ramp_duration_s: float | None = None,
    prefix_len: int = 0,
    num_groups: int = 1,
    turns: int = 4,
    system_prompt_len: int = 512,
    message_len: int = 64,
    think_time_s: float = 0.0,
    prefix_cache_compare: bool = False,
    dataset: str | None = None,
    replay: bool = False,
    time_scale: float = 1.0,
    ignore_eos: bool = True,
    tokenizer_path: str | None = None,
    workers: int = 1,
    seed: int = 0,
    warmup: int = 0,
    duration_s: float | None = None,
    timeout_s: float = 600.0,
    max_error_rate: float = 0.0,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
    slo_e2el_ms: float | None = None,
    goodput: Sequence[str] = (),
    lora_modules: Sequence[str] = (),
) -> tuple[BenchConfig, LoadLevels]:
    """``servefit bench``'s flags as a run's configuration and its load levels; every
    inconsistency is an :class:`InvalidArgumentError` naming the flag."""
    levels = LoadLevels(
        concurrencies=parse_levels("--concurrency", concurrency, int),
        rates=parse_levels("--request-rate", request_rate, float),
        is_search=search_slo,
        slo_percentile=slo_percentile,
    )
    slo = slo_from_flags(
        ttft_ms=slo_ttft_ms, tpot_ms=slo_tpot_ms, e2el_ms=slo_e2el_ms, goodput=goodput
    )
    if search_slo and slo is None:
        raise InvalidArgumentError(
            "--search-slo needs a limit: --slo-ttft-ms, --slo-tpot-ms, --slo-e2el-ms or "
            '--goodput "ttft:MS tpot:MS e2el:MS"'
        )
    if (ramp_to is not None or ramp_duration_s is not None) and (
        levels.is_sweep or len(levels.rates) != 1
    ):
        raise InvalidArgumentError(
            "--ramp-to ramps one --request-rate (the start): give one rate, not a sweep"
        )
    if prefix_cache_compare and workload != "agent":
        raise InvalidArgumentError("--prefix-cache-compare needs --workload agent")
    if replay and workload not in TIMED_KINDS:
        raise InvalidArgumentError(
            "--replay needs a timed dataset: --workload jsonl with timestamp_s on every line, "
            "or burstgpt, azure or mooncake"
        )
    cfg = BenchConfig(
        base_urls=(url, *replicas),
        workload=WorkloadConfig(
            kind=workload,
            num_requests=num_requests,
            input_len=input_len,
            output_len=output_len,
            endpoint="chat" if workload == "agent" else endpoint,
            ignore_eos=ignore_eos,
            seed=seed,
            prefix_len=prefix_len,
            num_groups=num_groups,
            turns=turns,
            system_prompt_len=system_prompt_len,
            message_len=message_len,
            think_time_s=think_time_s,
            path=dataset,
        ),
        schedule=Schedule(
            concurrency=levels.concurrencies[0]
            if levels.concurrencies
            else (1 if search_slo else None),
            is_replay=replay,
            time_scale=time_scale,
            rate_per_s=levels.rates[0] if levels.rates and not search_slo else None,
            burstiness=burstiness,
            seed=seed,
            ramp_to_per_s=ramp_to,
            ramp_s=ramp_duration_s,
        ),
        model=model_name,
        api_key_env=api_key_env,
        timeout_s=timeout_s,
        warmup_requests=warmup,
        duration_s=duration_s,
        slo=slo,
        session_affinity=session_affinity,
        tokenizer_path=tokenizer_path,
        workers=workers,
        max_error_rate=max_error_rate,
        lora_modules=lora_names(lora_modules),
    )
    if tokenizer_path:
        local_token_counter(tokenizer_path)  # fail now, not mid-run
    return cfg, levels
