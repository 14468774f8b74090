"""Kernel log: Xid and NVSwitch SXid events (each named by the GPU it hit) and PCIe links the
kernel reports as bandwidth-limited."""

from __future__ import annotations

import re

from gpufleet.gates import bundle as B, xid as xid_rules
from gpufleet.gates.checks.common import P, Q, W, ref, result
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult, not_collected

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
    out.append(result("kernel.xid", "Q/R/W", measured, "no Xid in the Q/R buckets", worst_v,
                      f"xid-{worst_x}" if worst_x is not None else None, msg, ref(12)))
    # SXid
    fatal = sorted({e.sxid for e in log.sxids if e.fatal})
    nonfatal = sorted({e.sxid for e in log.sxids if not e.fatal})
    if fatal:
        out.append(result("kernel.sxid", "Q/W", f"fatal {fatal}", "no fatal SXid", Q, "sxid-fatal",
                          f"fatal NVSwitch SXid {fatal}", ref(13)))
    elif nonfatal:
        out.append(result("kernel.sxid", "Q/W", f"non-fatal {nonfatal}", "no fatal SXid", W, "sxid-nonfatal",
                          f"non-fatal NVSwitch SXid {nonfatal}", ref(13)))
    else:
        out.append(result("kernel.sxid", "Q/W", "none", "no fatal SXid", P, None, "", ref(13)))
    # PCIe bandwidth limited (NIC or GPU trained below its link)
    if log.pcie_limited:
        devs = [p.device for p in log.pcie_limited]
        out.append(result("kernel.pcie_limited", "Q", devs, "none", Q, "pcie-limited",
                          f"PCIe bandwidth limited: {log.pcie_limited[0].detail}", ref(15)))
    else:
        out.append(result("kernel.pcie_limited", "Q", "none", "none", P, None, "", ref(15)))
    return out
