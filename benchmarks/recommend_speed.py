"""Fleet search speed: ``servefit recommend`` over the whole GPU catalog, per model.

Run: python benchmarks/recommend_speed.py     (prints a table; exits 0 whatever the numbers)

Target (issue 15, on a 2-core machine): <= 10 s for a full-catalog search of one model.
The workload is the issue's: 40 req/s of 3,000-in / 400-out tokens, TTFT p90 <= 1 s,
TPOT p90 <= 50 ms, 10 % headroom, aggregated and disaggregated fleets.

The search space per model: every catalog GPU with a price, served by vLLM; GPUs per
replica 1, 2, 4, 8 within a node and 16 as TP 8 x PP 2 (+ EP for a MoE); the checkpoint's
weights and, on GPUs with FP8 tensor cores, online fp8; KV auto and fp8 there. Pruning, in
order: the capacity plan (does not start, cannot hold one request), one request alone over
the SLO, then a cost lower bound (the fleet at each option's upper-bound rate) once 5 fleets
meeting the SLO are known; survivors are simulated (about 4 simulations each to find the
fewest replicas). On a machine shared with other work wall times stretch, so the table also
prints CPU seconds and a single ``plan_deployment`` (capacity + performance) measured in the
same run as the baseline to read them against.
"""

from __future__ import annotations

import sys
import time

from servefit.app.deployment import Deployment, Hardware, default_workload
from servefit.app.fleet import FleetRequest, recommend_fleet
from servefit.app.plan import plan_deployment
from servefit.core.fleet import FleetSlo
from servefit.core.metrics import Slo

MODELS = ("Qwen/Qwen3.6-27B-FP8", "meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B")
TARGET_S = 10.0


def workload():
    return default_workload(
        input_len=3000, output_len=400, concurrency=None, request_rate_per_s=40.0
    )


def baseline_s() -> float:
    """One plan with its performance section, the same workload, on one GPU."""
    d = Deployment(
        model="meta-llama/Llama-3.1-8B",
        hardware=Hardware(gpu="H100-SXM"),
        workload=workload(),
        is_workload_given=True,
        allow_hub=False,
    )
    plan_deployment(d)  # warm the catalogs
    started = time.perf_counter()
    plan_deployment(d)
    return time.perf_counter() - started


def main() -> int:
    slo = FleetSlo(slo=Slo(ttft_ms=1000, tpot_ms=50), percentile=90)
    print(f"baseline: one plan_deployment with performance: {baseline_s():.2f} s\n")
    header = (
        f"{'model':<26} {'GPUs':>4} {'options':>7} {'cap':>5} {'lat':>5} {'bound':>5} "
        f"{'sim':>4} {'runs':>5} {'wall s':>7} {'cpu s':>6} {'best':<34}"
    )
    print(header)
    print("-" * len(header))
    for model in MODELS:
        request = FleetRequest(models=(model,), workload=workload(), slo=slo, allow_hub=False)
        wall, cpu = time.perf_counter(), time.process_time()
        outcome = recommend_fleet(request)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        n = outcome.counts
        best = outcome.best
        text = (
            f"{best.replicas} x {best.gpus_per_replica} {best.gpu} {best.layout} "
            f"${best.usd_per_hour:,.2f}/h"
            if best
            else "none meets"
        )
        print(
            f"{model[:26]:<26} {n.gpus:>4} {n.options:>7} {n.pruned_capacity:>5} "
            f"{n.pruned_latency:>5} {n.pruned_bound:>5} {n.simulated:>4} {n.simulations:>5} "
            f"{wall:>7.1f} {cpu:>6.1f} {text[:34]:<34}"
            + ("" if wall <= TARGET_S else "  (over target)")
        )
    print(
        "\ncap: pruned at capacity; lat: one request alone misses the SLO; bound: the cost's "
        "lower bound cannot enter the 5 cheapest; sim: fleets simulated; runs: simulations"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
