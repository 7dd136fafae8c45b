"""``plan --dataset``: the same trace drives bench (against a real null server) and the
simulation, and both see the same requests: the same count, the same prompt and output
tokens (issue 27)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from servefit.bench.config import BenchConfig
from servefit.bench.runner import run
from servefit.bench.schedules import Schedule
from servefit.bench.workloads import WorkloadConfig
from servefit.cli.main import cli

from .test_traces import BURSTGPT, MOONCAKE


def _bench_sent(url, tmp_path, kind, path):
    cfg = BenchConfig(
        base_urls=(url,),
        workload=WorkloadConfig(kind=kind, path=str(path), num_requests=100),
        schedule=Schedule(concurrency=2),
    )
    result = run(cfg, api_key=None, out_dir=tmp_path / kind)
    assert result.summary.errored == 0
    lines = (tmp_path / kind / "requests.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    # what the server counted: the prompt it received, the tokens it sent back
    return sorted((r["prompt_tokens"], r["completion_tokens"]) for r in records)


def _plan_load(path, kind, *flags):
    result = CliRunner().invoke(
        cli,
        [
            *("plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--offline", "--json"),
            *("--dataset", str(path), "--dataset-format", kind, *flags),
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["performance"]


def test_bench_and_plan_see_the_same_requests_of_a_trace(instant_server, tmp_path):
    mooncake = tmp_path / "m.jsonl"
    mooncake.write_text("\n".join(json.dumps(r) for r in MOONCAKE) + "\n")
    burstgpt = tmp_path / "b.csv"
    burstgpt.write_text(BURSTGPT)
    for kind, path in (("mooncake", mooncake), ("burstgpt", burstgpt)):
        sent = _bench_sent(instant_server.url, tmp_path, kind, path)
        for flags in ((), ("--concurrency", "2")):  # replayed at its times, or a closed loop
            perf = _plan_load(path, kind, *flags)
            load = perf["load"]
            assert load["num_requests"] == len(sent), (kind, flags)
            assert load["num_input_tokens"] == sum(i for i, _ in sent), (kind, flags)
            assert load["num_output_tokens"] == sum(o for _, o in sent), (kind, flags)
        assert "replayed at the trace's arrival times" in _plan_load(path, kind)["workload"]


def test_a_jsonl_of_token_counts_is_simulated_request_for_request(tmp_path):
    path = tmp_path / "counts.jsonl"
    rows = [(200, 30), (900, 10), (4000, 200)]
    path.write_text("".join(json.dumps({"input_len": i, "output_len": o}) + "\n" for i, o in rows))
    load = _plan_load(path, "jsonl", "--concurrency", "1")["load"]
    assert load["num_requests"] == 3
    assert load["num_input_tokens"] == 5100 and load["num_output_tokens"] == 240


def test_a_request_longer_than_the_context_is_named(tmp_path):
    path = tmp_path / "counts.jsonl"
    path.write_text('{"input_len": 100, "output_len": 10}\n{"input_len": 9000, "output_len": 9}\n')
    result = CliRunner().invoke(
        cli,
        [
            *("plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--offline", "--max-model-len", "8192"),
            *("--dataset", str(path), "--concurrency", "1"),
        ],
    )
    # the longest request (9,009 tokens) is over the context: vLLM would reject it
    assert result.exit_code == 1 and "9,009 tokens" in result.output


def test_a_malformed_dataset_line_is_a_usage_error(tmp_path):
    path = tmp_path / "counts.jsonl"
    path.write_text('{"input_len": 100}\n')
    result = CliRunner().invoke(
        cli, ["plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--offline", "--dataset", str(path)]
    )
    assert result.exit_code == 2 and "line 1" in result.output


def test_lengths_given_beside_a_dataset_are_refused(tmp_path):
    path = tmp_path / "counts.jsonl"
    path.write_text('{"input_len": 100, "output_len": 10}\n')
    for flags in (("--input-len", "500"), ("--range-ratio", "0.2"), ("--turns", "2")):
        result = CliRunner().invoke(
            cli,
            ["plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--offline", "--dataset", str(path), *flags],
        )
        assert result.exit_code == 2, (flags, result.output)
        assert flags[0] in result.output
