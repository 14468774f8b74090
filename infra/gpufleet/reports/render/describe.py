"""One-sentence descriptions of charts and test groups: the Markdown summary line of a chart and
the HTML chart's text alternative (`<desc>`, figcaption) say the same thing.
"""

from __future__ import annotations

from gpufleet.reports.document import (BarChart, CaseStatus, Distribution, HeatMap, LineHistory, TestCases,
                                    Timeline)
from gpufleet.reports.render.text import number, plural, stats, value_in


def _spread(values: list[float], unit: str) -> str:
    s = stats(values)
    if s is None:
        return "no values"
    lo, mid, hi = s
    return f"min {value_in(lo, unit)}, median {value_in(mid, unit)}, max {value_in(hi, unit)}"


def bar_chart(c: BarChart) -> str:
    measured = [b.value for b in c.bars if b.value is not None]
    text = f"{plural(len(c.bars), 'item')}, {number(len(measured))} measured: {_spread(measured, c.unit)}"
    if c.floor is not None:
        text += f"; {number(len(c.below_floor()))} below the {c.floor_label} of {value_in(c.floor, c.unit)}"
    missing = len(c.bars) - len(measured)
    if missing:
        text += f"; {number(missing)} not measured"
    return text + "."


def heat_map(c: HeatMap) -> str:
    values = [x.value for x in c.cells]
    text = (f"{number(len(c.row_labels))} x {number(len(c.col_labels))}, "
            f"{plural(len(c.cells), 'measured cell')}: {_spread(values, c.unit)}")
    if c.floor is not None:
        below = sum(1 for v in values if v < c.floor)
        text += f"; {number(below)} below the floor of {value_in(c.floor, c.unit)}"
    return text + "."


def timeline(c: Timeline) -> str:
    if not c.spans:
        return "No stages recorded."
    start, end = min(s.start for s in c.spans), max(s.end for s in c.spans)
    return (f"{plural(len(c.lanes()), 'lane')}, {plural(len(c.stages()), 'stage')}, "
            f"{plural(len(c.spans), 'span')}; {value_in(end - start, c.unit)} from first start to last end.")


def distribution(c: Distribution) -> str:
    mixed = [g.name for g in c.groups if len([x for x in g.counts if x.count]) > 1]
    deviating = [g.name for g in c.groups if g.deviating()]
    text = f"{plural(len(c.groups), 'component')}"
    text += f"; {number(len(mixed))} with mixed values" + (f" ({', '.join(mixed[:10])})" if mixed else "")
    if any(g.expected is not None for g in c.groups):
        text += f"; {number(len(deviating))} deviating from the expected value" + (
            f" ({', '.join(deviating[:10])})" if deviating else "")
    return text + "."


def line_history(c: LineHistory) -> str:
    latest = [s.values[-1] for s in c.series if s.values and s.values[-1] is not None]
    text = f"{plural(len(c.series), 'series', 'series')} over {plural(len(c.runs), 'run')}"
    if latest:
        text += f"; latest run: {_spread(latest, c.unit)}"
    if c.floor is not None:
        below = sum(1 for v in latest if v < c.floor)
        text += f"; {number(below)} below the floor of {value_in(c.floor, c.unit)} in the latest run"
    return text + "."


def case_counts(t: TestCases) -> dict[CaseStatus, int]:
    counts = {s: 0 for s in CaseStatus}
    for c in t.cases:
        counts[c.status] += 1
    return counts


def cases(t: TestCases) -> str:
    n = case_counts(t)
    return (f"{plural(len(t.cases), 'case')}: {number(n[CaseStatus.PASS])} passed, {number(n[CaseStatus.FAIL])} failed, "
            f"{plural(n[CaseStatus.ERROR], 'error')}, {number(n[CaseStatus.SKIP])} skipped.")
