"""Text helpers shared by the renderers: numbers, durations and cells written the same way in
every format, and characters no format can carry removed.

Why one place: a busbw of 372.5 must read "372.5" in the Markdown summary, the HTML tooltip and
the JUnit message alike, or readers compare different roundings of one figure.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable

from gpufleet.reports.document import Cell

# XML 1.0 forbids C0 controls other than tab, LF and CR, lone surrogates and U+FFFE/U+FFFF;
# HTML parsers and GitHub's Markdown choke on the same characters.
_INVALID_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def clean(text: str) -> str:
    """`text` without the characters XML 1.0 cannot carry (kept: tab, LF, CR)."""
    return _INVALID_CHARS.sub("", text)


_CODE = re.compile(r"`([^`\n]+)`")


def code_spans(text: str) -> list[tuple[bool, str]]:
    """`text` split into (is_code, part): document text may mark identifiers as `code`.

    The one markup documents carry: Markdown shows the span as code, HTML as <code>; everything
    else in a document is plain text that every renderer escapes.
    """
    parts: list[tuple[bool, str]] = []
    last = 0
    for m in _CODE.finditer(text):
        if m.start() > last:
            parts.append((False, text[last:m.start()]))
        parts.append((True, m.group(1)))
        last = m.end()
    if last < len(text):
        parts.append((False, text[last:]))
    return parts


def number(value: float | None) -> str:
    """A figure for people: thousands separators, at most 2 decimals, scientific when huge or tiny."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) < 10**15 else f"{value:.3e}"
    if not math.isfinite(value):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 1e15 or (0 < magnitude < 1e-3):
        return f"{value:.3e}"
    text = f"{value:,.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def with_unit(value: float | None, unit: str) -> str:
    text = number(value)
    return f"{text} {unit}" if unit and value is not None else text


def duration(seconds: float) -> str:
    """1h02m03s / 4m05s / 12.5s: timelines span seconds to hours."""
    if seconds < 60:
        return f"{number(round(seconds, 1))}s"
    s = int(round(seconds))
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"


def value_in(value: float | None, unit: str) -> str:
    """A value in a chart's unit; durations when the unit is seconds."""
    if value is not None and unit == "s":
        return duration(value)
    return with_unit(value, unit)


def cell(value: Cell) -> str:
    """A table cell as text (None as an en dash, booleans as yes/no)."""
    if value is None or isinstance(value, (bool, int, float)):
        return number(value)
    return clean(value)


def stats(values: Iterable[float]) -> tuple[float, float, float] | None:
    """(min, median, max), or None for no values."""
    vs = sorted(values)
    if not vs:
        return None
    return vs[0], statistics.median(vs), vs[-1]


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else many or word + 's'}"
