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


JSON_VERSIONS = (1, 2, 3)  # nccl-tests src/util.cu JSON_FILE_VERSION: 1 (2.17.3), 3 (2.19.x)
_ROOT = re.compile(r"^\s*-?\d+$")


class _Unreadable(ValueError):
    """A value of a shape nccl-tests' writer never produces: the document is not judged."""


def _num(d: dict, key: str, where: str, *, nan_ok: bool = False) -> float:
    """A JSON number (jsonDouble / jsonInt / jsonSize_t); "nan" only where NaN is a reading."""
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        if nan_ok and v == "nan":
            return float("nan")
        raise _Unreadable(f"{where}.{key}: expected a number, got {v!r}"[:160])
    return float(v)


def _int_field(d: dict, key: str, where: str) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Unreadable(f"{where}.{key}: expected an integer, got {v!r}"[:160])
    return v


def _flag(v: object, where: str, *, unchecked_ok: bool = False) -> bool | None:
    """jsonBool writes the strings "true"/"false"; average_bus_bandwidth.okay may be "unchecked"."""
    if v == "true":
        return True
    if v == "false":
        return False
    if unchecked_ok and v == "unchecked":
        return None
    allowed = '"true", "false" or "unchecked"' if unchecked_ok else '"true" or "false"'
    raise _Unreadable(f"{where}: expected {allowed}, got {v!r}"[:160])


def _json_half(d: object, where: str) -> Half | None:
    """One of out_of_place / in_place: {time|cpu_time, alg_bw, bus_bw, nwrong (a float, or null: -c 0)}."""
    if d is None:
        return None
    if not isinstance(d, dict):
        raise _Unreadable(f"{where}: expected an object or null, got {type(d).__name__}")
    tkey = "time" if "time" in d else "cpu_time"
    nw = d.get("nwrong")
    if nw is None:
        wrong = None
    elif isinstance(nw, bool) or not isinstance(nw, (int, float)) or nw != nw or nw < 0 or float(nw) != int(nw):
        raise _Unreadable(f"{where}.nwrong: expected a whole number or null, got {nw!r}"[:160])
    else:
        wrong = int(nw)
    return Half(time_us=_num(d, tkey, where, nan_ok=True), algbw=_num(d, "alg_bw", where, nan_ok=True),
                busbw=_num(d, "bus_bw", where, nan_ok=True), wrong=wrong)


def _json_row(r: object, i: int) -> PerfRow:
    where = f"results[{i}]"
    if not isinstance(r, dict):
        raise _Unreadable(f"{where}: expected an object")
    root = r.get("root")
    if isinstance(root, str) and _ROOT.match(root):  # sprintf("%6i"): "    -1"
        root_n: int | None = int(root)
    elif root is None:
        root_n = None
    else:
        raise _Unreadable(f"{where}.root: expected a padded integer string, got {root!r}"[:160])
    for key in ("type", "redop"):
        if not isinstance(r.get(key), str):
            raise _Unreadable(f"{where}.{key}: expected a string, got {r.get(key)!r}"[:160])
    oop = _json_half(r.get("out_of_place"), f"{where}.out_of_place")
    inp = _json_half(r.get("in_place"), f"{where}.in_place")
    if oop is None:  # trace replay writes in-place only; gate on what was measured
        if inp is None:
            raise _Unreadable(f"{where}: neither out_of_place nor in_place")
        oop, inp = inp, None
    return PerfRow(size=_int_field(r, "size", where), count=_int_field(r, "count", where), dtype=r["type"],
                   redop=r["redop"], root=root_n, out_of_place=oop, in_place=inp)


def parse_json(text: str) -> PerfResult:
    """The `-J file.json` output (nccl-tests >= 2.17.3; format version 3 from 2.19), read as
    src/util.cu writes it: booleans are the strings "true"/"false" (the average's `okay` may be
    "unchecked": no -G/--check_avg_bw bar), `root` a "%6i" string, `nwrong` a double or null
    (-c 0), NaN as the string "nan", `devices` under `config`. A value of any other shape is a
    problem (the gates say "unreadable: retest"), never an exception and never a pass.
    """
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        return PerfResult(problems=(f"invalid JSON: {exc}",))
    if not isinstance(doc, dict):
        return PerfResult(problems=("the -J document is not an object",))
    problems: list[str] = []
    version = doc.get("version")
    if version is not None and version not in JSON_VERSIONS:
        problems.append(f"unknown -J format version {version!r} (known: {JSON_VERSIONS})")
    results = doc.get("results")
    if not isinstance(results, list):
        return PerfResult(problems=(*problems, f"results: expected a list, got {type(results).__name__}"))
    rows: list[PerfRow] = []
    for i, r in enumerate(results):
        try:
            rows.append(_json_row(r, i))
        except _Unreadable as exc:
            problems.append(str(exc))
    oob_count = oob_ok = avg = None
    try:
        oob = doc.get("out_of_bounds")
        if oob is not None:
            if not isinstance(oob, dict):
                raise _Unreadable("out_of_bounds: expected an object")
            oob_count = _int_field(oob, "count", "out_of_bounds")
            oob_ok = _flag(oob.get("okay"), "out_of_bounds.okay")
        ab = doc.get("average_bus_bandwidth")
        if ab is not None:
            if not isinstance(ab, dict):
                raise _Unreadable("average_bus_bandwidth: expected an object")
            avg = _num(ab, "bandwidth", "average_bus_bandwidth", nan_ok=True)
            _flag(ab.get("okay"), "average_bus_bandwidth.okay", unchecked_ok=True)
        config = doc.get("config")
        if config is not None and not isinstance(config, dict):
            raise _Unreadable("config: expected an object")
        devices = (config or {}).get("devices", doc.get("devices"))  # v3: under config; v1 drafts: top level
        if devices is not None and not (isinstance(devices, list) and all(isinstance(d, dict) for d in devices)):
            raise _Unreadable("config.devices: expected a list of objects")
        for key in ("minimum_bytes", "maximum_bytes"):
            if config is not None and key in config:
                _int_field(config, key, "config")
    except _Unreadable as exc:
        problems.append(str(exc))
    warns = tuple(e for e in doc.get("errors") or () if isinstance(e, str) and e.strip())
    if not rows:
        problems.append("no result rows")
    return PerfResult(rows=tuple(rows), out_of_bounds=oob_count, out_of_bounds_ok=oob_ok, avg_busbw=avg,
                      nccl_warnings=warns, problems=tuple(problems))


def _f(v) -> float | None:
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
