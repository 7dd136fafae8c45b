"""Scrape a server's Prometheus ``/metrics`` and normalise vLLM, SGLang and llama.cpp names.

Counters are compared before and after a run (deltas); gauges are read as they are.
"""

from __future__ import annotations

import math
import re

# normalised name -> the names each engine uses (summed over label sets)
NAMES: dict[str, tuple[str, ...]] = {
    "prefix_cache_queries_tokens": ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries"),
    "prefix_cache_hits_tokens": ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "prompt_tokens": (
        "vllm:prompt_tokens_total",
        "sglang:prompt_tokens_total",
        "llamacpp:prompt_tokens_total",
    ),
    "generation_tokens": (
        "vllm:generation_tokens_total",
        "sglang:generation_tokens_total",
        "llamacpp:tokens_predicted_total",
    ),
    "requests_running": (
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "llamacpp:requests_processing",
    ),
    "requests_waiting": (
        "vllm:num_requests_waiting",
        "sglang:num_queue_reqs",
        "llamacpp:requests_deferred",
    ),
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
        "llamacpp:kv_cache_usage_ratio",
    ),
}
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum of every sample per metric name (labels collapsed)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        out[match.group(1)] = out.get(match.group(1), 0.0) + value
    return out


def normalise(raw: dict[str, float]) -> dict[str, float]:
    out = {}
    for name, candidates in NAMES.items():
        for candidate in candidates:
            if candidate in raw:
                out[name] = raw[candidate]
                break
    return out


def deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Counter increases over a run (gauges keep their final value)."""
    out = {}
    for name, value in after.items():
        if name in ("requests_running", "requests_waiting", "kv_cache_usage"):
            out[name] = value
        elif name in before:
            out[name] = value - before[name]
    if out.get("prefix_cache_queries_tokens"):
        out["prefix_cache_hit_rate"] = (
            out.get("prefix_cache_hits_tokens", 0.0) / out["prefix_cache_queries_tokens"]
        )
    return out
