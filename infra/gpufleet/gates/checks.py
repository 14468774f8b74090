"""Per-node preflight checks over one in-memory bundle (no I/O).

Why one function per check, each citing its row of the research check list
(`gates-research.md (a) #N`): a verdict must be traceable to the rule that produced it, and a
missing file must become an explicit REMEDIATE ("not collected", retest once), never a pass.
"""

from __future__ import annotations

import functools
import re
from functools import cached_property
from typing import Callable

from gpufleet.gates import baseline, bundle as B, image, versions, xid as xid_rules
from gpufleet.gates.bundle import Bundle
from gpufleet.gates.parsers import dcgm, efa, kernel_log, nccl_debug, nccl_tests, nvidia_smi, system
from gpufleet.gates.parsers.common import absent_command, first_line, missing_tool, strip_unit, to_int, yes_no
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult, Verdict, check_result, not_collected

P, W, R, Q = Verdict.PASS, Verdict.WARN, Verdict.REMEDIATE, Verdict.QUARANTINE


@functools.cache
def ref(n: int | str) -> str:
    return f"gates-research.md (a) #{n}"


def _r(check_id: str, severity: str, measured: object, expected: object, verdict: Verdict, code: str | None,
       message: str, research_ref: str) -> CheckResult:
    return check_result(check_id, severity, str(measured), str(expected), verdict, code if verdict is not P else None,
                        message, research_ref)


def absent_tool(ev: "NodeEvidence", check_id: str, severity: str, expected: object, name: str, research_ref: str,
                verdict: Verdict = R) -> CheckResult | None:
    """The file's command could not run its tool: say so (not a garbled measurement), or None.

    REMEDIATE by default: install the tool (or fix PATH) and collect again; a second miss
    quarantines through the retest rule.
    """
    f = ev.bundle.get(name)
    if not f.collected:
        return None
    line = missing_tool(f.text, f.exit_code)
    if line is None:
        return None
    tool = re.sub(r"[^A-Za-z0-9._-]", "-", absent_command(line) or name.rsplit(".", 1)[0])
    return _r(check_id, severity, f"tool missing: {line}", expected, verdict, f"tool-missing-{tool}"[:63],
              f"{tool} is not installed or not on PATH ({line}); install it and collect again", research_ref)


# clocks_event_reasons bits (nvidia-smi; Azure azure_gpu_clock_throttling.nhc)
CLOCK_BITS = {0x1: "Idle", 0x2: "Applications Clocks Setting", 0x4: "SW Power Cap", 0x8: "HW Slowdown",
              0x10: "Sync Boost", 0x20: "SW Thermal Slowdown", 0x40: "HW Thermal Slowdown",
              0x80: "HW Power Brake Slowdown", 0x100: "Display Clock Setting"}
_CLOCK_NAME_TO_BIT = {v: k for k, v in CLOCK_BITS.items()}
HW_CLOCK_BITS = {0x8: "clock-hw-slowdown", 0x40: "clock-thermal", 0x80: "clock-power-brake"}


class NodeEvidence:
    """Lazily parsed views of one bundle; a parser runs only when a check needs it."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle

    def text(self, name: str) -> str | None:
        f = self.bundle.get(name)
        return f.text if f.collected else None

    @cached_property
    def query_table(self) -> nvidia_smi.QueryTable | None:
        t = self.text(B.QUERY_GPU)
        return nvidia_smi.read_query_table(t) if t is not None else None

    @cached_property
    def query(self) -> nvidia_smi.QueryCsv | None:
        return self.query_table.to_model() if self.query_table is not None else None

    @cached_property
    def smi_q(self) -> nvidia_smi.SmiQ | None:
        t = self.text(B.SMI_Q)
        return nvidia_smi.parse_q(t) if t is not None else None

    @cached_property
    def remapped_table(self) -> nvidia_smi.QueryTable | None:
        t = self.text(B.REMAPPED_ROWS)
        return nvidia_smi.read_query_table(t) if t is not None else None

    @cached_property
    def remapped(self) -> nvidia_smi.QueryCsv | None:
        return self.remapped_table.to_model() if self.remapped_table is not None else None

    @cached_property
    def nvlink(self) -> nvidia_smi.NvlinkStatus | None:
        t = self.text(B.NVLINK_S)
        return nvidia_smi.parse_nvlink_status(t) if t is not None else None

    @cached_property
    def topo(self) -> nvidia_smi.Topology | None:
        t = self.text(B.TOPO_M)
        return nvidia_smi.parse_topo(t) if t is not None else None

    @cached_property
    def dcgm(self) -> dcgm.DcgmDiag | None:
        t = self.text(B.DCGM_DIAG)
        return dcgm.parse_diag(t) if t is not None else None

    @cached_property
    def kernel(self) -> kernel_log.KernelLog | None:
        t = self.text(B.KERNEL_LOG)
        return kernel_log.parse_kernel_log(t) if t is not None else None

    @cached_property
    def fi_info(self) -> efa.FiInfo | None:
        t = self.text(B.FI_INFO)
        return efa.parse_fi_info(t) if t is not None else None

    @cached_property
    def lspci(self) -> efa.Lspci | None:
        t = self.text(B.LSPCI_EFA)
        return efa.parse_lspci(t) if t is not None else None

    @cached_property
    def versions(self) -> system.Versions | None:
        t = self.text(B.VERSIONS)
        return system.parse_versions(t) if t is not None else None

    @cached_property
    def intra(self) -> nccl_tests.PerfResult | None:
        t = self.text(B.NCCL_INTRA_JSON)
        if t is not None:
            res = nccl_tests.parse_json(t)
            if res.rows:
                return res
        t = self.text(B.NCCL_INTRA)
        return nccl_tests.parse_text(t) if t is not None else None

    @cached_property
    def net(self) -> nccl_debug.NcclNet | None:
        t = self.text(B.NCCL_EFA_LOOPBACK)
        return nccl_debug.parse_net(t) if t is not None else None

    @cached_property
    def gpus(self) -> list[dict[str, object]]:
        """One normalized record per GPU from --query-gpu, gaps filled from -q and the remap CSV."""
        out: list[dict[str, object]] = []
        qt = self.query_table
        if qt is not None and qt.rows:
            out = [_from_csv(row) for row in qt.records()]
        need_q = not out or any(v is None for g in out for v in g.values())
        if need_q and self.smi_q is not None:  # parse -q only when the CSV leaves gaps
            qg = self.smi_q.gpus
            if not out:
                out = [{} for _ in qg]
            for g, q in zip(out, qg):
                for k, v in _from_q(q).items():
                    if g.get(k) is None:
                        g[k] = v
        rt = self.remapped_table
        if rt is not None and rt.rows and len(rt.rows) == len(out):
            for g, row in zip(out, rt.records()):  # units on: to_int / _yes_or_count strip them
                for k, f in (("remap_correctable", "remapped_rows.correctable"),
                             ("remap_uncorrectable", "remapped_rows.uncorrectable")):
                    if row.get(f) is not None:
                        g[k] = to_int(row[f])
                for k, f in (("remap_pending", "remapped_rows.pending"), ("remap_failure", "remapped_rows.failure")):
                    if row.get(f) is not None:
                        g[k] = _yes_or_count(row[f])
        return out


def _yes_or_count(v: str | None) -> bool | None:
    """Remap pending/failure read 'Yes'/'No' in --query-gpu and sometimes 0/1 counts elsewhere."""
    b = yes_no(v)
    if b is None and v is not None:
        n = to_int(v)
        return None if n is None else n > 0
    return b


def _from_csv(row: dict[str, str | None]) -> dict[str, object]:
    """One GPU's record from a QueryTable row (units still on the values).

    Text fields get strip_unit here, as QueryCsv.rows has them; to_int, yes_no and _yes_or_count
    give the same answer with or without it (to_int strips units itself; a number with a unit is
    never a yes/no word), so the numeric and flag fields skip it.
    """
    g = row.get

    def text(name: str) -> str | None:
        v = g(name)
        return None if v is None else strip_unit(v)

    clocks = g("clocks_event_reasons.active") or g("clocks_throttle_reasons.active")
    return {
        "name": text("name"), "bus_id": text("pci.bus_id") or text("gpu_bus_id"), "driver": text("driver_version"),
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
        "recovery_action": text("gpu_recovery_action"),
        "fabric_state": text("fabric.state"), "fabric_status": text("fabric.status"),
    }


def _from_q(q: nvidia_smi.QGpu) -> dict[str, object]:
    remap = q.remapped
    pcie = q.pcie
    reasons = q.clock_event_reasons
    clocks = sum(bit for name, bit in _CLOCK_NAME_TO_BIT.items() if reasons.get(name)) if reasons else None
    ecc = q.ecc_mode
    state, status = q.fabric
    return {
        "name": q.product_name, "bus_id": q.bus_id, "persistence": q.persistence_mode,
        "mig": yes_no(q.get("MIG Mode/Current")), "ecc_current": ecc[0], "ecc_pending": ecc[1],
        "volatile_uncorrectable": q.volatile_uncorrectable,
        "sram_threshold": yes_no(q.get("ECC Errors/Aggregate/SRAM Threshold Exceeded")),
        "remap_correctable": remap["correctable"], "remap_uncorrectable": remap["uncorrectable"],
        "remap_pending": remap["pending"], "remap_failure": remap["failure"],
        "remap_histogram_none": remap["histogram_none"],
        "pcie_gen_current": pcie["gen_current"], "pcie_gen_max": pcie["gen_max"] or pcie["gen_device_max"],
        "pcie_width_current": pcie["width_current"], "pcie_width_max": pcie["width_max"],
        "clocks_active": clocks,
        "hw_thermal_us": to_int(q.get("Clocks Event Reasons Counters/HW Thermal Slowdown")),
        "hw_power_brake_us": to_int(q.get("Clocks Event Reasons Counters/HW Power Braking")),
        "recovery_action": q.recovery_action, "fabric_state": state, "fabric_status": status,
    }


# ------------------------------------------------------------------------------------------ checks

def _gpu_source_missing(ev: NodeEvidence, check_id: str, sev: str, expected: object, rref: str) -> CheckResult | None:
    if ev.query_table is None and ev.smi_q is None:
        return not_collected(check_id, sev, expected, B.QUERY_GPU, rref)
    if not ev.gpus:  # nvidia-smi absent: no GPU can be shown; gpu.count quarantines, the rest say why
        return absent_tool(ev, check_id, sev, expected, B.QUERY_GPU, rref, Q if check_id == "gpu.count" else R)
    return None


def _per_gpu(ev: NodeEvidence, key: str) -> list[object]:
    return [g.get(key) for g in ev.gpus]


def check_manifest(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    """A bundle whose manifest.json is missing or unusable is gated on its files (slot = folder
    name) but cannot be admitted: without the manifest nobody knows how the files were produced."""
    cid, rref = "bundle.manifest", "infra/gpufleet/gates/BUNDLE.md (manifest.json)"
    problem = ev.bundle.manifest_problem
    if problem is None:
        return [_r(cid, "R", "valid", "a valid manifest.json", P, None, "", rref)]
    code = "missing-manifest" if problem == "manifest.json missing" else "bad-manifest"
    return [_r(cid, "R", problem, "a valid manifest.json", R, code, f"{problem}; collect the bundle again", rref)]


def check_gpu_count(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "gpu.count", "Q", ref("1, #2")
    if (miss := _gpu_source_missing(ev, cid, sev, s.sku.gpus, rref)) is not None:
        return [miss]
    f = ev.bundle.get(B.QUERY_GPU)
    if f.collected and f.exit_code not in (None, 0) and not ev.gpus:
        return [_r(cid, sev, f"rc={f.exit_code}", s.sku.gpus, Q, "nvidia-smi-failed",
                   "nvidia-smi failed; NVML is not responsive", rref)]
    n = len(ev.gpus)
    if n != s.sku.gpus:
        return [_r(cid, sev, n, s.sku.gpus, Q, "gpu-count", f"{n} GPUs visible, {s.sku.name} has {s.sku.gpus}", rref)]
    return [_r(cid, sev, n, s.sku.gpus, P, None, "", rref)]


def check_gpu_model(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "gpu.model", "Q", ref(2)
    if (miss := _gpu_source_missing(ev, cid, sev, s.sku.gpu_model, rref)) is not None:
        return [miss]
    names = sorted({str(n) for n in _per_gpu(ev, "name")})
    if names != [s.sku.gpu_model]:
        return [_r(cid, sev, ", ".join(names) or "none", s.sku.gpu_model, Q, "gpu-model",
                   f"GPU model {', '.join(names) or 'unreadable'}, expected {s.sku.gpu_model}", rref)]
    return [_r(cid, sev, names[0], s.sku.gpu_model, P, None, "", rref)]


def measured_versions(ev: NodeEvidence) -> dict[str, str]:
    """Versions from versions.json, filled from nvidia-smi and NCCL's own INFO lines."""
    found = dict(ev.versions.versions) if ev.versions is not None else {}
    if "nvidia_driver" not in found:
        drivers = {str(d) for d in _per_gpu(ev, "driver") if d}
        if not drivers and ev.smi_q is not None and ev.smi_q.driver_version:
            drivers = {ev.smi_q.driver_version}
        if len(drivers) == 1:
            found["nvidia_driver"] = drivers.pop()
    if ev.net is not None:
        if "nccl" not in found and ev.net.nccl_version:
            found["nccl"] = ev.net.nccl_version
        if "aws_ofi_nccl" not in found and ev.net.plugin_version:
            found["aws_ofi_nccl"] = ev.net.plugin_version
    return found


def _expected_for_node(ev: NodeEvidence, s: GateSettings) -> tuple[dict[str, str], CheckResult | None]:
    """The BOM pins for this node's OS, or the result that says why there are none."""
    if not s.expected_by_os:
        return s.expected_versions, None
    node_os = ev.versions.node_os if ev.versions is not None else None
    if node_os is None:
        if len(s.expected_by_os) == 1:
            return next(iter(s.expected_by_os.values())), None
        return {}, _r("versions.os", "Q", "not reported", " or ".join(s.expected_by_os), R, "node-os-unknown",
                      "the node's OS was not collected (versions.json os_release); cannot pick the BOM's pins",
                      ref(3))
    if node_os not in s.expected_by_os:
        return {}, _r("versions.os", "Q", node_os, " or ".join(s.expected_by_os), Q, "node-os",
                      f"the node runs {node_os}; the BOM/stack pins {', '.join(s.expected_by_os)}", ref(3))
    return s.expected_by_os[node_os], None


def check_versions(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    """Each pinned component, read and compared its own way (gpufleet.gates.versions)."""
    rref = ref(3)
    expected_all, problem = _expected_for_node(ev, s)
    if problem is not None:
        return [problem]
    have = measured_versions(ev)
    missing = ev.versions.missing if ev.versions is not None else {}
    any_agent = versions.agent_for(s.pool) is None
    out = []
    for key, expected in sorted(expected_all.items()):
        if key == "fabric_manager" and not s.sku.nvswitch:
            continue
        got = have.get(key)
        if got is None and any_agent and key in versions.AGENT_KEYS:
            continue  # no pool named: compare the agent the node runs, if any
        cid, dashed = f"versions.{key}", key.replace("_", "-")
        want = versions.expected_text(key, expected)
        if got is not None and versions.matches(key, expected, got):
            out.append(_r(cid, "Q", got, want, P, None, "", rref))
        elif got is not None:
            out.append(_r(cid, "Q", got, want, Q, f"version-{dashed}",
                          f"{key}: found {got}, the BOM pins {want}", rref))
        elif key in missing:
            tool = versions.BY_KEY[key].tool if key in versions.BY_KEY else key
            out.append(_r(cid, "Q", f"tool missing: {missing[key]}", want, R, f"tool-missing-{dashed}",
                          f"{key}: {tool} is not installed or not on PATH ({missing[key]}); the BOM pins {want}",
                          rref))
        else:
            out.append(_r(cid, "Q", "not measured", want, R, f"missing-version-{dashed}",
                          f"{key}: version not collected or not readable; the BOM pins {want}", rref))
    return out


def check_persistence(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "gpu.persistence_mode", "W", ref(4)
    if (miss := _gpu_source_missing(ev, cid, sev, "Enabled", rref)) is not None:
        return [miss]
    off = [i for i, v in enumerate(_per_gpu(ev, "persistence")) if v is not True]
    if off:
        return [_r(cid, sev, f"disabled on GPU {off}", "Enabled", W, "persistence-off",
                   "persistence mode is not enabled; the driver reloads per process", rref)]
    return [_r(cid, sev, "Enabled", "Enabled", P, None, "", rref)]


def check_mig(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "gpu.mig_mode", "Q", ref(6)
    if (miss := _gpu_source_missing(ev, cid, sev, "Disabled", rref)) is not None:
        return [miss]
    on = [i for i, v in enumerate(_per_gpu(ev, "mig")) if v is True]
    if on:
        return [_r(cid, sev, f"enabled on GPU {on}", "Disabled", Q, "mig-enabled", "MIG is enabled on a training node",
                   rref)]
    return [_r(cid, sev, "Disabled", "Disabled", P, None, "", rref)]


def check_recovery_action(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "gpu.recovery_action", "R", ref(7)
    if (miss := _gpu_source_missing(ev, cid, sev, "None", rref)) is not None:
        return [miss]
    bad = {i: v for i, v in enumerate(_per_gpu(ev, "recovery_action")) if v not in (None, "None", "No")}
    if bad:
        return [_r(cid, sev, bad, "None", R, "gpu-recovery-action", f"the driver asks for recovery: {bad}", rref)]
    return [_r(cid, sev, "None", "None", P, None, "", rref)]


def check_ecc_mode(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "ecc.mode", "Q", ref(5)
    if (miss := _gpu_source_missing(ev, cid, sev, "Enabled/Enabled", rref)) is not None:
        return [miss]
    bad = [i for i, g in enumerate(ev.gpus) if g.get("ecc_current") is not True or g.get("ecc_pending") is not True]
    if bad:
        return [_r(cid, sev, f"not enabled on GPU {bad}", "Enabled/Enabled", Q, "ecc-disabled",
                   "ECC mode (current and pending) must be Enabled", rref)]
    return [_r(cid, sev, "Enabled/Enabled", "Enabled/Enabled", P, None, "", rref)]


def check_ecc_uncorrectable(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "ecc.volatile_uncorrectable", "R", ref(8)
    if (miss := _gpu_source_missing(ev, cid, sev, 0, rref)) is not None:
        return [miss]
    vals = _per_gpu(ev, "volatile_uncorrectable")
    out = []
    if any(v is None for v in vals):
        out.append(_r(cid, sev, vals, 0, R, "unreadable-ecc", "volatile uncorrectable ECC count unreadable", rref))
    elif any(v for v in vals):  # type: ignore[truthy-bool]
        out.append(_r(cid, sev, vals, 0, R, "ecc-uncorrectable",
                      f"volatile uncorrectable ECC errors {vals}; reset the GPU and retest", rref))
    else:
        out.append(_r(cid, sev, 0, 0, P, None, "", rref))
    sram = [i for i, v in enumerate(_per_gpu(ev, "sram_threshold")) if v is True]
    out.append(_r("ecc.sram_threshold", "Q", f"exceeded on GPU {sram}" if sram else "No", "No",
                  Q if sram else P, "sram-threshold-exceeded", "SRAM uncorrectable threshold exceeded", ref(10)))
    return out


def check_row_remap(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "ecc.row_remap", "Q/R/W", ref(9)
    expected = f"failure No, pending No, uncorrectable <= {s.remap_uncorrectable_limit}"
    if ev.query_table is None and ev.smi_q is None and ev.remapped_table is None:
        return [not_collected(cid, sev, expected, B.REMAPPED_ROWS, rref)]
    gpus = ev.gpus
    if not gpus and (absent := absent_tool(ev, cid, sev, expected, B.REMAPPED_ROWS, rref)) is not None:
        return [absent]
    failure = [i for i, g in enumerate(gpus) if g.get("remap_failure") is True]
    exhausted = [i for i, g in enumerate(gpus) if (g.get("remap_uncorrectable") or 0) > s.remap_uncorrectable_limit]  # type: ignore[operator]
    pending = [i for i, g in enumerate(gpus) if g.get("remap_pending") is True]
    no_bank = [i for i, g in enumerate(gpus) if (g.get("remap_histogram_none") or 0) > 0]  # type: ignore[operator]
    unread = [i for i, g in enumerate(gpus) if g.get("remap_failure") is None or g.get("remap_pending") is None]
    if failure:
        return [_r(cid, sev, f"failure on GPU {failure}", expected, Q, "row-remap-failure",
                   "row remapping failed (sticky; RMA path)", rref)]
    if exhausted:
        return [_r(cid, sev, f"uncorrectable remaps over limit on GPU {exhausted}", expected, Q, "row-remap-exhausted",
                   "too many uncorrectable row remaps", rref)]
    if pending:
        return [_r(cid, sev, f"pending on GPU {pending}", expected, R, "row-remap-pending",
                   "a row remap is pending; reset the GPU and retest", rref)]
    if unread:
        return [_r(cid, sev, f"unreadable on GPU {unread}", expected, R, "unreadable-row-remap",
                   "row-remap state unreadable", rref)]
    if no_bank:
        return [_r(cid, sev, f"banks without spare rows on GPU {no_bank}", expected, W, "row-remap-bank-exhausted",
                   "some memory banks have no spare rows left", rref)]
    return [_r(cid, sev, "failure No, pending No", expected, P, None, "", rref)]


_PCI = re.compile(r"^(?:([0-9A-Fa-f]{4,8}):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.([0-7]))?$")


def _pci_key(address: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) of '0000:0f:00' (an Xid line) or '00000000:0F:00.0' (nvidia-smi)."""
    m = _PCI.match(address.strip())
    if not m:
        return None
    return int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16)


def _gpu_at(ev: NodeEvidence, pci: str) -> str:
    """'GPU 3 (00000000:53:00.0)' for the GPU at the Xid's PCI address; the address alone when no
    nvidia-smi record has it (the GPU may have fallen off the bus)."""
    key = _pci_key(pci)
    for i, g in enumerate(ev.gpus):
        bus = g.get("bus_id")
        if key is not None and isinstance(bus, str) and _pci_key(bus) == key:
            return f"GPU {i} ({bus})"
    return f"PCI {pci} (not listed by nvidia-smi)"


def check_kernel_log(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    if ev.kernel is None:
        return [not_collected("kernel.xid", "Q/R/W", "no Xid in the Q/R buckets", B.KERNEL_LOG, ref(12))]
    log = ev.kernel
    pending = any(g.get("remap_pending") is True for g in ev.gpus) if ev.gpus else False
    out = []
    # Xid: the worst bucket decides; among equals the lowest code names the reason
    ranked = sorted(((xid_rules.bucket(e.xid, remap_pending=pending, sxid_present=bool(log.sxids)), e.xid)
                     for e in log.xids), key=lambda t: (-t[0].rank, t[1]))
    worst_v, worst_x = ranked[0] if ranked else (P, None)
    seen = sorted({e.xid for e in log.xids})
    where: dict[int, list[str]] = {}  # Xid -> the GPUs it names, so the operator knows which one to reset
    for e in log.xids:
        gpu = _gpu_at(ev, e.pci)
        if gpu not in where.setdefault(e.xid, []):
            where[e.xid].append(gpu)
    msg = "; ".join(f"Xid {x} {xid_rules.mnemonic(x)} on {', '.join(where[x])}" for x in seen)
    measured = "; ".join(f"Xid {x} on {', '.join(where[x])}" for x in seen) or "none"
    out.append(_r("kernel.xid", "Q/R/W", measured, "no Xid in the Q/R buckets", worst_v,
                  f"xid-{worst_x}" if worst_x is not None else None, msg, ref(12)))
    # SXid
    fatal = sorted({e.sxid for e in log.sxids if e.fatal})
    nonfatal = sorted({e.sxid for e in log.sxids if not e.fatal})
    if fatal:
        out.append(_r("kernel.sxid", "Q/W", f"fatal {fatal}", "no fatal SXid", Q, "sxid-fatal",
                      f"fatal NVSwitch SXid {fatal}", ref(13)))
    elif nonfatal:
        out.append(_r("kernel.sxid", "Q/W", f"non-fatal {nonfatal}", "no fatal SXid", W, "sxid-nonfatal",
                      f"non-fatal NVSwitch SXid {nonfatal}", ref(13)))
    else:
        out.append(_r("kernel.sxid", "Q/W", "none", "no fatal SXid", P, None, "", ref(13)))
    # PCIe bandwidth limited (NIC or GPU trained below its link)
    if log.pcie_limited:
        devs = [p.device for p in log.pcie_limited]
        out.append(_r("kernel.pcie_limited", "Q", devs, "none", Q, "pcie-limited",
                      f"PCIe bandwidth limited: {log.pcie_limited[0].detail}", ref(15)))
    else:
        out.append(_r("kernel.pcie_limited", "Q", "none", "none", P, None, "", ref(15)))
    return out


def check_pcie(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "pcie.link", "Q", ref(14)
    expected = f"Gen{s.sku.pcie_gen} x{s.sku.pcie_width}"
    if (miss := _gpu_source_missing(ev, cid, sev, expected, rref)) is not None:
        return [miss]
    gens = _per_gpu(ev, "pcie_gen_max")
    widths = _per_gpu(ev, "pcie_width_current")
    if any(v is None for v in gens + widths):
        return [_r(cid, sev, f"gen max {gens}, width {widths}", expected, R, "unreadable-pcie", "PCIe link unreadable",
                   rref)]
    narrow = [i for i, w in enumerate(widths) if w < s.sku.pcie_width]  # type: ignore[operator]
    slow = [i for i, g in enumerate(gens) if g < s.sku.pcie_gen]  # type: ignore[operator]
    if narrow:
        return [_r(cid, sev, f"width {widths}", expected, Q, "pcie-width", f"PCIe link narrower than x{s.sku.pcie_width}"
                   f" on GPU {narrow}", rref)]
    if slow:
        return [_r(cid, sev, f"gen max {gens}", expected, Q, "pcie-gen", f"PCIe link below Gen{s.sku.pcie_gen} on GPU {slow}",
                   rref)]
    cur = _per_gpu(ev, "pcie_gen_current")
    note = "" if all(c == s.sku.pcie_gen for c in cur) else f"current gen {cur} at idle (downtraining is normal)"
    return [_r(cid, sev, expected, expected, P, None, note, rref)]


def check_nvlink(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "nvlink.status", "Q", ref(17)
    expected = f"{s.sku.gpus} GPUs x {s.sku.nvlinks_per_gpu} active links"
    if ev.nvlink is None:
        return [not_collected(cid, sev, expected, B.NVLINK_S, rref)]
    if (absent := absent_tool(ev, cid, sev, expected, B.NVLINK_S, rref)) is not None:
        return [absent]
    st = ev.nvlink
    bad = {g.index: f"{g.active}/{s.sku.nvlinks_per_gpu}" for g in st.gpus if g.active != s.sku.nvlinks_per_gpu}
    if len(st.gpus) != s.sku.gpus or bad:
        detail = f"{len(st.gpus)} GPUs listed; links up per bad GPU {bad}"
        return [_r(cid, sev, detail, expected, Q, "nvlink-down", f"NVLinks down: {detail}", rref)]
    if ev.topo is not None and ev.topo.matrix:
        gpus = [d for d in ev.topo.devices if d.startswith("GPU")]
        n, cell, topo = s.sku.nvlinks_per_gpu, f"NV{s.sku.nvlinks_per_gpu}", ev.topo
        # `cell ==` first: the usual cell; nvlinks_between decides the rest (e.g. 'NV018')
        off = [(a, b, topo.matrix.get(a, {}).get(b)) for a in gpus for b in gpus
               if a != b and topo.matrix.get(a, {}).get(b) != cell and topo.nvlinks_between(a, b) != n]
        if off:
            return [_r(cid, sev, f"topo {off[:4]}", f"NV{s.sku.nvlinks_per_gpu} between every GPU pair", Q,
                       "nvlink-topology", f"nvidia-smi topo -m shows {len(off)} GPU pair(s) not at "
                       f"NV{s.sku.nvlinks_per_gpu}", rref)]
    return [_r(cid, sev, expected, expected, P, None, "", rref)]


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
        return [_r(cid, sev, shown, "active", R, "fabricmanager-inactive",
                   "nvidia-fabricmanager is not active; restart it and retest (CUDA init fails with 802 without it)",
                   rref)]
    fab = {(g.get("fabric_state"), g.get("fabric_status")) for g in ev.gpus if g.get("fabric_state") is not None}
    bad = sorted(str(f) for f in fab if f != ("Completed", "Success"))
    if bad:
        return [_r(cid, sev, f"fabric {bad}", "active; Completed/Success", R, "fabric-not-ready",
                   f"GPU fabric registration not complete: {bad}", rref)]
    return [_r(cid, sev, "active", "active", P, None, "", rref)]


def check_clocks(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    """Idle HW slowdown/thermal/power brake = WARN; counters > 0 (time spent so since boot, which
    includes the DCGM burn-in load) = REMEDIATE: the research says Q under load, we retest once."""
    cid, sev, rref = "clocks.event_reasons", "W/Q", ref(20)
    expected = "no HW slowdown, thermal or power-brake events"
    if (miss := _gpu_source_missing(ev, cid, sev, expected, rref)) is not None:
        return [miss]
    under_load = [(i, g.get("hw_thermal_us"), g.get("hw_power_brake_us")) for i, g in enumerate(ev.gpus)
                  if (g.get("hw_thermal_us") or 0) > 0 or (g.get("hw_power_brake_us") or 0) > 0]  # type: ignore[operator]
    if under_load:
        i, th, pb = under_load[0]
        code = "clock-thermal" if (th or 0) > 0 else "clock-power-brake"  # type: ignore[operator]
        return [_r(cid, sev, f"counters (GPU, thermal us, power-brake us) {under_load}", expected, R, code,
                   "GPUs spent time in HW thermal slowdown or power braking", rref)]
    active = [(i, v) for i, v in enumerate(_per_gpu(ev, "clocks_active")) if isinstance(v, int) and v & 0xC8]
    if active:
        i, v = active[0]
        code = next(c for bit, c in HW_CLOCK_BITS.items() if v & bit)
        names = [CLOCK_BITS[b] for b in CLOCK_BITS if v & b]
        return [_r(cid, sev, f"GPU {i}: {hex(v)} {names}", expected, W, code, f"active at idle: {names}", rref)]
    return [_r(cid, sev, "none", expected, P, None, "", rref)]


# DCGM test names (JSON names are lower-case plugin names; text names are display names)
_LEVEL_TESTS = {2: ("pcie", "memory", "gpu memory")}
_CMD_LEVEL = re.compile(r"(?:-r|--run)\s*['\"]?(\d)")


def check_dcgm(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "dcgm.diag", "Q/R/W", ref("21-23")
    expected = f"level {s.dcgm_level}: all Pass/Skip"
    diag = ev.dcgm
    if diag is None:
        return [not_collected(cid, sev, expected, B.DCGM_DIAG, rref)]
    if (absent := absent_tool(ev, cid, sev, expected, B.DCGM_DIAG, rref)) is not None:
        return [absent]
    if diag.runtime_error:
        return [_r(cid, sev, "runtime error", expected, R, "dcgm-runtime-error", diag.runtime_error[:300], rref)]
    if not diag.results:
        return [_r(cid, sev, "no results", expected, R, "dcgm-unreadable", "; ".join(diag.problems), rref)]
    record = ev.bundle.get(B.DCGM_DIAG).record
    level = None
    if record is not None:
        m = _CMD_LEVEL.search(record.command)
        level = int(m.group(1)) if m else None
    if level is None:  # infer from the tests present
        names = {t.lower() for t in diag.tests}
        level = 2 if any(n in names for n in _LEVEL_TESTS[2]) else 1
    if level < s.dcgm_level:
        return [_r(cid, sev, f"level {level}", expected, R, "dcgm-level-low",
                   f"DCGM ran at level {level}, the stack asks for {s.dcgm_level}", rref)]
    worst, code, msgs = P, None, []
    for res in diag.results:
        st = res.status_norm
        sevs = {w.severity for w in res.warnings if w.severity is not None}
        if st == "fail":
            if dcgm.DcgmSeverity.ISOLATE in sevs:
                v, c = Q, "dcgm-isolate"
            elif dcgm.DcgmSeverity.RESET in sevs:
                v, c = R, "dcgm-reset"
            else:
                v, c = Q, "dcgm-fail"
        elif st == "warn" or (sevs and sevs <= {dcgm.DcgmSeverity.MONITOR}):
            v, c = W, "dcgm-warn"
        else:
            continue
        where = f"GPU {res.gpu}" if res.gpu is not None else "node"
        msgs.append(f"{res.test} {res.status} on {where}" + (f": {res.warnings[0].text}" if res.warnings else ""))
        if v.rank > worst.rank:
            worst, code = v, c
    measured = f"level {level}, {len(diag.results)} results, DCGM {diag.version or '?'}"
    return [_r(cid, sev, measured, expected, worst, code, "; ".join(msgs[:5]), rref)]


def check_efa(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    n = s.sku.efa_interfaces
    out = []
    fi, lspci = ev.fi_info, ev.lspci
    if fi is None and lspci is None:
        return [not_collected("efa.count", "Q", n, B.FI_INFO, ref(28))]
    fi_absent = absent_tool(ev, "efa.provider", "Q", "provider efa, FI_EP_RDM", B.FI_INFO, ref(29))
    lspci_absent = absent_tool(ev, "efa.count", "Q", n, B.LSPCI_EFA, ref(28))
    fi = None if fi_absent is not None else fi  # an absent tool counts nothing
    lspci = None if lspci_absent is not None else lspci
    if fi is None and lspci is None:
        count = lspci_absent or absent_tool(ev, "efa.count", "Q", n, B.FI_INFO, ref(28))
        return [count or not_collected("efa.count", "Q", n, B.FI_INFO, ref(28)),
                fi_absent or not_collected("efa.provider", "Q", "provider efa, FI_EP_RDM", B.FI_INFO, ref(29))]
    counts = {k: v for k, v in (("fi_info", fi.devices if fi else None), ("lspci", lspci.efa_devices if lspci else None))
              if v is not None}
    low = min(counts.values())
    if low < n:
        out.append(_r("efa.count", "Q", counts, n, Q, "efa-missing", f"{low} of {n} EFA devices visible {counts}",
                      ref(28)))
    elif max(counts.values()) > n:
        out.append(_r("efa.count", "Q", counts, n, W, "efa-count-unexpected", f"more EFA devices than {n}", ref(28)))
    else:
        out.append(_r("efa.count", "Q", counts, n, P, None, "", ref(28)))
    if fi_absent is not None:
        out.append(fi_absent)
    elif fi is None:
        out.append(not_collected("efa.provider", "Q", "provider efa, FI_EP_RDM", B.FI_INFO, ref(29)))
    elif not fi.provider_ok:
        if fi.efa_absent is not None:  # libfabric's own words: the efa provider found no device
            why = fi.efa_absent
        elif fi.error_code is not None:
            why = f"fi_getinfo: {fi.error_code}"
        else:
            why = "no efa FI_EP_RDM provider"
        out.append(_r("efa.provider", "Q", why, "provider efa, FI_EP_RDM", Q, "efa-provider",
                      f"libfabric has no usable EFA provider ({why})", ref(29)))
    else:
        out.append(_r("efa.provider", "Q", "efa", "provider efa, FI_EP_RDM", P, None, "", ref(29)))
    return out


def check_nccl_net(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    expected = "Using network (AWS) Libfabric, Selected provider efa"
    if (absent := absent_tool(ev, "efa.nccl_net", "Q", expected, B.NCCL_EFA_LOOPBACK, ref(36))) is not None:
        return [absent]
    return [baseline.check_efa_used(ev.net, "efa.nccl_net", B.NCCL_EFA_LOOPBACK)]


def check_lustre(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "lustre.mount", "R", "DESIGN.md section 1 (consistency: Lustre client, broken mounts)"
    if not s.expect_lustre:
        return []
    text = ev.text(B.LUSTRE)
    if text is None:
        return [not_collected(cid, sev, "mounted, writable", B.LUSTRE, rref)]
    lc = system.parse_lustre_check(text)
    if not lc.mount:
        return [_r(cid, sev, "not mounted", "mounted, writable", R, "lustre-unmounted", "no Lustre file system mounted",
                   rref)]
    if lc.writable is not True:
        return [_r(cid, sev, f"{lc.mount}, not writable", "mounted, writable", R, "lustre-readonly",
                   "the Lustre mount is not writable", rref)]
    return [_r(cid, sev, lc.mount, "mounted, writable", P, None, "", rref)]


def check_container(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "container.gpus", "R", "DESIGN.md section 9 (device plugin; container runtime sees all GPUs)"
    if not s.expect_container_runtime:
        return []
    text = ev.text(B.CONTAINER_GPUS)
    if text is None:
        return [not_collected(cid, sev, s.sku.gpus, B.CONTAINER_GPUS, rref)]
    if (absent := absent_tool(ev, cid, sev, s.sku.gpus, B.CONTAINER_GPUS, rref)) is not None:
        return [absent]
    n = len(system.parse_nvidia_smi_l(text).gpus)
    if n != s.sku.gpus:
        first = first_line(text)
        shown = f"{n}; rc={ev.bundle.get(B.CONTAINER_GPUS).exit_code}: {first[:200]}" if n == 0 and first else n
        return [_r(cid, sev, shown, s.sku.gpus, R, "container-gpus", f"a container sees {n} of {s.sku.gpus} GPUs",
                   rref)]
    return [_r(cid, sev, n, s.sku.gpus, P, None, "", rref)]


def check_workload_image(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    return image.workload_image_checks(ev.bundle, s.workload_image, s.sku.gpus)


def check_intra_node(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    """Correctness and the absolute floor; the cohort-relative gate needs every node (evaluate)."""
    if ev.intra is None:
        return [not_collected("nccl.intra.correctness", "Q", "#wrong 0, out of bounds 0", B.NCCL_INTRA, ref(35)),
                not_collected("nccl.intra.busbw", "Q", f">= {s.intra_floor} GB/s", B.NCCL_INTRA, ref(34))]
    if ev.text(B.NCCL_INTRA_JSON) is None or not ev.intra.rows:
        absent = absent_tool(ev, "nccl.intra.correctness", "Q", "#wrong 0, out of bounds 0", B.NCCL_INTRA, ref(35))
        if absent is not None:
            return [absent, absent.model_copy(update={"check_id": "nccl.intra.busbw", "expected":
                                                      f">= {s.intra_floor} GB/s", "research_ref": ref(34)})]
    return [baseline.check_correctness(ev.intra),
            baseline.check_floor(baseline.large_message_busbw(ev.intra, s.baseline_min_bytes), s.intra_floor)]


CHECKS: tuple[Callable[[NodeEvidence, GateSettings], list[CheckResult]], ...] = (
    check_manifest, check_gpu_count, check_gpu_model, check_versions, check_persistence, check_mig, check_recovery_action,
    check_ecc_mode, check_ecc_uncorrectable, check_row_remap, check_kernel_log, check_pcie, check_nvlink,
    check_fabric_manager, check_clocks, check_dcgm, check_efa, check_nccl_net, check_lustre, check_container,
    check_workload_image, check_intra_node,
)


def run_checks(bundle: Bundle, settings: GateSettings) -> tuple[NodeEvidence, list[CheckResult]]:
    ev = NodeEvidence(bundle)
    results: list[CheckResult] = []
    for check in CHECKS:
        results.extend(check(ev, settings))
    return ev, results
