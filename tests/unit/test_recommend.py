"""``servefit recommend``: the fleet arithmetic (hand-derived), the search on two GPUs, its
JSON document, and the bad inputs (one clear line, exit 2; an SLO nothing meets, exit 1)."""

from __future__ import annotations

import json
import math
from functools import cache

import pytest
from click.testing import CliRunner

from servefit.app.deployment import default_workload
from servefit.app.fleet import FleetRequest, recommend_fleet
from servefit.app.fleet_types import FleetOutcome
from servefit.cli.main import cli
from servefit.core.fleet import (
    FleetSlo,
    SloCheck,
    decode_batch_limit,
    fleet_cost,
    pareto_front,
    replicas_for,
    search_replicas,
)
from servefit.core.metrics import Slo
from servefit.errors import InvalidArgumentError

MODEL = "meta-llama/Llama-3.1-8B"
GPUS = ("H100-SXM", "L40S")
BASE = [MODEL, "--offline", "--input-len", "2000", "--output-len", "200"]
SLO_FLAGS = ["--slo-ttft-ms", "1500", "--slo-tpot-ms", "60"]


def check(ratio: float) -> SloCheck:
    return SloCheck(ttft_s=ratio, tpot_s=0.0, ttft_ratio=ratio, tpot_ratio=0.0)


# ---------------------------------------------------------------- the arithmetic


def test_replicas_carry_the_rate_with_headroom():
    # 40 req/s x 1.1 = 44 req/s over 10 req/s a replica: 5 replicas (4.4 rounded up)
    assert replicas_for(40, 10, 0.10) == 5
    assert replicas_for(40, 44, 0.10) == 1  # exactly one replica's worth is one replica
    assert replicas_for(1, 100, 0.0) == 1
    with pytest.raises(InvalidArgumentError):
        replicas_for(1, 0, 0.1)


def test_fleet_cost_is_gpu_hours_over_tokens():
    # 4 GPUs at $2.50 = $10/h; 10 req/s x 500 output tokens = 18M tokens/h -> $0.5556/1M;
    # a request costs $10 / 3600 / 10 = $0.000278, a 3-request task 3x that
    cost = fleet_cost(
        num_gpus=4,
        usd_per_gpu_hour=2.5,
        rate_per_s=10,
        output_tokens_per_request=500,
        requests_per_task=3,
    )
    assert cost.usd_per_hour == 10.0
    assert math.isclose(cost.usd_per_million_output_tokens, 10 / 18)
    assert math.isclose(cost.usd_per_task, 3 * 10 / 3600 / 10)
    half = fleet_cost(
        num_gpus=4,
        usd_per_gpu_hour=2.5,
        rate_per_s=10,
        output_tokens_per_request=500,
        requests_per_task=3,
        success_rate=0.5,
    )
    assert math.isclose(half.usd_per_task, 2 * cost.usd_per_task)  # half the tasks succeed


def test_search_replicas_finds_the_fewest_that_meet():
    # one replica meets the SLO at <= 3 req/s; 20 req/s needs 7 (20 / 7 = 2.86)
    calls: list[float] = []

    def at(load: float) -> SloCheck:
        calls.append(load)
        return check(load / 3.0)

    found = search_replicas(at, load=20.0, fewest=2, most=100)
    assert found.replicas == 7
    assert math.isclose(found.share, 20 / 7)
    assert found.check.meets
    assert found.num_simulations == len(calls) <= 5  # 2, 8 (met), then 5, 6, 7: not 2..7


def test_search_replicas_reports_the_miss_when_none_meets():
    found = search_replicas(lambda load: check(2.0), load=10.0, fewest=1, most=16)
    assert found.replicas == 0
    assert not found.check.meets


def test_decode_batch_limit_is_the_largest_batch_within_the_limit():
    # a step of 10 ms + 0.5 ms per request: 50 ms allows 80 requests
    assert decode_batch_limit(lambda b: 0.010 + 0.0005 * b, tpot_limit_s=0.050, most=256) == 80
    assert decode_batch_limit(lambda b: 0.010 + 0.0005 * b, tpot_limit_s=0.050, most=30) == 30
    assert decode_batch_limit(lambda b: 0.1, tpot_limit_s=0.050, most=8) == 0


def test_pareto_front_keeps_the_undominated():
    points = [(10, 1), (8, 3), (9, 2), (7, 2), (1, 10), (5, 5)]
    front = pareto_front(points, lambda p: p[0], lambda p: p[1])
    assert front == ((10, 1), (9, 2), (8, 3), (5, 5), (1, 10))


def test_the_slo_needs_a_limit_and_a_known_percentile():
    with pytest.raises(InvalidArgumentError, match="--slo-ttft-ms"):
        FleetSlo(slo=Slo())
    with pytest.raises(InvalidArgumentError, match="--slo-percentile"):
        FleetSlo(slo=Slo(ttft_ms=100), percentile=80)


# ---------------------------------------------------------------- the search


def request(rate: float = 8.0, **more: object) -> FleetRequest:
    fields: dict[str, object] = {
        "models": (MODEL,),
        "workload": default_workload(
            input_len=2000, output_len=200, concurrency=None, request_rate_per_s=rate
        ),
        "slo": FleetSlo(slo=Slo(ttft_ms=1500, tpot_ms=60), percentile=90),
        "gpus": GPUS,
        "max_gpus": 8,
        "top": 4,
        "allow_hub": False,
    }
    fields.update(more)
    return FleetRequest(**fields)  # type: ignore[arg-type]


@cache
def outcome() -> FleetOutcome:
    return recommend_fleet(request())


def test_the_best_fleet_meets_the_slo_and_is_the_cheapest_that_does():
    out = outcome()
    best = out.best
    assert best is not None and best.meets_slo
    assert best.ttft_s <= 1.5 and best.tpot_s <= 0.060
    meeting = [c for c in out.candidates if c.is_recommendable]
    assert best.usd_per_million_output_tokens == min(
        c.usd_per_million_output_tokens for c in meeting
    )
    assert best.gpu in GPUS
    assert best.num_gpus == best.replicas * best.gpus_per_replica or best.mode != "aggregated"
    assert best.vllm_command.startswith(f"vllm serve {MODEL}")
    assert f"--max-num-seqs {best.max_num_seqs}" in best.vllm_command


def test_the_search_prunes_and_counts():
    n = outcome().counts
    assert n.gpus == 2
    assert n.options >= n.pruned_capacity + n.pruned_latency + n.simulated
    assert n.simulations >= n.simulated >= 1
    assert n.pruned_bound >= 1  # the cost bound spares simulating most options


def test_disaggregated_fleets_are_ranked_with_the_aggregated():
    modes = {c.mode for c in outcome().candidates}
    assert "aggregated" in modes
    disagg = [c for c in outcome().candidates if c.mode == "disaggregated"]
    assert disagg  # L40S's pools are within the 4 cheapest bounds here
    for c in disagg:
        assert c.prefill_replicas >= 1 and c.decode_replicas >= 1
        assert c.kv_transfer_s > 0
        assert any("--kv-transfer-config" in line for line in c.commands)
        assert '"kv_connector":"NixlConnector"' in c.vllm_command


def test_the_json_document_has_the_promised_keys():
    from servefit.adapters.fleet_document import recommendation_document

    doc = recommendation_document(outcome())
    assert doc["schema_version"] == 1 and doc["kind"] == "recommendation"
    for key in ("inputs", "search_space", "candidates", "pareto", "why"):
        assert key in doc
    first = doc["candidates"][0]
    for key in (
        "gpu",
        "gpus_per_replica",
        "replicas",
        "usd_per_hour",
        "usd_per_million_output_tokens",
        "meets_slo",
        "vllm_command",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "mode",
    ):
        assert key in first, key
    assert first["rank"] == 1
    json.dumps(doc)  # serialisable as it stands


def test_a_budget_below_the_cheapest_fleet_names_the_budget():
    best = outcome().best
    assert best is not None
    tight = recommend_fleet(request(max_usd_per_hour=best.usd_per_hour / 10))
    assert tight.best is None
    assert "budget" in tight.closest_miss


# ---------------------------------------------------------------- the command line


def run(*args: str):
    return CliRunner().invoke(cli, ["recommend", *args])


def test_an_impossible_slo_exits_1_naming_the_binding_constraint():
    result = run(
        *BASE, "--request-rate", "2", "--gpus", "L40S", "--slo-ttft-ms", "1", "--max-gpus", "2"
    )
    assert result.exit_code == 1, result.output
    assert "TTFT" in result.output
    assert "closest miss" in result.output


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--request-rate", "1", "--gpus", "H100-SXM,NoSuchGPU", *SLO_FLAGS], "unknown GPU"),
        (["--request-rate", "0", "--gpus", "L40S", *SLO_FLAGS], "--request-rate"),
        (["--request-rate", "1", "--gpus", "T4", *SLO_FLAGS], "no $/GPU-hour"),
        (["--gpus", "L40S", *SLO_FLAGS], "--request-rate"),
        (["--request-rate", "2", "--concurrency", "4", *SLO_FLAGS], "one way"),
        (["--request-rate", "1", "--gpus", "L40S"], "--slo-ttft-ms"),
        (["--request-rate", "1", "--slo-percentile", "80", *SLO_FLAGS], "--slo-percentile"),
        (["--request-rate", "1", "--success-rate", "0", *SLO_FLAGS], "--success-rate"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(args, words):
    result = run(*BASE, *args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error (")
    assert words in lines[0]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("not json\n", "line 1: not JSON"),
        ('{"input_len": 10}\n', "output_len"),
        ('{"input_len": -3, "output_len": 5}\n', "positive integer"),
        ("\n", "holds no request"),
    ],
)
def test_a_dataset_that_does_not_parse_exits_2(tmp_path, content, words):
    path = tmp_path / "requests.jsonl"
    path.write_text(content, encoding="utf-8")
    result = run(*BASE, "--request-rate", "1", "--dataset", str(path), *SLO_FLAGS)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error (dataset)")
    assert words in result.output


def test_a_dataset_gives_the_lengths(tmp_path):
    from servefit.adapters.fleet_dataset import read_dataset_lengths

    path = tmp_path / "requests.jsonl"
    lines = [{"input_len": 900, "output_len": 100}, {"prompt_tokens": 1100, "max_tokens": 300}]
    path.write_text("\n".join(json.dumps(x) for x in lines), encoding="utf-8")
    got = read_dataset_lengths(path)
    # means 1000 and 200; the widest deviation is the output's 100 / 200 = 0.5
    assert (got.input_len, got.output_len, got.range_ratio, got.num_requests) == (
        1000,
        200,
        0.5,
        2,
    )


def test_a_trace_gives_the_lengths_through_benchs_reader(tmp_path):
    """An Azure trace (its CSV header): lengths 374/44, 396/109, 879/20 -> means 550 and 58
    (rounded), the widest deviation the output's |109 - 58| / 58 = 0.879 -> 0.87."""
    from servefit.adapters.fleet_dataset import read_dataset_lengths

    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.0000000,879,20\n",
        encoding="utf-8",
    )
    got = read_dataset_lengths(path, "azure")
    assert (got.input_len, got.output_len, got.range_ratio, got.num_requests) == (550, 58, 0.87, 3)
    bad = run(
        *BASE,
        "--request-rate",
        "1",
        "--dataset",
        str(path),
        "--dataset-format",
        "mooncake",
        *SLO_FLAGS,
    )
    assert bad.exit_code == 2 and "line 1: not JSON" in bad.output


def test_the_command_prints_the_table_and_json(tmp_path):
    args = [*BASE, "--request-rate", "4", "--gpus", "L40S", "--max-gpus", "4", *SLO_FLAGS]
    result = run(*args, "--top", "3", "--no-disaggregated", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["candidates"][0]["gpu"] == "L40S"
    assert doc["candidates"][0]["meets_slo"] is True
    text = run(*args, "--top", "3", "--no-disaggregated")
    assert text.exit_code == 0, text.output
    for words in ("$/1M out", "Pareto front", "Why:", "vllm serve"):
        assert words in text.output, words


def test_emit_writes_the_winners_manifests_through_deploy(tmp_path):
    out = tmp_path / "deploy"
    args = [*BASE, "--request-rate", "4", "--gpus", "L40S", "--max-gpus", "4", *SLO_FLAGS]
    result = run(*args, "--top", "2", "--no-disaggregated", "--emit", str(out))
    assert result.exit_code == 0, result.output
    serve = (out / "vllm-serve.sh").read_text(encoding="utf-8")
    assert "vllm serve meta-llama/Llama-3.1-8B" in serve
    assert "--max-num-seqs" in serve  # the winner's flags, not a default plan's
    assert (out / "compose.yaml").exists() and (out / "k8s" / "deployment.yaml").exists()


def test_a_model_no_option_starts_exits_1_saying_what_to_raise():
    result = run(
        "meta-llama/Llama-3.1-405B",
        "--offline",
        "--request-rate",
        "1",
        "--gpus",
        "L40S",
        "--max-gpus",
        "2",
        *SLO_FLAGS,
    )
    assert result.exit_code == 1, result.output
    assert "--max-gpus" in result.output
    assert "the most memory tried" in result.output


def test_the_printed_command_reads_back_to_the_same_plan():
    import shlex

    from servefit.app.deployment import Hardware, deployment_from_vllm_command
    from servefit.app.plan import plan_deployment

    for c in outcome().candidates[:3]:
        d = deployment_from_vllm_command(
            shlex.split(c.vllm_command), hardware=Hardware(gpu=c.gpu), allow_hub=False
        )
        got = plan_deployment(d, with_performance=False)
        assert got.fits
        r = got.capacity.settings
        assert (r.tensor_parallel_size, r.max_num_seqs, r.kv_cache_dtype) == (
            c.tensor_parallel_size,
            c.max_num_seqs,
            c.kv_cache_dtype,
        )
        assert d.settings.quantization == c.quantization


def test_a_gpu_budget_too_small_for_the_rate_says_the_budget_binds():
    result = run(*BASE, "--request-rate", "200", "--gpus", "L40S", "--max-gpus", "2", *SLO_FLAGS)
    assert result.exit_code == 1, result.output
    assert "GPU budget binds" in " ".join(result.output.split())


def test_several_models_are_ranked_together_each_naming_its_model():
    out = recommend_fleet(
        request(
            rate=4.0,
            models=(MODEL, "Qwen/Qwen3-8B"),
            gpus=("L40S",),
            max_gpus=2,
            disaggregated=False,
        )
    )
    assert {c.model for c in out.candidates} == {MODEL, "Qwen/Qwen3-8B"}
    for c in out.candidates:
        assert c.vllm_command.startswith(f"vllm serve {c.model} ")


# ---------------------------------------------------------------- speculation in the search

SPEC_MODEL = "deepseek-ai/DeepSeek-V3"  # carries one MTP layer (num_nextn_predict_layers 1)


def _spec_request(**more: object) -> FleetRequest:
    from servefit.adapters.speculative_config import read_speculative_config

    fields: dict[str, object] = {
        "models": (SPEC_MODEL,),
        "workload": default_workload(
            input_len=1000, output_len=500, concurrency=16, request_rate_per_s=None
        ),
        "slo": FleetSlo(slo=Slo(tpot_ms=40), percentile=90),
        "gpus": ("H200-SXM",),
        "allow_hub": False,
        "speculative": read_speculative_config(
            '{"method":"mtp","num_speculative_tokens":1}', "0.33"
        ),
    }
    fields.update(more)
    return FleetRequest(**fields)  # type: ignore[arg-type]


def test_the_search_tries_every_option_with_and_without_the_drafts():
    plain = recommend_fleet(_spec_request(speculative=None))
    tried = recommend_fleet(_spec_request())
    assert tried.counts.options == 2 * plain.counts.options
    assert all(c.speculative_config is None for c in plain.candidates)
    assert all("--speculative-config" not in c.vllm_command for c in plain.candidates)
    speculating = [c for c in tried.candidates if c.speculative_config is not None]
    assert speculating
    for c in speculating:
        assert "+mtp(k=1)" in c.layout and "--speculative-config" in c.vllm_command
    # memory-bound decode at 16 users: the MTP drafts, accepted at the published 85 %,
    # cut the time per token, so the cheapest fleet within 40 ms per token speculates
    assert tried.best is not None and tried.best.speculative_config is not None
    assert tried.best.usd_per_million_output_tokens <= plain.best.usd_per_million_output_tokens


def test_a_method_that_needs_a_draft_checkpoint_is_refused():
    from servefit.adapters.speculative_config import read_speculative_config

    eagle = read_speculative_config(
        '{"method":"eagle3","model":"org/head","num_speculative_tokens":2}', "0.33"
    )
    with pytest.raises(InvalidArgumentError, match="draft checkpoint"):
        _spec_request(speculative=eagle)
