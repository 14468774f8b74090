"""Small helpers shared by the parsers: sentinels, numbers with units, rank prefixes."""

from __future__ import annotations

import functools
import re
from typing import Callable, TypeVar

from pydantic import BaseModel, ConfigDict

# nvidia-smi prints these instead of a value; they mean "no reading", not a failure ...
NA_SENTINELS = frozenset({
    "", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Requested functionality has been deprecated]",
    "Requested functionality has been deprecated", "[Insufficient Permissions]", "[Not Found]",
})
# ... while these mean the GPU or driver is in trouble.
ERROR_SENTINELS = frozenset({"[GPU is lost]", "[Unknown Error]", "[Unknown]", "GPU is lost", "Unknown Error"})

_NUM_UNIT = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(?:[A-Za-z%/]+(?:\([a-z]+\))?)$")
RANK_PREFIX = re.compile(r"^(?:\s*\d+:\s?|\[\d+,\d+\]<std(?:out|err)>:)")


# Line boundaries str.splitlines() knows besides '\n'. A text without them splits into the same
# lines under re.MULTILINE ('^'/'$' at '\n'), so a whole-text regex may replace a per-line loop.
_ODD_LINE_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def plain_lines(text: str) -> bool:
    """True when '\n' is the only line boundary in text (then '\n'-based regexes see splitlines()' lines)."""
    if text.isascii():  # the usual case: a few memchr scans instead of a character-class search
        return not ("\r" in text or "\x0b" in text or "\x0c" in text or "\x1c" in text or "\x1d" in text
                    or "\x1e" in text)
    return _ODD_LINE_BREAKS.search(text) is None


class ParseModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


_P = TypeVar("_P")


def shared_by_text(parse: Callable[[str], _P]) -> Callable[[str], _P]:
    """One parse per distinct text, the result shared (parse results are frozen models).

    Why: nodes built from one image print byte-identical `fi_info`, `topo -m`, `lspci` and
    version outputs; a cohort of 1,250 then parses each text once. Bounded: a cohort of
    distinct texts just clears and refills the table. `parse.uncached` is the plain parser.
    """
    table: dict[str, _P] = {}

    @functools.wraps(parse)
    def cached(text: str) -> _P:
        hit = table.get(text)
        if hit is None:
            hit = parse(text)
            if len(table) >= 256:
                table.clear()
            table[text] = hit
        return hit

    cached.uncached = parse  # type: ignore[attr-defined]
    return cached


def strip_unit(value: str) -> str:
    """'81559 MiB' -> '81559'; '700.00 W' -> '700.00'; other text unchanged."""
    # Cheap exits first (this runs on every CSV cell): the pattern needs a leading '-' or digit
    # and a trailing unit letter, '%', '/', ')' or newline, so a value ending in a digit or
    # starting with a letter cannot match. isdigit() is a superset of \d, so nothing is skipped wrongly.
    if not value:
        return value
    c = value[0]
    if (c != "-" and not c.isdigit()) or value[-1].isdigit():
        return value
    m = _NUM_UNIT.match(value)
    return m.group(1) if m else value


def to_float(value: str | None) -> float | None:
    if value is None:
        return None
    v = value.strip()
    try:
        # A string float() accepts never matches the number+unit pattern (that needs trailing
        # unit letters, which float() rejects apart from 'inf'/'nan' with no digits before them),
        # so trying float() first gives the same answer as strip_unit() then float().
        return float(v)
    except ValueError:
        pass
    try:
        return float(strip_unit(v))
    except ValueError:
        return None


_ints: dict[str, int | None] = {}  # to_int's answers by input text; a fleet prints few distinct values


def to_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return _ints[value]
    except KeyError:
        n = _to_int(value)
    except TypeError:  # not a str: let _to_int fail as it would
        return _to_int(value)
    if len(_ints) >= 4096:  # per-device counters would grow it without limit
        _ints.clear()
    _ints[value] = n
    return n


def _to_int(value: str) -> int | None:
    v = strip_unit(value.strip())
    try:
        return int(v, 16) if v.lower().startswith("0x") else int(v)
    except ValueError:
        f = to_float(v)
        return int(f) if f is not None and f.is_integer() else None


_TRUE_WORDS = ("yes", "enabled", "active", "true")
_FALSE_WORDS = ("no", "disabled", "not active", "false", "none")
# the usual spellings, looked up before normalising (an answer that yes_no's rule gives them)
_YES_NO = {w: b for words, b in ((_TRUE_WORDS, True), (_FALSE_WORDS, False))
           for word in words for w in (word, word.capitalize(), word.title(), word.upper())}


def yes_no(value: str | None) -> bool | None:
    """'Yes'/'No', 'Enabled'/'Disabled', 'Active'/'Not Active' -> bool; anything else -> None."""
    if value is None:
        return None
    if type(value) is str:
        b = _YES_NO.get(value)
        if b is not None:
            return b
    v = value.strip().lower()
    if v in _TRUE_WORDS:
        return True
    if v in _FALSE_WORDS:
        return False
    return None


def strip_rank_prefix(line: str) -> str:
    """Remove `0: ` (srun -l) or `[1,0]<stdout>:` (OpenMPI --tag-output)."""
    if ":" not in line:  # both prefixes end in ':' (a result row has none)
        return line
    return RANK_PREFIX.sub("", line, count=1)


# How a shell says a command is absent: `bash: line 1: dcgmi: command not found` (bash),
# `/bin/sh: 1: dcgmi: not found` (dash), `...: all_reduce_perf: No such file or directory` (a path).
_ABSENT = re.compile(r"^(?:.*?: )?(\S+): (?:command not found|not found|No such file or directory)\s*$", re.M)


def missing_tool(text: str, exit_code: int | None) -> str | None:
    """The shell's line saying the command is absent, or None when the tool ran.

    Why not just exit 127: a collector may not record the exit code, and a tool that ran may
    print a file path it could not open; the shell's own line is only trusted when it is the
    output's first line (or the exit code is 127, the shell's code for "command not found").
    """
    first = first_line(text)
    if exit_code == 127:  # the shell's line, also after what the command printed first (a preamble echo)
        said = next((ln.strip() for ln in text[-4096:].splitlines() if _ABSENT.match(ln.strip())), None)
        return said or first or "exit 127 (command not found)"
    if first and ("command not found" in first or ": not found" in first) and _ABSENT.match(first):
        return first
    return None


def first_line(text: str) -> str:
    """The first non-blank line, stripped, without splitting the whole text (outputs run to MBs)."""
    start, n = 0, len(text)
    while start < n:
        end = text.find("\n", start)
        line = text[start:end if end >= 0 else n].strip()
        if line:
            return line.splitlines()[0].strip() if any(c in line for c in "\r\x0b\x0c") else line
        if end < 0:
            break
        start = end + 1
    return ""


def absent_command(line: str) -> str | None:
    """'bash: line 1: dcgmi: command not found' -> 'dcgmi'; '/opt/x/all_reduce_perf: No such file...' -> 'all_reduce_perf'."""
    m = _ABSENT.match(line.strip())
    return m.group(1).rsplit("/", 1)[-1] if m else None
