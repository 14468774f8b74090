"""GPU health and counts: how many GPUs of which model, their modes (persistence, MIG, ECC),
the driver's recovery action, ECC errors and row remapping, the PCIe link and clock events."""

from __future__ import annotations

from gpufleet.gates import bundle as B
from gpufleet.gates.checks.common import P, Q, R, W, absent_tool, gpu_source_missing, per_gpu, ref, result
from gpufleet.gates.checks.evidence import CLOCK_BITS, NodeEvidence
from gpufleet.gates.checks.readable import source_unreadable
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult, not_collected

HW_CLOCK_BITS = {0x8: "clock-hw-slowdown", 0x40: "clock-thermal", 0x80: "clock-power-brake"}


def check_gpu_count(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "gpu.count", "Q", ref("1, #2")
    if (miss := gpu_source_missing(ev, cid, sev, s.sku.gpus, rref)) is not None:
        return [miss]
    f = ev.bundle.get(B.QUERY_GPU)
    if f.collected and f.exit_code not in (None, 0) and not ev.gpus:
        return [result(cid, sev, f"rc={f.exit_code}", s.sku.gpus, Q, "nvidia-smi-failed",
                       "nvidia-smi failed; NVML is not responsive", rref)]
    n = len(ev.gpus)
    if n != s.sku.gpus and (unread := source_unreadable(ev, cid, sev, s.sku.gpus, B.QUERY_GPU, B.SMI_Q,
                                                        research_ref=rref)) is not None:
        return [unread]  # a row cut short or a GPU section cut off is not a missing GPU
    if n != s.sku.gpus:
        return [result(cid, sev, n, s.sku.gpus, Q, "gpu-count", f"{n} GPUs visible, {s.sku.name} has {s.sku.gpus}",
                       rref)]
    return [result(cid, sev, n, s.sku.gpus, P, None, "", rref)]


def check_gpu_model(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "gpu.model", "Q", ref(2)
    if (miss := gpu_source_missing(ev, cid, sev, s.sku.gpu_model, rref)) is not None:
        return [miss]
    names = sorted({str(n) for n in per_gpu(ev, "name")})
    if names != [s.sku.gpu_model]:
        return [result(cid, sev, ", ".join(names) or "none", s.sku.gpu_model, Q, "gpu-model",
                       f"GPU model {', '.join(names) or 'unreadable'}, expected {s.sku.gpu_model}", rref)]
    return [result(cid, sev, names[0], s.sku.gpu_model, P, None, "", rref)]


def check_persistence(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "gpu.persistence_mode", "W", ref(4)
    if (miss := gpu_source_missing(ev, cid, sev, "Enabled", rref)) is not None:
        return [miss]
    off = [i for i, v in enumerate(per_gpu(ev, "persistence")) if v is not True]
    if off:
        return [result(cid, sev, f"disabled on GPU {off}", "Enabled", W, "persistence-off",
                       "persistence mode is not enabled; the driver reloads per process", rref)]
    return [result(cid, sev, "Enabled", "Enabled", P, None, "", rref)]


def check_mig(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "gpu.mig_mode", "Q", ref(6)
    if (miss := gpu_source_missing(ev, cid, sev, "Disabled", rref)) is not None:
        return [miss]
    on = [i for i, v in enumerate(per_gpu(ev, "mig")) if v is True]
    if on:
        return [result(cid, sev, f"enabled on GPU {on}", "Disabled", Q, "mig-enabled",
                       "MIG is enabled on a training node", rref)]
    return [result(cid, sev, "Disabled", "Disabled", P, None, "", rref)]


def check_recovery_action(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "gpu.recovery_action", "R", ref(7)
    if (miss := gpu_source_missing(ev, cid, sev, "None", rref)) is not None:
        return [miss]
    bad = {i: v for i, v in enumerate(per_gpu(ev, "recovery_action")) if v not in (None, "None", "No")}
    if bad:
        return [result(cid, sev, bad, "None", R, "gpu-recovery-action", f"the driver asks for recovery: {bad}", rref)]
    return [result(cid, sev, "None", "None", P, None, "", rref)]


def check_ecc_mode(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "ecc.mode", "Q", ref(5)
    if (miss := gpu_source_missing(ev, cid, sev, "Enabled/Enabled", rref)) is not None:
        return [miss]
    bad = [i for i, g in enumerate(ev.gpus) if g.get("ecc_current") is not True or g.get("ecc_pending") is not True]
    if bad:
        return [result(cid, sev, f"not enabled on GPU {bad}", "Enabled/Enabled", Q, "ecc-disabled",
                       "ECC mode (current and pending) must be Enabled", rref)]
    return [result(cid, sev, "Enabled/Enabled", "Enabled/Enabled", P, None, "", rref)]


def check_ecc_uncorrectable(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "ecc.volatile_uncorrectable", "R", ref(8)
    if (miss := gpu_source_missing(ev, cid, sev, 0, rref)) is not None:
        return [miss]
    vals = per_gpu(ev, "volatile_uncorrectable")
    out = []
    if any(v is None for v in vals):
        out.append(result(cid, sev, vals, 0, R, "unreadable-ecc", "volatile uncorrectable ECC count unreadable", rref))
    elif any(v for v in vals):  # type: ignore[truthy-bool]
        out.append(result(cid, sev, vals, 0, R, "ecc-uncorrectable",
                          f"volatile uncorrectable ECC errors {vals}; reset the GPU and retest", rref))
    else:
        out.append(result(cid, sev, 0, 0, P, None, "", rref))
    sram = [i for i, v in enumerate(per_gpu(ev, "sram_threshold")) if v is True]
    out.append(result("ecc.sram_threshold", "Q", f"exceeded on GPU {sram}" if sram else "No", "No",
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
        return [result(cid, sev, f"failure on GPU {failure}", expected, Q, "row-remap-failure",
                       "row remapping failed (sticky; RMA path)", rref)]
    if exhausted:
        return [result(cid, sev, f"uncorrectable remaps over limit on GPU {exhausted}", expected, Q,
                       "row-remap-exhausted", "too many uncorrectable row remaps", rref)]
    if pending:
        return [result(cid, sev, f"pending on GPU {pending}", expected, R, "row-remap-pending",
                       "a row remap is pending; reset the GPU and retest", rref)]
    if unread:
        return [result(cid, sev, f"unreadable on GPU {unread}", expected, R, "unreadable-row-remap",
                       "row-remap state unreadable", rref)]
    if no_bank:
        return [result(cid, sev, f"banks without spare rows on GPU {no_bank}", expected, W, "row-remap-bank-exhausted",
                       "some memory banks have no spare rows left", rref)]
    return [result(cid, sev, "failure No, pending No", expected, P, None, "", rref)]


def check_pcie(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "pcie.link", "Q", ref(14)
    expected = f"Gen{s.sku.pcie_gen} x{s.sku.pcie_width}"
    if (miss := gpu_source_missing(ev, cid, sev, expected, rref)) is not None:
        return [miss]
    gens = per_gpu(ev, "pcie_gen_max")
    widths = per_gpu(ev, "pcie_width_current")
    if any(v is None for v in gens + widths):
        return [result(cid, sev, f"gen max {gens}, width {widths}", expected, R, "unreadable-pcie",
                       "PCIe link unreadable", rref)]
    narrow = [i for i, w in enumerate(widths) if w < s.sku.pcie_width]  # type: ignore[operator]
    slow = [i for i, g in enumerate(gens) if g < s.sku.pcie_gen]  # type: ignore[operator]
    if narrow:
        return [result(cid, sev, f"width {widths}", expected, Q, "pcie-width",
                       f"PCIe link narrower than x{s.sku.pcie_width} on GPU {narrow}", rref)]
    if slow:
        return [result(cid, sev, f"gen max {gens}", expected, Q, "pcie-gen",
                       f"PCIe link below Gen{s.sku.pcie_gen} on GPU {slow}", rref)]
    cur = per_gpu(ev, "pcie_gen_current")
    note = "" if all(c == s.sku.pcie_gen for c in cur) else f"current gen {cur} at idle (downtraining is normal)"
    return [result(cid, sev, expected, expected, P, None, note, rref)]


def check_clocks(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    """Idle HW slowdown/thermal/power brake = WARN; counters > 0 (time spent so since boot, which
    includes the DCGM burn-in load) = REMEDIATE: the research says Q under load, we retest once."""
    cid, sev, rref = "clocks.event_reasons", "W/Q", ref(20)
    expected = "no HW slowdown, thermal or power-brake events"
    if (miss := gpu_source_missing(ev, cid, sev, expected, rref)) is not None:
        return [miss]
    under_load = [(i, g.get("hw_thermal_us"), g.get("hw_power_brake_us")) for i, g in enumerate(ev.gpus)
                  if (g.get("hw_thermal_us") or 0) > 0 or (g.get("hw_power_brake_us") or 0) > 0]  # type: ignore[operator]
    if under_load:
        i, th, pb = under_load[0]
        code = "clock-thermal" if (th or 0) > 0 else "clock-power-brake"  # type: ignore[operator]
        return [result(cid, sev, f"counters (GPU, thermal us, power-brake us) {under_load}", expected, R, code,
                       "GPUs spent time in HW thermal slowdown or power braking", rref)]
    active = [(i, v) for i, v in enumerate(per_gpu(ev, "clocks_active")) if isinstance(v, int) and v & 0xC8]
    if active:
        i, v = active[0]
        code = next(c for bit, c in HW_CLOCK_BITS.items() if v & bit)
        names = [CLOCK_BITS[b] for b in CLOCK_BITS if v & b]
        return [result(cid, sev, f"GPU {i}: {hex(v)} {names}", expected, W, code, f"active at idle: {names}", rref)]
    return [result(cid, sev, "none", expected, P, None, "", rref)]
