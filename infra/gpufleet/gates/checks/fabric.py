"""Fabric and NVLink: every link up, every GPU pair at full NVLink width, and on NVSwitch
systems the fabric manager active and each GPU registered with the fabric."""

from __future__ import annotations

from gpufleet.gates import bundle as B
from gpufleet.gates.checks.common import P, Q, R, absent_tool, ref, result
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.checks.readable import source_unreadable, unreadable_result
from gpufleet.gates.parsers import nvidia_smi, system
from gpufleet.gates.parsers.common import first_line
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult, not_collected


def check_nvlink(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "nvlink.status", "Q", ref(17)
    expected = f"{s.sku.gpus} GPUs x {s.sku.nvlinks_per_gpu} active links"
    if ev.nvlink is None:
        return [not_collected(cid, sev, expected, B.NVLINK_S, rref)]
    if (absent := absent_tool(ev, cid, sev, expected, B.NVLINK_S, rref)) is not None:
        return [absent]
    if (unread := source_unreadable(ev, cid, sev, expected, B.NVLINK_S, research_ref=rref)) is not None:
        return [unread]  # a link value in no known shape is not a link down
    st = ev.nvlink
    bad = {g.index: f"{g.active}/{s.sku.nvlinks_per_gpu}" for g in st.gpus if g.active != s.sku.nvlinks_per_gpu}
    if len(st.gpus) != s.sku.gpus or bad:
        detail = f"{len(st.gpus)} GPUs listed; links up per bad GPU {bad}"
        return [result(cid, sev, detail, expected, Q, "nvlink-down", f"NVLinks down: {detail}", rref)]
    if ev.topo is not None and ev.topo.matrix:
        gpus = [d for d in ev.topo.devices if d.startswith("GPU")]
        n, cell, topo = s.sku.nvlinks_per_gpu, f"NV{s.sku.nvlinks_per_gpu}", ev.topo
        # `cell ==` first: the usual cell; nvlinks_between decides the rest (e.g. 'NV018')
        off = [(a, b, topo.matrix.get(a, {}).get(b)) for a in gpus for b in gpus
               if a != b and topo.matrix.get(a, {}).get(b) != cell and topo.nvlinks_between(a, b) != n]
        if off:
            return [result(cid, sev, f"topo {off[:4]}", f"NV{s.sku.nvlinks_per_gpu} between every GPU pair", Q,
                           "nvlink-topology", f"nvidia-smi topo -m shows {len(off)} GPU pair(s) not at "
                           f"NV{s.sku.nvlinks_per_gpu}", rref)]
    return [result(cid, sev, expected, expected, P, None, "", rref)]


def fabric_readings(ev: NodeEvidence) -> dict[str, dict[str, nvidia_smi.FabricInfo]]:
    """Each GPU's fabric reading per source, by bus id: "csv" (nvidia-smi-fabric.csv, else the
    main --query-gpu's fabric.state/status) and "-q" (the Fabric section). Both are kept: when
    they disagree the check says so rather than letting one win."""
    out: dict[str, dict[str, nvidia_smi.FabricInfo]] = {}
    table = ev.fabric_table if ev.fabric_table is not None and ev.fabric_table.rows else ev.query_table
    if table is not None and "fabric.state" in table.fields:  # a CSV without the field says nothing
        for i, row in enumerate(table.records()):
            bus = _bus(row.get("pci.bus_id") or row.get("gpu_bus_id") or f"row {i}")
            out.setdefault(bus, {})["csv"] = nvidia_smi.read_fabric(row, nvidia_smi.FABRIC_CSV_FIELDS, f"GPU {bus}")
    q_text = ev.text(B.SMI_Q)
    if q_text is not None:
        parsed = ev.__dict__.get("smi_q")  # parsed already by another check, else only its Fabric sections
        sections = [(g.bus_id, g.values) for g in parsed.gpus] if parsed is not None else nvidia_smi.q_fabric(q_text)
        for bus_id, values in sections:
            bus = _bus(bus_id)
            out.setdefault(bus, {})["-q"] = nvidia_smi.read_fabric(values, nvidia_smi.FABRIC_Q_PATHS, f"GPU {bus}")
    return out


def _bus(bus_id: str) -> str:
    return bus_id.strip().upper()


# Health fields: (attribute, the value that is a fault, reason code, verdict). A route being
# recovered or an access timeout being recovered is the fabric healing itself: retest once; a
# degraded bandwidth, an unhealthy route or an incorrect configuration is not admitted.
_HEALTH_FIELDS = (
    ("bandwidth_degraded", True, "fabric-bandwidth-degraded", Q, "Bandwidth Degraded"),
    ("route_unhealthy", True, "fabric-route-unhealthy", Q, "Route Unhealthy"),
    ("route_recovery", True, "fabric-route-recovery", R, "Route Recovery in progress"),
    ("access_timeout_recovery", True, "fabric-access-timeout-recovery", R, "Access Timeout Recovery"),
)
_FABRIC_COMPARED = ("state", "status", "summary", "bandwidth_degraded", "route_recovery", "route_unhealthy",
                    "access_timeout_recovery", "incorrect_configuration")


def check_fabric_manager(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "fabric_manager", "R/Q", ref(19)
    if not s.sku.nvswitch:
        return []
    text = ev.text(B.FABRICMANAGER)
    if text is None:
        return [not_collected(cid, sev, "active", B.FABRICMANAGER, rref)]
    if (absent := absent_tool(ev, cid, sev, "active", B.FABRICMANAGER, rref)) is not None:
        return [absent]
    state = system.parse_systemctl_is_active(text)
    if state != "active":
        shown = state if state in system.SYSTEMCTL_STATES else (first_line(text) or "no output")[:200]
        return [result(cid, sev, shown, "active", R, "fabricmanager-inactive",
                       "nvidia-fabricmanager is not active; restart it and retest (CUDA init fails with 802 without it)",
                       rref)]
    return [result(cid, sev, "active", "active", P, None, "", rref), *fabric_health(ev, s)]


def fabric_health(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    """Per GPU: registered with the fabric (Completed/Success), healthy, both sources agreeing.

    A100 (p4d/p4de) has no GPU fabric registration: its state is N/A and only the fabric
    manager's own state counts. On Hopper and later an N/A state on an NVSwitch system is a
    finding (the registration is unproven), never a silent pass.
    """
    readings = fabric_readings(ev)
    # nodes of one type print the same readings at the same bus ids: judge each distinct set once
    key = (s.sku.name, ev.fabric_table is not None,
           tuple((bus, per.get("csv"), per.get("-q")) for bus, per in readings.items()))
    hit = _judged.get(key)
    if hit is None:
        hit = tuple(_fabric_health(readings, ev.fabric_table is not None, s))
        if len(_judged) >= 1024:
            _judged.clear()
        _judged[key] = hit
    return list(hit)


_judged: dict[tuple, tuple[CheckResult, ...]] = {}


def _fabric_health(readings: dict[str, dict[str, nvidia_smi.FabricInfo]], has_fabric_csv: bool,
                   s: GateSettings) -> list[CheckResult]:
    sev, rref = "R/Q", ref(19)
    problems = [p for per in readings.values() for r in per.values() for p in r.problems]
    if problems:
        return [unreadable_result("fabric_manager.fabric", sev, "known fabric values", B.FABRIC_QUERY
                                  if has_fabric_csv else B.SMI_Q, problems, rref)]
    registers = s.sku.gpu_short != "A100"
    out: list[CheckResult] = []
    disagree = [f"GPU {bus} {f}: csv {getattr(per['csv'], f)!r}, -q {getattr(per['-q'], f)!r}"
                for bus, per in readings.items() if "csv" in per and "-q" in per for f in _FABRIC_COMPARED
                if getattr(per["csv"], f) is not None and getattr(per["-q"], f) is not None
                and getattr(per["csv"], f) != getattr(per["-q"], f)]
    if disagree:
        out.append(result("fabric_manager.sources", sev, "; ".join(disagree[:4]), "--query-gpu and -q agree", R,
                          "fabric-sources-disagree", f"nvidia-smi's CSV and -q disagree on the fabric: "
                          f"{'; '.join(disagree[:4])}; collect again", rref))
    merged = {bus: _merge(per) for bus, per in readings.items()}
    if not registers:
        return out
    na = sorted(bus for bus, f in merged.items() if f["state"] is None)
    not_ready = {bus: f"{f['state']}/{f['status']}" for bus, f in merged.items()
                 if f["state"] is not None and (f["state"], f["status"]) != ("Completed", "Success")}
    expected = "Completed/Success on every GPU"
    if not_ready:
        out.append(result("fabric_manager.registration", sev, f"fabric {not_ready}", expected, R, "fabric-not-ready",
                          f"GPU fabric registration not complete: {not_ready}", rref))
    elif na:
        out.append(result("fabric_manager.registration", sev, f"fabric state N/A on GPU {na}", expected, R,
                          "fabric-state-na", f"fabric state N/A on {len(na)} GPU(s) of an NVSwitch {s.sku.gpu_short} "
                          "system: registration unproven; check the driver and fabric manager, then retest", rref))
    else:
        out.append(result("fabric_manager.registration", sev, expected, expected, P, None, "", rref))
    registered = {bus: f for bus, f in merged.items() if (f["state"], f["status"]) == ("Completed", "Success")}
    reported = any(f["reported"] for f in registered.values())
    for attr, bad, code, verdict, label in _HEALTH_FIELDS:
        hit = sorted(bus for bus, f in registered.items() if f[attr] is bad)
        if hit:
            out.append(result(f"fabric_manager.health.{attr}", sev, f"{label} on GPU {hit}", f"not {label}", verdict,
                              code, f"NVLink fabric health: {label} on {len(hit)} GPU(s) {hit}", rref))
    wrong_config = {bus: f["incorrect_configuration"] for bus, f in registered.items()
                    if f["incorrect_configuration"] not in (None, "None")}
    if wrong_config:
        out.append(result("fabric_manager.health.incorrect_configuration", sev, f"{wrong_config}",
                          "Incorrect Configuration None", Q, "fabric-incorrect-configuration",
                          f"NVLink fabric: incorrect configuration {wrong_config}", rref))
    flagged = any(c.check_id.startswith("fabric_manager.health.") for c in out)
    summary = {bus: f["summary"] for bus, f in registered.items() if f["summary"] not in (None, "Healthy")}
    if summary and not flagged:  # the summary says unhealthy but no field names why
        code = "fabric-limited-capacity" if set(summary.values()) == {"Limited Capacity"} else "fabric-health-unhealthy"
        out.append(result("fabric_manager.health.summary", sev, f"{summary}", "Healthy", R, code,
                          f"NVLink fabric health summary {summary}", rref))
    if not any(c.check_id.startswith("fabric_manager.health.") for c in out):
        note = "" if reported else "fabric health not reported (driver before 570, or N/A on this system)"
        out.append(result("fabric_manager.health", sev, "healthy" if reported else "not reported", "Healthy", P,
                          None, note, rref))
    return out


def _merge(per: dict[str, nvidia_smi.FabricInfo]) -> dict[str, object]:
    """One value per field: the CSV's, else -q's (a disagreement is reported separately)."""
    out: dict[str, object] = {}
    for f in _FABRIC_COMPARED:
        vals = [getattr(per[src], f) for src in ("csv", "-q") if src in per]
        out[f] = next((v for v in vals if v is not None), None)
    out["reported"] = any(r.health_reported for r in per.values())
    return out
