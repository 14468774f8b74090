"""Inline SVG charts drawn in Python: no JavaScript library, no external URL, nothing to load.

Every mark carries its data as attributes (`data-label`, `data-value`, ...) and a <title> tooltip,
so tests assert on the DOM and a reader hovers for the figure. Each chart has role="img" with a
<title> and <desc> naming what it shows.

Scale (1,250 nodes, 10,000 GPUs): a bar chart draws one bar per item up to BAR_LIMIT and scrolls
horizontally; beyond it consecutive items are aggregated into buckets showing their lowest value.
A heat map draws at most HEAT_GRID x HEAT_GRID cells: a bigger matrix is aggregated to blocks whose
cell is the lowest measured value inside, and the caption says so (1,250 x 1,250 would be 1.5M
elements and an unusable page).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from html import escape as _escape

from gpufleet.reports.document import BarChart, Distribution, HeatMap, LineHistory, Series, Timeline
from gpufleet.reports.render.text import clean, number, value_in

BAR_LIMIT = 2_000
"""Bars drawn one per item; more are aggregated into at most BAR_LIMIT // 2 buckets."""
HEAT_GRID = 64
"""Cells per side drawn at most; larger matrices are aggregated into blocks."""

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#8C6D31", "#555555")
"""Okabe-Ito based: distinguishable with the common colour-vision deficiencies."""
OK, LOW, MISSING = "#4C78A8", "#D62728", "#BBBBBB"
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


# HTML forbids more than XML: C1 controls and the noncharacters are parse errors (WHATWG "input stream").
_NOT_HTML = re.compile("[\x80-\x9f\ufdd0-\ufdef" + "".join(chr(p << 16 | 0xFFFE) + chr(p << 16 | 0xFFFF)
                                                     for p in range(1, 17)) + "]")


def esc(text: str) -> str:
    """Text for HTML and inline SVG: without the characters neither may carry, then escaped."""
    return _escape(_NOT_HTML.sub("", clean(text)), quote=True)


def attr_num(value: float | None) -> str:
    """A data attribute's number: repr-exact so tests compare with the source values."""
    return "" if value is None else repr(float(value))


@dataclass(frozen=True)
class Svg:
    """A drawn chart and what the caption must add (aggregation notes)."""

    markup: str
    notes: tuple[str, ...] = ()


def _open(width: float, height: float, title: str, desc: str, uid: str, css_class: str) -> list[str]:
    return [f'<svg class="chart {css_class}" width="{width:.0f}" '
            f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
            f'aria-labelledby="{uid}-t {uid}-d" {FONT}>',
            f'<title id="{uid}-t">{esc(title)}</title>', f'<desc id="{uid}-d">{esc(desc)}</desc>']


def _nice_step(span: float) -> float:
    """A round tick step at or above span (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k)."""
    if span <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(span))
    return next(m * exp for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * exp >= span * (1 - 1e-12))


def _nice_max(v: float) -> float:
    """A round axis maximum at or above v, divisible into four round ticks."""
    return 4 * _nice_step(v / 4) if v > 0 else 1.0


def _y_axis(lines: list[str], left: float, top: float, height: float, vmax: float, unit: str, width: float,
            vmin: float = 0.0) -> None:
    for i in range(5):
        v = vmin + (vmax - vmin) * i / 4
        y = top + height - height * i / 4
        lines.append(f'<line class="grid" x1="{left}" x2="{left + width:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#e5e5e5"/>')
        lines.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{esc(value_in(v, unit))}</text>')


# ------------------------------------------------------------------ bar chart


@dataclass(frozen=True)
class _Bucket:
    labels: tuple[str, ...]
    values: tuple[float | None, ...]

    @property
    def label(self) -> str:
        return self.labels[0] if len(self.labels) == 1 else f"{self.labels[0]} … {self.labels[-1]}"

    @property
    def low(self) -> float | None:
        measured = [v for v in self.values if v is not None]
        return min(measured) if measured else None


def _buckets(chart: BarChart) -> tuple[list[_Bucket], int]:
    bars = chart.bars
    size = 1 if len(bars) <= BAR_LIMIT else math.ceil(len(bars) / (BAR_LIMIT // 2))
    out = [_Bucket(tuple(b.label for b in bars[i:i + size]), tuple(b.value for b in bars[i:i + size]))
           for i in range(0, len(bars), size)]
    return out, size


def bar_chart(chart: BarChart, uid: str, desc: str) -> Svg:
    buckets, size = _buckets(chart)
    n = max(len(buckets), 1)
    step = min(28.0, max(3.0, 760 / n))
    bar_w = step - 1 if step < 6 else step - 2
    left, top, plot_h = 64.0, 16.0, 200.0
    labelled = n <= 40
    bottom = 90.0 if labelled else 24.0
    width = left + n * step + 90
    values = [b.value for b in chart.bars if b.value is not None]
    vmax = _nice_max(max(values + ([chart.floor] if chart.floor is not None else []), default=1.0) * 1.05)
    lines = _open(width, top + plot_h + bottom, chart.title, desc, uid, "bar-chart")
    _y_axis(lines, left, top, plot_h, vmax, chart.unit, n * step)
    base = top + plot_h
    for i, b in enumerate(buckets):
        x = left + i * step
        low = b.low
        note = chart.bars[i].note if size == 1 else ""
        if low is None:
            lines.append(f'<rect class="bar missing" x="{x:.1f}" y="{base - 3:.1f}" width="{bar_w:.1f}" height="3" '
                         f'fill="{MISSING}" data-label="{esc(b.label)}" data-value="" data-items="{len(b.labels)}">'
                         f'<title>{esc(b.label)}: not measured</title></rect>')
            continue
        h = max(plot_h * max(low, 0.0) / vmax, 1.0)
        failing = chart.floor is not None and low < chart.floor
        what = "lowest of " + number(len(b.labels)) + ": " if len(b.labels) > 1 else ""
        tip = f"{b.label}: {what}{value_in(low, chart.unit)}" + (f" ({note})" if note else "") + (
            f", below the {chart.floor_label}" if failing else "")
        lines.append(f'<rect class="bar {"low" if failing else "ok"}" x="{x:.1f}" y="{base - h:.1f}" '
                     f'width="{bar_w:.1f}" height="{h:.1f}" fill="{LOW if failing else OK}" '
                     f'data-label="{esc(b.label)}" data-value="{attr_num(low)}" data-items="{len(b.labels)}">'
                     f'<title>{esc(tip)}</title></rect>')
        if labelled:
            cx = x + bar_w / 2
            lines.append(f'<text x="{cx:.1f}" y="{base + 8:.1f}" transform="rotate(45 {cx:.1f} {base + 8:.1f})">'
                         f'{esc(b.label[:24])}</text>')
    lines.append(f'<line class="axis" x1="{left}" x2="{left + n * step:.1f}" y1="{base}" y2="{base}" stroke="#333"/>')
    if chart.floor is not None:
        y = base - plot_h * chart.floor / vmax
        lines.append(f'<line class="floor" x1="{left}" x2="{left + n * step:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#000" stroke-width="1.5" stroke-dasharray="6 3" data-floor="{attr_num(chart.floor)}">'
                     f'<title>{esc(chart.floor_label)}: {esc(value_in(chart.floor, chart.unit))}</title></line>')
        lines.append(f'<text x="{left + n * step + 4:.1f}" y="{y + 4:.1f}">{esc(chart.floor_label)} '
                     f'{esc(value_in(chart.floor, chart.unit))}</text>')
    lines.append("</svg>")
    notes = (f"Aggregated: each bar is the lowest value of {number(size)} consecutive items "
             f"({number(len(chart.bars))} items in {number(len(buckets))} bars).",) if size > 1 else ()
    return Svg("\n".join(lines), notes)


# ------------------------------------------------------------------ heat map


def _blend(t: float) -> str:
    """Light to dark blue for t in [0, 1] (higher is darker)."""
    lo, hi = (222, 235, 247), (8, 48, 107)
    r, g, b = (round(a + (c - a) * t) for a, c in zip(lo, hi))
    return f"#{r:02x}{g:02x}{b:02x}"


def heat_map(chart: HeatMap, uid: str, desc: str) -> Svg:
    nr, nc = len(chart.row_labels), len(chart.col_labels)
    k = max(1, math.ceil(max(nr, nc) / HEAT_GRID))
    gr, gc = math.ceil(nr / k), math.ceil(nc / k)
    blocks: dict[tuple[int, int], list[float]] = {}
    for c in chart.cells:
        blocks.setdefault((c.row // k, c.col // k), []).append(c.value)
    cell = max(4.0, min(24.0, 640 / max(gr, gc, 1)))
    labelled = k == 1 and max(nr, nc) <= 40
    left = 130.0 if labelled else 40.0
    top = 110.0 if labelled else 30.0
    # the colour scale spans the passing cells: one failing outlier would wash the others out
    values = [c.value for c in chart.cells if chart.floor is None or c.value >= chart.floor]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    legend = [("low", LOW, "below the floor")] if chart.floor is not None else []
    if values:
        legend += [("min", _blend(0.0), value_in(lo, chart.unit))] + (
            [("max", _blend(1.0), value_in(hi, chart.unit))] if hi > lo else [])
    legend.append(("unmeasured", f"url(#{uid}-hatch)", "not measured"))
    legend_w = sum(24 + 7 * len(text) for _, _, text in legend)
    width = max(left + gc * cell + (90 if labelled else 0), left + legend_w) + 20  # room for slanted labels
    height = top + gr * cell + 40
    lines = _open(width, height, chart.title, desc, uid, "heat-map")
    lines.append(f'<defs><pattern id="{uid}-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
                 f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f4f4f4"/>'
                 f'<line x1="0" y1="0" x2="0" y2="6" stroke="#cccccc" stroke-width="2"/></pattern></defs>')
    lines.append(f'<rect class="unmeasured" x="{left}" y="{top}" width="{gc * cell:.1f}" height="{gr * cell:.1f}" '
                 f'fill="url(#{uid}-hatch)"><title>hatched: not measured</title></rect>')

    def span(labels: list[str], i: int) -> str:
        part = labels[i * k:(i + 1) * k]
        return part[0] if len(part) == 1 else f"{part[0]} … {part[-1]}"

    for (bi, bj), vs in sorted(blocks.items()):
        v = min(vs)
        failing = chart.floor is not None and v < chart.floor
        fill = LOW if failing else _blend(min(max((v - lo) / (hi - lo), 0.0), 1.0) if hi > lo else 0.0)
        row, col = span(chart.row_labels, bi), span(chart.col_labels, bj)
        what = f"lowest of {number(len(vs))} measured: " if k > 1 else ""
        lines.append(f'<rect class="cell {"low" if failing else "ok"}" x="{left + bj * cell:.1f}" '
                     f'y="{top + bi * cell:.1f}" width="{cell - 1:.1f}" height="{cell - 1:.1f}" fill="{fill}" '
                     f'data-row="{esc(row)}" data-col="{esc(col)}" data-value="{attr_num(v)}" data-count="{len(vs)}">'
                     f'<title>{esc(row)} × {esc(col)}: {what}{esc(value_in(v, chart.unit))}</title></rect>')
    if labelled:
        for i, name in enumerate(chart.row_labels):
            lines.append(f'<text x="{left - 4}" y="{top + i * cell + cell * 0.7:.1f}" text-anchor="end">'
                         f'{esc(name[:20])}</text>')
        for i, name in enumerate(chart.col_labels):
            x = left + i * cell + cell * 0.6
            lines.append(f'<text x="{x:.1f}" y="{top - 4}" transform="rotate(-60 {x:.1f} {top - 4})">'
                         f'{esc(name[:20])}</text>')
    legend_y = top + gr * cell + 16
    x = left
    for key, colour, text in legend:
        lines.append(f'<rect class="legend" data-key="{key}" x="{x:.1f}" y="{legend_y - 9:.1f}" width="10" '
                     f'height="10" fill="{colour}" stroke="#999" stroke-width="0.5"/>'
                     f'<text x="{x + 14:.1f}" y="{legend_y:.1f}">{esc(text)}</text>')
        x += 24 + 7 * len(text)
    lines.append("</svg>")
    notes: tuple[str, ...] = ()
    if k > 1:
        notes = (f"Aggregated to blocks of {k} x {k}: each cell is the lowest measured value inside its block "
                 f"({number(len(blocks))} cells drawn for a {number(nr)} x {number(nc)} matrix).",)
    return Svg("\n".join(lines), notes)


# ------------------------------------------------------------------ timeline


_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def _ticks(start: float, end: float, seconds: bool, most: int = 8) -> list[float]:
    """Round tick positions covering [start, end]: whole minutes/hours for durations."""
    span = max(end - start, 1e-9)
    if seconds:
        step = float(next((s for s in _TIME_STEPS if span / s <= most), 86400 * math.ceil(span / 86400 / most)))
    else:
        step = _nice_step(span / most)
    first = math.ceil(start / step - 1e-9) * step
    return [first + i * step for i in range(int((end - first) / step + 1e-9) + 1)]


def timeline(chart: Timeline, uid: str, desc: str) -> Svg:
    lanes, stages = chart.lanes(), chart.stages()
    colour = {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(stages)}
    row, left, top, plot_w = 18.0, 140.0, 10.0, 720.0
    t0 = min((s.start for s in chart.spans), default=0.0)
    t1 = max((s.end for s in chart.spans), default=1.0)
    scale = plot_w / max(t1 - t0, 1e-9)
    legend_rows = math.ceil(len(stages) / 6)
    height = top + len(lanes) * row + 30 + legend_rows * 16
    lines = _open(left + plot_w + 50, height, chart.title, desc, uid, "timeline")
    lane_index = {name: i for i, name in enumerate(lanes)}
    for t in _ticks(t0, t1, chart.unit == "s"):
        x = left + (t - t0) * scale
        lines.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + len(lanes) * row:.1f}" '
                     f'stroke="#e5e5e5"/><text x="{x:.1f}" y="{top + len(lanes) * row + 12:.1f}" '
                     f'text-anchor="middle">{esc(value_in(t, chart.unit))}</text>')
    for name, i in lane_index.items():
        lines.append(f'<text x="{left - 6}" y="{top + i * row + 13:.1f}" text-anchor="end">{esc(name[:22])}</text>')
    for s in chart.spans:
        y = top + lane_index[s.lane] * row + 2
        x = left + (s.start - t0) * scale
        w = max((s.end - s.start) * scale, 1.0)
        lines.append(f'<rect class="span" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{row - 4:.1f}" '
                     f'fill="{colour[s.stage]}" data-lane="{esc(s.lane)}" data-stage="{esc(s.stage)}" '
                     f'data-start="{attr_num(s.start)}" data-end="{attr_num(s.end)}"><title>{esc(s.lane)}, '
                     f'{esc(s.stage)}: {esc(value_in(s.start, chart.unit))} to {esc(value_in(s.end, chart.unit))} '
                     f'({esc(value_in(s.end - s.start, chart.unit))})</title></rect>')
    y = top + len(lanes) * row + 28
    for i, stage in enumerate(stages):
        x = left + (i % 6) * 120
        yy = y + (i // 6) * 16
        lines.append(f'<rect class="legend" data-stage="{esc(stage)}" x="{x:.1f}" y="{yy - 9:.1f}" width="10" '
                     f'height="10" fill="{colour[stage]}"/><text x="{x + 14:.1f}" y="{yy:.1f}">{esc(stage[:16])}</text>')
    lines.append("</svg>")
    return Svg("\n".join(lines))


# ------------------------------------------------------------------ distribution


EXPECTED_COLOUR = "#2CA02C"
OTHER_COLOURS = ("#FF7F0E", "#D62728", "#9467BD", "#8C564B", "#E377C2", "#7F7F7F")


def distribution(chart: Distribution, uid: str, desc: str) -> Svg:
    labels = [(g.name + (f" (expected {g.expected})" if g.expected is not None else ""))[:48] for g in chart.groups]
    row, left, plot_w = 26.0, min(max(6.5 * max(map(len, labels), default=0) + 14, 120.0), 330.0), 560.0
    height = 10 + len(chart.groups) * row + 10
    lines = _open(left + plot_w + 150, height, chart.title, desc, uid, "distribution")
    for gi, g in enumerate(chart.groups):
        y = 10 + gi * row
        total = g.total
        lines.append(f'<text x="{left - 6}" y="{y + 14:.1f}" text-anchor="end">{esc(labels[gi])}</text>')
        x = left
        others = 0
        for vc in sorted(g.counts, key=lambda v: (v.value != g.expected, -v.count, v.value)):
            if not vc.count:
                continue
            expected = g.expected is not None and vc.value == g.expected
            if expected or g.expected is None and x == left:
                fill = EXPECTED_COLOUR if expected else PALETTE[0]
            else:
                fill = OTHER_COLOURS[others % len(OTHER_COLOURS)]
                others += 1
            w = plot_w * vc.count / total
            lines.append(f'<rect class="segment {"expected" if expected else "other"}" x="{x:.1f}" y="{y:.1f}" '
                         f'width="{max(w, 1.0):.1f}" height="{row - 6:.1f}" fill="{fill}" data-group="{esc(g.name)}" '
                         f'data-value="{esc(vc.value)}" data-count="{vc.count}" '
                         f'data-expected="{"true" if expected else "false"}"><title>{esc(g.name)} {esc(vc.value)}: '
                         f'{number(vc.count)} of {number(total)}</title></rect>')
            text = f"{vc.value} ({number(vc.count)})"
            if w > 7 * len(text):
                lines.append(f'<text x="{x + 4:.1f}" y="{y + 14:.1f}" fill="#fff">{esc(text)}</text>')
            x += w
        lines.append(f'<text x="{left + plot_w + 6}" y="{y + 14:.1f}">{number(total)}</text>')
    lines.append("</svg>")
    return Svg("\n".join(lines))


# ------------------------------------------------------------------ line history


def _range(values: list[float]) -> tuple[float, float]:
    """A y range around the values on round ticks, not from zero: history lines differ by a few
    percent, and a regression of 10% must show as a drop, not as a flat line near the top."""
    if not values:
        return 0.0, 1.0
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.15 or abs(hi) * 0.05 or 1.0
    step = _nice_step((hi - lo + 2 * pad) / 4)
    vmin = math.floor((lo - pad) / step) * step
    if lo >= 0 > vmin:
        vmin = 0.0
    while vmin + 4 * step < hi + pad * 0.5:
        step = _nice_step(step * 1.01)
    return vmin, vmin + 4 * step


SERIES_LIMIT = 12
"""Series drawn as lines of their own. With more, a band (lowest to highest per run) and the median
stand for all of them, and only the notable series are drawn: 80 block lines are a tangle."""
REGRESSION = 0.05
"""A series is notable when its latest value is this fraction under the median of its earlier ones."""


def notable(series: Series, floor: float | None) -> bool:
    """Below the floor in any run, or regressed in the latest run against its own history."""
    measured = [v for v in series.values if v is not None]
    if floor is not None and any(v < floor for v in measured):
        return True
    latest = series.values[-1] if series.values else None
    earlier = [v for v in series.values[:-1] if v is not None]
    return latest is not None and bool(earlier) and latest < (1 - REGRESSION) * statistics.median(earlier)


def line_history(chart: LineHistory, uid: str, desc: str) -> Svg:
    left, top, plot_w, plot_h = 64.0, 12.0, 640.0, 200.0
    runs = max(len(chart.runs), 1)
    many = len(chart.series) > SERIES_LIMIT
    shown = [s for s in chart.series if notable(s, chart.floor)] if many else list(chart.series)
    hidden_notable = max(len(shown) - SERIES_LIMIT, 0)
    shown = shown[:SERIES_LIMIT]
    values = [v for s in chart.series for v in s.values if v is not None]
    vmin, vmax = _range(values + ([chart.floor] if chart.floor is not None else []))
    legend = [(s.name, PALETTE[i % len(PALETTE)]) for i, s in enumerate(shown)]
    height = top + plot_h + 40 + math.ceil((len(legend) + (2 if many else 0)) / 4) * 16
    lines = _open(left + plot_w + 30, height, chart.title, desc, uid, "line-history")
    _y_axis(lines, left, top, plot_h, vmax, chart.unit, plot_w, vmin)

    def x_of(i: int) -> float:
        return left + (plot_w * i / (runs - 1) if runs > 1 else plot_w / 2)

    def y_of(v: float) -> float:
        return top + plot_h - plot_h * (v - vmin) / (vmax - vmin)

    every = max(1, math.ceil(runs / 8))
    for i, run in enumerate(chart.runs):
        if i == runs - 1 or (i % every == 0 and runs - 1 - i >= every):
            lines.append(f'<text x="{x_of(i):.1f}" y="{top + plot_h + 18:.1f}" text-anchor="middle">'
                         f'{esc(run[:14])}</text>')
    if chart.floor is not None:
        y = y_of(chart.floor)
        lines.append(f'<line class="floor" x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#000" '
                     f'stroke-dasharray="6 3" data-floor="{attr_num(chart.floor)}"><title>floor: '
                     f'{esc(value_in(chart.floor, chart.unit))}</title></line>')
    if many:
        per_run = [(i, sorted(v for s in chart.series if (v := s.values[i]) is not None)) for i in range(len(chart.runs))]
        per_run = [(i, vs) for i, vs in per_run if vs]
        upper = " ".join(f"{x_of(i):.1f},{y_of(vs[-1]):.1f}" for i, vs in per_run)
        lower = " ".join(f"{x_of(i):.1f},{y_of(vs[0]):.1f}" for i, vs in reversed(per_run))
        lines.append(f'<polygon class="band" points="{upper} {lower}" fill="#c6dbef" fill-opacity="0.7" '
                     f'data-series-count="{len(chart.series)}"><title>lowest to highest of '
                     f'{number(len(chart.series))} series per run</title></polygon>')
        median = " ".join(f"{x_of(i):.1f},{y_of(statistics.median(vs)):.1f}" for i, vs in per_run)
        lines.append(f'<polyline class="median" points="{median}" fill="none" stroke="#08519c" stroke-width="2" '
                     f'stroke-dasharray="4 2"><title>median of {number(len(chart.series))} series</title></polyline>')
        legend = [("band: lowest to highest", "#c6dbef"), ("median", "#08519c")] + legend
    for si, s in enumerate(shown):
        colour = PALETTE[si % len(PALETTE)]
        segment: list[str] = []
        paths: list[str] = []
        for i, v in enumerate(s.values):
            if v is None:  # a gap: the line breaks instead of bridging an unmeasured run
                if segment:
                    paths.append(" ".join(segment))
                segment = []
                continue
            segment.append(f"{x_of(i):.1f},{y_of(v):.1f}")
        if segment:
            paths.append(" ".join(segment))
        for p in paths:
            lines.append(f'<polyline class="line" points="{p}" fill="none" stroke="{colour}" stroke-width="1.5" '
                         f'data-series="{esc(s.name)}"/>')
        for i, v in enumerate(s.values):
            if v is None:
                continue
            low = chart.floor is not None and v < chart.floor
            lines.append(f'<circle class="point {"low" if low else "ok"}" cx="{x_of(i):.1f}" cy="{y_of(v):.1f}" '
                         f'r="{3.5 if low else 2.5}" fill="{LOW if low else colour}" data-series="{esc(s.name)}" '
                         f'data-run="{esc(chart.runs[i])}" data-value="{attr_num(v)}"><title>{esc(s.name)}, '
                         f'{esc(chart.runs[i])}: {esc(value_in(v, chart.unit))}</title></circle>')
    y = top + plot_h + 34
    for li, (name, colour) in enumerate(legend):
        x = left + (li % 4) * 160
        yy = y + (li // 4) * 16
        lines.append(f'<rect class="legend" data-series="{esc(name)}" x="{x:.1f}" y="{yy - 9:.1f}" width="10" '
                     f'height="10" fill="{colour}"/><text x="{x + 14:.1f}" y="{yy:.1f}">{esc(name[:24])}</text>')
    lines.append("</svg>")
    notes: tuple[str, ...] = ()
    if many:
        notes = (f"{number(len(chart.series))} series: the band spans the lowest to the highest value per run, the "
                 f"dashed line is their median; drawn on their own: the {number(len(shown) + hidden_notable)} series "
                 f"below the floor or more than {REGRESSION:.0%} under their own median in the latest run"
                 + (f" (the first {SERIES_LIMIT})" if hidden_notable else "") + ".",)
    return Svg("\n".join(lines), notes)
