"""The parsers as first written (regex per line), kept as the reference the fast paths must match.

Frozen copy of infra/gpufleet/gates/parsers (efa.parse_fi_info, efa.parse_lspci, nvidia_smi.parse_nvlink_status,
common.strip_unit/to_float) at commit f78dbf0; nvidia_smi.parse_query_csv, common.to_int/yes_no and
dcgm.parse_json and checks._from_csv as at commit 7972714 (before the QueryTable path; the CSV reader in its per-cell
form); used only by test_parsers_fast.py.
"""

from __future__ import annotations

import csv
import re

from gpufleet.gates.parsers.common import ERROR_SENTINELS, NA_SENTINELS
from gpufleet.gates.parsers.dcgm import DcgmDiag, DcgmResult, DcgmWarning, severity
from gpufleet.gates.parsers.efa import FiInfo, Lspci
from gpufleet.gates.parsers.nvidia_smi import NvlinkGpu, NvlinkStatus, QueryCsv

_NUM_UNIT = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(?:[A-Za-z%/]+(?:\([a-z]+\))?)$")


def strip_unit(value: str) -> str:
    """'81559 MiB' -> '81559'; '700.00 W' -> '700.00'; other text unchanged."""
    m = _NUM_UNIT.match(value)
    return m.group(1) if m else value


def to_float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(strip_unit(value.strip()))
    except ValueError:
        return None


_KV = re.compile(r"^\s*([\w ]+?):\s*(.*?)\s*$")
_FI_ERR = re.compile(r"fi_getinfo:\s*(-?\d+)")


def _stem(domain: str) -> str:
    return re.sub(r"-(rdm|dgrm|dgram|rxd)$", "", domain.strip())


def parse_fi_info(text: str) -> FiInfo:
    blocks: list[dict[str, str]] = []
    cur: dict[str, str] | None = None
    problems: list[str] = []
    err = _FI_ERR.search(text)
    for line in text.splitlines():
        m = _KV.match(line)
        if not m:
            continue
        key, value = m.group(1).strip(), m.group(2)
        if key == "provider":
            cur = {"provider": value}
            blocks.append(cur)
        elif cur is not None:
            cur.setdefault(key, value)
    rdm: dict[str, None] = {}
    anyd: dict[str, None] = {}
    for b in blocks:
        if b.get("provider") != "efa":  # "efa;ofi_rxd" is a utility layer, not a device
            continue
        dom = b.get("domain")
        if not dom:
            problems.append("efa provider block without a domain line")
            continue
        anyd[_stem(dom)] = None
        if b.get("type", "FI_EP_RDM") == "FI_EP_RDM":
            rdm[_stem(dom)] = None
    if "command not found" in text or "No such file" in text:
        problems.append("fi_info is not installed")
    return FiInfo(entries=len(blocks), efa_rdm_domains=tuple(rdm), efa_any_domains=tuple(anyd),
                  error_code=int(err.group(1)) if err else None, problems=tuple(problems))


_LSPCI_EFA = re.compile(r"Elastic Fabric Adapter|\b1d0f:efa[0-9a-f]\b", re.IGNORECASE)


def parse_lspci(text: str) -> Lspci:
    addrs = [ln.split()[0] for ln in text.splitlines() if ln.strip() and _LSPCI_EFA.search(ln)]
    return Lspci(efa_devices=len(addrs), addresses=tuple(addrs))


_NVL_GPU = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: ([^)]*)\))?\s*$")
_NVL_LINK = re.compile(r"^\s*Link (\d+): (.+?)\s*$")


def parse_nvlink_status(text: str) -> NvlinkStatus:
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
            speed = to_float(value.replace("GB/s", "").strip()) if "GB/s" in value else None
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


def to_int(value: str | None) -> int | None:
    if value is None:
        return None
    v = strip_unit(value.strip())
    try:
        return int(v, 16) if v.lower().startswith("0x") else int(v)
    except ValueError:
        f = to_float(v)
        return int(f) if f is not None and f.is_integer() else None


def yes_no(value: str | None) -> bool | None:
    if value is None:
        return None
    v = value.strip().lower()
    if v in ("yes", "enabled", "active", "true"):
        return True
    if v in ("no", "disabled", "not active", "false", "none"):
        return False
    return None


_UNIT_IN_HEADER = re.compile(r"\s*\[[^\]]*\]\s*$")


def parse_query_csv(text: str) -> QueryCsv:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return QueryCsv(problems=("empty output",))
    reader = csv.reader(lines, skipinitialspace=True)
    header = next(reader)
    fields = tuple(_UNIT_IN_HEADER.sub("", h.strip()) for h in header)
    if not any("." in f or f in ("name", "count", "timestamp", "gpu_bus_id", "driver_version") for f in fields):
        return QueryCsv(problems=("no header line (was --format=csv,noheader used?)",))
    odd = [f for f in fields if not re.match(r"^[A-Za-z_][A-Za-z0-9_.]*$", f)]
    if odd:  # issue 19: a header that is not dotted field names (an XML document, garbage) is not this CSV
        return QueryCsv(problems=(f"not a --query-gpu header: {', '.join(odd)[:120]}",))
    rows: list[dict[str, str | None]] = []
    problems: list[str] = []
    for i, raw in enumerate(reader):
        if len(raw) != len(fields):
            problems.append(f"row {i}: {len(raw)} values for {len(fields)} fields; skipped")
            continue
        row: dict[str, str | None] = {}
        for f, v in zip(fields, (v.strip() for v in raw)):
            if v in NA_SENTINELS:
                row[f] = None
            elif v in ERROR_SENTINELS:
                row[f] = None
                problems.append(f"row {i}: {f} = {v}")
            else:
                row[f] = strip_unit(v)
        rows.append(row)
    if not rows:
        problems.append("no data rows")
    return QueryCsv(fields=fields, rows=tuple(rows), problems=tuple(dict.fromkeys(problems)))


def _yes_or_count(v: str | None) -> bool | None:
    b = yes_no(v)
    if b is None and v is not None:
        n = to_int(v)
        return None if n is None else n > 0
    return b


def gpu_record_from_csv(row: dict[str, str | None]) -> dict[str, object]:
    """checks._from_csv as it was: over a QueryCsv row (units already stripped)."""
    g = row.get
    clocks = g("clocks_event_reasons.active") or g("clocks_throttle_reasons.active")
    return {
        "name": g("name"), "bus_id": g("pci.bus_id") or g("gpu_bus_id"), "driver": g("driver_version"),
        "persistence": yes_no(g("persistence_mode")), "mig": yes_no(g("mig.mode.current")),
        "ecc_current": yes_no(g("ecc.mode.current")), "ecc_pending": yes_no(g("ecc.mode.pending")),
        "volatile_uncorrectable": to_int(g("ecc.errors.uncorrected.volatile.total")),
        "sram_threshold": yes_no(g("ecc.errors.uncorrected.aggregate.sram.thresholdExceeded")),
        "remap_correctable": to_int(g("remapped_rows.correctable")),
        "remap_uncorrectable": to_int(g("remapped_rows.uncorrectable")),
        "remap_pending": _yes_or_count(g("remapped_rows.pending")),
        "remap_failure": _yes_or_count(g("remapped_rows.failure")),
        "remap_histogram_none": to_int(g("remapped_rows.histogram.none")),
        "pcie_gen_current": to_int(g("pcie.link.gen.current")),
        "pcie_gen_max": to_int(g("pcie.link.gen.max")) or to_int(g("pcie.link.gen.gpumax")),
        "pcie_width_current": to_int(g("pcie.link.width.current")),
        "pcie_width_max": to_int(g("pcie.link.width.max")),
        "clocks_active": to_int(clocks),
        "hw_thermal_us": to_int(g("clocks_event_reasons_counters.hw_thermal_slowdown")),
        "hw_power_brake_us": to_int(g("clocks_event_reasons_counters.hw_power_brake_slowdown")),
        "recovery_action": g("gpu_recovery_action"),
        "fabric_state": g("fabric.state"), "fabric_status": g("fabric.status"),
    }


def parse_json(doc: dict) -> DcgmDiag:
    problems: list[str] = []
    if "DCGM Diagnostic" in doc:
        fmt, body = "4.x-json", doc["DCGM Diagnostic"]
        meta = doc.get("metadata") or {}
        version = meta.get("version") or body.get("version")
        driver = meta.get("Driver Version Detected")
    elif "DCGM GPU Diagnostic" in doc:
        fmt, body = "3.x-json", doc["DCGM GPU Diagnostic"]
        version = doc.get("version")
        driver = doc.get("Driver Version Detected")
    else:
        return DcgmDiag(format="unknown", problems=("neither 'DCGM Diagnostic' nor 'DCGM GPU Diagnostic' found",))
    if not isinstance(body, dict):
        return DcgmDiag(format=fmt, problems=("diagnostic body is not an object",))
    if version is None:
        problems.append("DCGM version not in the output; severities read with the >= 3.3.1 enum")
    results: list[DcgmResult] = []
    for cat in body.get("test_categories") or []:
        cname = str(cat.get("category", "?"))
        for test in cat.get("tests") or []:
            tname = str(test.get("name", "?"))
            for res in test.get("results") or []:
                gpu = res.get("entity_id", res.get("gpu_id"))
                if gpu is None and isinstance(res.get("gpu_ids"), (str, int)) and "," not in str(res["gpu_ids"]):
                    gpu = str(res["gpu_ids"]).strip() or None
                group = res.get("entity_group")
                if group not in (None, "GPU"):
                    gpu = None
                try:
                    gpu_i = int(gpu) if gpu is not None else None
                except (TypeError, ValueError):
                    gpu_i = None
                    problems.append(f"{tname}: unreadable gpu id {gpu!r}")
                warnings = []
                for w in res.get("warnings") or []:
                    if isinstance(w, str):
                        warnings.append(DcgmWarning(text=w))
                        continue
                    raw = w.get("error_severity")
                    sev = severity(int(raw), version) if isinstance(raw, int) else None
                    warnings.append(DcgmWarning(text=str(w.get("warning", "")), error_id=w.get("error_id"),
                                                severity=sev, severity_raw=raw))
                info = res.get("info") or []
                info_t = (info,) if isinstance(info, str) else tuple(str(i) for i in info)
                results.append(DcgmResult(category=cname, test=tname, status=str(res.get("status", "?")),
                                          gpu=gpu_i, warnings=tuple(warnings), info=info_t))
    runtime_error = body.get("runtime_error")
    if not results and not runtime_error:
        problems.append("no test results")
    return DcgmDiag(format=fmt, version=version, driver_version=driver, results=tuple(results),
                    runtime_error=runtime_error, problems=tuple(problems))
