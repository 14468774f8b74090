"""EFA device evidence: `fi_info -p efa [-t FI_EP_RDM]` and `lspci`.

Why count distinct domains: libfabric 1.x names domains `efa_0-rdm` with `EFA-fe80::...`
fabrics; libfabric 2.x uses PCI-style `rdmapXsY-rdm` domains and lists each device twice
(fabrics `efa` and `efa-direct`). De-duplicating by domain stem counts devices in both.
"""

from __future__ import annotations

import re

from infra.gates.parsers.common import ParseModel

_KV = re.compile(r"^\s*([\w ]+?):\s*(.*?)\s*$")
_FI_ERR = re.compile(r"fi_getinfo:\s*(-?\d+)")


class FiInfo(ParseModel):
    entries: int = 0  # provider blocks seen (any provider)
    efa_rdm_domains: tuple[str, ...] = ()  # distinct device stems with provider efa, type FI_EP_RDM
    efa_any_domains: tuple[str, ...] = ()  # distinct device stems with provider efa, any type
    error_code: int | None = None  # fi_getinfo: -61 = no EFA provider / device
    problems: tuple[str, ...] = ()

    @property
    def devices(self) -> int:
        return len(self.efa_rdm_domains) if self.efa_rdm_domains else len(self.efa_any_domains)

    @property
    def provider_ok(self) -> bool:
        return bool(self.efa_rdm_domains) and self.error_code is None


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


class Lspci(ParseModel):
    efa_devices: int
    addresses: tuple[str, ...] = ()


def parse_lspci(text: str) -> Lspci:
    addrs = [ln.split()[0] for ln in text.splitlines() if ln.strip() and _LSPCI_EFA.search(ln)]
    return Lspci(efa_devices=len(addrs), addresses=tuple(addrs))
