"""Error bands and margins: every figure says how wrong it has been on the public fidelity
corpus, and a verdict closer to the edge than that says "at the edge" (issues 24 and 33).

The bundled bands (``data/error_bands.toml``) must be what ``benchmarks/fidelity.py`` computes
from the corpus as it is: a new record, or a change that moves a prediction, changes them, and
this test fails until ``python benchmarks/fidelity.py --write`` is rerun.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from tests.corpus import FIDELITY_DIR

from servefit.adapters.error_bands import FILE, bands_toml, error_bands
from servefit.calibrate.fidelity import load_corpus, score_corpus
from servefit.cli.main import cli
from servefit.core.error_band import ErrorBand, ErrorBands, ScoredRecord, bands_from
from servefit.core.margin import Constraint, tightest_margin


def _band(p90: float, **kw) -> ErrorBand:
    base = {
        "figure": "kv_cache_tokens",
        "hardware_class": "nvidia-hbm",
        "engine": "vllm",
        "load": "any",
        "records": 10,
        "median_rel": p90 / 2,
        "p90_rel": p90,
    }
    return ErrorBand(**{**base, **kw})


@pytest.fixture(scope="module")
def corpus_score():
    return score_corpus(*load_corpus(FIDELITY_DIR))


def test_the_bundled_bands_are_the_corpus_scored_now(corpus_score):
    bands = bands_from(corpus_score.scored())
    expected = bands_toml(bands, len(corpus_score.capacity), len(corpus_score.speed))
    assert FILE.read_text(encoding="utf-8") == expected, (
        "data/error_bands.toml is stale: run python benchmarks/fidelity.py --write"
    )


def test_every_startup_log_is_reproduced_to_the_token_from_its_logged_kv_memory(corpus_score):
    given = [c for c in corpus_score.capacity if c.given_memory_error is not None]
    assert given, "no start-up log prints its KV memory"
    missed = [
        (c.log.name, c.given_memory_tokens, c.logged_tokens) for c in given if c.given_memory_error
    ]
    assert not missed


def test_a_band_is_the_median_and_p90_of_its_group_and_needs_three_records():
    records = [
        ScoredRecord(
            figure="tpot", hardware_class="amd", engine="vllm", concurrency=c, relative_error=e
        )
        for c, e in [(1, 0.10), (1, -0.20), (4, 0.30), (64, 0.50), (128, -0.40)]
    ]
    bands = {(b.load): b for b in bands_from(records)}
    # all five: |errors| sorted 0.1 0.2 0.3 0.4 0.5 -> median 0.3, p90 at rank 3.6 -> 0.46
    assert bands["any"].records == 5
    assert bands["any"].median_rel == pytest.approx(0.30)
    assert bands["any"].p90_rel == pytest.approx(0.46)
    # batch <= 32: 0.1 0.2 0.3 -> median 0.2; batch > 32 has two records: no band of its own
    assert bands["low"].median_rel == pytest.approx(0.20)
    assert "high" not in bands


def test_a_band_of_another_group_never_stands_in():
    bands = ErrorBands(bands=(_band(0.05), _band(0.2, figure="tpot", load="low")))
    assert bands.find("kv_cache_tokens", "amd", "vllm") is None
    assert bands.find("kv_cache_tokens", "nvidia-hbm", "sglang") is None
    assert bands.find("tpot", "nvidia-hbm", "vllm", concurrency=8).p90_rel == 0.2
    # batch 64 has no band of its own and no "any" band: unvalidated
    assert bands.find("tpot", "nvidia-hbm", "vllm", concurrency=64) is None


def test_the_margin_is_the_tightest_comparison_against_the_band():
    # the KV cache holds 1.04 requests of max-model-len and 9 of the workload's 8: the start
    # check is the tighter (1.04 / 1 < 9 / 8); 1 - 1/1.04 = 3.85 % of 10 GiB to spare
    start = Constraint(what="one request", held=1.04, needed=1)
    workload = Constraint(what="8 requests", held=9, needed=8)
    kv_bytes = 10 * 2**30
    margin = tightest_margin([workload, start], kv_bytes, 100_000, _band(0.05))
    assert margin.constraint is start
    assert margin.relative == pytest.approx(1 - 1 / 1.04)
    assert margin.bytes == int((1 - 1 / 1.04) * kv_bytes)
    assert margin.is_at_edge  # 3.85 % < 5 %
    assert not tightest_margin([start], kv_bytes, 100_000, _band(0.03)).is_at_edge
    assert not tightest_margin([start], kv_bytes, 100_000, None).is_at_edge  # unvalidated
    assert tightest_margin([start], 0, 0, _band(0.05)) is None  # no KV cache: no margin


# 61 GiB of weights on an 80 GiB GPU: the KV cache holds one request of about 32k tokens, under
# the model's 40,960 positions, so max-model-len alone moves the plan across the edge
MODEL = "Qwen/Qwen3-32B"


def _plan_json(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(
        cli,
        ["plan", MODEL, "--gpu", "H100-SXM", "--offline", "--no-performance", "--json", *args],
    )
    return result.exit_code, json.loads(result.output)


def test_a_plan_inside_its_band_is_at_the_edge_with_the_flags_that_take_it_out():
    band = error_bands().find("kv_cache_tokens", "nvidia-hbm", "vllm")
    assert band is not None and band.p90_rel > 0
    _, wide = _plan_json("--max-model-len", "32768")
    largest = wide["memory"]["largest_max_model_len"]
    # just under the longest request the KV cache holds: fits, by less than the band
    code, edge = _plan_json("--max-model-len", str(largest - 16))
    v = edge["verdict"]
    assert code == 0 and v["fits"] and v["is_at_edge"]
    assert v["headline"].startswith("AT THE EDGE: predicted to fit")
    assert 0 <= v["margin"]["spare_kv_cache_fraction"] <= band.p90_rel
    assert v["edge_advice"]
    # the advised shorter context takes it out of the band: a plain FITS
    shorter = next(a for a in v["edge_advice"] if a.startswith("--max-model-len"))
    code, out = _plan_json("--max-model-len", shorter.split()[1].replace(",", ""))
    assert code == 0 and out["verdict"]["headline"] == "FITS"
    assert out["verdict"]["margin"]["spare_kv_cache_fraction"] > band.p90_rel
    # and so does the advised utilization
    util = next(a for a in v["edge_advice"] if a.startswith("--gpu-memory-utilization"))
    code, out = _plan_json("--max-model-len", str(largest - 16), *util.split()[:2])
    assert code == 0 and out["verdict"]["headline"] == "FITS"


def test_a_plan_just_short_is_at_the_edge_and_still_exits_1():
    _, wide = _plan_json("--max-model-len", "32768")
    largest = wide["memory"]["largest_max_model_len"]
    code, out = _plan_json("--max-model-len", str(largest + 64))
    v = out["verdict"]
    assert code == 1 and not v["fits"]
    assert v["headline"].startswith("AT THE EDGE: predicted not to fit")
    assert v["margin"]["spare_kv_cache_fraction"] < 0


def test_a_hard_rule_is_never_at_the_edge():
    # a context beyond the model's max_position_embeddings (40,960) is refused whatever the
    # memory: the verdict is a plain DOES NOT FIT, however close the KV cache comes
    code, out = _plan_json("--max-model-len", "40961", "--kv-cache-memory", "10GiB")
    assert code == 1 and not out["verdict"]["is_at_edge"]
    assert out["verdict"]["headline"].startswith("DOES NOT FIT")


def test_every_figure_carries_its_band_or_says_unvalidated():
    result = CliRunner().invoke(
        cli, ["plan", "Qwen/Qwen3-8B", "--gpu", "MI300X", "--offline", "--json"]
    )
    doc = json.loads(result.output)
    bands = doc["error_bands"]
    assert set(bands) == {"kv_cache_tokens", "ttft", "tpot", "throughput"}
    text = CliRunner().invoke(cli, ["plan", "Qwen/Qwen3-8B", "--gpu", "MI300X", "--offline"]).output
    for figure, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("throughput", "throughput")):
        shown = bands[figure]["text"] if bands[figure] else "unvalidated"
        assert f"{label} error: {shown}"[:40] in " ".join(text.split())
