"""servefit bench against a real (null) OpenAI-compatible server: counts, timings, faults,
a server killed mid-run (SIGINT/SIGTERM: test_interruption.py). Nothing is lost: every
request is a JSONL line and the summary is valid."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from servefit.bench.config import BenchConfig
from servefit.bench.null_server import TTFT_BUCKETS_S
from servefit.bench.runner import run
from servefit.bench.schedules import Schedule
from servefit.bench.workloads import WorkloadConfig
from servefit.core.metrics import Slo

from .conftest import free_port

SERVEFIT = [sys.executable, "-m", "servefit.cli.main"]


def bench(url, tmp_path, workload=None, schedule=None, **kw):
    cfg = BenchConfig(
        base_urls=(url,),
        workload=workload or WorkloadConfig(num_requests=20, input_len=50, output_len=8),
        schedule=schedule or Schedule(concurrency=4),
        **kw,
    )
    return run(cfg, api_key=None, out_dir=tmp_path)


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "requests.jsonl").read_text().splitlines()]


def loop_lateness_s(samples: int = 40, sleep_s: float = 0.005) -> float:
    """How late an event loop wakes from a short timer on this machine right now (p90 over
    ``samples`` sleeps): the baseline, measured in the same run, that a bound on punctuality
    or on a known delay is derived from."""

    async def probe() -> list[float]:
        late = []
        for _ in range(samples):
            t0 = time.perf_counter()
            await asyncio.sleep(sleep_s)
            late.append(time.perf_counter() - t0 - sleep_s)
        return late

    late = sorted(asyncio.run(probe()))
    return late[int(0.9 * (len(late) - 1))]


def slack_s(margin_s: float, baseline_s: float) -> float:
    """Room over an exact figure: the margin a quiet machine needs, or four times what this
    machine showed in the same run, whichever is larger."""
    return max(margin_s, 4 * baseline_s)


def lags_s(rows: list[dict]) -> list[float]:
    return [r["sent_s"] - r["scheduled_s"] for r in rows]


def test_random_workload_exact_prompt_tokens_and_counts(instant_server, tmp_path):
    result = bench(
        instant_server.url, tmp_path, WorkloadConfig(num_requests=30, input_len=100, output_len=12)
    )
    s = result.summary
    assert (s.successful, s.errored, s.incomplete) == (30, 0, 0)
    rows = jsonl(tmp_path)
    assert len(rows) == 30
    assert {r["prompt_tokens"] for r in rows} == {100}  # exact, via the server's /tokenize
    assert {r["completion_tokens"] for r in rows} == {12}
    assert s.completion_tokens_total == 360 and s.token_count_source == "usage"
    assert json.loads((tmp_path / "summary.json").read_text())["summary"]["successful"] == 30
    assert result.server["model"] == "servefit-null"


def test_timings_match_the_servers_known_delays(null_server, instant_server, tmp_path):
    # null server: TTFT 20 ms, 5 ms between tokens, 16 tokens; one request at a time. The
    # delays are lower bounds (the server sleeps at least that long); above them, room derived
    # in the same run from the same requests against the instant server (what the client and
    # the loopback add) and from how late a timer wakes here (what each of the server's
    # sleeps adds on a busy machine).
    workload = WorkloadConfig(num_requests=12, input_len=20, output_len=16)
    base = bench(instant_server.url, tmp_path / "base", workload, Schedule(concurrency=1)).summary
    late_s = loop_lateness_s()
    result = bench(
        null_server.url, tmp_path / "run", workload, Schedule(concurrency=1), warmup_requests=2
    )
    s = result.summary
    assert s.successful == 12 and s.warmup_excluded == 2
    assert 0.020 <= s.ttft_s.p50 <= 0.020 + slack_s(0.010, base.ttft_s.p90 + late_s)
    assert 0.005 <= s.tpot_s.p50 <= 0.005 + slack_s(0.003, base.tpot_s.p90 + late_s)
    assert s.itl_s.count == 12 * 15
    expected_e2e = 0.020 + 15 * 0.005
    assert expected_e2e <= s.e2e_s.p50 <= expected_e2e + slack_s(0.05, base.e2e_s.p90 + 16 * late_s)
    # one request at a time: each one sent after the previous one ended, so Little's law
    # gives at most 1 (it equals 1 less the client's gaps between requests)
    rows = sorted(
        (r for r in jsonl(tmp_path / "run") if not r["is_warmup"]), key=lambda r: r["sent_s"]
    )
    assert all(b["sent_s"] >= a["done_s"] for a, b in itertools.pairwise(rows))
    busy_s = sum(r["done_s"] - r["sent_s"] for r in rows)
    assert s.achieved_concurrency == pytest.approx(busy_s / s.duration_s, rel=1e-9)
    assert s.achieved_concurrency <= 1.0 + 1e-9
    gaps_s = [b["sent_s"] - a["done_s"] for a, b in itertools.pairwise(rows)]
    assert statistics.median(gaps_s) <= slack_s(0.005, base.e2e_s.p50)  # no idle client


def test_open_loop_rate_and_client_lag(instant_server, tmp_path):
    late_s = loop_lateness_s()  # how punctual a timer is here, now
    schedule = Schedule(rate_per_s=100, seed=1)
    result = bench(
        instant_server.url,
        tmp_path,
        WorkloadConfig(num_requests=40, input_len=10, output_len=4),
        schedule,
    )
    s = result.summary
    assert s.successful == 40
    rows = sorted(jsonl(tmp_path), key=lambda r: r["request_id"])
    expected = schedule.arrival_offsets_s(40)  # 40 arrivals at 100/s ~ 0.4 s
    start = rows[0]["scheduled_s"]
    assert [round(r["scheduled_s"] - start, 6) for r in rows] == [round(t, 6) for t in expected]
    assert min(lags_s(rows)) >= 0  # never before its time
    assert s.client_lag_s.p99 < slack_s(0.05, late_s)
    # the run spans the schedule: from the first send to the last answer
    assert s.duration_s == pytest.approx(
        max(r["done_s"] for r in rows) - min(r["sent_s"] for r in rows), rel=1e-9
    )
    first_sent_s = min(r["sent_s"] for r in rows)
    assert s.duration_s >= start + expected[-1] - first_sent_s  # the last left at its time


def test_every_fault_is_counted_and_nothing_is_lost(instant_server, tmp_path):
    lines = [{"prompt": "fine words here"}] * 3 + [
        {"prompt": "x __HTTP_429__"},
        {"prompt": "x __HTTP_500__"},
        {"prompt": "x __DISCONNECT__"},
        {"prompt": "x __MALFORMED__"},
        {"prompt": "x __HANG__"},
    ]
    dataset = tmp_path / "faults.jsonl"
    dataset.write_text("\n".join(json.dumps(x) for x in lines))
    out = tmp_path / "out"
    result = bench(
        instant_server.url,
        out,
        WorkloadConfig(kind="jsonl", path=str(dataset), num_requests=100, output_len=8),
        Schedule(concurrency=8),
        timeout_s=1.5,
    )
    s = result.summary
    assert (s.successful, s.errored, s.incomplete) == (3, 2, 3)
    rows = jsonl(out)
    assert len(rows) == 8
    errors = sorted(r["error"].split(":")[0] for r in rows if r["error"])
    assert errors == ["HTTP 429", "HTTP 500", "disconnected mid-stream", "malformed SSE", "timeout"]


@pytest.mark.parametrize("model", [[], ["--model", "m"]], ids=["discover", "model-given"])
def test_unreachable_server_is_a_server_error_naming_the_url(tmp_path, model):
    url = f"http://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [
            *SERVEFIT,
            "bench",
            url + "/v1/",
            *model,
            "--concurrency",
            "2",
            "--num-requests",
            "4",
            "--json",
            "--output",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error (server): cannot reach {url} (")
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "summary.json").exists()  # nothing was sent: no run to summarise


GUARD_S = 120.0  # against a hang only: every wait below returns as soon as its event happened


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll until ``condition`` holds: the tests order events, they do not time them."""
    deadline = time.monotonic() + GUARD_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {GUARD_S:.0f} s for {what}")
        time.sleep(0.05)


def _start_null_server(*args: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [*SERVEFIT, "null-server", "--port", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def is_up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"null server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url + "/health", timeout=5).read()
        except OSError:
            return False
        return True

    try:
        wait_until(is_up, "the null server to answer /health")
    except BaseException:
        proc.kill()
        raise
    return proc, url


def server_metric(url: str, name: str) -> float:
    """One sample of the null server's /metrics (vLLM's names)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} is not in {url}/metrics")


def num_records(directory: Path) -> int:
    path = directory / "requests.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


QUICK = 4  # requests the null server answers at once: recorded before the event under test
SLOTS = 4  # --concurrency: the held requests in flight when it happens


def held_dataset(path: Path, num_held: int) -> Path:
    """QUICK prompts answered at once, then ``num_held`` the null server stops answering after
    two tokens (``__HANG__``). With SLOTS client slots, once QUICK records are written and the
    server streams SLOTS requests, exactly those are in flight, and stay so (30 s) while the
    test acts: no race with the run's own pace."""
    lines = [{"prompt": f"quick words {i}", "max_tokens": 4} for i in range(QUICK)]
    lines += [{"prompt": f"held words {i} __HANG__", "max_tokens": 8} for i in range(num_held)]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    return path


def bench_held(url: str, tmp_path: Path, num_held: int, *flags: str) -> subprocess.Popen:
    """servefit bench over :func:`held_dataset`, returned once the held requests are in flight."""
    dataset = held_dataset(tmp_path / "held.jsonl", num_held)
    proc = subprocess.Popen(
        [
            *SERVEFIT, "bench", url, "--workload", "jsonl", "--dataset", str(dataset),
            "--concurrency", str(SLOTS), *flags, "--output", str(tmp_path / "out"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip

    def held_in_flight() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"bench ended early: {proc.communicate()[1]}")
        return (
            num_records(tmp_path / "out") >= QUICK
            and server_metric(url, "vllm:num_requests_running") == SLOTS
        )

    try:
        wait_until(held_in_flight, f"{QUICK} records and {SLOTS} held requests")
    except BaseException:
        proc.kill()
        raise
    return proc


def test_server_killed_mid_run(tmp_path):
    server, url = _start_null_server()
    try:
        proc = bench_held(url, tmp_path, SLOTS + 2, "--json")
        server.send_signal(signal.SIGKILL)  # with SLOTS requests in flight, 2 not yet sent
        out, err = proc.communicate(timeout=GUARD_S)
    finally:
        server.kill()
    s = json.loads(out)["summary"]
    rows = jsonl(tmp_path / "out")
    # every line of the dataset is a record: the quick ones answered, the held ones cut when
    # the server died, the last two refused
    assert len(rows) == QUICK + SLOTS + 2
    assert s["successful"] == QUICK and s["errored"] + s["incomplete"] == SLOTS + 2
    assert s["successful"] + s["errored"] + s["incomplete"] == len(rows)
    assert "Traceback" not in err


def test_agent_sessions_resend_their_growing_history(instant_server, tmp_path):
    result = bench(
        instant_server.url,
        tmp_path,
        WorkloadConfig(
            kind="agent",
            endpoint="chat",
            num_requests=3,
            turns=4,
            system_prompt_len=100,
            message_len=20,
            output_len=10,
        ),
        Schedule(concurrency=3),
    )
    assert result.summary.successful == 12
    means = [t.prompt_tokens_mean for t in result.turns]
    assert [t.turn for t in result.turns] == [0, 1, 2, 3]
    # each turn re-sends system prompt + history: it grows by the last answer and a new message
    assert all(b > a for a, b in itertools.pairwise(means))
    assert means[1] - means[0] >= 10 + 20


def test_shared_prefix_and_goodput(instant_server, tmp_path):
    result = bench(
        instant_server.url,
        tmp_path,
        WorkloadConfig(
            kind="shared-prefix",
            num_requests=10,
            input_len=80,
            prefix_len=60,
            num_groups=2,
            output_len=4,
        ),
        slo=Slo(ttft_ms=5000),
    )
    assert result.summary.successful == 10
    assert result.summary.goodput_per_s == pytest.approx(result.summary.request_throughput_per_s)


def test_cli_json_contract(instant_server, tmp_path):
    done = subprocess.run(
        [
            *SERVEFIT,
            "bench",
            instant_server.url,
            "--workload",
            "random",
            "--input-len",
            "32",
            "--output-len",
            "8",
            "--concurrency",
            "4",
            "--num-requests",
            "16",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OPENAI_API_KEY": "sk-test-secret"},
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    s = doc["summary"]
    for key in ("successful", "errored", "request_throughput_per_s", "output_throughput_tok_per_s"):
        assert key in s
    assert (
        s["ttft_s"]["p50"] is not None
        and s["ttft_s"]["p99"] is not None
        and s["tpot_s"]["p50"] is not None
    )
    assert "sk-test-secret" not in done.stdout  # the key is never written
    assert doc["config"]["api_key_env"] == "OPENAI_API_KEY"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--num-requests", "5"], "give --concurrency, --request-rate"),
        (["--workload", "jsonl", "--concurrency", "1"], "needs --dataset"),
        (["--concurrency", "1", "--timeout-s", "0"], "--timeout-s must be a positive"),
        (["--concurrency", "1", "--timeout-s", "nan"], "must be a finite number"),
        (["--concurrency", "1", "--duration-s", "0"], "--duration-s must be a positive"),
        (["--concurrency", "1", "--max-error-rate", "1.5"], "from 0 to 1"),
        (["--concurrency", "1", "--max-error-rate", "-0.1"], "from 0 to 1"),
    ],
)
def test_bad_bench_flags_exit_2(args, message):
    done = subprocess.run(
        [*SERVEFIT, "bench", "http://127.0.0.1:9", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and message in done.stderr


def test_prefix_cache_comparison_runs_cold_then_warm(instant_server, tmp_path):
    from servefit.bench.runner import run_cache_comparison

    cfg = BenchConfig(
        base_urls=(instant_server.url,),
        workload=WorkloadConfig(
            kind="agent",
            endpoint="chat",
            num_requests=2,
            turns=3,
            system_prompt_len=50,
            message_len=10,
            output_len=5,
        ),
        schedule=Schedule(concurrency=2),
    )
    result = run_cache_comparison(cfg, api_key=None, out_dir=tmp_path)
    rows = result.prefix_cache_comparison
    assert [r.turn for r in rows] == [0, 1, 2]
    assert all(r.ttft_cold_s is not None and r.ttft_warm_s is not None for r in rows)
    # cold prompts carry one nonce more: a busted prefix, same conversation otherwise
    cold = jsonl(tmp_path / "cold")
    warm = jsonl(tmp_path / "warm")
    assert len(cold) == len(warm) == 6
    assert all(
        c["prompt_tokens"] > w["prompt_tokens"]
        for c, w in zip(
            sorted(cold, key=lambda r: (r["session_id"], r["turn"])),
            sorted(warm, key=lambda r: (r["session_id"], r["turn"])),
            strict=True,
        )
    )


def test_sweep_and_slo_search_find_the_servers_capacity(tmp_path):
    # A server that serves 4 requests at once: TTFT 20 ms, then 20 tokens 20 ms apart, so a
    # request holds a slot ~400 ms. Up to 4 clients nobody queues (TTFT ~20 ms); from 5 on,
    # the requests beyond 4 sent at the start wait a whole request for a slot. The p99 TTFT
    # SLO sits halfway between the two, both measured in the same run at 4 clients (the p99
    # TTFT, and how long a request holds its slot): the highest concurrency that holds is 4,
    # with ~190 ms of room on either side on a quiet machine, and room that grows with the
    # machine's load on a busy one.
    server, url = _start_null_server("--ttft-ms", "20", "--itl-ms", "20", "--max-concurrency", "4")
    small = ["--num-requests", "8", "--output-len", "20", "--json"]
    try:
        base = bench(
            url,
            tmp_path / "baseline",
            WorkloadConfig(num_requests=8, output_len=20),
            Schedule(concurrency=4),
        ).summary
        assert base.successful == 8
        slo_ms = round(1000 * (base.ttft_s.p99 + base.e2e_s.p50) / 2)
        slo = ["--search-slo", "--slo-ttft-ms", str(slo_ms), "--slo-percentile", "99"]
        sweep = subprocess.run(
            [*SERVEFIT, "bench", url, "--concurrency", "2,16", *small, "--output", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        search = subprocess.run(
            [*SERVEFIT, "bench", url, *slo, *small],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        server.kill()
    assert sweep.returncode == 0, sweep.stderr
    doc = json.loads(sweep.stdout)
    low, high = doc["levels"]
    assert (low["concurrency"], high["concurrency"]) == (2, 16)
    assert (
        high["result"]["summary"]["ttft_s"]["p90"] > 2 * low["result"]["summary"]["ttft_s"]["p90"]
    )
    assert (tmp_path / "c16" / "requests.jsonl").exists()
    assert json.loads((tmp_path / "sweep.json").read_text()) == doc
    assert search.returncode == 0, search.stderr
    result = json.loads(search.stdout)
    assert result["mode"] == "search" and result["best_concurrency"] == 4
    assert result["slo"] == {"ttft_ms": float(slo_ms), "tpot_ms": None, "e2el_ms": None}
    tried = [lv["concurrency"] for lv in result["levels"]]
    assert tried == [1, 2, 4, 8, 6, 5]  # doubling, then bisecting (4, 8)
    assert [lv["meets_slo"] for lv in result["levels"]] == [True] * 3 + [False] * 3


def test_server_side_ttft_and_samples(null_server, tmp_path):
    """The null server's own TTFT histogram (vLLM's metric name) against the client's TTFT:
    the client adds its network and parsing overhead on top of the server's figure."""
    # 20 ms configured: a lower bound; above it, room for how late a timer wakes here, now
    limit_s = 0.020 + slack_s(0.010, loop_lateness_s())
    result = bench(
        null_server.url,
        tmp_path,
        WorkloadConfig(num_requests=60, input_len=10, output_len=60),
        Schedule(concurrency=6),
    )
    server_ttft = result.server_latency_s["server_ttft_s"]
    # from the buckets, coarse: (0.02, 0.04] holds a median near 20 ms
    bucket_top_s = next(b for b in TTFT_BUCKETS_S if b >= limit_s)
    assert 0.01 <= server_ttft["p50"] <= bucket_top_s
    assert 0.020 <= server_ttft["mean"] <= limit_s  # exact: _sum / _count
    # the client sees the server's TTFT plus its own network and parsing overhead
    assert result.summary.ttft_s.mean >= server_ttft["mean"] - 0.001
    samples = (tmp_path / "server_metrics.jsonl").read_text().splitlines()
    assert samples and "requests_running" in json.loads(samples[0])
    assert result.server_peaks["requests_running"] >= 1


def test_trace_replay_sends_at_the_recorded_times(instant_server, tmp_path):
    late_s = loop_lateness_s()  # how punctual a timer is here, now
    trace = tmp_path / "trace.jsonl"
    stamps = [0.0, 0.2, 0.2, 0.5, 0.9]
    trace.write_text(
        "\n".join(
            json.dumps({"prompt": f"hello {i}", "max_tokens": 4, "timestamp_s": t})
            for i, t in enumerate(stamps)
        )
    )
    out = tmp_path / "out"
    cfg = BenchConfig(
        base_urls=(instant_server.url,),
        workload=WorkloadConfig(kind="jsonl", path=str(trace), output_len=4),
        schedule=Schedule(is_replay=True, time_scale=0.5),
    )
    result = run(cfg, api_key=None, out_dir=out)
    assert result.summary.successful == 5
    rows = sorted(jsonl(out), key=lambda r: r["request_id"])
    start = rows[0]["scheduled_s"]
    assert [round(r["scheduled_s"] - start, 3) for r in rows] == [t * 0.5 for t in stamps]
    assert min(lags_s(rows)) >= 0  # never before its time
    assert max(lags_s(rows)) < slack_s(0.05, late_s)


def test_replay_needs_a_dataset():
    done = subprocess.run(
        [*SERVEFIT, "bench", "http://127.0.0.1:9", "--replay"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--replay needs a timed dataset" in done.stderr


def test_predicted_next_to_measured(instant_server, tmp_path):
    done = subprocess.run(
        [
            *SERVEFIT,
            "bench",
            instant_server.url,
            "--concurrency",
            "4",
            "--num-requests",
            "8",
            "--input-len",
            "1000",
            "--output-len",
            "24",
            "--plan-model",
            "meta-llama/Llama-3.1-8B",
            "--gpu",
            "L4",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    p = json.loads(done.stdout)["prediction"]
    assert p["gpu"] == "L4" and p["context_tokens"] == 1024
    # hand check: an L4's KV cache (~4 GiB after 15 GiB of weights) at 128 KiB/token holds
    # tens of 1,024-token requests
    assert 10 < p["max_concurrent_requests_at_context"] < 60
    assert p["fits_target"] is True


def test_local_tokenizer_sizes_prompts(instant_server, tmp_path):
    """--tokenizer: prompts sized with a local tokenizer.json (here a word-level one with a BOS
    token, so every prompt is 1 + words tokens by construction)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    from servefit.bench.prompts import WORDS

    vocab = {"<s>": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(dict.fromkeys(WORDS))}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tok.save(str(tmp_path / "tokenizer.json"))
    out = tmp_path / "out"
    result = bench(
        instant_server.url,
        out,
        WorkloadConfig(num_requests=5, input_len=40, output_len=4),
        tokenizer_path=str(tmp_path),
    )
    assert result.summary.successful == 5
    # the local tokenizer counts a BOS, the null server does not: 39 words -> 39 server tokens
    assert {r["prompt_tokens"] for r in jsonl(out)} == {39}
    assert {r["prompt_tokens_planned"] for r in jsonl(out)} == {40}
    bad = subprocess.run(
        [
            *SERVEFIT,
            "bench",
            instant_server.url,
            "--concurrency",
            "1",
            "--tokenizer",
            str(tmp_path / "missing"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "cannot load a tokenizer.json" in bad.stderr


def test_worker_processes_closed_loop(instant_server, tmp_path):
    result = bench(
        instant_server.url,
        tmp_path,
        WorkloadConfig(num_requests=60, input_len=20, output_len=6),
        Schedule(concurrency=8),
        workers=2,
    )
    assert result.summary.successful == 60
    rows = jsonl(tmp_path)
    assert sorted(r["request_id"] for r in rows) == list(range(60))
    assert result.summary.achieved_concurrency <= 8.5


def test_worker_processes_keep_the_open_loop_schedule(instant_server, tmp_path):
    workload = WorkloadConfig(num_requests=40, input_len=10, output_len=4)
    schedule = Schedule(rate_per_s=80, seed=5)
    # the baseline: the same schedule from one process, in the same run
    bench(instant_server.url, tmp_path / "one", workload, schedule)
    one = sorted(lags_s(jsonl(tmp_path / "one")))
    result = bench(instant_server.url, tmp_path / "two", workload, schedule, workers=2)
    assert result.summary.successful == 40
    rows = sorted(jsonl(tmp_path / "two"), key=lambda r: r["request_id"])
    expected = schedule.arrival_offsets_s(40)
    start = rows[0]["scheduled_s"]
    assert [round(r["scheduled_s"] - start, 6) for r in rows] == [round(t, 6) for t in expected]
    assert min(lags_s(rows)) >= 0  # no request leaves before its time, in either process
    # both processes on time: requests are dealt round robin (even ids to the first process),
    # and each process is as punctual as one process alone, within a generous factor. A
    # process let go before it was ready sends every request due meanwhile late by its
    # start-up time (a fresh interpreter: seconds), which the median sees.
    bound_s = slack_s(0.05, one[int(0.9 * (len(one) - 1))])
    for share in (rows[0::2], rows[1::2]):
        assert statistics.median(lags_s(share)) < bound_s, (lags_s(share), one)
