"""servefit bench against the real vLLM (CPU) server: counts, exact prompt lengths, cached
tokens on repeated prefixes, and /metrics deltas. Not absolute speeds."""

from __future__ import annotations

import pytest

from servefit.bench.runner import BenchConfig, run
from servefit.bench.schedules import Schedule
from servefit.bench.workloads import WorkloadConfig

pytestmark = pytest.mark.integration
CPU_BLOCK_TOKENS = 128  # prefix-cache hits come in whole blocks (vLLM CPU block size)


def test_random_workload_counts_and_exact_lengths(vllm_server, tmp_path):
    cfg = BenchConfig(
        base_urls=(vllm_server.base_url,),
        workload=WorkloadConfig(num_requests=12, input_len=64, output_len=16),
        schedule=Schedule(concurrency=4),
    )
    result = run(cfg, api_key=None, out_dir=tmp_path)
    s = result.summary
    assert (s.successful, s.errored, s.incomplete) == (12, 0, 0)
    assert s.prompt_tokens_total == 12 * 64  # sized with the server's own /tokenize
    assert s.completion_tokens_total == 12 * 16  # ignore_eos + min_tokens
    assert s.token_count_source == "usage"
    assert s.ttft_s.count == 12 and s.tpot_s.count == 12
    assert result.server["model"] == "tiny-llama"
    assert (tmp_path / "requests.jsonl").read_text().count("\n") == 12


def test_agent_sessions_hit_the_prefix_cache(vllm_server, tmp_path):
    cfg = BenchConfig(
        base_urls=(vllm_server.base_url,),
        workload=WorkloadConfig(
            kind="agent",
            endpoint="chat",
            num_requests=2,
            turns=3,
            system_prompt_len=300,
            message_len=40,
            output_len=12,
        ),
        schedule=Schedule(concurrency=2),
    )
    result = run(cfg, api_key=None, out_dir=tmp_path)
    assert result.summary.successful == 6
    turns = {t.turn: t for t in result.turns}
    assert turns[2].prompt_tokens_mean > turns[1].prompt_tokens_mean > turns[0].prompt_tokens_mean
    # later turns re-send the system prompt and history: whole cached blocks come back
    assert turns[1].cached_tokens_mean >= CPU_BLOCK_TOKENS
    assert turns[2].cached_tokens_mean >= turns[1].cached_tokens_mean
    for t in result.turns:
        if t.cached_tokens_mean:
            assert t.cached_tokens_mean % CPU_BLOCK_TOKENS == 0 or t.requests > 1
    m = result.server_metrics
    assert m["prefix_cache_queries_tokens"] > 0
    assert m["prefix_cache_hits_tokens"] >= CPU_BLOCK_TOKENS
    assert 0 < m["prefix_cache_hit_rate"] <= 1
    assert m["generation_tokens"] == 6 * 12


def test_traces_drive_the_real_server(vllm_server, tmp_path):
    """A ShareGPT file and a Mooncake trace against vLLM: every request sent as the file
    says (the reply's length, the trace's output lengths), and the Mooncake requests that
    share a 512-token block get it back from vLLM's prefix cache; the one that shares none
    does not."""
    import json

    sharegpt = tmp_path / "sg.json"
    sharegpt.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": " ".join(["time air"] * (8 + i))},
                        {"from": "gpt", "value": " ".join(["gold"] * (6 + i))},
                    ]
                }
                for i in range(5)
            ]
        )
    )
    cfg = BenchConfig(
        base_urls=(vllm_server.base_url,),
        workload=WorkloadConfig(kind="sharegpt", path=str(sharegpt), num_requests=5),
        schedule=Schedule(concurrency=2),
    )
    s = run(cfg, api_key=None, out_dir=tmp_path / "sg").summary
    assert s.successful == 5
    records = [
        json.loads(line) for line in (tmp_path / "sg" / "requests.jsonl").read_text().splitlines()
    ]
    assert all(r["completion_tokens"] == r["max_tokens"] for r in records)  # the reply's length
    assert all(r["prompt_tokens"] == r["prompt_tokens_planned"] for r in records)  # /tokenize

    mooncake = tmp_path / "m.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [7, 8]},
        {"timestamp": 10, "input_length": 600, "output_length": 8, "hash_ids": [7, 9]},
        {"timestamp": 20, "input_length": 300, "output_length": 8, "hash_ids": [11]},
    ]
    mooncake.write_text("\n".join(json.dumps(r) for r in rows))
    cfg = BenchConfig(
        base_urls=(vllm_server.base_url,),
        workload=WorkloadConfig(kind="mooncake", path=str(mooncake), num_requests=3),
        schedule=Schedule(concurrency=1),  # one after the other: the first is cached first
    )
    run(cfg, api_key=None, out_dir=tmp_path / "mc")
    done = sorted(
        (
            json.loads(line)
            for line in (tmp_path / "mc" / "requests.jsonl").read_text().splitlines()
        ),
        key=lambda r: r["request_id"],
    )
    assert [r["completion_tokens"] for r in done] == [8, 8, 8]
    shared, unshared = done[1]["cached_tokens"], done[2]["cached_tokens"]
    assert shared >= CPU_BLOCK_TOKENS and shared % CPU_BLOCK_TOKENS == 0
    assert shared < done[1]["prompt_tokens"]  # the second block is its own
    assert not unshared
