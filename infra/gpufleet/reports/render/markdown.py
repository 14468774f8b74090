"""Markdown for a CI step summary or a PR comment: the summary first, long tables folded.

GitHub caps a step summary at 1 MiB and a comment at 65,536 characters; over the cap the upload
fails or the text is cut anywhere (inside a table, inside <details>). So the renderer cuts
itself: whole blocks while they fit, then as many rows of the block that does not, its
<details> closed, and a note saying what was left out and where the full report is.

Charts become a one-line description plus a table of what needs attention (bars under the floor,
failing cells, deviating versions), never ASCII art: tables survive every Markdown viewer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.reports.document import (BarChart, Block, CaseStatus, Cell, Distribution, Document, HeatMap,
                                    LineHistory, Paragraph, Status, Table, TestCases, Timeline, Tone)
from gpufleet.reports.render import describe
from gpufleet.reports.render.text import cell, clean, code_spans, number, plural, value_in

STEP_SUMMARY_LIMIT = 1024 * 1024
"""Bytes GitHub accepts in one step's $GITHUB_STEP_SUMMARY."""
COMMENT_LIMIT = 65_536
"""Characters GitHub accepts in an issue or PR comment (bytes are never fewer, so bytes are safe)."""
FOLD_ROWS = 10
"""Tables with more rows than this are folded into <details>."""
_NOTE_RESERVE = 400  # bytes kept free for the truncation note

_STATUS = {Status.OK: "✅ OK", Status.FAILED: "❌ FAILED", Status.DRIFT: "⚠️ DRIFT", Status.ERROR: "❌ ERROR"}
_TONE = {Tone.INFO: "", Tone.GOOD: "✅ ", Tone.WARNING: "⚠️ ", Tone.BAD: "❌ "}
_SPECIAL = re.compile(r"([\\`*_\[\]#|~])")


def _plain(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SPECIAL.sub(r"\\\1", text)


def _code(text: str, in_table: bool) -> str:
    """A code span: shown literally by Markdown; inside a table cell a pipe still ends the cell
    unless escaped (GFM removes that backslash first), elsewhere a backslash would show."""
    text = text.strip()
    return "`" + (text.replace("|", "\\|") if in_table else text) + "`" if text else ""


def escape(text: str, in_table: bool = False) -> str:
    """Document text as Markdown: no markup but `code` spans, no tags, one line."""
    text = re.sub(r"\r\n|\r|\n", "\n", clean(text))
    out = "".join(_code(part, in_table) if is_code else _plain(part) for is_code, part in code_spans(text))
    return out.replace("\n", "<br>")


@dataclass
class _Piece:
    """A block as lines: `head` and `tail` stay whole, `body` lines (table rows) may be cut."""

    head: list[str]
    body: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)


def _size(lines: list[str]) -> int:
    return sum(len(line.encode("utf-8")) + 1 for line in lines)


def _table(columns: list[str], rows: list[list[Cell]], title: str = "") -> _Piece:
    """A GitHub table; folded into <details> when longer than FOLD_ROWS rows."""
    header = ["| " + " | ".join(escape(c, in_table=True) or " " for c in columns) + " |",
              "|" + "|".join("---" for _ in columns) + "|"]
    body = ["| " + " | ".join(escape(cell(v), in_table=True) for v in row) + " |" for row in rows]
    label = escape(title) if title else "Table"
    if not rows:
        return _Piece([f"**{label}**: no rows.", ""] if title else ["_No rows._", ""])
    if len(rows) <= FOLD_ROWS:
        return _Piece(([f"**{label}**", ""] if title else []) + header, body, [""])
    return _Piece([f"<details><summary>{label} ({plural(len(rows), 'row')})</summary>", ""] + header, body,
                  ["", "</details>", ""])


def _line(text: str) -> _Piece:
    return _Piece([text, ""])


def _pieces(block: Block) -> list[_Piece]:
    if isinstance(block, Paragraph):
        return [_line(_TONE[block.tone] + escape(block.text))]
    if isinstance(block, Table):
        out = [_table(block.columns, block.rows, block.title)]
        return out + ([_line(f"_{escape(block.caption)}_")] if block.caption else [])
    if isinstance(block, BarChart):
        rows: list[list[Cell]] = [[b.label, value_in(b.value, block.unit), b.note] for b in block.below_floor()]
        rows += [[b.label, "not measured", b.note] for b in block.bars if b.value is None]
        out = [_line(f"**{escape(block.title)}**: {escape(describe.bar_chart(block))}")]
        if rows:
            out.append(_table(["item", "value", "note"], rows, f"{block.title}: below the {block.floor_label} "
                                                                 f"or not measured"))
        return out + _caption(block.caption)
    if isinstance(block, HeatMap):
        out = [_line(f"**{escape(block.title)}**: {escape(describe.heat_map(block))}")]
        if block.floor is not None:
            cells = sorted((c for c in block.cells if c.value < block.floor), key=lambda c: c.value)
            if cells:
                out.append(_table(["row", "column", "value"], [
                    [block.row_labels[c.row], block.col_labels[c.col], value_in(c.value, block.unit)] for c in cells],
                    f"{block.title}: cells below the floor"))
        return out + _caption(block.caption)
    if isinstance(block, Timeline):
        out = [_line(f"**{escape(block.title)}**: {escape(describe.timeline(block))}")]
        if block.spans:
            out.append(_table(["lane", "stage", "start", "end", "duration"], [
                [s.lane, s.stage, value_in(s.start, block.unit), value_in(s.end, block.unit),
                 value_in(s.end - s.start, block.unit)] for s in block.spans], block.title))
        return out + _caption(block.caption)
    if isinstance(block, Distribution):
        out = [_line(f"**{escape(block.title)}**: {escape(describe.distribution(block))}")]
        rows = []
        for g in block.groups:
            counts = sorted((x for x in g.counts if x.count), key=lambda x: (-x.count, x.value))
            rows.append([g.name, g.expected, ", ".join(f"{x.value}: {number(x.count)}" for x in counts),
                         sum(x.count for x in g.deviating())])
        if rows:
            out.append(_table(["component", "expected", "values (count)", "deviating"], rows, block.title))
        return out + _caption(block.caption)
    if isinstance(block, LineHistory):
        out = [_line(f"**{escape(block.title)}**: {escape(describe.line_history(block))}")]
        rows = []
        for s in block.series:
            measured = [v for v in s.values if v is not None]
            latest = s.values[-1] if s.values else None
            prev = next((v for v in reversed(s.values[:-1]) if v is not None), None)
            change = (f"{(latest - prev) / prev:+.1%}" if latest is not None and prev not in (None, 0)
                      else None)
            rows.append([s.name, value_in(measured[0] if measured else None, block.unit),
                         value_in(prev, block.unit), value_in(latest, block.unit), change,
                         value_in(min(measured) if measured else None, block.unit)])
        if rows:
            out.append(_table(["series", "first", "previous", "latest", "change", "min"], rows, block.title))
        return out + _caption(block.caption)
    if isinstance(block, TestCases):
        out = [_line(f"**{escape(block.title)}**: {escape(describe.cases(block))}")]
        bad = [[c.suite, c.classname or c.suite, c.name, c.status.value, c.message]
               for c in block.cases if c.status is not CaseStatus.PASS]
        if bad:
            out.append(_table(["suite", "class", "name", "status", "message"], bad, f"{block.title}: not passed"))
        return out
    raise TypeError(f"no Markdown for block {type(block).__name__}")


def _caption(caption: str) -> list[_Piece]:
    return [_line(f"_{escape(caption)}_")] if caption else []


def _document_pieces(doc: Document) -> list[_Piece]:
    meta = [f"**{_STATUS[doc.status]}**"]
    if doc.stack:
        meta.append(f"stack `{escape(doc.stack)}`")
    meta += [f"generated {doc.generated_at.isoformat(timespec='seconds')}", f"gpufleet {escape(doc.gpufleet_version)}"]
    pieces = [_Piece([f"# {escape(doc.title)}", "", " · ".join(meta), ""])]
    if doc.summary:
        pieces.append(_Piece([f"- **{escape(s.key)}:** {_TONE[s.tone]}{escape(s.value)}" for s in doc.summary] + [""]))
    for section in doc.sections:
        pieces.append(_line(f"## {escape(section.title)}"))
        if not section.blocks:
            pieces.append(_line("_Nothing to report._"))
        for block in section.blocks:
            pieces.extend(_pieces(block))
    return pieces


def render(doc: Document, limit: int = STEP_SUMMARY_LIMIT, full_report: str = "the JSON and HTML reports") -> str:
    """The document as GitHub-flavoured Markdown of at most `limit` UTF-8 bytes.

    `full_report` names where the reader finds what a truncated summary leaves out.
    """
    if limit < 2 * _NOTE_RESERVE:
        raise ValueError(f"a Markdown limit of {limit} bytes leaves no room for a report")
    budget = limit - _NOTE_RESERVE
    out: list[str] = []
    used, total_lines, kept_lines = 0, 0, 0
    cut = False
    for piece in _document_pieces(doc):
        lines = piece.head + piece.body + piece.tail
        total_lines += len(piece.body) + len(piece.head)
        if cut:
            continue
        size = _size(lines)
        if used + size <= budget:
            out += lines
            used += size
            kept_lines += len(piece.body) + len(piece.head)
            continue
        cut = True
        fixed = _size(piece.head) + _size(piece.tail)
        if used + fixed > budget:
            continue
        kept = piece.head[:]
        used += fixed
        for line in piece.body:
            n = _size([line])
            if used + n > budget:
                break
            kept.append(line)
            used += n
        out += kept + piece.tail
        kept_lines += len(kept)
    if cut:
        out += ["", f"> **Truncated:** {number(total_lines - kept_lines)} of {number(total_lines)} lines left out to stay "
                    f"under {number(limit)} bytes; see {escape(full_report)}."]
    text = "\n".join(out).rstrip("\n") + "\n"
    return text
