"""Kernel log (journalctl -k / dmesg, any timestamp style): Xid, SXid and PCIe-limited lines.

Why search rather than anchor: prefixes differ (`[  18.6]`, `[Sun Feb 23 16:24:18 2025]`,
`2025-02-23T16:24:18+0000 host kernel:`), the NVRM text does not.
"""

from __future__ import annotations

import re

from gpufleet.gates.parsers.common import ParseModel

# `NVRM: Xid (PCI:0000:3b:00): 79, ...`; under MIG the driver names the GPU instance (and compute
# instance) too: `NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 43, ...` / `(PCI:0000:3b:00 GPU-I:05 GPU-C:01)`.
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)(?:\s+GPU-I:([0-9a-fA-F]+))?(?:\s+GPU-C:[0-9a-fA-F]+)?\): (\d+),?\s*(.*)$")
_SXID = re.compile(r"(nvidia-nvswitch\d*): SXid \(PCI:([0-9a-fA-F:.]+)\): (\d+),\s*(Fatal|Non-fatal)\b,?\s*(.*)$",
                   re.IGNORECASE)
_PCIE_LIMITED = re.compile(r"(\S+ [0-9a-fA-F:.]+): ([\d.]+ Gb/s) available PCIe bandwidth, limited by (.*)$")
_TS = re.compile(r"^\s*(\[[^\]]*\]|\d{4}-\d\d-\d\dT\S+|\w{3} [ \d]\d \d\d:\d\d:\d\d)")


class XidEvent(ParseModel):
    xid: int
    pci: str
    text: str
    timestamp: str | None = None
    gpu_instance: int | None = None  # the MIG GPU instance the driver names, when there is one


class SxidEvent(ParseModel):
    sxid: int
    device: str
    pci: str
    fatal: bool
    text: str
    timestamp: str | None = None


class PcieLimited(ParseModel):
    device: str
    available: str
    detail: str


class KernelLog(ParseModel):
    xids: tuple[XidEvent, ...] = ()
    sxids: tuple[SxidEvent, ...] = ()
    pcie_limited: tuple[PcieLimited, ...] = ()
    lines: int = 0
    problems: tuple[str, ...] = ()


def parse_kernel_log(text: str) -> KernelLog:
    xids: list[XidEvent] = []
    sxids: list[SxidEvent] = []
    limited: list[PcieLimited] = []
    problems: list[str] = []
    n = 0
    for line in text.splitlines():
        n += 1
        if "Xid" not in line and "PCIe bandwidth" not in line:
            continue
        ts_m = _TS.match(line)
        ts = ts_m.group(1).strip("[] ") if ts_m else None
        m = _XID.search(line)
        if m:
            xids.append(XidEvent(xid=int(m.group(3)), pci=m.group(1), text=m.group(4).strip(), timestamp=ts,
                                 gpu_instance=int(m.group(2), 16) if m.group(2) else None))
            continue
        m = _SXID.search(line)
        if m:
            sxids.append(SxidEvent(sxid=int(m.group(3)), device=m.group(1), pci=m.group(2),
                                   fatal=m.group(4).lower() == "fatal", text=m.group(5).strip(), timestamp=ts))
            continue
        m = _PCIE_LIMITED.search(line)
        if m:
            limited.append(PcieLimited(device=m.group(1), available=m.group(2), detail=m.group(3)))
            continue
        if "Xid" in line and ("NVRM" in line or "nvswitch" in line.lower()):
            problems.append(f"unrecognised Xid-like line: {line.strip()[:200]}")
    if "-- No entries --" in text:
        n = 0
    return KernelLog(xids=tuple(xids), sxids=tuple(sxids), pcie_limited=tuple(limited), lines=n,
                     problems=tuple(problems))
