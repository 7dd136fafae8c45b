"""How a server is named (with or without /v1) and how SLOs are given (ms flags, or vLLM's
--goodput), against the null server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from servefit.bench.config import base_url, parse_goodput, slo_from_flags
from servefit.core.metrics import Slo
from servefit.errors import InvalidArgumentError

SERVEFIT = [sys.executable, "-m", "servefit.cli.main"]
SMALL_RUN = ["--concurrency", "2", "--num-requests", "4", "--input-len", "16", "--output-len", "4"]


def servefit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVEFIT, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("given", "root"),
    [
        ("http://h:8000", "http://h:8000"),
        ("http://h:8000/", "http://h:8000"),
        ("http://h:8000/v1", "http://h:8000"),
        ("http://h:8000/v1/", "http://h:8000"),
        ("https://h/proxy/v1//", "https://h/proxy"),  # a path prefix (a gateway) is kept
        (" http://h:8000/v1 ", "http://h:8000"),
    ],
)
def test_base_url_with_or_without_v1(given, root):
    assert base_url(given) == root


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("localhost:8000", "write it as http://localhost:8000"),
        ("127.0.0.1:8000/v1/", "write it as http://127.0.0.1:8000/v1"),
        ("ftp://h:21", "servefit bench speaks HTTP"),
        ("http://:8000", "write it as http://host:port"),
        ("http://h:99999", "write it as http://host:port"),
        ("http://h:8000/v1?x=1", "write it as http://host:port"),
    ],
)
def test_a_url_that_cannot_be_a_server_is_refused_with_the_fix(given, says):
    with pytest.raises(InvalidArgumentError, match=says.replace("?", r"\?")):
        base_url(given)


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_bench_reaches_the_server_with_or_without_v1(instant_server, suffix):
    done = servefit("bench", instant_server.url + suffix, *SMALL_RUN, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["summary"]["successful"] == 4 and doc["summary"]["errored"] == 0
    assert doc["server"]["base_urls"] == [instant_server.url]  # no /v1/v1/models
    assert doc["config"]["base_urls"] == [instant_server.url]


def test_replicas_are_normalised_too(instant_server):
    done = servefit(
        "bench", instant_server.url + "/v1", "--replica", instant_server.url + "/v1/", *SMALL_RUN,
        "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["server"]["base_urls"] == [instant_server.url] * 2
    assert doc["summary"]["successful"] == 4


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("127.0.0.1:9", "has no scheme: write it as http://127.0.0.1:9"),
        ("ws://127.0.0.1:9", "servefit bench speaks HTTP"),
    ],
)
def test_a_url_without_http_exits_2_naming_the_fix(url, says):
    done = servefit("bench", url, *SMALL_RUN)
    assert done.returncode == 2
    assert done.stderr.startswith("error (invalid argument): server URL")
    assert says in done.stderr and "Traceback" not in done.stderr


def test_goodput_pairs_as_vllm_spells_them():
    assert parse_goodput(["ttft:500 tpot:50"]) == {"ttft": 500.0, "tpot": 50.0}
    assert parse_goodput(["ttft:500", "e2el:9000"]) == {"ttft": 500.0, "e2el": 9000.0}
    assert slo_from_flags(goodput=["ttft:100 tpot:5"]) == slo_from_flags(ttft_ms=100, tpot_ms=5)
    assert slo_from_flags(ttft_ms=100, goodput=["tpot:5"]) == Slo(ttft_ms=100, tpot_ms=5)
    assert slo_from_flags(ttft_ms=100, goodput=["ttft:100"]) == Slo(ttft_ms=100)
    assert slo_from_flags() is None


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ({"goodput": ["ttft=500"]}, "write KEY:VALUE pairs"),
        ({"goodput": ["ttft:fast"]}, "write KEY:VALUE pairs"),
        ({"goodput": ["ttft:1:2"]}, "write KEY:VALUE pairs"),
        ({"goodput": ["itl:5"]}, "one of ttft, tpot, e2el"),
        ({"goodput": ["tpot:-1"]}, "non-negative"),
        ({"ttft_ms": 100, "goodput": ["ttft:200"]}, "give each limit once"),
        ({"e2el_ms": -5}, "--slo-e2el-ms must be a non-negative"),
    ],
)
def test_bad_slo_spellings_name_the_fix(flags, says):
    with pytest.raises(InvalidArgumentError, match=says):
        slo_from_flags(**flags)


def _hand_goodput(rows: list[dict], ttft_ms: float, tpot_ms: float) -> float:
    """docs/metrics.md, by hand over requests.jsonl: ok requests with TTFT <= ttft_ms and
    TPOT <= tpot_ms (a one-token request has no TPOT and meets it), over first sent to last
    done."""
    good = 0
    for r in rows:
        if r["outcome"] != "ok":
            continue
        ttft = r["chunk_s"][0] - r["sent_s"]
        n = r["completion_tokens"]
        tpot = (r["done_s"] - r["chunk_s"][0]) / (n - 1) if n > 1 else None
        good += ttft <= ttft_ms / 1000 and (tpot is None or tpot <= tpot_ms / 1000)
    duration = max(r["done_s"] for r in rows) - min(r["sent_s"] for r in rows)
    return good / duration


@pytest.mark.parametrize(
    "slo_flags",
    [
        ["--goodput", "ttft:100 tpot:5"],
        ["--slo-ttft-ms", "100", "--slo-tpot-ms", "5"],
        ["--goodput", "ttft:100", "--slo-tpot-ms", "5"],
    ],
    ids=["goodput", "ms-flags", "both"],
)
def test_goodput_flags_match_a_hand_computation(null_server, tmp_path, slo_flags):
    # the null server: TTFT 20 ms, then 16 tokens 5 ms apart (so TPOT sits near the limit)
    done = servefit(
        "bench", null_server.url, "--concurrency", "4", "--num-requests", "12", "--output-len",
        "16", *slo_flags, "--json", "--output", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["config"]["slo"] == {"ttft_ms": 100.0, "tpot_ms": 5.0, "e2el_ms": None}
    rows = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == 12
    expected = _hand_goodput(rows, ttft_ms=100, tpot_ms=5)
    assert doc["summary"]["goodput_per_s"] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert doc["summary"]["goodput_per_s"] <= doc["summary"]["request_throughput_per_s"]


def test_a_bad_goodput_flag_exits_2():
    done = servefit("bench", "http://127.0.0.1:9", *SMALL_RUN, "--goodput", "ttft=100")
    assert done.returncode == 2 and "error (invalid argument): --goodput" in done.stderr


def test_search_slo_needs_a_limit_in_ms():
    done = servefit("bench", "http://127.0.0.1:9", "--search-slo")
    assert done.returncode == 2 and "--slo-ttft-ms" in done.stderr and "--goodput" in done.stderr
