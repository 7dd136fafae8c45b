"""A plan as Prometheus metrics: what ``servefit exporter`` serves beside a running vLLM, so
a dashboard draws the predicted TTFT, TPOT, throughput, batch and KV-cache size next to what
vLLM's own ``/metrics`` measure (``deploy/grafana/servefit-vllm.json``).

The exposition is written with ``prometheus_client`` (its registry and text format), from the
plan's ``--json`` document, so the numbers served are the ones ``servefit plan --json``
prints. Every series carries the plan's ``model`` and ``gpu`` labels.

=================================================  =========================================
series                                             from the plan document
=================================================  =========================================
``servefit_plan_info``                             1, with engine, vLLM and servefit versions
``servefit_plan_fits``                             1 fits, 0 does not
``servefit_predicted_kv_cache_tokens``             memory.kv_cache_tokens ("GPU KV cache size")
``servefit_predicted_max_concurrency``             memory.max_concurrency
``servefit_predicted_ttft_seconds{stat}``          performance.load.ttft_s (mean, p50, p90, p99)
``servefit_predicted_tpot_seconds{stat}``          performance.load.tpot_s
``servefit_predicted_e2e_seconds{stat}``           performance.load.e2e_s
``servefit_predicted_output_throughput_tokens_per_second``  performance.output_throughput_tok_per_s
``servefit_predicted_request_throughput_per_second``        performance.request_throughput_per_s
``servefit_predicted_mean_batch``                  performance.load.mean_batch (requests running)
=================================================  =========================================
"""

from __future__ import annotations

import math
from typing import Any

STATS = ("mean", "p50", "p90", "p99")
LATENCIES = ("ttft", "tpot", "e2e")


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def plan_exposition(doc: dict[str, Any]) -> bytes:
    """The Prometheus text exposition of a plan document (``plan --json``)."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    from servefit import __version__

    registry = CollectorRegistry()
    labels = {"model": str(doc["model"]["id"]), "gpu": str(doc["gpu"]["name"])}
    names = list(labels)
    perf = doc.get("performance") or {}
    load = perf.get("load") or {}
    info = Gauge(
        "servefit_plan_info",
        "The plan servefit serves: engine and versions",
        [*names, "engine", "vllm_version", "servefit_version"],
        registry=registry,
    )
    info.labels(
        **labels,
        engine=str(perf.get("engine") or "vllm"),
        vllm_version=str(doc["settings"].get("vllm_version") or ""),
        servefit_version=__version__,
    ).set(1)

    def gauge(name: str, text: str, value: Any) -> None:
        number = _number(value)
        if number is not None:
            Gauge(name, text, names, registry=registry).labels(**labels).set(number)

    gauge("servefit_plan_fits", "1 when the deployment fits as planned", int(bool(doc["fits"])))
    memory = doc.get("memory") or {}
    gauge(
        "servefit_predicted_kv_cache_tokens",
        "GPU KV cache size as vLLM logs it at start-up, predicted",
        memory.get("kv_cache_tokens"),
    )
    gauge(
        "servefit_predicted_max_concurrency",
        "Maximum concurrency at max-model-len as vLLM logs it, predicted",
        memory.get("max_concurrency"),
    )
    for kind in LATENCIES:
        values = load.get(f"{kind}_s") or {}
        present = {s: _number(values.get(s)) for s in STATS}
        if not any(v is not None for v in present.values()):
            continue
        latency = Gauge(
            f"servefit_predicted_{kind}_seconds",
            f"Predicted {kind.upper()} under the planned workload, by statistic",
            [*names, "stat"],
            registry=registry,
        )
        for stat, number in present.items():
            if number is not None:
                latency.labels(**labels, stat=stat).set(number)
    gauge(
        "servefit_predicted_output_throughput_tokens_per_second",
        "Predicted output tokens per second under the planned workload",
        perf.get("output_throughput_tok_per_s"),
    )
    gauge(
        "servefit_predicted_request_throughput_per_second",
        "Predicted completed requests per second under the planned workload",
        perf.get("request_throughput_per_s"),
    )
    gauge(
        "servefit_predicted_mean_batch",
        "Predicted mean number of requests running per engine step",
        load.get("mean_batch"),
    )
    return generate_latest(registry)
