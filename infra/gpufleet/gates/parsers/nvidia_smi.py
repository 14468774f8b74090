"""nvidia-smi: `--query-gpu`/`--query-remapped-rows` CSV, `-q`, `nvlink -s`, `topo -m`.

Why header-driven and indentation-driven: field order, key-column width (43 vs 55) and the
set of fields change between drivers; sentinels (`[N/A]`, `[Not Supported]`) mean "no reading"
and are returned as None, while `[GPU is lost]`/`[Unknown Error]` are reported as problems.
"""

from __future__ import annotations

import csv
import functools
import re
from typing import Mapping

from gpufleet.gates.parsers.common import (ERROR_SENTINELS, NA_SENTINELS, ParseModel, plain_lines, shared_by_text,
                                        strip_unit, to_float, to_int, yes_no)

# ---------------------------------------------------------------- --query-gpu / --query-remapped-rows

_UNIT_IN_HEADER = re.compile(r"\s*\[[^\]]*\]\s*$")
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


class QueryCsv(ParseModel):
    """One dict per GPU row: field name (units stripped from the header) -> value or None."""

    fields: tuple[str, ...] = ()
    rows: tuple[dict[str, str | None], ...] = ()
    problems: tuple[str, ...] = ()

    def column(self, name: str) -> list[str | None]:
        return [r.get(name) for r in self.rows]


class QueryTable:
    """parse_query_csv's reading before the per-cell unit stripping: `rows` holds one tuple of
    values per GPU row, in `fields` order, whitespace-stripped, sentinels -> None, units kept.

    Why: `--query-gpu` prints ~40 fields x 8 GPUs and the checks read about 20 of them; stripping
    units on every cell (what QueryCsv.rows holds) is most of the parse. `value(row, name)` and
    `to_model()` apply strip_unit, so both give exactly QueryCsv's values.
    """

    __slots__ = ("fields", "rows", "problems")

    def __init__(self, fields: tuple[str, ...], rows: tuple[tuple[str | None, ...], ...],
                 problems: tuple[str, ...]) -> None:
        self.fields, self.rows, self.problems = fields, rows, problems

    def records(self) -> list[dict[str, str | None]]:
        """One dict per row, values with units still on (duplicate field names: the last wins, as in QueryCsv)."""
        fields = self.fields
        return [dict(zip(fields, r)) for r in self.rows]

    def to_model(self) -> QueryCsv:
        fields = self.fields
        rows = tuple({f: None if v is None else strip_unit(v) for f, v in zip(fields, r)} for r in self.rows)
        return QueryCsv(fields=fields, rows=rows, problems=self.problems)


def read_query_table(text: str) -> QueryTable:
    """The `--query-gpu` / `--query-remapped-rows` CSV (header line required), units not yet stripped."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return QueryTable((), (), ("empty output",))
    reader = csv.reader(lines, skipinitialspace=True)
    header = next(reader)
    fields = tuple(_UNIT_IN_HEADER.sub("", h.strip()) for h in header)
    if not any("." in f or f in ("name", "count", "timestamp", "gpu_bus_id", "driver_version") for f in fields):
        return QueryTable((), (), ("no header line (was --format=csv,noheader used?)",))
    odd = [f for f in fields if not _FIELD_NAME.match(f)]
    if odd:  # `--help-query-gpu` names are dotted identifiers: anything else is not this CSV
        return QueryTable((), (), (f"not a --query-gpu header: {', '.join(odd)[:120]}",))
    rows: list[tuple[str | None, ...]] = []
    problems: list[str] = []
    n = len(fields)
    na = NA_SENTINELS
    for i, raw in enumerate(reader):
        if len(raw) != n:
            problems.append(f"row {i}: {len(raw)} values for {n} fields; skipped")
            continue
        vals = tuple([None if (v := c.strip()) in na else v for c in raw])
        if not ERROR_SENTINELS.isdisjoint(vals):
            for f, v in zip(fields, vals):
                if v in ERROR_SENTINELS:
                    problems.append(f"row {i}: {f} = {v}")
            vals = tuple([None if v in ERROR_SENTINELS else v for v in vals])
        rows.append(vals)
    if not rows:
        problems.append("no data rows")
    return QueryTable(fields, tuple(rows), tuple(dict.fromkeys(problems)))


def parse_query_csv(text: str) -> QueryCsv:
    return read_query_table(text).to_model()


# ---------------------------------------------------------------- -q

_Q_LINE = re.compile(r"^(\s*)(\S.*?)\s+:(?:\s(.*))?$")


class QGpu(ParseModel):
    """One GPU section of `nvidia-smi -q`, flattened: 'ECC Errors/Volatile/DRAM Uncorrectable' -> '0'."""

    bus_id: str
    values: dict[str, str]

    def get(self, *paths: str) -> str | None:
        """The first path present with a real value (sentinels -> None)."""
        for p in paths:
            v = self.values.get(p)
            if v is not None and v not in NA_SENTINELS:
                return v
        return None

    @property
    def product_name(self) -> str | None:
        return self.get("Product Name")

    @property
    def persistence_mode(self) -> bool | None:
        return yes_no(self.get("Persistence Mode"))

    @property
    def ecc_mode(self) -> tuple[bool | None, bool | None]:
        return yes_no(self.get("ECC Mode/Current")), yes_no(self.get("ECC Mode/Pending"))

    @property
    def volatile_uncorrectable(self) -> int | None:
        parts = [to_int(self.get(p)) for p in ("ECC Errors/Volatile/DRAM Uncorrectable",
                                               "ECC Errors/Volatile/SRAM Uncorrectable Parity",
                                               "ECC Errors/Volatile/SRAM Uncorrectable SEC-DED",
                                               "ECC Errors/Volatile/SRAM Uncorrectable")]
        known = [p for p in parts if p is not None]
        return sum(known) if known else None

    @property
    def remapped(self) -> dict[str, int | bool | None]:
        return {
            "correctable": to_int(self.get("Remapped Rows/Correctable Error")),
            "uncorrectable": to_int(self.get("Remapped Rows/Uncorrectable Error")),
            "pending": yes_no(self.get("Remapped Rows/Pending")),
            "failure": yes_no(self.get("Remapped Rows/Remapping Failure Occurred")),
            "histogram_none": to_int(self.get("Remapped Rows/Bank Remap Availability Histogram/None")),
        }

    @property
    def pcie(self) -> dict[str, int | None]:
        base = "PCI/GPU Link Info/"
        return {
            "gen_max": to_int(self.get(base + "PCIe Generation/Max")),
            "gen_current": to_int(self.get(base + "PCIe Generation/Current")),
            "gen_device_max": to_int(self.get(base + "PCIe Generation/Device Max")),
            "width_max": to_int((self.get(base + "Link Width/Max") or "").rstrip("x") or None),
            "width_current": to_int((self.get(base + "Link Width/Current") or "").rstrip("x") or None),
        }

    @property
    def clock_event_reasons(self) -> dict[str, bool]:
        """Active flags by name; older drivers call the section 'Clocks Throttle Reasons'."""
        out: dict[str, bool] = {}
        for prefix in ("Clocks Event Reasons/", "Clocks Throttle Reasons/"):
            for k, v in self.values.items():
                if k.startswith(prefix):
                    flag = yes_no(v)
                    if flag is not None:
                        out[k[len(prefix):].split("/")[-1]] = flag
        return out

    @property
    def recovery_action(self) -> str | None:
        return self.get("GPU Recovery Action", "GPU Reset Status/Reset Required")

    @property
    def fabric(self) -> tuple[str | None, str | None]:
        return self.get("Fabric/State"), self.get("Fabric/Status")


class SmiQ(ParseModel):
    driver_version: str | None = None
    cuda_version: str | None = None
    attached_gpus: int | None = None
    gpus: tuple[QGpu, ...] = ()
    problems: tuple[str, ...] = ()


def parse_q(text: str) -> SmiQ:
    top: dict[str, str] = {}
    gpus: list[QGpu] = []
    current: dict[str, str] | None = None
    bus_id = ""
    stack: list[tuple[int, str]] = []  # (indent, section name) of open sections inside a GPU
    problems: list[str] = []

    def close() -> None:
        if current is not None:
            gpus.append(QGpu(bus_id=bus_id, values=current))

    for line in text.splitlines():
        if not line.strip() or line.startswith("==="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        stripped = line.strip()
        if indent == 0 and stripped.startswith("GPU ") and " : " not in line:
            close()
            current, bus_id, stack = {}, stripped[4:].strip(), []
            continue
        m = _Q_LINE.match(line.rstrip())
        key, value = (m.group(2).strip(), (m.group(3) or "").strip()) if m else (stripped, None)
        if current is None:
            if value is not None:
                top[key] = value
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([s for _, s in stack] + [key])
        if value is None or value == "":
            stack.append((indent, key))
            if value == "":
                current[path] = ""
        else:
            current[path] = value
        if value in ERROR_SENTINELS:
            problems.append(f"GPU {bus_id}: {path} = {value}")
    close()
    if not gpus:
        problems.append("no GPU section found")
    attached = to_int(top.get("Attached GPUs"))
    if attached is not None and attached != len(gpus):
        problems.append(f"Attached GPUs says {attached}, found {len(gpus)} GPU sections")
    return SmiQ(driver_version=top.get("Driver Version"), cuda_version=top.get("CUDA Version"),
                attached_gpus=attached, gpus=tuple(gpus), problems=tuple(problems))


# ---------------------------------------------------------------- NVLink fabric (-q and --query-gpu)

# The same fields under their `--query-gpu` names (driver 580 `--help-query-gpu`) and their `-q`
# paths (Fabric > State/Status/CliqueId/ClusterUUID, Fabric > Health > ...; the real driver 580
# and 590 captures in tests/fixtures/real).
FABRIC_CSV_FIELDS = {
    "fabric.state": "state", "fabric.status": "status", "fabric.cliqueId": "clique_id",
    "fabric.clusterUuid": "cluster_uuid", "fabric.health.summary": "summary",
    "fabric.health.bandwidth": "bandwidth", "fabric.health.route_recovery_in_progress": "route_recovery",
    "fabric.health.route_unhealthy": "route_unhealthy",
    "fabric.health.access_timeout_recovery": "access_timeout_recovery",
    "fabric.health.incorrect_configuration": "incorrect_configuration",
}
FABRIC_Q_PATHS = {
    "Fabric/State": "state", "Fabric/Status": "status", "Fabric/CliqueId": "clique_id",
    "Fabric/ClusterUUID": "cluster_uuid", "Fabric/Health/Summary": "summary", "Fabric/Health/Bandwidth": "bandwidth",
    "Fabric/Health/Route Recovery in progress": "route_recovery", "Fabric/Health/Route Unhealthy": "route_unhealthy",
    "Fabric/Health/Access Timeout Recovery": "access_timeout_recovery",
    "Fabric/Health/Incorrect Configuration": "incorrect_configuration",
}
# What nvidia-smi prints for each (NVML nvmlGpuFabricInfo_v2/v3: state enum, health summary enum,
# health mask bits; rendered names as NVIDIA/k8s-test-infra's nvml-mock documents the real
# nvidia-smi 580 binary printing them). Anything else is a parser problem, never a guess.
FABRIC_STATES = ("Completed", "In Progress", "Not Started")
FABRIC_SUMMARIES = ("Healthy", "Unhealthy", "Limited Capacity")
FABRIC_BANDWIDTH = {"Full": False, "Degraded": True}
_FABRIC_FLAGS = ("route_recovery", "route_unhealthy", "access_timeout_recovery")
_TRUE_FALSE = {"true": True, "false": False, "yes": True, "no": False}


class FabricInfo(ParseModel):
    """One GPU's NVLink fabric registration and health; None: N/A (not reported)."""

    state: str | None = None
    status: str | None = None
    clique_id: str | None = None
    cluster_uuid: str | None = None
    summary: str | None = None
    bandwidth_degraded: bool | None = None
    route_recovery: bool | None = None
    route_unhealthy: bool | None = None
    access_timeout_recovery: bool | None = None
    incorrect_configuration: str | None = None  # "None" when clean, else the configuration error named
    problems: tuple[str, ...] = ()

    @property
    def health_reported(self) -> bool:
        return any(v is not None for v in (self.summary, self.bandwidth_degraded, self.route_recovery,
                                            self.route_unhealthy, self.access_timeout_recovery,
                                            self.incorrect_configuration))


_fabric_seen: dict[tuple[tuple[str, str | None], ...], FabricInfo] = {}  # a fleet prints few distinct readings


def read_fabric(values: Mapping[str, str | None], names: Mapping[str, str], where: str) -> FabricInfo:
    """FabricInfo from one GPU's values keyed by CSV field or -q path (`names` maps them)."""
    raw: dict[str, str | None] = {}
    for key, field in names.items():
        v = values.get(key)
        raw[field] = None if v is None or v.strip() in NA_SENTINELS or v.strip() == "Not Supported" else v.strip()
    key = tuple(raw.items())
    hit = _fabric_seen.get(key)
    if hit is not None:
        return hit
    info = _fabric_info(raw, where)
    if not info.problems:  # a problem names its GPU: not shared
        if len(_fabric_seen) >= 4096:
            _fabric_seen.clear()
        _fabric_seen[key] = info
    return info


def _fabric_info(raw: dict[str, str | None], where: str) -> FabricInfo:
    problems: list[str] = []
    out: dict[str, object] = {k: raw.get(k) for k in ("status", "clique_id", "cluster_uuid")}

    def known(field: str, allowed: tuple[str, ...] | dict[str, bool]) -> str | None:
        v = raw.get(field)
        if v is not None and v not in allowed:
            problems.append(f"{where}: fabric {field} {v!r} is none of {', '.join(allowed)}")
            return None
        return v

    out["state"] = known("state", FABRIC_STATES)
    out["summary"] = known("summary", FABRIC_SUMMARIES)
    bw = known("bandwidth", FABRIC_BANDWIDTH)
    out["bandwidth_degraded"] = FABRIC_BANDWIDTH[bw] if bw is not None else None
    for field in _FABRIC_FLAGS:
        v = raw.get(field)
        flag = _TRUE_FALSE.get(v.lower()) if v is not None else None
        if v is not None and flag is None:
            problems.append(f"{where}: fabric {field} {v!r} is not True/False")
        out[field] = flag
    out["incorrect_configuration"] = raw.get("incorrect_configuration")
    return FabricInfo(**out, problems=tuple(problems))


# The fabric sections and the section count of a -q without parsing the whole document: a
# node's -q runs to ~2,000 lines and the checks need little of it when the CSV is whole.
_Q_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])[ \t\r]*$", re.M)
_Q_ATTACHED = re.compile(r"^Attached GPUs\s*:\s*(\S+)", re.M)
# "    Fabric" at a GPU section's first level, then its lines (all indented deeper than 4)
_Q_FABRIC_BLOCK = re.compile(r"\n    Fabric[ \t\r]*\n((?: {5}[^\n]*(?:\n|$))*)")


@functools.lru_cache(maxsize=8)
def _q_heads(text: str) -> tuple[tuple[int, str], ...]:
    """(offset, bus id) of each GPU section header of a -q (one scan, shared by q_fabric and q_problems)."""
    return tuple((m.start(), m.group(1)) for m in _Q_GPU_HEADER.finditer(text))


def q_fabric(text: str) -> list[tuple[str, dict[str, str]]]:
    """(bus id, {'Fabric/State': ..., 'Fabric/Health/Summary': ...}) per GPU section of a -q, the
    same paths and values parse_q gives (tests/gates/test_field_verdicts.py compares them)."""
    heads = _q_heads(text)
    out: list[tuple[str, dict[str, str]]] = [(bus, {}) for _, bus in heads]
    hi = 0
    for fm in _Q_FABRIC_BLOCK.finditer(text):
        while hi + 1 < len(heads) and heads[hi + 1][0] < fm.start():
            hi += 1
        if not heads or heads[hi][0] > fm.start():
            continue  # a Fabric block before any GPU section
        values = out[hi][1]
        stack: list[tuple[int, str]] = [(4, "Fabric")]
        for line in fm.group(1).split("\n"):
            line = line.rstrip()
            if not line:
                continue
            indent = len(line) - len(line.lstrip(" "))
            lm = _Q_LINE.match(line)
            key, value = (lm.group(2).strip(), (lm.group(3) or "").strip()) if lm else (line.strip(), None)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            path = "/".join([k for _, k in stack] + [key])
            if value is None or value == "":
                stack.append((indent, key))
                if value == "":
                    values[path] = ""
            else:
                values[path] = value
    return out


def q_problems(text: str) -> tuple[str, ...]:
    """parse_q's document-level problems (no GPU section; Attached GPUs against the sections), cheaply."""
    n = len(_q_heads(text))
    if n == 0:
        return ("no GPU section found",)
    m = _Q_ATTACHED.search(text)
    attached = to_int(m.group(1)) if m else None
    if attached is not None and attached != n:
        return (f"Attached GPUs says {attached}, found {n} GPU sections",)
    return ()


# ---------------------------------------------------------------- nvlink -s

_NVL_GPU = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: ([^)]*)\))?\s*$")
_NVL_LINK = re.compile(r"^\s*Link (\d+): (.+?)\s*$")


class NvlinkGpu(ParseModel):
    index: int
    name: str
    links: dict[int, float | None]  # link -> GB/s, None when <inactive> or unreadable

    @property
    def active(self) -> int:
        return sum(1 for v in self.links.values() if v is not None)

    @property
    def inactive(self) -> tuple[int, ...]:
        return tuple(k for k, v in self.links.items() if v is None)


class NvlinkStatus(ParseModel):
    gpus: tuple[NvlinkGpu, ...] = ()
    unparsed: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()


_link_speeds: dict[str, float | None] = {}  # 'Link N:' value text -> GB/s; few distinct texts per fleet


def _link_speed(value: str) -> float | None:
    try:
        return _link_speeds[value]
    except KeyError:
        speed = to_float(value.replace("GB/s", "").strip()) if "GB/s" in value else None
        if len(_link_speeds) < 4096:
            _link_speeds[value] = speed
        return speed


# Whole-text views for the usual shape ('\n'-only line breaks): GPU header lines split the text
# into sections, and one findall per section reads its `Link j: v` lines (v up to its last
# non-blank character, as `(.+?)\s*$` reads it).
_NVL_HEADER_LINE = re.compile(r"\n[^\S\n]*(GPU [^\n]*)")
_NVL_LINK_LINE = re.compile(r"\n[^\S\n]*Link (\d+): ([^\n]*\S)")
_NONBLANK_LINE = re.compile(r"\n[^\S\n]*\S")


def parse_nvlink_status(text: str) -> NvlinkStatus:
    """`GPU i: <name> (UUID: ...)` headers, each followed by `Link j: <speed> GB/s` or `<inactive>`.

    Why two paths: 8 GPUs x 18 links per node. The usual text is read section by section with
    C-level regex scans; a section with any line that is not a `Link j: v` line (or text with
    unusual line breaks) sends the whole text to the line-by-line reader, which is the reference.
    """
    if plain_lines(text):
        fast = _nvlink_sections(text)
        if fast is not None:
            return fast
    return _parse_nvlink_lines(text)


# Section body (the `Link j: v` lines under one GPU header, no UUID in it) -> (links, unreadable
# (link, value) pairs), or None when the body has other lines. Healthy GPUs of one SKU print the
# same body, so a fleet has few distinct ones; bounded all the same.
_bodies: dict[str, tuple[dict[int, float | None], tuple[tuple[str, str], ...]] | None] = {}


def _nvlink_body(body: str) -> tuple[dict[int, float | None], tuple[tuple[str, str], ...]] | None:
    try:
        return _bodies[body]
    except KeyError:
        pass
    found = _NVL_LINK_LINE.findall(body)
    parsed: tuple[dict[int, float | None], tuple[tuple[str, str], ...]] | None = None
    if len(found) == len(_NONBLANK_LINE.findall(body)):  # else a line that is not `Link j: v`
        speeds = [_link_speed(v) for _, v in found]
        bad = tuple((n, v) for (n, v), sp in zip(found, speeds) if sp is None and "inactive" not in v.lower())
        parsed = ({int(n): sp for (n, _), sp in zip(found, speeds)}, bad)
    if len(_bodies) < 1024:
        _bodies[body] = parsed
    return parsed


def _nvlink_sections(text: str) -> NvlinkStatus | None:
    parts = _NVL_HEADER_LINE.split("\n" + text)
    if len(parts) < 3 or parts[0].strip():
        return None  # no GPU line, or lines before the first one: the line reader reports them
    gpus: list[NvlinkGpu] = []
    problems: list[str] = []
    for k in range(1, len(parts), 2):
        m = _NVL_GPU.match(parts[k].strip())
        if m is None:
            return None
        parsed = _nvlink_body(parts[k + 1])
        if parsed is None:
            return None
        links, bad = parsed
        index = int(m.group(1))
        if bad:
            problems.extend(f"GPU {index} link {n}: unreadable {v!r}" for n, v in bad)
        gpus.append(NvlinkGpu(index=index, name=m.group(2), links=dict(links)))
    return NvlinkStatus(gpus=tuple(gpus), problems=tuple(problems))


def _parse_nvlink_lines(text: str) -> NvlinkStatus:
    gpus: list[NvlinkGpu] = []
    cur: tuple[int, str, dict[int, float | None]] | None = None
    unparsed: list[str] = []
    problems: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _NVL_GPU.match(line.strip())
        if m:
            if cur:
                gpus.append(NvlinkGpu(index=cur[0], name=cur[1], links=cur[2]))
            cur = (int(m.group(1)), m.group(2), {})
            continue
        m = _NVL_LINK.match(line)
        if m and cur is not None:
            value = m.group(2)
            speed = _link_speed(value)
            if speed is None and "inactive" not in value.lower():
                problems.append(f"GPU {cur[0]} link {m.group(1)}: unreadable {value!r}")
            cur[2][int(m.group(1))] = speed
            continue
        unparsed.append(line)
    if cur:
        gpus.append(NvlinkGpu(index=cur[0], name=cur[1], links=cur[2]))
    if not gpus and text.strip():  # an empty output is a real answer: no NVLink devices (one-GPU VMs)
        problems.append("no GPU lines found")
    return NvlinkStatus(gpus=tuple(gpus), unparsed=tuple(unparsed), problems=tuple(problems))


# ---------------------------------------------------------------- topo -m

class Topology(ParseModel):
    """GPU/NIC connection matrix: matrix[row][column] = 'X', 'NV18', 'PIX', 'SYS', ..."""

    devices: tuple[str, ...] = ()
    matrix: dict[str, dict[str, str]] = {}
    problems: tuple[str, ...] = ()

    def nvlinks_between(self, a: str, b: str) -> int | None:
        cell = self.matrix.get(a, {}).get(b, "")
        return int(cell[2:]) if cell.startswith("NV") and cell[2:].isdigit() else None


_TOPO_HEADER = re.compile(r"^\s+GPU0\b")
_TOPO_DEVICE = re.compile(r"^(GPU|NIC|mlx|efa|rdmap)\S*\d+$")


@shared_by_text
def parse_topo(text: str) -> Topology:
    lines = text.splitlines()
    if "\x1b" in text:  # underline escapes around the header
        lines = [ln.replace("\x1b[4m", "").replace("\x1b[0m", "") for ln in lines]
    header_idx = next((i for i, ln in enumerate(lines) if _TOPO_HEADER.match(ln)), None)
    if header_idx is None:
        return Topology(problems=("no header line with GPU0",))
    header = lines[header_idx].split()
    devices = tuple(h for h in header if _TOPO_DEVICE.match(h))
    matrix: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for ln in lines[header_idx + 1:]:
        if not ln.strip() or ln.strip().startswith("Legend"):
            break
        cells = ln.split("\t") if "\t" in ln else ln.split()
        cells = [c.strip() for c in cells]
        name, rest = cells[0], cells[1:]
        if len(rest) < len(devices):
            problems.append(f"row {name}: {len(rest)} cells for {len(devices)} devices")
            continue
        matrix[name] = dict(zip(devices, rest[:len(devices)]))
    return Topology(devices=devices, matrix=matrix, problems=tuple(problems))
