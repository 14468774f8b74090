"""libfabric fabtests performance tables: `fi_pingpong` and the `fi_rma_bw`/`fi_msg_bw` family.

Both print a header line naming their columns, then one row per message size:
  fi_pingpong:  bytes  #sent  #ack  total  time  MB/sec  usec/xfer  Mxfers/sec
  fi_rma_bw:    [name] bytes  iters  total  time  MB/sec  usec/xfer  Mxfers/sec
Sizes and totals are fabtests' `size_str` (`1k`, `1.2m`, `20m`, `1g`: powers of 1024, one
truncated decimal below 10); counts (`#sent`, `#ack`, `iters`) are its `cnt_str` (`10k`, `1m`,
`1b`: powers of 1000, truncated), so "1k" iterations are 1000, not 1024 (fabtests
common/shared.c). `time` ends in `s`, `#ack` may carry a leading `=`. Columns are located by the header, so either
table (and a Slurm/MPI rank prefix) parses the same way. `fi_getinfo(): -61` and similar
lines mean the fabric could not be opened: a failure, reported as such.
"""

from __future__ import annotations

import re

from gpufleet.gates.parsers.common import RANK_PREFIX, ParseModel

_SUFFIX = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"^=?([\d.]+)([kmgt]?)$", re.IGNORECASE)
_CNT_SUFFIX = {"": 1, "k": 1000, "m": 1000**2, "b": 1000**3}  # cnt_str: thousand, million, billion
_CNT = re.compile(r"^=?(\d+)([kmb]?)$")
_ERROR = re.compile(r"(fi_\w+\(?\)?:?\s*-?\d+.*|.*\b(?:error|failed|No data available)\b.*)", re.IGNORECASE)


class FabRow(ParseModel):
    bytes: int
    mb_per_s: float
    usec_per_xfer: float
    iterations: int | None = None


class FabResult(ParseModel):
    rows: tuple[FabRow, ...] = ()
    errors: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # table lines of the header's width that do not read as a row

    def row(self, size: int) -> FabRow | None:
        return next((r for r in self.rows if r.bytes == size), None)

    @property
    def smallest(self) -> FabRow | None:
        return min(self.rows, key=lambda r: r.bytes) if self.rows else None

    @property
    def largest(self) -> FabRow | None:
        return max(self.rows, key=lambda r: r.bytes) if self.rows else None


def size_value(token: str) -> int | None:
    m = _SIZE.match(token.strip())
    if m is None:
        return None
    return int(float(m[1]) * _SUFFIX[m[2].lower()])


def count_value(token: str) -> int | None:
    """fabtests' cnt_str back to a count: '10' -> 10, '1k' -> 1000, '=10k' -> 10000, '2m' -> 2000000."""
    m = _CNT.match(token.strip())
    if m is None:
        return None
    return int(m[1]) * _CNT_SUFFIX[m[2]]


def parse_table(text: str) -> FabResult:
    columns: list[str] | None = None
    rows: list[FabRow] = []
    errors: list[str] = []
    problems: list[str] = []
    for raw in text.splitlines():
        line = RANK_PREFIX.sub("", raw).strip()
        if not line:
            continue
        tokens = line.split()
        if "bytes" in tokens and "MB/sec" in tokens:
            columns = tokens
            continue
        if columns is not None and len(tokens) == len(columns):
            row = _row(dict(zip(columns, tokens)))
            if row is not None:
                rows.append(row)
                continue
            if tokens[0][:1].isdigit() or tokens[0].startswith(("write_", "read_", "send_")):
                problems.append(f"unreadable table row: {line[:120]}")
                continue
        if _ERROR.fullmatch(line):
            errors.append(line)
    if not rows and not errors:
        errors.append("no fabtests result table in the output")
    return FabResult(rows=tuple(rows), errors=tuple(errors), problems=tuple(problems))


def _row(cells: dict[str, str]) -> FabRow | None:
    size = size_value(cells["bytes"])
    try:
        bw = float(cells["MB/sec"])
        usec = float(cells.get("usec/xfer", "nan"))
    except ValueError:
        return None
    if size is None:
        return None
    iters = cells.get("iters") or cells.get("#sent")
    count = count_value(iters) if iters else None
    if iters and count is None:
        return None  # a count fabtests never prints: the row is unreadable, not a row of unknown length
    return FabRow(bytes=size, mb_per_s=bw, usec_per_xfer=usec, iterations=count)
