"""The rules of core/error_band.py, one by one: which figure a corpus metric measures, the load
split, a band's words, which band a prediction takes, how bands are computed from scored
records. Every expected value is written out by hand from the rule's docstring; the bundled
bands themselves are held to the corpus by tests/unit/test_error_bands.py.
"""

from __future__ import annotations

import math

import pytest

from servefit.core.error_band import (
    ANY_LOAD,
    FIGURE_LABELS,
    FIGURES,
    LOW_LOAD_MAX_CONCURRENCY,
    MIN_RECORDS,
    ErrorBand,
    ErrorBands,
    PredictionBands,
    ScoredRecord,
    bands_for,
    bands_from,
    figure_of,
    load_of,
    summarise,
)


def _band(**kw) -> ErrorBand:
    base = {
        "figure": "tpot",
        "hardware_class": "nvidia-hbm",
        "engine": "vllm",
        "load": ANY_LOAD,
        "records": 10,
        "median_rel": 0.05,
        "p90_rel": 0.2,
    }
    return ErrorBand(**{**base, **kw})


def _rec(figure: str, error: float, concurrency: float | None = 1, **kw) -> ScoredRecord:
    base = {"hardware_class": "amd", "engine": "vllm"}
    return ScoredRecord(
        figure=figure, concurrency=concurrency, relative_error=error, **{**base, **kw}
    )


# -- figure_of, load_of -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metric", "figure"),
    [
        ("kv_cache_tokens", "kv_cache_tokens"),
        ("ttft_s", "ttft"),
        ("prefill_tok_per_s", "ttft"),  # prefill tok/s is TTFT's inverse
        ("tpot_s", "tpot"),
        ("itl_s", "tpot"),
        ("decode_tok_per_s_per_request", "tpot"),  # per-request decode tok/s is 1 / TPOT
        ("output_throughput_tok_per_s", "throughput"),
        ("total_throughput_tok_per_s", "throughput"),
    ],
)
def test_each_corpus_metric_measures_one_figure(metric, figure):
    assert figure_of(metric) == figure


def test_every_figure_has_a_label():
    assert set(FIGURE_LABELS) == set(FIGURES)


def test_an_unknown_metric_is_refused_naming_the_figures():
    with pytest.raises(ValueError, match=r"no figure measures 'e2e_s'.*kv_cache_tokens"):
        figure_of("e2e_s")


def test_the_load_split_is_batch_32_or_less():
    assert LOW_LOAD_MAX_CONCURRENCY == 32
    assert load_of(None) == ANY_LOAD  # an open-loop rate has no batch of its own
    assert load_of(1) == "low"
    assert load_of(32) == "low"
    assert load_of(32.5) == "high"
    assert load_of(33) == "high"


# -- a band in words -----------------------------------------------------------------------------


def test_a_speed_band_names_its_group_and_load():
    band = _band(load="low", records=14, median_rel=0.066, p90_rel=0.30)
    assert band.group == "nvidia-hbm GPUs, vllm, batch <= 32"
    assert band.describe() == (
        "+-6.6% median, +-30% p90 over 14 measurements (nvidia-hbm GPUs, vllm, batch <= 32)"
    )
    assert _band(load="high").group == "nvidia-hbm GPUs, vllm, batch > 32"


def test_a_capacity_band_counts_start_up_logs_and_has_no_load():
    band = _band(figure="kv_cache_tokens", records=39, median_rel=0.0, p90_rel=0.012)
    assert band.group == "nvidia-hbm GPUs, vllm"
    assert band.describe() == (
        "+-0.0% median, +-1.2% p90 over 39 start-up logs (nvidia-hbm GPUs, vllm)"
    )


def test_a_band_of_ten_percent_or_more_is_rounded_to_whole_percent():
    # 0.1 exactly is already a whole-percent band: "10%", not "10.0%"
    assert _band(median_rel=0.1, p90_rel=0.125).describe().startswith("+-10% median, +-12% p90")
    assert _band(median_rel=0.0999, p90_rel=0.5).describe().startswith("+-10.0% median, +-50%")


# -- which band a prediction takes ---------------------------------------------------------------


def test_the_load_split_band_comes_before_the_any_load_band():
    low = _band(load="low", p90_rel=0.1)
    any_load = _band(p90_rel=0.4)
    # listed any-load first: the split is still preferred
    bands = ErrorBands(bands=(any_load, low))
    assert bands.find("tpot", "nvidia-hbm", "vllm", concurrency=8) is low
    # batch 64 has no split band: the any-load band stands in
    assert bands.find("tpot", "nvidia-hbm", "vllm", concurrency=64) is any_load
    # an open-loop rate (no concurrency) takes the any-load band
    assert bands.find("tpot", "nvidia-hbm", "vllm") is any_load


def test_each_key_of_a_band_must_match():
    band = _band(p90_rel=0.3)
    bands = ErrorBands(bands=(band,))
    assert bands.find("tpot", "nvidia-hbm", "vllm") is band
    assert bands.find("ttft", "nvidia-hbm", "vllm") is None  # another figure
    assert bands.find("tpot", "nvidia-gddr", "vllm") is None  # another class
    assert bands.find("tpot", "nvidia-hbm", "sglang") is None  # another engine
    assert ErrorBands().find("tpot", "nvidia-hbm", "vllm") is None


def test_a_plan_takes_each_figure_s_band_and_the_load_only_for_speed():
    kv = _band(figure="kv_cache_tokens")
    ttft_low = _band(figure="ttft", load="low", p90_rel=0.11)
    ttft_high = _band(figure="ttft", load="high", p90_rel=0.55)
    tpot = _band(figure="tpot", load="high", p90_rel=0.33)
    throughput_high = _band(figure="throughput", load="high", p90_rel=0.6)
    throughput_any = _band(figure="throughput", p90_rel=0.25)
    # bands of another group, which must never stand in
    others = (
        _band(figure="throughput", hardware_class="amd", load="high"),
        _band(figure="throughput", engine="sglang", load="high"),
    )
    bands = ErrorBands(
        bands=(*others, kv, ttft_low, ttft_high, tpot, throughput_high, throughput_any)
    )
    plan = bands_for(bands, "nvidia-hbm", "vllm", concurrency=128)
    assert plan.kv_cache_tokens is kv
    assert plan.ttft is ttft_high
    assert plan.tpot is tpot
    assert plan.throughput is throughput_high
    assert plan.of("ttft") is ttft_high
    low = bands_for(bands, "nvidia-hbm", "vllm", concurrency=4)
    assert low.ttft is ttft_low
    assert low.tpot is None
    assert low.throughput is throughput_any  # no split band at batch 4: any load
    assert bands_for(bands, "amd", "vllm", concurrency=128).throughput is others[0]
    assert bands_for(bands, "nvidia-hbm", "sglang", concurrency=128).throughput is others[1]


def test_a_figure_without_a_band_says_unvalidated():
    plan = PredictionBands(tpot=_band(median_rel=0.066, p90_rel=0.3, records=14))
    assert plan.describe("throughput").startswith("unvalidated: ")
    assert "too few records" in plan.describe("throughput")
    assert plan.describe("tpot") == plan.tpot.describe()


# -- bands from scored records -------------------------------------------------------------------


def test_bands_need_min_records_and_the_threshold_is_a_parameter():
    assert MIN_RECORDS == 3
    two = [_rec("ttft", 0.1), _rec("ttft", 0.2)]
    assert bands_from(two) == ()
    (band_any, band_low) = bands_from(two, min_records=2)
    assert (band_any.load, band_any.records) == (ANY_LOAD, 2)
    assert (band_low.load, band_low.records) == ("low", 2)
    three = [*two, _rec("ttft", -0.3)]
    assert [(b.figure, b.records) for b in bands_from(three)] == [("ttft", 3), ("ttft", 3)]
    # a small group sorted before a large one leaves the large one its band
    mixed = [_rec("throughput", 0.5), *three]
    assert [(b.figure, b.load) for b in bands_from(mixed)] == [("ttft", "any"), ("ttft", "low")]


def test_a_band_is_over_absolute_errors():
    # |-0.4|, |0.1|, |-0.2|, |0.3| sorted 0.1 0.2 0.3 0.4: median 0.25; p90 at rank 2.7 of
    # 0..3 -> 0.3 + 0.7 x 0.1 = 0.37
    records = [_rec("tpot", e, concurrency=None) for e in (-0.4, 0.1, -0.2, 0.3)]
    (band,) = bands_from(records)
    assert band.load == ANY_LOAD
    assert band.median_rel == pytest.approx(0.25)
    assert band.p90_rel == pytest.approx(0.37)


def test_capacity_records_are_never_split_by_load():
    records = [_rec("kv_cache_tokens", e, concurrency=8) for e in (0.01, 0.02, 0.03)]
    (band,) = bands_from(records)
    assert band.load == ANY_LOAD and band.records == 3


def test_groups_are_kept_apart_and_sorted():
    records = [
        *[_rec("tpot", 0.1, hardware_class="nvidia-hbm") for _ in range(3)],
        *[_rec("tpot", 0.3, hardware_class="amd", engine="sglang") for _ in range(3)],
        *[_rec("tpot", 0.5, hardware_class="amd", concurrency=64) for _ in range(3)],
    ]
    keys = [(b.hardware_class, b.engine, b.load, b.median_rel) for b in bands_from(records)]
    assert keys == [
        ("amd", "sglang", "any", pytest.approx(0.3)),
        ("amd", "sglang", "low", pytest.approx(0.3)),
        ("amd", "vllm", "any", pytest.approx(0.5)),
        ("amd", "vllm", "high", pytest.approx(0.5)),
        ("nvidia-hbm", "vllm", "any", pytest.approx(0.1)),
        ("nvidia-hbm", "vllm", "low", pytest.approx(0.1)),
    ]


def test_summarise_counts_absolute_errors():
    n, median, p90 = summarise([-0.5, 0.1, 0.3])
    assert n == 3
    assert median == pytest.approx(0.3)
    assert p90 == pytest.approx(0.46)  # rank 1.8 of 0..2: 0.3 + 0.8 x 0.2
    n, median, p90 = summarise([])
    assert n == 0 and math.isnan(median) and math.isnan(p90)
