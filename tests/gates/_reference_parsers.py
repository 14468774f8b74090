"""The parsers as first written (regex per line), kept as the reference the fast paths must match.

Frozen copy of infra/gates/parsers (efa.parse_fi_info, efa.parse_lspci, nvidia_smi.parse_nvlink_status,
common.strip_unit/to_float) at commit f78dbf0; used only by test_parsers_fast.py.
"""

from __future__ import annotations

import re

from infra.gates.parsers.efa import FiInfo, Lspci
from infra.gates.parsers.nvidia_smi import NvlinkGpu, NvlinkStatus

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
    if not gpus:
        problems.append("no GPU lines found")
    return NvlinkStatus(gpus=tuple(gpus), unparsed=tuple(unparsed), problems=tuple(problems))
