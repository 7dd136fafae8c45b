"""Recorded traffic as bench requests (bench/traces.py): the four formats as their files are
laid out, a malformed line named, and each format run against a real null server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servefit.bench.config import BenchConfig
from servefit.bench.runner import run
from servefit.bench.schedules import Schedule
from servefit.bench.traces import MOONCAKE_BLOCK_TOKENS, read_trace
from servefit.bench.workloads import WorkloadConfig
from servefit.errors import DatasetError, InvalidArgumentError

# the column layouts of the published files (BurstGPT's CSV, the Azure LLM inference trace)
BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
47,GPT-4,417,276,693,Conversation log
"""
AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,879,20
"""
MOONCAKE = [
    {"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [46, 47]},
    {"timestamp": 2000, "input_length": 700, "output_length": 6, "hash_ids": [46, 48]},
    {"timestamp": 2500, "input_length": 300, "output_length": 4, "hash_ids": [50]},
]


def _sharegpt(n: int) -> list[dict]:
    convs = []
    for i in range(n):
        prompt = " ".join(["time"] * (10 + i))
        reply = " ".join(["gold"] * (5 + i))
        convs.append(
            {
                "id": f"c{i}",
                "conversations": [
                    {"from": "human", "value": prompt},
                    {"from": "gpt", "value": reply},
                ],
            }
        )
    convs.append({"id": "short", "conversations": [{"from": "human", "value": "hi"}]})
    convs.append(  # a reply of 2 tokens: vLLM's filter drops it
        {
            "id": "tiny",
            "conversations": [
                {"from": "human", "value": "a long enough question here"},
                {"from": "gpt", "value": "no no"},
            ],
        }
    )
    return convs


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_burstgpt_keeps_answered_requests_and_their_times(tmp_path):
    items = read_trace("burstgpt", _write(tmp_path, "b.csv", BURSTGPT))
    assert [(i.input_tokens, i.output_tokens, i.arrival_s) for i in items] == [
        (472, 18, 0.0),
        (417, 276, 42.0),  # the failed request (0 response tokens) is skipped
    ]


def test_azure_times_are_seconds_after_the_first(tmp_path):
    items = read_trace("azure", _write(tmp_path, "a.csv", AZURE))
    assert [(i.input_tokens, i.output_tokens) for i in items] == [(374, 44), (396, 109), (879, 20)]
    assert items[1].arrival_s == pytest.approx(50.9951690 - 46.6805900, abs=1e-6)
    assert items[2].arrival_s == pytest.approx(51.0 - 46.68059, abs=1e-6)


def test_mooncake_blocks_and_milliseconds(tmp_path):
    text = "\n".join(json.dumps(r) for r in MOONCAKE)
    items = read_trace("mooncake", _write(tmp_path, "m.jsonl", text))
    assert [i.arrival_s for i in items] == [0.0, 2.0, 2.5]
    assert items[1].hash_ids == (46, 48)


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        ("burstgpt", "Timestamp,Model\n1,x\n", "no Request tokens, Response tokens column"),
        ("burstgpt", BURSTGPT.replace("472", "many"), "line 2: Request tokens 'many'"),
        ("azure", AZURE.replace("2023-11-16 18:15:50", "yesterday"), "line 3: TIMESTAMP"),
        ("mooncake", '{"input_length": 10}\n', "line 1: needs input_length and output_length"),
        (
            "mooncake",
            json.dumps({"input_length": 2000, "output_length": 1, "hash_ids": [1]}),
            f"1 hash_ids of {MOONCAKE_BLOCK_TOKENS} tokens cannot hold input_length 2000",
        ),
        ("sharegpt", '{"conversations": []}', "a JSON array of conversations"),
        ("sharegpt", '[{"id": 1}]', "conversation 1: no 'conversations' list"),
    ],
)
def test_a_malformed_line_is_named(tmp_path, kind, text, message):
    with pytest.raises(DatasetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_trace(kind, _write(tmp_path, "bad", text))


def test_a_trace_workload_needs_its_file():
    with pytest.raises(InvalidArgumentError, match="--workload mooncake needs --dataset FILE"):
        WorkloadConfig(kind="mooncake")


def _bench(url, tmp_path, kind, path, n, schedule=None):
    cfg = BenchConfig(
        base_urls=(url,),
        workload=WorkloadConfig(kind=kind, path=str(path), num_requests=n, output_len=99),
        schedule=schedule or Schedule(concurrency=2),
    )
    return run(cfg, api_key=None, out_dir=tmp_path / kind)


def _records(tmp_path: Path, kind: str) -> list[dict]:
    lines = (tmp_path / kind / "requests.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda r: r["request_id"])


def test_sharegpt_sends_the_first_turns_sized_by_the_server(instant_server, tmp_path):
    path = _write(tmp_path, "sg.json", json.dumps(_sharegpt(6)))
    result = _bench(instant_server.url, tmp_path, "sharegpt", path, 4)
    assert result.summary.successful == 4
    records = _records(tmp_path, "sharegpt")
    # every prompt and reply sized with the server's /tokenize: the reply's length is asked
    for r in records:
        assert r["prompt_tokens"] == r["prompt_tokens_planned"]
        assert r["completion_tokens"] == r["max_tokens"] >= 4
    sent = {(r["prompt_tokens"], r["max_tokens"]) for r in records}
    assert len(sent) == 4  # four different conversations of the six kept


def test_length_traces_send_exact_prompts_and_their_output_lengths(instant_server, tmp_path):
    for kind, text, expected in (
        ("burstgpt", BURSTGPT, [(472, 18), (417, 276)]),
        ("azure", AZURE, [(374, 44), (396, 109), (879, 20)]),
    ):
        path = _write(tmp_path, f"{kind}.csv", text)
        result = _bench(instant_server.url, tmp_path, kind, path, 10)
        assert result.summary.successful == len(expected)
        sent = [(r["prompt_tokens"], r["completion_tokens"]) for r in _records(tmp_path, kind)]
        assert sent == expected


def test_mooncake_requests_share_the_text_of_shared_blocks(instant_server, tmp_path):
    path = _write(tmp_path, "m.jsonl", "\n".join(json.dumps(r) for r in MOONCAKE))
    cfg = BenchConfig(
        base_urls=(instant_server.url,),
        workload=WorkloadConfig(kind="mooncake", path=str(path), num_requests=3),
        schedule=Schedule(concurrency=1),
    )
    import asyncio

    from servefit.bench.workloads import build_requests

    requests = asyncio.run(build_requests(cfg.workload, None))
    words = [r.prompt.split() for r in requests]
    block = MOONCAKE_BLOCK_TOKENS
    assert words[0][:block] == words[1][:block]  # hash id 46 in both
    assert words[0][block:] != words[1][block : block + len(words[0]) - block]
    assert [len(w) for w in words] == [600, 700, 300]  # one word a token of the trace
    assert words[2][:10] != words[0][:10]
    assert [r.arrival_s for r in requests] == [0.0, 2.0, 2.5]
    result = run(cfg, api_key=None, out_dir=tmp_path / "run")
    assert result.summary.successful == 3
    assert [r["completion_tokens"] for r in _records(tmp_path, "run")] == [8, 6, 4]
