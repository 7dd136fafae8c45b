"""How far a plan is from the edge (core/margin.py), on numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from servefit.core.error_band import ErrorBand
from servefit.core.margin import Constraint, Margin, tightest_margin
from servefit.units import GIB_BYTES

BAND = ErrorBand(
    figure="kv_cache_tokens",
    hardware_class="nvidia-hbm",
    engine="vllm",
    load="any",
    records=39,
    median_rel=0.002,
    p90_rel=0.012,
)


def margin(held: float, needed: float, band: ErrorBand | None = BAND) -> Margin:
    return Margin(
        constraint=Constraint(what="one request of 32,768 tokens", held=held, needed=needed),
        kv_cache_bytes=8 * GIB_BYTES,
        kv_cache_tokens=100_000,
        band=band,
    )


def test_a_margin_is_the_share_of_the_kv_cache_to_spare():
    # 2 requests held, 1 needed: 1 - 1 / 2 = 50 % to spare, of 8 GiB and 100,000 tokens
    m = margin(held=2, needed=1)
    assert m.relative == 0.5
    assert (m.bytes, m.tokens) == (4 * GIB_BYTES, 50_000)
    assert not m.is_at_edge
    assert m.describe() == (
        "50.0% of the KV cache to spare (4.00 GiB, 50,000 tokens) for one request of 32,768 "
        "tokens; outside servefit's measured KV error here (+-1.2% p90 over 39 start-up logs)"
    )


def test_a_short_plan_is_a_negative_margin():
    # 0.8 held of 1 needed: 1 - 1 / 0.8 = -25 %: short by a quarter of the KV cache
    m = margin(held=0.8, needed=1)
    assert m.relative == pytest.approx(-0.25)
    assert (m.bytes, m.tokens) == (-int(0.25 * 8 * GIB_BYTES), -25_000)
    assert m.describe().startswith("25.0% of the KV cache short (2.00 GiB, 25,000 tokens)")


@pytest.mark.parametrize(
    ("held", "at_edge"),
    [
        (1 / (1 - 0.011), True),  # 1.1 % to spare, inside the band's 1.2 % p90: at the edge
        (1 / (1 - 0.013), False),  # 1.3 %: outside it
        (1 / (1 + 0.011), True),  # short by 1.1 %: the engine may start after all
        (1 / (1 + 0.013), False),
    ],
)
def test_at_the_edge_is_within_the_p90_error_either_side(held, at_edge):
    m = margin(held=held, needed=1)
    assert m.is_at_edge is at_edge
    judged = "inside" if at_edge else "outside"
    assert f"; {judged} servefit's measured KV error here (+-1.2% p90" in m.describe()


def test_exactly_enough_is_nothing_to_spare_not_short():
    m = margin(held=3, needed=3)
    assert m.relative == 0.0 and m.is_at_edge
    assert m.describe().startswith("0.00% of the KV cache to spare (0.00 GiB, 0 tokens)")


def test_a_share_under_one_percent_keeps_two_decimals():
    m = margin(held=1 / (1 - 0.005), needed=1)  # 0.5 % to spare
    assert m.describe().startswith("0.50% of the KV cache to spare")


def test_without_a_band_the_figure_is_unvalidated_never_at_the_edge():
    m = margin(held=1.001, needed=1, band=None)
    assert not m.is_at_edge
    assert m.describe().endswith("; servefit's KV figure is unvalidated on this hardware")


def test_no_kv_cache_held_is_infinitely_short_and_zero_sized():
    m = margin(held=0, needed=1)
    assert m.relative == -math.inf and (m.bytes, m.tokens) == (0, 0)


def test_the_tightest_constraint_is_the_least_held_per_needed():
    start = Constraint(what="one request of max-model-len", held=10, needed=1)
    workload = Constraint(what="the workload's 16 requests", held=20, needed=16)
    nothing = Constraint(what="no requests", held=0, needed=0)
    m = tightest_margin([start, nothing, workload], 8 * GIB_BYTES, 100_000, BAND)
    assert m is not None and m.constraint is workload  # 20 / 16 = 1.25 < 10 / 1
    assert (m.kv_cache_bytes, m.kv_cache_tokens, m.band) == (8 * GIB_BYTES, 100_000, BAND)
    assert tightest_margin([start], 0, 100_000, BAND) is None  # no KV memory: no margin
    assert tightest_margin([start], 1, 100_000, BAND) is not None
    assert tightest_margin([nothing], 8 * GIB_BYTES, 100_000, BAND) is None
