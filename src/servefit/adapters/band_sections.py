"""The error bands of a plan's figures as document sections (plan, compare, cost, report and
the page show the same ones)."""

from __future__ import annotations

from servefit.adapters.document import FrozenDoc
from servefit.core.error_band import ErrorBand, PredictionBands


class BandSection(FrozenDoc):
    """The measured error of one figure on its group of the fidelity corpus."""

    group: str
    records: int
    median_abs_error: float  # a fraction: 0.07 = 7 %
    p90_abs_error: float
    text: str


class ErrorBandsSection(FrozenDoc):
    """Each figure's band; null: the figure is unvalidated on this hardware and engine."""

    kv_cache_tokens: BandSection | None
    ttft: BandSection | None
    tpot: BandSection | None
    throughput: BandSection | None


def band_section(band: ErrorBand | None) -> BandSection | None:
    if band is None:
        return None
    return BandSection(
        group=band.group,
        records=band.records,
        median_abs_error=band.median_rel,
        p90_abs_error=band.p90_rel,
        text=band.describe(),
    )


def bands_section(bands: PredictionBands) -> ErrorBandsSection:
    return ErrorBandsSection(
        kv_cache_tokens=band_section(bands.kv_cache_tokens),
        ttft=band_section(bands.ttft),
        tpot=band_section(bands.tpot),
        throughput=band_section(bands.throughput),
    )
