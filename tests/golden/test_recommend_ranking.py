"""``recommend``'s cost ranking of GPUs against published measurements.

Where ``benchmarks/fidelity/speed.json`` measured the same model with the same workload
on several GPUs that the price catalog prices (vLLM or TensorRT-LLM servers; llama.cpp's
desktop runs are left out, since ``recommend`` searches vLLM fleets), the measured cost of
an output token is the GPU's catalog price over the measured output rate
(``$/h / (3600 x output tok/s) x 1e6``), and the predicted one is the best fleet
``recommend`` finds on that GPU for the same workload (the measured GPUs per replica; fp8
tried only where the measured runs used it; an SLO so loose that only the workload binds;
no headroom). Rankings are compared within each
group (model x workload) and, pooled, as one Spearman rank correlation over every GPU's cost
relative to its group's geometric mean.

Threshold: the pooled correlation is at least 0.60, the one-sided 5 % critical value of
Spearman's rho for 9 points (Zar, Biostatistical Analysis, table of critical values of
r_s): a ranking that agrees no better than chance fails. The value is printed by
``python -m pytest tests/golden/test_recommend_ranking.py -s``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from functools import cache

from tests.corpus import SPEED

from servefit.adapters.catalog import gpu_price
from servefit.adapters.measurements import Measurement, load_measurements
from servefit.app.deployment import default_workload
from servefit.app.fleet import FleetRequest, recommend_fleet
from servefit.core.fleet import FleetSlo
from servefit.core.metrics import Slo

FILE = SPEED
ENGINES = ("vllm", "trtllm")
OUTPUT_RATE_METRICS = (
    "output_throughput_tok_per_s",
    "total_throughput_tok_per_s",
    "tpot_s",
    "itl_s",
)
OFFLINE_CONCURRENCY = 1024  # "every request sent at once" runs, as one closed loop
LOOSE_SLO = Slo(ttft_ms=3_600_000, tpot_ms=10_000)
RHO_THRESHOLD = 0.60  # one-sided 5 % critical value for n = 9 (see the module docstring)


def measured_output_tok_per_s(m: Measurement) -> float:
    """The output tokens per second the measurement implies (prompts of a few hundred
    tokens or less cost the decode-time metrics little; a total throughput is split by the
    workload's output share)."""
    w = m.workload
    if m.metric == "output_throughput_tok_per_s":
        return m.value
    if m.metric == "total_throughput_tok_per_s":
        return m.value * w.output_len / (w.input_len + w.output_len)
    return (w.concurrency or 1) / m.value  # tpot_s / itl_s: each user gets 1 / value tok/s


def groups() -> dict[tuple[str, str, str], list[Measurement]]:
    by: dict[tuple[str, str, str], dict[str, Measurement]] = defaultdict(dict)
    for m in load_measurements(FILE):
        if not m.fitted:  # the fresh ones are scored by benchmarks/fidelity.py
            continue
        if m.engine not in ENGINES or m.metric not in OUTPUT_RATE_METRICS:
            continue
        if m.settings.weights or gpu_price(m.gpu) is None or m.replicas != 1:
            continue
        if m.settings.kv_cache_dtype != "auto" and m.settings.quantization is None:
            continue  # an fp8-KV variant of a run kept with its default KV
        key = (m.model, m.metric, m.workload.model_dump_json())
        by[key].setdefault(m.gpu, m)
    return {k: list(v.values()) for k, v in by.items() if len(v) >= 2}


def measured_usd_per_million(m: Measurement) -> float:
    price = gpu_price(m.gpu)
    assert price is not None
    return price[0] * m.tp / (3600 * measured_output_tok_per_s(m)) * 1e6


def predicted_usd_per_million(members: list[Measurement]) -> dict[str, float]:
    """The best fleet's $/1M output tokens on each GPU, searched one GPU at a time (a closed
    loop ranks by $/hour for its users, which would spare simulating the dearer GPUs)."""
    first = members[0]
    w = first.workload
    workload = default_workload(
        input_len=w.input_len,
        output_len=w.output_len,
        concurrency=w.concurrency or OFFLINE_CONCURRENCY,
        request_rate_per_s=None,
        range_ratio=w.range_ratio,
    )
    best: dict[str, float] = {}
    for m in members:
        outcome = recommend_fleet(
            FleetRequest(
                models=(first.model,),
                workload=workload,
                slo=FleetSlo(slo=LOOSE_SLO, percentile=90),
                gpus=(m.gpu,),
                max_gpus=m.tp,
                headroom=0.0,
                disaggregated=False,
                allow_fp8=any(x.settings.quantization == "fp8" for x in members),
                top=1,
                allow_hub=False,
            )
        )
        costs = [c.usd_per_million_output_tokens for c in outcome.candidates if c.meets_slo]
        if costs:
            best[m.gpu] = min(costs)
    return best


def ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: list[float], ys: list[float]) -> float:
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    vy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (vx * vy)


@cache
def comparison() -> list[tuple[str, str, float, float]]:
    """(group, GPU, predicted $/1M out relative to the group, measured relative)."""
    rows = []
    for key, members in groups().items():
        predicted = predicted_usd_per_million(members)
        measured = {m.gpu: measured_usd_per_million(m) for m in members}
        gpus = sorted(set(predicted) & set(measured))
        assert len(gpus) >= 2, f"{key}: recommend found fleets on {sorted(predicted)}"
        geo_p = math.exp(sum(math.log(predicted[g]) for g in gpus) / len(gpus))
        geo_m = math.exp(sum(math.log(measured[g]) for g in gpus) / len(gpus))
        for g in gpus:
            rows.append((key[0] + " " + key[1], g, predicted[g] / geo_p, measured[g] / geo_m))
    return rows


def test_the_groups_are_the_multi_gpu_measurements():
    found = groups()
    assert len(found) >= 4
    assert sum(len(v) for v in found.values()) >= 9
    assert all(len({m.gpu for m in v}) == len(v) for v in found.values())


def test_the_rank_correlation_beats_chance():
    rows = comparison()
    rho = spearman([r[2] for r in rows], [r[3] for r in rows])
    for group, gpu, p, m in rows:
        print(f"{group:<55} {gpu:<14} predicted {p:6.2f}  measured {m:6.2f}")
    print(f"pooled Spearman rho over {len(rows)} GPUs: {rho:.3f}")
    assert rho >= RHO_THRESHOLD


def test_the_cheapest_gpu_of_most_groups_is_the_measured_cheapest():
    rows = comparison()
    by_group: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    for group, gpu, p, m in rows:
        by_group[group].append((gpu, p, m))
    agree = sum(
        min(v, key=lambda r: r[1])[0] == min(v, key=lambda r: r[2])[0] for v in by_group.values()
    )
    assert agree >= math.ceil(0.75 * len(by_group)), f"{agree} of {len(by_group)} groups"


def test_spearman_is_the_textbook_one():
    # a hand-checked case: ranks (1,2,3,4) vs (2,1,4,3): rho = 1 - 6 x 4 / (4 x 15) = 0.6
    assert math.isclose(spearman([1, 2, 3, 4], [2, 1, 4, 3]), 0.6)
    assert math.isclose(spearman([1, 2, 3], [30, 20, 10]), -1.0)
    assert ranks([5.0, 5.0, 1.0]) == [2.5, 2.5, 1.0]
