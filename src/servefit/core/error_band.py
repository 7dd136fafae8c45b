"""How sure a prediction is: the error servefit measured on the public fidelity corpus
(``benchmarks/fidelity/``) for predictions of the same kind.

A band belongs to one *figure* (what is predicted: the KV-cache size, TTFT, TPOT, output
throughput) and one *group* of deployments (hardware class x engine, and for speed the load:
batch <= 32 or above). Its numbers are the median and the 90th percentile of the absolute
relative error over the corpus records of that group. ``benchmarks/fidelity.py`` computes
them and writes ``data/error_bands.toml``; a group with fewer than :data:`MIN_RECORDS`
records has no band, and a prediction in it is *unvalidated*.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from servefit.core.stats import percentile

MIN_RECORDS = 3  # fewer records than this are no evidence of an error's size
LOW_LOAD_MAX_CONCURRENCY = 32  # the load split of the speed bands: batch <= 32, or above
ANY_LOAD = "any"

# what is predicted -> the corpus metrics that measure it (a throughput is a figure's inverse
# where a source gives tok/s: decode tok/s per request measures TPOT, prefill tok/s TTFT)
FIGURES: dict[str, tuple[str, ...]] = {
    "kv_cache_tokens": ("kv_cache_tokens",),
    "ttft": ("ttft_s", "prefill_tok_per_s"),
    "tpot": ("tpot_s", "itl_s", "decode_tok_per_s_per_request"),
    "throughput": ("output_throughput_tok_per_s", "total_throughput_tok_per_s"),
}
FIGURE_LABELS = {
    "kv_cache_tokens": "KV-cache tokens",
    "ttft": "TTFT",
    "tpot": "TPOT",
    "throughput": "throughput",
}


def figure_of(metric: str) -> str:
    """The figure a corpus metric measures."""
    for figure, metrics in FIGURES.items():
        if metric in metrics:
            return figure
    raise ValueError(f"no figure measures {metric!r}; known: {sorted(FIGURES)}")


def load_of(concurrency: int | float | None) -> str:
    """The load split a workload belongs to (speed bands only)."""
    if concurrency is None:
        return ANY_LOAD
    return "low" if concurrency <= LOW_LOAD_MAX_CONCURRENCY else "high"


LOAD_LABELS = {
    "low": f"batch <= {LOW_LOAD_MAX_CONCURRENCY}",
    "high": f"batch > {LOW_LOAD_MAX_CONCURRENCY}",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorBand:
    """The measured error of one figure on one group of the corpus."""

    figure: str
    hardware_class: str
    engine: str
    load: str  # "low", "high" or "any"
    records: int
    median_rel: float  # median |predicted - measured| / measured
    p90_rel: float

    @property
    def group(self) -> str:
        """The group in words: ``nvidia-hbm GPUs, vllm, batch <= 32``."""
        parts = [f"{self.hardware_class} GPUs", self.engine]
        if self.load != ANY_LOAD:
            parts.append(LOAD_LABELS[self.load])
        return ", ".join(parts)

    def describe(self) -> str:
        """``+-7% median, +-18% p90 over 31 measurements (nvidia-hbm GPUs, vllm, batch <= 32)``."""
        noun = "start-up logs" if self.figure == "kv_cache_tokens" else "measurements"
        return (
            f"+-{_pct(self.median_rel)} median, +-{_pct(self.p90_rel)} p90 over {self.records} "
            f"{noun} ({self.group})"
        )


def _pct(fraction: float) -> str:
    """7 %, or 0.7 % below ten (a band of a few tenths of a percent is no "+-1%")."""
    return f"{fraction:.0%}" if fraction >= 0.1 else f"{fraction:.1%}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorBands:
    """Every band of the corpus; :meth:`find` picks the one a prediction belongs to."""

    bands: tuple[ErrorBand, ...] = ()
    source: str = ""

    def find(
        self, figure: str, hardware_class: str, engine: str, concurrency: int | float | None = None
    ) -> ErrorBand | None:
        """The band of the prediction's own group: its load split first, then any load.
        None when the corpus holds too few records of that group (the prediction is
        unvalidated); a band of another class or engine never stands in."""
        load = load_of(concurrency)
        for want in (load, ANY_LOAD):
            for band in self.bands:
                if (
                    band.figure == figure
                    and band.hardware_class == hardware_class
                    and band.engine == engine
                    and band.load == want
                ):
                    return band
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoredRecord:
    """One corpus record scored: its group and servefit's relative error on it."""

    figure: str
    hardware_class: str
    engine: str
    concurrency: int | float | None
    relative_error: float  # (predicted - measured) / measured


def bands_from(
    records: Iterable[ScoredRecord], min_records: int = MIN_RECORDS
) -> tuple[ErrorBand, ...]:
    """The bands of a scored corpus: one per (figure, class, engine) over every load, and one
    per load split where the split alone has ``min_records`` records."""
    groups: dict[tuple[str, str, str, str], list[float]] = {}
    for r in records:
        base = (r.figure, r.hardware_class, r.engine)
        groups.setdefault((*base, ANY_LOAD), []).append(abs(r.relative_error))
        if r.figure != "kv_cache_tokens" and r.concurrency is not None:
            groups.setdefault((*base, load_of(r.concurrency)), []).append(abs(r.relative_error))
    out = []
    for (figure, cls, eng, load), errors in sorted(groups.items()):
        if len(errors) < min_records:
            continue
        out.append(
            ErrorBand(
                figure=figure,
                hardware_class=cls,
                engine=eng,
                load=load,
                records=len(errors),
                median_rel=percentile(sorted(errors), 50),
                p90_rel=percentile(sorted(errors), 90),
            )
        )
    return tuple(out)


def summarise(errors: Sequence[float]) -> tuple[int, float, float]:
    """n, median and p90 of absolute relative errors (0, nan, nan for none)."""
    values = sorted(abs(e) for e in errors)
    if not values:
        return 0, float("nan"), float("nan")
    return len(values), percentile(values, 50), percentile(values, 90)


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictionBands:
    """The bands of one plan's figures (None: unvalidated)."""

    kv_cache_tokens: ErrorBand | None = None
    ttft: ErrorBand | None = None
    tpot: ErrorBand | None = None
    throughput: ErrorBand | None = None

    def of(self, figure: str) -> ErrorBand | None:
        band: ErrorBand | None = getattr(self, figure)
        return band

    def describe(self, figure: str) -> str:
        """The band of ``figure`` in words, or ``unvalidated`` with the reason."""
        band = self.of(figure)
        if band is None:
            return "unvalidated: the fidelity corpus has too few records of this group"
        return band.describe()


def bands_for(
    bands: ErrorBands, hardware_class: str, engine: str, concurrency: int | float | None
) -> PredictionBands:
    """The band of each figure of a plan on ``hardware_class`` under ``engine``."""
    return PredictionBands(
        kv_cache_tokens=bands.find("kv_cache_tokens", hardware_class, engine),
        ttft=bands.find("ttft", hardware_class, engine, concurrency),
        tpot=bands.find("tpot", hardware_class, engine, concurrency),
        throughput=bands.find("throughput", hardware_class, engine, concurrency),
    )
