"""nccl-tests `*_perf` output: the text table (any rank prefix, any column set) and `-J` JSON.

Why header-driven: v2.16 vs v2.19 spacing, an old `error` column instead of `#wrong`, and
`-I 1`/`-S 1` extra columns all move the busbw column; splitting on whitespace and locating
`time algbw busbw #wrong` in the header survives all of them. The footer's `Avg bus bandwidth`
is parsed but is an average of the whole sweep: gates must not use it (research section 0).
"""

from __future__ import annotations

import json
import re

from gpufleet.gates.parsers.common import ParseModel, strip_rank_prefix, to_float


class Half(ParseModel):
    """One of out-of-place / in-place."""

    time_us: float | None = None
    algbw: float | None = None
    busbw: float | None = None
    wrong: int | None = None  # None: N/A (-c 0) or an old float `error` column
    error: float | None = None  # old builds: max error instead of a count


class PerfRow(ParseModel):
    size: int
    count: int | None = None
    dtype: str | None = None
    redop: str | None = None
    root: int | None = None
    out_of_place: Half
    in_place: Half | None = None


class PerfResult(ParseModel):
    rows: tuple[PerfRow, ...] = ()
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    avg_busbw: float | None = None  # informational only; never gate on it
    nccl_warnings: tuple[str, ...] = ()
    unparsed: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def wrong_total(self) -> int | None:
        counts = [h.wrong for r in self.rows for h in (r.out_of_place, r.in_place) if h is not None and h.wrong is not None]
        return sum(counts) if counts else None


_DEFAULT_COLS = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                 "time", "algbw", "busbw", "#wrong"]
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.eE+-]+)")


def _int(v: str) -> int | None:
    try:
        return int(v)
    except ValueError:
        f = to_float(v)
        return int(f) if f is not None and f.is_integer() else None


def parse_text(text: str) -> PerfResult:
    cols = list(_DEFAULT_COLS)
    rows: list[dict] = []
    oob = oob_ok = avg = None
    warns: list[str] = []
    unparsed: list[str] = []
    problems: list[str] = []
    for raw in text.splitlines():
        line = strip_rank_prefix(raw).strip()
        if not line:
            continue
        if line.startswith("#"):
            body = line.lstrip("#").split()
            if body[:2] == ["size", "count"] or (body and body[0] == "size"):
                cols = body
                continue
            m = _OOB.match(line)
            if m:
                oob, oob_ok = int(m.group(1)), (m.group(2) != "FAILED")
                continue
            m = _AVG.match(line)
            if m:
                avg = to_float(m.group(1))
            continue
        if "NCCL WARN" in line:
            warns.append(line)
            continue
        tokens = line.split()
        if not tokens[0].isdigit():
            continue  # NCCL INFO lines, hostnames, banners
        row = _row(tokens, cols)
        if row is None:
            unparsed.append(line)
        else:
            rows.append(row)
    if not rows:
        problems.append("no result rows")
    return PerfResult(rows=tuple(rows), out_of_bounds=oob, out_of_bounds_ok=oob_ok, avg_busbw=avg,
                      nccl_warnings=tuple(warns), unparsed=tuple(unparsed), problems=tuple(problems))


def _row(tokens: list[str], cols: list[str]) -> dict | None:
    """One result row as PerfRow's fields (halves as Half's), or None when it does not fit the columns."""
    if len(tokens) != len(cols):
        # no header seen and an unfamiliar shape: accept the common 13- or 12-column layouts only
        if len(tokens) == 12 and cols == _DEFAULT_COLS:  # collectives without a root column
            cols = [c for c in _DEFAULT_COLS if c != "root"]
        else:
            return None
    halves = []
    idx = [i for i, c in enumerate(cols) if c == "time"]
    for start in idx[:2]:
        h: dict = {}
        for j in range(start, min(start + 4, len(cols))):
            name, val = cols[j], tokens[j]
            if name == "time":
                h["time_us"] = to_float(val)
            elif name == "algbw":
                h["algbw"] = to_float(val)
            elif name == "busbw":
                h["busbw"] = to_float(val)
            elif name in ("#wrong", "wrong"):
                h["wrong"] = None if val.upper() == "N/A" else _int(val)
            elif name == "error":
                h["error"] = to_float(val)
        halves.append(h)
    if not halves:
        return None
    get = dict(zip(cols[:idx[0]], tokens[:idx[0]]))
    size = _int(get.get("size", ""))
    if size is None:
        return None
    # plain dicts: PerfResult validates the rows and their halves in one call
    return {"size": size, "count": _int(get["count"]) if "count" in get else None, "dtype": get.get("type"),
            "redop": get.get("redop"), "root": _int(get["root"]) if "root" in get else None,
            "out_of_place": halves[0], "in_place": halves[1] if len(halves) > 1 else None}


def parse_json(text: str) -> PerfResult:
    """The `-J file.json` output (nccl-tests >= 2.17.3)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        return PerfResult(problems=(f"invalid JSON: {exc}",))
    rows: list[PerfRow] = []
    problems: list[str] = []

    def half(d: dict | None) -> Half | None:
        if not isinstance(d, dict):
            return None
        nw = d.get("nwrong")
        wrong = None if nw is None or (isinstance(nw, str) and nw.upper() == "N/A") else int(nw)
        return Half(time_us=_f(d.get("time")), algbw=_f(d.get("alg_bw")), busbw=_f(d.get("bus_bw")), wrong=wrong)

    for r in doc.get("results") or []:
        oop = half(r.get("out_of_place"))
        if oop is None or r.get("size") is None:
            problems.append(f"result without size/out_of_place: {str(r)[:80]}")
            continue
        rows.append(PerfRow(size=int(r["size"]), count=r.get("count"), dtype=r.get("type"), redop=r.get("redop"),
                            root=r.get("root"), out_of_place=oop, in_place=half(r.get("in_place"))))
    oob = doc.get("out_of_bounds") or {}
    avg = doc.get("average_bus_bandwidth") or {}
    if not rows:
        problems.append("no result rows")
    return PerfResult(rows=tuple(rows), out_of_bounds=oob.get("count"), out_of_bounds_ok=oob.get("okay"),
                      avg_busbw=_f(avg.get("bandwidth")), problems=tuple(problems))


def _f(v) -> float | None:
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
