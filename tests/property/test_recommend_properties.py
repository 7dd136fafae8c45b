"""Properties of ``recommend``'s fleet search (issue 15), on one or two GPUs to stay fast:

- the recommended deployment, re-planned through ``plan_deployment`` (the path ``servefit
  plan`` takes) and re-simulated at its replica's share of the rate, meets the SLO;
- doubling the rate never lowers a layout's replicas (nor so its $/hour);
- a larger GPU budget never raises the best cost.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from servefit.adapters.catalog import efficiency_table, gpu_catalog
from servefit.adapters.model_source import load_model
from servefit.app.deployment import (
    Deployment,
    Hardware,
    default_workload,
    longest_request_tokens,
)
from servefit.app.fleet import FleetRequest, evaluate, recommend_fleet
from servefit.app.fleet_search import Dropped, Shape, options_for, screen
from servefit.app.fleet_types import Evaluator, sim_requests
from servefit.app.plan import plan_deployment
from servefit.core.fleet import FleetSlo, slo_ratio
from servefit.core.metrics import Slo

MODEL = "meta-llama/Llama-3.1-8B"
FEW = settings(max_examples=10, deadline=None)

rates = st.floats(min_value=0.5, max_value=24.0)
slos = st.builds(
    lambda ttft, tpot: FleetSlo(slo=Slo(ttft_ms=ttft, tpot_ms=tpot), percentile=90),
    st.sampled_from([600.0, 1000.0, 2500.0]),
    st.sampled_from([40.0, 60.0, 100.0]),
)


def request(rate: float, slo: FleetSlo, ratio: float = 0.0, **more: object) -> FleetRequest:
    fields: dict[str, object] = {
        "models": (MODEL,),
        "workload": default_workload(
            input_len=1501,
            output_len=203,
            concurrency=None,
            request_rate_per_s=rate,
            range_ratio=ratio,
        ),
        "slo": slo,
        "gpus": ("L40S",),
        "max_gpus": 16,
        "disaggregated": False,
        "top": 2,
        "allow_hub": False,
    }
    fields.update(more)
    return FleetRequest(**fields)  # type: ignore[arg-type]


@FEW
@given(rate=rates, slo=slos, ratio=st.sampled_from([0.0, 0.33]))
def test_the_recommended_fleet_replanned_and_resimulated_meets_the_slo(rate, slo, ratio):
    req = request(rate, slo, ratio)
    best = recommend_fleet(req).best
    if best is None:  # nothing meets: the bad-input tests cover that answer
        return
    assert best.serve_settings is not None
    share = rate / best.replicas
    workload = replace(
        req.workload,
        request_rate_per_s=share,
        num_requests=sim_requests(best.max_num_seqs),
    )
    outcome = plan_deployment(
        Deployment(
            model=MODEL,
            hardware=Hardware(gpu=best.gpu),
            settings=best.serve_settings,
            workload=workload,
            is_workload_given=True,
            slo=slo.slo,
            allow_hub=False,
        )
    )
    assert outcome.fits
    assert outcome.capacity.settings.max_num_seqs == best.max_num_seqs
    assert outcome.performance is not None
    load = outcome.performance.load
    assert slo_ratio(load.ttft_s, load.tpot_s, slo).meets


@FEW
@given(rate=rates, slo=slos)
def test_doubling_the_rate_never_lowers_a_layouts_replicas(rate, slo):
    req = request(rate, slo)
    spec = load_model(MODEL, allow_hub=False).spec
    gpu = gpu_catalog().get("L40S")
    option = next(options_for(spec, gpu, max_gpus_per_replica=1, gpus_per_node=8))
    shape = Shape.of(req.workload, longest_request_tokens(req.workload))
    screened = screen(
        spec,
        option,
        shape,
        efficiency_table().for_gpu(gpu, "vllm"),
        ttft_limit_s=slo.slo.ttft_s,
        tpot_limit_s=slo.slo.tpot_s,
        vllm_version=req.vllm_version,
    )
    if isinstance(screened, Dropped):
        return  # one request alone misses the SLO on this layout
    one = evaluate(req, MODEL, screened, 1.0, "test", Evaluator(req))
    doubled_req = request(2 * rate, slo)
    two = evaluate(doubled_req, MODEL, screened, 1.0, "test", Evaluator(doubled_req))
    if one.meets_slo:
        assert not two.meets_slo or two.replicas >= one.replicas
        assert not two.meets_slo or two.usd_per_hour >= one.usd_per_hour


@FEW
@given(rate=rates, slo=slos, budget=st.sampled_from([1, 2, 4]))
def test_a_larger_gpu_budget_never_raises_the_best_cost(rate, slo, budget):
    small = recommend_fleet(request(rate, slo, max_gpus=budget, gpus=("L40S", "H100-SXM")))
    large = recommend_fleet(request(rate, slo, max_gpus=4 * budget, gpus=("L40S", "H100-SXM")))
    if small.best is not None:
        assert large.best is not None
        assert large.best.usd_per_million_output_tokens <= (
            small.best.usd_per_million_output_tokens * (1 + 1e-9)
        )
