"""An SGLang server's start-up log, read line by line: its settings and memory figures.

The lines SGLang prints while it starts (``sglang/srt``, 0.3 to 0.5; each read in the
releases' ``model_runner.py``, ``memory_pool.py`` and ``scheduler.py``):

- ``server_args=ServerArgs(model_path='...', tp_size=4, mem_fraction_static=0.85, ...)``;
- ``Load weight begin. avail mem=21.63 GB``: the memory free before loading (after the
  distributed init), in GiB though printed "GB";
- ``Load weight end. type=..., dtype=..., avail mem=6.09 GB, mem usage=15.54 GB.``;
- ``KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB`` (0.4.3 on;
  earlier releases print the K and V sizes only);
- ``max_total_num_tokens=46611, chunked_prefill_size=2048, max_prefill_tokens=16384,
  max_running_requests=2049, context_len=131072``.

Under tensor parallelism each rank prints its own lines (``TP0``, ``TP1``, ...); SGLang sizes
the pool from the smallest free memory, so the smallest figure of each kind is kept.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from servefit.units import GIB_BYTES

_SERVER_ARGS = re.compile(r"server_args=ServerArgs\((?P<args>.*)\)\s*$")
_BEGIN = re.compile(r"Load weight begin\. avail mem=(?P<gb>[\d.]+) GB")
_END = re.compile(
    r"Load weight end\..*?avail mem=(?P<gb>[\d.]+) GB(?:, mem usage=(?P<use>[\d.]+) GB)?"
)
_KV = re.compile(r"KV Cache is allocated\. #tokens: (?P<tokens>\d+)")
_MAX_TOTAL = re.compile(r"max_total_num_tokens=(?P<tokens>\d+)")
_FIELDS = re.compile(r"\b(?P<key>chunked_prefill_size|max_running_requests|context_len)=(?P<n>\d+)")
ROUNDING_BYTES = 0.005 * GIB_BYTES  # memory is printed to two decimals


@dataclass(frozen=True, slots=True, kw_only=True)
class SglangFact:
    value: float
    line: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SglangLog:
    """What an SGLang start-up log says (the smallest figure of each kind over its ranks)."""

    server_args: dict[str, Any] = field(default_factory=dict)
    free_before_load_bytes: SglangFact | None = None
    free_after_load_bytes: SglangFact | None = None
    weights_bytes: SglangFact | None = None  # "mem usage" of loading, or before - after
    kv_cache_tokens: SglangFact | None = None
    scheduler: dict[str, SglangFact] = field(default_factory=dict)  # max_running_requests, ...
    engine_version: str | None = None  # SGLang's logs do not print their release

    @property
    def model(self) -> str | None:
        path = self.server_args.get("model_path")
        return str(path) if path else None

    @classmethod
    def read(cls, lines: Iterable[str]) -> SglangLog:
        args: dict[str, Any] = {}
        found: dict[str, SglangFact] = {}
        scheduler: dict[str, SglangFact] = {}

        def keep(kind: str, value: float, line: str) -> None:
            if kind not in found or value < found[kind].value:
                found[kind] = SglangFact(value=value, line=line)

        for raw in lines:
            line = raw.rstrip("\n")
            if m := _SERVER_ARGS.search(line):
                args = server_args(m.group("args"))
            if m := _BEGIN.search(line):
                keep("before", float(m.group("gb")) * GIB_BYTES, line)
            if m := _END.search(line):
                keep("after", float(m.group("gb")) * GIB_BYTES, line)
                if m.group("use"):
                    keep("weights", float(m.group("use")) * GIB_BYTES, line)
            for pattern in (_KV, _MAX_TOTAL):
                if m := pattern.search(line):
                    keep("tokens", int(m.group("tokens")), line)
            if "max_total_num_tokens=" in line:
                for m in _FIELDS.finditer(line):
                    scheduler[m.group("key")] = SglangFact(value=int(m.group("n")), line=line)
        if "weights" not in found and "before" in found and "after" in found:
            used = found["before"].value - found["after"].value
            found["weights"] = SglangFact(value=used, line=found["after"].line)
        return cls(
            server_args=args,
            free_before_load_bytes=found.get("before"),
            free_after_load_bytes=found.get("after"),
            weights_bytes=found.get("weights"),
            kv_cache_tokens=found.get("tokens"),
            scheduler=scheduler,
        )


def is_sglang_log(lines: Iterable[str]) -> bool:
    """Any of the lines only SGLang prints while it starts."""
    return any(
        "server_args=ServerArgs(" in line
        or "Load weight begin. avail mem=" in line
        or "max_total_num_tokens=" in line
        for line in lines
    )


def server_args(text: str) -> dict[str, Any]:
    """``model_path='x', tp_size=4, ...`` (a dataclass repr) as a dict of its literal values;
    a value that is not a Python literal (an enum, an object) is left out."""
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except SyntaxError:
        return {}
    if not isinstance(call, ast.Call):
        return {}
    out: dict[str, Any] = {}
    for keyword in call.keywords:
        if keyword.arg is None:
            continue
        try:
            out[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, SyntaxError, TypeError):
            continue
    return out
