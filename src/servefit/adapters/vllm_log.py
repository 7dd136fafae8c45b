"""vLLM's startup log, read line by line: what the engine says it built, and why it refused.

A log line is held against the plan the moment it arrives (``servefit up``) or after the fact
(``servefit check-log``), so the reader is incremental: :func:`read_line` turns one line into
the facts it states, and :class:`StartupLog` gathers them. The lines it knows, as vLLM prints
them (V1 engine, 0.10 to 0.32; each pattern names the versions it was read from):

===========================  ==========================================================
quantity                     line (vLLM source)
===========================  ==========================================================
engine_version               ``vLLM API server version 0.10.1`` (0.10-0.1x,
                             ``entrypoints/openai/api_server.py``); the banner's
                             ``version 0.32.0`` and ``vLLM server version 0.32.0, serving
                             model M`` (0.2x-0.32, ``entrypoints/serve/utils/api_utils.py``);
                             ``Initializing a V1 LLM engine (v0.10.0) with config``
                             (``v1/engine/core.py``)
model, flags                 ``non-default args: {...}`` (0.9+, a Python dict literal);
                             ``model='...'`` of the engine config line
dtype, max_model_len         ``dtype=torch.bfloat16``, ``max_seq_len=4096`` (engine config)
weights_bytes                ``Model loading took 14.9917 GiB and 6.9 seconds`` (0.10) /
                             ``Model loading took 14.99 GiB memory and 6.9 seconds``
                             (0.19-0.32, ``v1/worker/gpu_model_runner.py``)
kv_cache_memory_bytes        ``Available KV cache memory: 58.11 GiB`` (GPU worker);
                             ``Explicitly set (1.0/7.46) GiB for KV cache on node 0`` and
                             ``Auto set (X/Y) GiB for KV cache on node 0`` (CPU worker, 0.3x)
kv_cache_tokens              ``GPU KV cache size: 476,016 tokens`` (0.10-0.31, its own line);
                             ``CPU KV cache size: N tokens, Maximum concurrency for ...``
                             (0.32, one line, ``v1/core/kv_cache_utils.py``)
max_concurrency              ``Maximum concurrency for 8,192 tokens per request: 58.11x``
block_size                   ``Setting attention block size to 2096 tokens`` (hybrids);
                             ``'block_size': 32`` in the non-default args
V0 engine (0.5-0.7)          ``args: Namespace(...)`` (every argument, the flags read from it);
                             ``Loading model weights took 14.9888 GB`` (GiB); 0.6.4's
                             ``Memory profiling results: total_gpu_memory=... kv_cache_size=X``
                             and 0.6.5+'s ``the rest of the memory reserved for KV Cache is
                             X``; ``# GPU blocks: N`` (``# CUDA blocks``, ``# cuda blocks``:
                             ``kv_cache_blocks``); the refusal ``max seq len (N) is larger
                             than the maximum number of tokens that can be stored``
refusals                     OOM (``torch.OutOfMemoryError``, ``CUDA out of memory``), ``No
                             available memory for the cache blocks``, ``To serve at least one
                             request with the model's max seq len``, ``max_num_seqs (M)
                             exceeds available Mamba cache blocks (N)``, ``User-specified
                             max_model_len (X) is greater than the derived max_model_len``,
                             the CPU worker's ``Available memory on node ...`` and a port in
                             use (``Address already in use``)
===========================  ==========================================================

Logged GiB figures are rounded (two decimals from 0.19; four before): each fact carries the
half-unit of its rounding, so a comparison does not call rounding a deviation.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from servefit.units import GIB_BYTES

# A line's prefix: "(EngineCore_DP0 pid=12) INFO 11-30 07:54:03 [core.py:134] message"
_PREFIX_RE = re.compile(
    r"^(?:\((?P<proc>[^)]*)\)\s+)?(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s+)?(?P<message>.*)$"
)
_NUM = r"[\d,]+(?:\.\d+)?"
# The numbers a fact is read from, bounded: a line with a 400-digit count states no fact
# (int() refuses 4,300 digits and float() makes 1e400 infinite). A count fits 18 digits,
# a grouped one 24 characters, a GiB figure 9 digits (a billion GiB) and 12 decimals.
_INT = r"\d{1,18}(?!\d)"
_GROUPED = r"[\d,]{1,24}(?![\d,])"
_DEC = r"\d{1,9}(?:\.\d{1,12})?(?!\d)"


class Refusal(StrEnum):
    """Why the engine stopped during startup."""

    OUT_OF_MEMORY = "out_of_memory"
    NO_KV_CACHE_MEMORY = "no_kv_cache_memory"
    MAX_MODEL_LEN_DOES_NOT_FIT = "max_model_len_does_not_fit"
    MAMBA_BLOCKS = "mamba_blocks"
    MAX_MODEL_LEN_TOO_LONG = "max_model_len_too_long"
    HOST_MEMORY = "host_memory"
    PORT_IN_USE = "port_in_use"
    MODEL_NOT_LOADABLE = "model_not_loadable"


@dataclass(frozen=True, slots=True, kw_only=True)
class LogFact:
    """One thing one line says."""

    quantity: str  # weights_bytes, kv_cache_tokens, refusal, engine_version, ...
    value: Any
    line: str  # the message, without vLLM's prefix
    rounding: float = 0.0  # half a unit of the last printed digit, in the value's unit
    process: str = ""  # "EngineCore_DP0 pid=12", "Worker_TP1 pid=5": who printed it


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _gib(text: str) -> tuple[int, float]:
    """A printed GiB figure as bytes, and half a unit of its last digit in bytes."""
    decimals = len(text.partition(".")[2])
    return round(float(text) * GIB_BYTES), 0.5 * 10.0**-decimals * GIB_BYTES


def _half_unit(text: str) -> float:
    return 0.5 * 10.0 ** -len(text.partition(".")[2])


_VERSION_RES = (
    re.compile(r"vLLM (?:API )?server version v?(?P<v>\d+\.\d+[\w.+-]*)"),
    re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(?P<v>\d+\.\d+[\w.+-]*)\)"),
    re.compile(r"\bversion (?P<v>\d+\.\d+\.\d+[\w.+-]*)\s*$"),  # the 0.3x banner
)
_BANNER_MODEL_RE = re.compile(r"\bmodel\s{2,}(?P<model>\S+)\s*$")
_SERVING_MODEL_RE = re.compile(r"serving model (?P<model>\S+)")
_NON_DEFAULT_RE = re.compile(r"non-default args: (?P<args>\{.*\})\s*$")
# the engine's config line: "Initializing a V1 LLM engine (v0.10.0) with config: ..." (V1),
# "Initializing an LLM engine (v0.6.4) with config: ..." (V0, llm_engine.py)
_ENGINE = r"Initializing an? (?:V1 )?LLM engine"
_ENGINE_MODEL_RE = re.compile(rf"{_ENGINE} .*?\bmodel='(?P<model>[^']*)'")
_DTYPE_RE = re.compile(rf"{_ENGINE} .*?\bdtype=torch\.(?P<dtype>\w+)")
_MAX_SEQ_LEN_RE = re.compile(rf"{_ENGINE} .*?\bmax_seq_len=(?P<len>{_INT})")
# V0 and 0.8's api_server print every argument: "args: Namespace(model='...', ...)"
_NAMESPACE_RE = re.compile(r"\bargs: Namespace\((?P<args>.*)\)\s*$")
_NAMESPACE_VALUE = (
    r"'(?:[^'\\]|\\.){0,2000}'|\"(?:[^\"\\]|\\.){0,2000}\"|None|True|False|-?[\d.]{1,24}"
)
# "GB" in the V0 model runner of 0.8-0.10 (bytes / 2**30 all the same)
_LOADING_RE = re.compile(rf"Model loading took (?P<gib>{_DEC}) ?Gi?B")
# V0's model runner: "Loading model weights took 14.9888 GB" (the figure is GiB: bytes / 2**30)
_V0_LOADING_RE = re.compile(rf"Loading model weights took (?P<gib>{_DEC}) ?GB")
_AVAILABLE_KV_RE = re.compile(
    rf"Available KV cache memory: (?P<gib>{_DEC}) ?GiB"
    # V0 0.6.4 "Memory profiling results: ... kv_cache_size=3.81GiB"; 0.6.5-0.7 "the rest of
    # the memory reserved for KV Cache is 14.65GiB" (worker.py)
    rf"|\bkv_cache_size=(?P<gib04>{_DEC})GiB|reserved for KV Cache is (?P<gib05>{_DEC}) ?GiB"
)
_V0_TOTAL_RE = re.compile(
    rf"\btotal_gpu_memory=(?P<gib>{_DEC})GiB|total_gpu_memory \((?P<gib05>{_DEC})GiB\)"
)
# V0's executor: "# GPU blocks: 1952, # CPU blocks: 2048" ("# CUDA blocks" from 0.7)
_V0_BLOCKS_RE = re.compile(rf"(?:# )?(?:GPU|CUDA|cuda) blocks: (?P<n>{_INT}), # CPU blocks")
_CPU_KV_RE = re.compile(
    rf"(?P<how>Explicitly|Auto) set \((?P<gib>{_DEC})/(?P<total>{_DEC})\) GiB "
    r"for KV cache on node"
)
_KV_SIZE_RE = re.compile(
    rf"(?P<device>[A-Z]+)(?: \+ host)? KV cache size: (?P<tokens>{_GROUPED}) tokens"
)
_CONCURRENCY_RE = re.compile(
    rf"Maximum concurrency for (?P<len>{_GROUPED}) tokens per request: (?P<x>{_DEC})x"
)
_HYBRID_BLOCK_RE = re.compile(rf"Setting attention block size to (?P<n>{_INT}) tokens")
# kv_cache_utils.py, when the groups of a hybrid (or a drafter's extra layer) are unequal
_PADDING_RE = re.compile(rf"Add (?P<n>{_INT}) padding layers")
_FREE_ON_DEVICE_RE = re.compile(
    rf"Free memory on device \((?P<free>{_DEC})/(?P<total>{_DEC}) GiB\)"
)
_REFUSALS: tuple[tuple[Refusal, re.Pattern[str]], ...] = (
    (Refusal.OUT_OF_MEMORY, re.compile(r"OutOfMemoryError|CUDA out of memory|out of memory")),
    (Refusal.NO_KV_CACHE_MEMORY, re.compile(r"No available memory for the cache blocks")),
    (
        Refusal.MAX_MODEL_LEN_DOES_NOT_FIT,
        re.compile(
            r"To serve at least one request with the models?'s max seq len"
            # V0 worker.py raise_if_cache_size_invalid
            r"|max seq len \(\d+\) is larger than the maximum number of tokens"
        ),
    ),
    (Refusal.MAMBA_BLOCKS, re.compile(r"exceeds available Mamba cache blocks")),
    (
        Refusal.MAX_MODEL_LEN_TOO_LONG,
        re.compile(r"max_model_len \(\d+\) is greater than the derived max_model_len"),
    ),
    (Refusal.HOST_MEMORY, re.compile(r"Available memory on node \d+ .* is less than")),
    (Refusal.PORT_IN_USE, re.compile(r"Address already in use|error while attempting to bind")),
    (
        Refusal.MODEL_NOT_LOADABLE,
        re.compile(
            r"(?:OSError|ValueError|RuntimeError).*(?:is not a valid model|not supported for now|"
            r"Model architectures? \[.*\] (?:are|is) not supported|"
            r"does not appear to have a file named|Can't load the configuration|"
            r"Invalid repository ID or local directory)"
            r"|SafetensorError|Error while deserializing header"
        ),
    ),
)
_ESTIMATED_LEN_RE = re.compile(
    rf"estimated maximum model length is (?P<n>{_INT})"
    rf"|tokens that can be stored in KV cache \((?P<v0>{_INT})\)"  # V0: the tokens it holds
)
_MAMBA_NUMBERS_RE = re.compile(
    rf"max_num_seqs \((?P<seqs>{_INT})\) exceeds available Mamba cache blocks "
    rf"\((?P<blocks>{_INT})\)"
)


def split_prefix(line: str) -> tuple[str, str]:
    """(the process that printed it, the message) of one raw log line."""
    m = _PREFIX_RE.match(line.rstrip("\n"))
    if m is None:  # pragma: no cover - the pattern matches any string
        return "", line.strip()
    return (m.group("proc") or "").strip(), m.group("message").strip()


MAX_ARGS_CHARS = 100_000  # a non-default-args line longer than this states no fact
MAX_ARG_INT = 2**63 - 1  # an argument past 64 bits is no setting vLLM took


def _is_plausible(value: Any) -> bool:
    """Every number in a literal within 64 bits and finite (vLLM logs no others)."""
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return abs(value) <= MAX_ARG_INT
    if isinstance(value, float):
        return value == value and abs(value) != float("inf")
    if isinstance(value, dict):
        return all(_is_plausible(k) and _is_plausible(v) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return all(_is_plausible(v) for v in value)
    return True


def _literal_dict(text: str) -> dict[str, Any]:
    """The dict a ``non-default args`` line prints, or {} where it is not one a vLLM
    printed: unparsable, nested past Python's limit, or holding an implausible number."""
    if len(text) > MAX_ARGS_CHARS:
        return {}
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
        return {}
    return value if isinstance(value, dict) and _is_plausible(value) else {}


def namespace_args(text: str) -> dict[str, Any]:
    """The arguments of an ``args: Namespace(...)`` line that servefit reads (every one is
    printed, defaults too; a value that is not a plain literal is left out)."""
    from servefit.adapters.vllm_settings import DESTS

    out: dict[str, Any] = {}
    for dest in ("model", *DESTS):
        if m := re.search(rf"(?:^|[(, ]){dest}=(?P<v>{_NAMESPACE_VALUE})(?=[,)]|$)", text):
            try:
                value = ast.literal_eval(m.group("v"))
            except (ValueError, SyntaxError):
                continue
            if value is not None and _is_plausible(value):
                out[dest] = value
    return out


def read_line(line: str) -> tuple[LogFact, ...]:
    """Every fact one raw log line states (most lines state none)."""
    proc, msg = split_prefix(line)
    if not msg:
        return ()
    out: list[LogFact] = []

    def add(quantity: str, value: Any, rounding: float = 0.0) -> None:
        out.append(
            LogFact(quantity=quantity, value=value, line=msg, rounding=rounding, process=proc)
        )

    for pattern in _VERSION_RES:
        if m := pattern.search(msg):
            add("engine_version", m.group("v"))
            break
    for pattern in (_BANNER_MODEL_RE, _SERVING_MODEL_RE, _ENGINE_MODEL_RE):
        if m := pattern.search(msg):
            add("model", m.group("model"))
            break
    if m := _NON_DEFAULT_RE.search(msg):
        args = _literal_dict(m.group("args"))
        add("non_default_args", args)
        if isinstance(args.get("block_size"), int):
            add("block_size", args["block_size"])
    elif m := _NAMESPACE_RE.search(msg):
        add("non_default_args", namespace_args(m.group("args")))
    if m := _DTYPE_RE.search(msg):
        add("dtype", m.group("dtype"))
    if m := _MAX_SEQ_LEN_RE.search(msg):
        add("max_model_len", int(m.group("len")))
    if m := _LOADING_RE.search(msg) or _V0_LOADING_RE.search(msg):
        add("weights_bytes", *_gib(m.group("gib")))
    if m := _AVAILABLE_KV_RE.search(msg):
        add("kv_cache_memory_bytes", *_gib(m.group("gib") or m.group("gib04") or m.group("gib05")))
    if m := _V0_TOTAL_RE.search(msg):
        add("device_total_bytes", *_gib(m.group("gib") or m.group("gib05")))
    if m := _V0_BLOCKS_RE.search(msg):
        add("kv_cache_blocks", int(m.group("n")))
    if m := _CPU_KV_RE.search(msg):
        add("kv_cache_memory_bytes", *_gib(m.group("gib")))
        add("kv_cache_explicit", m.group("how") == "Explicitly")
        add("device_total_bytes", *_gib(m.group("total")))
        add("device", "CPU")
    if m := _FREE_ON_DEVICE_RE.search(msg):
        add("device_total_bytes", *_gib(m.group("total")))
    if m := _KV_SIZE_RE.search(msg):
        add("kv_cache_tokens", _int(m.group("tokens")))
        add("device", m.group("device"))
    if m := _CONCURRENCY_RE.search(msg):
        add("max_concurrency", float(m.group("x")), _half_unit(m.group("x")))
        add("max_model_len", _int(m.group("len")))
    if m := _HYBRID_BLOCK_RE.search(msg):
        add("block_size", int(m.group("n")))
    if m := _PADDING_RE.search(msg):
        add("kv_padding_layers", int(m.group("n")))
    for kind, pattern in _REFUSALS:
        if pattern.search(msg):
            add("refusal", kind)
            break
    return tuple(out)


@dataclass(slots=True)
class StartupLog:
    """The facts of a startup log so far (fed line by line, or read whole)."""

    facts: list[LogFact] = field(default_factory=list)
    num_lines: int = 0

    def feed(self, line: str) -> tuple[LogFact, ...]:
        """Read one more line; return the facts it adds."""
        self.num_lines += 1
        new = read_line(line)
        self.facts.extend(new)
        return new

    @classmethod
    def read(cls, lines: Iterable[str]) -> StartupLog:
        log = cls()
        for line in lines:
            log.feed(line)
        return log

    def all(self, quantity: str) -> list[LogFact]:
        return [f for f in self.facts if f.quantity == quantity]

    def first(self, quantity: str) -> LogFact | None:
        found = self.all(quantity)
        return found[0] if found else None

    def value(self, quantity: str) -> Any:
        fact = self.first(quantity)
        return fact.value if fact is not None else None

    def smallest(self, quantity: str) -> LogFact | None:
        """The smallest of a per-worker figure (the engine sizes its cache from the smallest
        worker; tensor-parallel ranks print the same line once each)."""
        found = self.all(quantity)
        return min(found, key=lambda f: f.value) if found else None

    @property
    def is_vllm_log(self) -> bool:
        """Does this look like vLLM's output at all?"""
        known = {"engine_version", "non_default_args", "kv_cache_tokens", "weights_bytes"}
        return any(f.quantity in known for f in self.facts) or any(
            f.quantity == "max_concurrency" or f.quantity == "kv_cache_memory_bytes"
            for f in self.facts
        )

    @property
    def refusals(self) -> list[LogFact]:
        return self.all("refusal")

    @property
    def engine_version(self) -> str | None:
        return self.value("engine_version")

    @property
    def model(self) -> str | None:
        args = self.value("non_default_args") or {}
        model = args.get("model")
        return str(model) if model else self.value("model")

    @property
    def non_default_args(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for fact in self.all("non_default_args"):
            merged.update(fact.value)
        return merged


def refusal_detail(fact: LogFact) -> dict[str, int]:
    """The numbers a refusal line carries (the engine's estimate of what would fit)."""
    out: dict[str, int] = {}
    if m := _ESTIMATED_LEN_RE.search(fact.line):
        out["estimated_max_model_len"] = int(m.group("n") or m.group("v0"))
    if m := _MAMBA_NUMBERS_RE.search(fact.line):
        out["max_num_seqs"] = int(m.group("seqs"))
        out["mamba_cache_blocks"] = int(m.group("blocks"))
    return out
