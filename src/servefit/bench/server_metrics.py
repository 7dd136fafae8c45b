"""Scrape a server's Prometheus ``/metrics`` and normalise vLLM, SGLang and llama.cpp names.

Counters are compared before and after a run (deltas); gauges are read as they are. The
text format is read by ``prometheus_client``'s own parser (label values may hold braces,
commas, escaped quotes and newlines); a line it refuses is skipped, the rest is kept.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from prometheus_client.parser import text_string_to_metric_families

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
    # speculative decoding (vllm/v1/spec_decode/metrics.py): drafts proposed, tokens drafted,
    # tokens accepted; per position below (the counter's `position` label)
    "spec_decode_drafts": ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_drafts"),
    "spec_decode_draft_tokens": (
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_draft_tokens",
    ),
    "spec_decode_accepted_tokens": (
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_accepted_tokens",
    ),
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
        "llamacpp:kv_cache_usage_ratio",
    ),
}
GAUGES = ("requests_running", "requests_waiting", "kv_cache_usage")
PER_POSITION = (
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)
# a draft position's accepted-token counter, normalised: accepted_pos_<position>
POSITION_PREFIX = "spec_decode_accepted_pos_"
# the exposition names of the gauges: what a sample taken while the run goes on reads
_GAUGE_METRICS = frozenset(name for gauge in GAUGES for name in NAMES[gauge])


Sample = tuple[str, dict[str, str], float]  # sample name (``_total``, ``_bucket`` kept), labels


def samples(text: str) -> Iterator[Sample]:
    """Every sample of a Prometheus text exposition, NaN values left out."""
    try:
        parsed = list(_parse(text))
    except ValueError:  # a line the parser refuses: parse line by line, skipping it
        parsed = []
        for line in text.splitlines():
            try:
                parsed.extend(_parse(line + "\n"))
            except ValueError:
                continue
    for name, labels, value in parsed:
        if not math.isnan(value):
            yield name, labels, value


def _parse(text: str) -> Iterator[Sample]:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            yield sample.name, sample.labels, float(sample.value)


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum of every sample per metric name (labels collapsed)."""
    return sums(samples(text))


def sums(parsed: Iterable[Sample]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, _, value in parsed:
        out[name] = out.get(name, 0.0) + value
    return out


def gauge_lines(text: str) -> str:
    """Only the lines of the gauges servefit samples during a run (and their ``# TYPE`` /
    ``# HELP``). vLLM 0.32's /metrics is ~630 lines, mostly histogram buckets; parsing all
    of it takes tens of milliseconds of the event loop that sends the requests, every
    second. The text format escapes newlines inside label values, so a line is a sample."""
    kept = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(maxsplit=3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP") and parts[2] in _GAUGE_METRICS:
                kept.append(line)
            continue
        end = len(line)
        for stop in ("{", " "):
            at = line.find(stop)
            if at != -1:
                end = min(end, at)
        if line[:end] in _GAUGE_METRICS:
            kept.append(line)
    return "\n".join(kept) + "\n" if kept else ""


def parse_gauges(text: str) -> dict[str, float]:
    """The gauges (running, waiting, KV-cache usage) of one /metrics text, normalised."""
    values = normalise(parse_prometheus(gauge_lines(text)))
    return {name: value for name, value in values.items() if name in GAUGES}


def per_position(parsed: Iterable[Sample]) -> dict[str, float]:
    """vLLM's accepted tokens per draft position (summed over engines), normalised to
    ``spec_decode_accepted_pos_<i>``; the first exposition name found wins, as in
    :func:`normalise`."""
    by_name: dict[str, dict[str, float]] = {}
    for name, labels, value in parsed:
        if name in PER_POSITION and labels.get("position", "").isdigit():
            key = POSITION_PREFIX + labels["position"]
            found = by_name.setdefault(name, {})
            found[key] = found.get(key, 0.0) + value
    for name in PER_POSITION:
        if name in by_name:
            return by_name[name]
    return {}


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
        if name in GAUGES:
            out[name] = value
        elif name in before:
            out[name] = value - before[name]
        elif name.startswith(POSITION_PREFIX):  # a position first drafted during the run
            out[name] = value
    if out.get("prefix_cache_queries_tokens"):
        out["prefix_cache_hit_rate"] = (
            out.get("prefix_cache_hits_tokens", 0.0) / out["prefix_cache_queries_tokens"]
        )
    out.update(acceptance(out))
    return out


def acceptance(counters: dict[str, float]) -> dict[str, float]:
    """Speculative decoding over a run, from the counter increases, as vLLM's own
    SpecDecodingLogging states them: acceptance rate = accepted / drafted tokens, mean
    acceptance length = 1 + accepted / drafts, per position = accepted at it / drafts."""
    drafts = counters.get("spec_decode_drafts", 0.0)
    drafted = counters.get("spec_decode_draft_tokens", 0.0)
    accepted = counters.get("spec_decode_accepted_tokens", 0.0)
    if drafts <= 0 or drafted <= 0:
        return {}
    out = {
        "spec_decode_acceptance_rate": accepted / drafted,
        "spec_decode_mean_acceptance_length": 1.0 + accepted / drafts,
    }
    for key, value in counters.items():
        if key.startswith(POSITION_PREFIX):
            out["spec_decode_acceptance_pos_" + key[len(POSITION_PREFIX) :]] = value / drafts
    return out


# Server-side latency histograms (seconds), by engine.
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "server_ttft_s": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "server_e2e_s": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
    "server_itl_s": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "sglang:inter_token_latency_seconds",
    ),
}


def parse_histograms(text: str) -> dict[str, dict[float, float]]:
    """Cumulative bucket counts per histogram name (``_bucket`` samples, labels other than
    ``le`` summed)."""
    return histograms(samples(text))


def histograms(parsed: Iterable[Sample]) -> dict[str, dict[float, float]]:
    out: dict[str, dict[float, float]] = {}
    for name, labels, value in parsed:
        if not name.endswith("_bucket") or "le" not in labels:
            continue
        try:
            bound = float(labels["le"])
        except ValueError:
            continue
        buckets = out.setdefault(name[: -len("_bucket")], {})
        buckets[bound] = buckets.get(bound, 0.0) + value
    return out


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus' histogram_quantile: linear interpolation inside the bucket holding rank q."""
    bounds = sorted(buckets)
    if not bounds:
        return None
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return previous_bound
            if count == previous_count:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (
                count - previous_count
            )
        previous_bound, previous_count = bound, count
    return previous_bound


def latency_percentiles(
    before: dict[str, dict[float, float]],
    after: dict[str, dict[float, float]],
    raw_before: dict[str, float] | None = None,
    raw_after: dict[str, float] | None = None,
) -> dict[str, dict[str, float]]:
    """p50/p90/p99 of each server-side latency over the run (bucket deltas, as coarse as the
    server's buckets) and the exact mean (``_sum`` / ``_count`` deltas)."""
    out: dict[str, dict[str, float]] = {}
    raw_before, raw_after = raw_before or {}, raw_after or {}
    for name, candidates in HISTOGRAMS.items():
        for candidate in candidates:
            if candidate not in after:
                continue
            start = before.get(candidate, {})
            delta = {b: c - start.get(b, 0.0) for b, c in after[candidate].items()}
            values = {f"p{int(q * 100)}": histogram_quantile(q, delta) for q in (0.5, 0.9, 0.99)}
            if all(v is not None for v in values.values()):
                out[name] = {k: float(v) for k, v in values.items() if v is not None}
                count = raw_after.get(candidate + "_count", 0.0) - raw_before.get(
                    candidate + "_count", 0.0
                )
                total = raw_after.get(candidate + "_sum", 0.0) - raw_before.get(
                    candidate + "_sum", 0.0
                )
                if count > 0:
                    out[name]["mean"] = total / count
            break
    return out
