"""One self-contained HTML file: inline CSS, inline SVG charts, no script, no external URL.

Why self-contained: the file is a CI artifact opened from a download or an air-gapped jump host;
anything fetched from a CDN would be missing there and would leak that a report was opened. A
Content-Security-Policy of default-src 'none' makes the browser refuse any fetch a future edit
might add. Every chart has a text alternative (its <desc>, a caption, a data table) so the report
reads without the pictures.
"""

from __future__ import annotations

from itertools import count

from gpufleet.reports.document import (BarChart, Block, CaseStatus, Cell, Distribution, Document, HeatMap,
                                    LineHistory, Paragraph, Status, Table, TestCases, Timeline)
from gpufleet.reports.render import describe, svg
from gpufleet.reports.render.svg import esc
from gpufleet.reports.render.text import cell, code_spans, number, plural, value_in

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
DATA_ROWS = 2_000
"""Rows of a chart's data table at most (the JSON holds all)."""

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;color:#1b1b1b;margin:0 auto;max-width:1180px;padding:16px 24px}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
.status{display:inline-block;padding:2px 10px;border-radius:10px;font-weight:600;color:#fff}
.status-ok{background:#2c7a2c}.status-failed,.status-error{background:#b3261e}.status-drift{background:#b36b00}
.meta{color:#555}dl.summary{display:grid;grid-template-columns:max-content auto;gap:2px 16px;margin:12px 0}
dl.summary dt{font-weight:600}dl.summary dd{margin:0}
.tone-good{color:#2c7a2c}.tone-warning{color:#8a5300}.tone-bad{color:#b3261e;font-weight:600}
figure{margin:12px 0 20px}figcaption{color:#333;margin-top:4px}
.scroll{overflow-x:auto;max-width:100%;border:1px solid #eee}
.table-wrap{overflow:auto;max-height:520px;border:1px solid #eee;margin:6px 0}
table{border-collapse:collapse;font-size:13px}th,td{padding:3px 8px;border-bottom:1px solid #eee;text-align:left}
th{position:sticky;top:0;background:#f6f6f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.fail td,tr.error td{background:#fdecea}details{margin:6px 0}summary{cursor:pointer;color:#0b57d0}
footer{color:#777;margin-top:32px;font-size:12px}
code{font:12px ui-monospace,monospace;background:#f2f2f2;padding:0 3px;border-radius:3px}
"""


def text(value: str) -> str:
    """Document text as element content: escaped, `code` spans as <code>."""
    return "".join(f"<code>{esc(part)}</code>" if is_code else esc(part) for is_code, part in code_spans(value))


class _Ids:
    """Unique element ids within one page (chart titles may repeat)."""

    def __init__(self) -> None:
        self._n = count(1)

    def __call__(self) -> str:
        return f"c{next(self._n)}"


def _table(columns: list[str], rows: list[list[Cell]], css_class: str = "",
           row_classes: list[str] | None = None) -> str:
    head = "".join(f'<th scope="col">{text(c)}</th>' for c in columns)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes and row_classes[i] else ""
        tds = "".join(f'<td class="num">{esc(cell(v))}</td>' if isinstance(v, (int, float)) and not isinstance(v, bool)
                      else f"<td>{text(cell(v))}</td>" for v in row)
        body.append(f"<tr{cls}>{tds}</tr>")
    return (f'<div class="table-wrap"><table class="{css_class}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def _data_table(summary: str, columns: list[str], rows: list[list[Cell]]) -> str:
    shown = rows[:DATA_ROWS]
    more = f" (first {number(DATA_ROWS)} of {number(len(rows))}; the JSON report holds all)" if len(rows) > DATA_ROWS else ""
    return (f"<details><summary>{esc(summary)}{esc(more)}</summary>{_table(columns, shown, 'data')}</details>")


def _figure(title: str, desc: str, drawn: svg.Svg, caption: str, data: str) -> str:
    notes = " ".join(esc(n) for n in drawn.notes)
    cap = " ".join(x for x in (esc(desc), notes, text(caption)) if x)
    return (f'<figure><h3>{text(title)}</h3><div class="scroll">{drawn.markup}</div>'
            f"<figcaption>{cap}</figcaption>{data}</figure>")


def _block(block: Block, ids: _Ids) -> str:
    if isinstance(block, Paragraph):
        return f'<p class="tone-{block.tone.value}">{text(block.text)}</p>'
    if isinstance(block, Table):
        title = f"<h3>{text(block.title)}</h3>" if block.title else ""
        caption = f"<p class=\"caption\">{text(block.caption)}</p>" if block.caption else ""
        return title + (_table(block.columns, block.rows) if block.rows else "<p>No rows.</p>") + caption
    if isinstance(block, BarChart):
        desc = describe.bar_chart(block)
        rows: list[list[Cell]] = [[b.label, b.value, "not measured" if b.value is None else
                                   "below" if block.floor is not None and b.value < block.floor else "", b.note]
                                  for b in block.bars]
        data = _data_table(f"Data: {plural(len(rows), 'item')}", ["item", f"value ({block.unit})" if block.unit
                                                                  else "value", f"vs {block.floor_label}", "note"], rows)
        return _figure(block.title, desc, svg.bar_chart(block, ids(), desc), block.caption, data)
    if isinstance(block, HeatMap):
        desc = describe.heat_map(block)
        worst = sorted(block.cells, key=lambda c: c.value)
        data = _data_table("Data: measured cells, lowest first", ["row", "column", "value"],
                           [[block.row_labels[c.row], block.col_labels[c.col], c.value] for c in worst])
        return _figure(block.title, desc, svg.heat_map(block, ids(), desc), block.caption, data)
    if isinstance(block, Timeline):
        desc = describe.timeline(block)
        data = _data_table("Data: spans", ["lane", "stage", "start", "end", "duration"], [
            [s.lane, s.stage, value_in(s.start, block.unit), value_in(s.end, block.unit),
             value_in(s.end - s.start, block.unit)] for s in block.spans])
        return _figure(block.title, desc, svg.timeline(block, ids(), desc), block.caption, data)
    if isinstance(block, Distribution):
        desc = describe.distribution(block)
        data = _data_table("Data: counts", ["component", "expected", "value", "count"], [
            [g.name, g.expected, v.value, v.count] for g in block.groups for v in g.counts])
        return _figure(block.title, desc, svg.distribution(block, ids(), desc), block.caption, data)
    if isinstance(block, LineHistory):
        desc = describe.line_history(block)
        data = _data_table("Data: values per run", ["series", *block.runs],
                           [[s.name, *s.values] for s in block.series])
        return _figure(block.title, desc, svg.line_history(block, ids(), desc), block.caption, data)
    if isinstance(block, TestCases):
        bad = [c for c in block.cases if c.status is not CaseStatus.PASS]
        table = _table(["suite", "class", "name", "status", "message", "details"],
                       [[c.suite, c.classname or c.suite, c.name, c.status.value, c.message, c.details] for c in bad],
                       "cases", [c.status.value for c in bad]) if bad else ""
        return f'<h3>{text(block.title)}</h3><p>{esc(describe.cases(block))}</p>{table}'
    raise TypeError(f"no HTML for block {type(block).__name__}")


_STATUS_TEXT = {Status.OK: "OK", Status.FAILED: "FAILED", Status.DRIFT: "DRIFT", Status.ERROR: "ERROR"}


def render(doc: Document) -> str:
    ids = _Ids()
    meta = " · ".join(x for x in (f"stack {doc.stack}" if doc.stack else "",
                                  f"generated {doc.generated_at.isoformat(timespec='seconds')}") if x)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{esc(doc.title)}</title><style>{_CSS}</style></head><body>",
             f'<header><h1>{text(doc.title)}</h1><p><span class="status status-{doc.status.value}" '
             f'data-status="{doc.status.value}">{_STATUS_TEXT[doc.status]}</span> '
             f'<span class="meta">{esc(meta)}</span></p>']
    if doc.summary:
        parts.append('<dl class="summary">' + "".join(
            f'<dt>{text(s.key)}</dt><dd class="tone-{s.tone.value}">{text(s.value)}</dd>' for s in doc.summary) + "</dl>")
    parts.append("</header><main>")
    for section in doc.sections:
        parts.append(f"<section><h2>{text(section.title)}</h2>")
        parts.extend(_block(b, ids) for b in section.blocks)
        if not section.blocks:
            parts.append("<p>Nothing to report.</p>")
        parts.append("</section>")
    parts.append(f"</main><footer>gpufleet {esc(doc.gpufleet_version)} · {esc(doc.kind)} report · document schema "
                 f"v{doc.schema_version}</footer></body></html>")
    return "\n".join(parts) + "\n"
