"""Small, dependency-free SVG charts for the self-contained HTML report."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT = 640, 300
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 64, 16, 28, 44
PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563")


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.1f}"
    return f"{v:.2g}"


def _frame(
    title: str, x_label: str, y_label: str, body: str, chart_id: str, height: int = HEIGHT
) -> str:
    return (
        f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img" aria-label="{escape(title)}" '
        'xmlns="http://www.w3.org/2000/svg">'
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" class="title">{escape(title)}</text>'
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 6}" text-anchor="middle" class="axis">'
        f"{escape(x_label)}</text>"
        f'<text x="14" y="{HEIGHT / 2}" text-anchor="middle" class="axis" '
        f'transform="rotate(-90 14 {HEIGHT / 2})">{escape(y_label)}</text>'
        f"{body}</svg>"
    )


class _Scale:
    def __init__(self, lo: float, hi: float, a: float, b: float, log: bool = False) -> None:
        if log:
            lo, hi = math.log10(max(lo, 1e-12)), math.log10(max(hi, 1e-12))
        if hi <= lo:
            hi = lo + 1
        self.lo, self.hi, self.a, self.b, self.log = lo, hi, a, b, log

    def __call__(self, v: float) -> float:
        if self.log:
            v = math.log10(max(v, 1e-12))
        return self.a + (v - self.lo) / (self.hi - self.lo) * (self.b - self.a)

    def ticks(self, n: int = 5) -> list[float]:
        if self.log:
            return [10**e for e in range(math.floor(self.lo), math.ceil(self.hi) + 1)]
        step = (self.hi - self.lo) / n
        return [self.lo + i * step for i in range(n + 1)]


def integer_ticks(top: int, n: int = 5) -> list[int]:
    """Whole-number ticks from 0 covering ``top`` (counts: no "2.5 requests"), at most
    about ``n`` steps of 1, 2 or 5 x a power of ten."""
    step = 1
    while math.ceil(max(top, 1) / step) > n:
        for factor in (2, 5 / 2, 2):  # 1 -> 2 -> 5 -> 10 -> 20 -> 50 ...
            step = round(step * factor)
            if math.ceil(max(top, 1) / step) <= n:
                break
    return list(range(0, step * math.ceil(max(top, 1) / step) + 1, step))


def distinct_labels(values: Sequence[float]) -> list[str]:
    """``values`` as labels with the fewest decimals that keep neighbours apart (bin edges
    21.2, 21.4 ... are not all "21")."""
    labels = [_fmt(v) for v in values]
    digits = 0
    while len(set(labels)) < len(set(values)) and digits < 6:
        labels = [f"{v:,.{digits}f}" for v in values]
        digits += 1
    return labels


def _axes(
    xs: _Scale,
    ys: _Scale,
    *,
    x_ticks: Sequence[tuple[float, str]] | None = None,
    y_ticks: Sequence[tuple[float, str]] | None = None,
) -> str:
    parts = []
    for t, label in y_ticks if y_ticks is not None else [(t, _fmt(t)) for t in ys.ticks()]:
        y = ys(t)
        if MARGIN_T - 1 <= y <= HEIGHT - MARGIN_B + 1:
            parts.append(
                f'<line x1="{MARGIN_L}" x2="{WIDTH - MARGIN_R}" y1="{y:.1f}" y2="{y:.1f}" '
                'class="grid"/>'
                f'<text x="{MARGIN_L - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
                f"{escape(label)}</text>"
            )
    for t, label in x_ticks if x_ticks is not None else [(t, _fmt(t)) for t in xs.ticks()]:
        x = xs(t)
        if MARGIN_L - 1 <= x <= WIDTH - MARGIN_R + 1:
            parts.append(
                f'<text x="{x:.1f}" y="{HEIGHT - MARGIN_B + 16}" text-anchor="middle" '
                f'class="tick">{escape(label)}</text>'
            )
    parts.append(
        f'<line x1="{MARGIN_L}" x2="{MARGIN_L}" y1="{MARGIN_T}" y2="{HEIGHT - MARGIN_B}" '
        'class="axisline"/>'
        f'<line x1="{MARGIN_L}" x2="{WIDTH - MARGIN_R}" y1="{HEIGHT - MARGIN_B}" '
        f'y2="{HEIGHT - MARGIN_B}" class="axisline"/>'
    )
    return "".join(parts)


def _legend(names: Sequence[str]) -> str:
    out = []
    for i, name in enumerate(names):
        x = MARGIN_L + 8 + i * 170
        out.append(
            f'<rect x="{x}" y="{MARGIN_T + 2}" width="10" height="10" '
            f'fill="{PALETTE[i % len(PALETTE)]}"/>'
            f'<text x="{x + 14}" y="{MARGIN_T + 11}" class="legend">{escape(name)}</text>'
        )
    return "".join(out)


def line_chart(
    chart_id: str,
    title: str,
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    markers_only: Sequence[bool] = (),
) -> str:
    points = [p for _, pts in series for p in pts]
    if not points:
        points = [(0.0, 0.0), (1.0, 1.0)]
    xs = _Scale(
        min(p[0] for p in points), max(p[0] for p in points), MARGIN_L, WIDTH - MARGIN_R, log_x
    )
    ys = _Scale(0.0, max(p[1] for p in points) * 1.1 or 1.0, HEIGHT - MARGIN_B, MARGIN_T + 16)
    body = [_axes(xs, ys)]
    for i, (_, pts) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        coords = [(xs(x), ys(y)) for x, y in pts]
        only_markers = i < len(markers_only) and markers_only[i]
        if len(coords) > 1 and not only_markers:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            body.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>'
            )
        if len(coords) <= 40 or only_markers:  # long series (samples): the line alone
            for x, y in coords:
                body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}"/>')
    body.append(_legend([name for name, _ in series]))
    return _frame(title, x_label, y_label, "".join(body), chart_id)


def histogram(
    chart_id: str,
    title: str,
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    x_label: str,
    bins: int = 20,
) -> str:
    """Counts per bin, one bar per series in each bin (cold and warm side by side), over
    the same bin edges. The y axis counts whole requests; the x ticks are bin edges, labelled
    with the precision that keeps them apart."""
    values = [v for _, vs in series for v in vs] or [0.0]
    lo, hi = min(values), max(values)
    width = (hi - lo) / bins or 1.0
    counts = []
    for _, vs in series:
        c = [0] * bins
        for v in vs:
            c[min(int((v - lo) / width), bins - 1)] += 1
        counts.append(c)
    y_ticks = integer_ticks(max((n for c in counts for n in c), default=0))
    xs = _Scale(lo, lo + width * bins, MARGIN_L, WIDTH - MARGIN_R)
    ys = _Scale(0, y_ticks[-1], HEIGHT - MARGIN_B, MARGIN_T + 16)
    edges = [lo + i * width for i in range(0, bins + 1, max(1, bins // 5))]
    body = [
        _axes(
            xs,
            ys,
            x_ticks=list(zip(edges, distinct_labels(edges), strict=True)),
            y_ticks=[(t, str(t)) for t in y_ticks],
        )
    ]
    share = 1 / max(len(series), 1)
    for j, c in enumerate(counts):
        for i, n in enumerate(c):
            x0, x1 = xs(lo + (i + j * share) * width), xs(lo + (i + (j + 1) * share) * width)
            y = ys(n)
            body.append(
                f'<rect x="{x0 + 1:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 2, 1):.1f}" '
                f'height="{HEIGHT - MARGIN_B - y:.1f}" fill="{PALETTE[j % len(PALETTE)]}">'
                f"<title>{escape(series[j][0])}: {n}</title></rect>"
            )
    if len(series) > 1:
        body.append(_legend([name for name, _ in series]))
    return _frame(title, x_label, "requests", "".join(body), chart_id)


def stacked_bar(
    chart_id: str, title: str, parts: Sequence[tuple[str, float]], *, total: float, unit: str
) -> str:
    """One horizontal bar split into parts (e.g. where a GPU's memory goes)."""
    body = []
    x = float(MARGIN_L)
    span = WIDTH - MARGIN_L - MARGIN_R
    y0, h = 70, 60
    for i, (name, value) in enumerate(parts):
        w = span * value / total if total else 0
        color = PALETTE[i % len(PALETTE)]
        body.append(
            f'<rect x="{x:.1f}" y="{y0}" width="{max(w, 0.5):.1f}" height="{h}" fill="{color}">'
            f"<title>{escape(name)}: {_fmt(value)} {escape(unit)}</title></rect>"
        )
        body.append(
            f'<rect x="{MARGIN_L + (i % 3) * 190}" '
            f'y="{160 + (i // 3) * 22}" width="10" height="10" '
            f'fill="{color}"/><text x="{MARGIN_L + (i % 3) * 190 + 14}" y="{169 + (i // 3) * 22}" '
            f'class="legend">{escape(name)} {_fmt(value)} {escape(unit)}</text>'
        )
        x += w
    body.append(
        f'<rect x="{MARGIN_L}" y="{y0}" width="{span}" height="{h}" fill="none" class="outline"/>'
        f'<text x="{MARGIN_L}" y="{y0 - 8}" class="legend">total '
        f"{_fmt(total)} {escape(unit)}</text>"
    )
    return _frame(title, "", "", "".join(body), chart_id, height=230)


def grouped_bars(
    chart_id: str,
    title: str,
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    y_label: str,
) -> str:
    """Bars per label, one per series (e.g. TTFT per agent turn, cold vs cached)."""
    top = max((v for _, vals in series for v in vals), default=1.0) * 1.1 or 1.0
    ys = _Scale(0, top, HEIGHT - MARGIN_B, MARGIN_T + 16)
    xs = _Scale(0, max(len(labels), 1), MARGIN_L, WIDTH - MARGIN_R)
    body = [_axes(_Scale(0, 1, -1e6, -1e6), ys)]
    group = (WIDTH - MARGIN_L - MARGIN_R) / max(len(labels), 1)
    bar = group * 0.8 / max(len(series), 1)
    for j, label in enumerate(labels):
        for i, (_, vals) in enumerate(series):
            y = ys(vals[j])
            x = xs(j) + group * 0.1 + i * bar
            body.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" '
                f'height="{HEIGHT - MARGIN_B - y:.1f}" '
                f'fill="{PALETTE[i % len(PALETTE)]}"/>'
            )
        body.append(
            f'<text x="{xs(j) + group / 2:.1f}" y="{HEIGHT - MARGIN_B + 16}" text-anchor="middle" '
            f'class="tick">{escape(label)}</text>'
        )
    body.append(_legend([name for name, _ in series]))
    return _frame(title, "", y_label, "".join(body), chart_id)
