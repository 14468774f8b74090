"""EFA device evidence: `fi_info -p efa [-t FI_EP_RDM]` and `lspci`.

Why count distinct domains: libfabric 1.x names domains `efa_0-rdm` with `EFA-fe80::...`
fabrics; libfabric 2.x uses PCI-style `rdmapXsY-rdm` domains and lists each device twice
(fabrics `efa` and `efa-direct`). De-duplicating by domain stem counts devices in both.
"""

from __future__ import annotations

import re

from gpufleet.gates.parsers.common import ParseModel, plain_lines, shared_by_text

_FI_ERR = re.compile(r"fi_getinfo:\s*(-?\d+)")
EFA_EMPTY = "provider efa output empty list"  # libfabric: the efa provider found no device


class FiInfo(ParseModel):
    entries: int = 0  # provider blocks seen (any provider)
    efa_rdm_domains: tuple[str, ...] = ()  # distinct device stems with provider efa, type FI_EP_RDM
    efa_any_domains: tuple[str, ...] = ()  # distinct device stems with provider efa, any type
    error_code: int | None = None  # fi_getinfo: -61 = no EFA provider / device
    efa_absent: str | None = None  # libfabric's "... fi_getinfo: provider efa output empty list" line (FI_LOG_LEVEL)
    problems: tuple[str, ...] = ()

    @property
    def devices(self) -> int:
        return len(self.efa_rdm_domains) if self.efa_rdm_domains else len(self.efa_any_domains)

    @property
    def provider_ok(self) -> bool:
        return bool(self.efa_rdm_domains) and self.error_code is None and self.efa_absent is None


_STEM_SUFFIXES = ("-rdm", "-dgrm", "-dgram", "-rxd")
_stems: dict[str, str] = {}  # domain -> stem; a fleet has few distinct domain names


def _stem(domain: str) -> str:
    """'rdmap16s27-rdm' -> 'rdmap16s27'; 'efa_0-dgrm' -> 'efa_0' (one suffix, at the end)."""
    stem = _stems.get(domain)
    if stem is None:
        stem = d = domain.strip()
        for suffix in _STEM_SUFFIXES:
            if d.endswith(suffix):
                stem = d[:-len(suffix)]
                break
        if len(_stems) < 4096:
            _stems[domain] = stem
    return stem


_WANTED = frozenset({"provider", "domain", "type"})


# The wanted `key: value` lines in one pass over "\n" + text ([^\S\n] = whitespace within a line);
# starting at a literal '\n' lets the regex engine skip from line to line.
_WANTED_KV = re.compile(r"\n[^\S\n]*(provider|domain|type) *:([^\n]*)")


def _wanted_pairs(text: str) -> list[tuple[str, str]]:
    """(key, raw value) of the provider/domain/type lines, in order; values still need strip()."""
    if plain_lines(text):
        return _WANTED_KV.findall("\n" + text)
    pairs = []
    for line in text.splitlines():
        head, sep, value = line.partition(":")
        if sep:
            key = head.lstrip().rstrip(" ")  # any indentation; only spaces between key and ':'
            if key in _WANTED:
                pairs.append((key, value))
    return pairs


@shared_by_text
def parse_fi_info(text: str) -> FiInfo:
    r"""Blocks start at `provider:`; within a block the first `domain:` and `type:` count.

    A line is `<indentation><key><spaces>: <value>`. Why no per-line loop: a p5 prints 64 blocks
    (32 devices x 2 fabrics, 6 lines each) and this runs once per node; one regex picks the
    three keys the result uses (the same lines the former per-line `^\s*([\w ]+?):\s*(.*?)\s*$`
    read for them; tests/gates/test_parsers_fast.py compares the two on fixtures and mutations).
    """
    entries = 0
    problems: list[str] = []
    rdm: dict[str, None] = {}
    anyd: dict[str, None] = {}
    prov = dom = typ = None

    def close() -> None:  # one provider block: count efa devices by domain stem
        if prov != "efa":  # "efa;ofi_rxd" is a utility layer, not a device
            return
        if not dom:
            problems.append("efa provider block without a domain line")
            return
        stem = _stem(dom)
        anyd[stem] = None
        if (typ if typ is not None else "FI_EP_RDM") == "FI_EP_RDM":
            rdm[stem] = None

    for key, value in _wanted_pairs(text):
        if key == "provider":
            if entries:
                close()
            entries += 1
            prov, dom, typ = value.strip(), None, None
        elif entries:  # the first domain / type line of the block counts
            if key == "domain":
                if dom is None:
                    dom = value.strip()
            elif typ is None:
                typ = value.strip()
    if entries:
        close()
    err = _FI_ERR.search(text) if "fi_getinfo" in text else None
    if "command not found" in text or "No such file" in text:
        problems.append("fi_info is not installed")
    absent = None
    if EFA_EMPTY in text:
        absent = next((ln.strip() for ln in text.splitlines() if EFA_EMPTY in ln), EFA_EMPTY)
    return FiInfo(entries=entries, efa_rdm_domains=tuple(rdm), efa_any_domains=tuple(anyd),
                  error_code=int(err.group(1)) if err else None, efa_absent=absent, problems=tuple(problems))


_LSPCI_EFA = re.compile(r"Elastic Fabric Adapter|\b1d0f:efa[0-9a-f]\b", re.IGNORECASE)


class Lspci(ParseModel):
    efa_devices: int
    addresses: tuple[str, ...] = ()


@shared_by_text
def parse_lspci(text: str) -> Lspci:
    if text.isascii():
        # For ASCII text, IGNORECASE 'Elastic Fabric Adapter' is a lower-case substring test; only
        # the '1d0f:efaX' alternative needs the regex (word boundaries).
        low = text.lower()
        if "elastic fabric adapter" not in low and "1d0f:efa" not in low:
            return Lspci(efa_devices=0)
        addrs = [ln.split()[0] for ln in text.splitlines()
                 if ln.strip() and ("elastic fabric adapter" in (lo := ln.lower())
                                    or ("1d0f:efa" in lo and _LSPCI_EFA.search(ln)))]
    else:
        addrs = [ln.split()[0] for ln in text.splitlines() if ln.strip() and _LSPCI_EFA.search(ln)]
    return Lspci(efa_devices=len(addrs), addresses=tuple(addrs))


# pciutils lspci's default line: `[domain:]bus:device.function class: name` (ls-kernel.c / lspci.c
# show_device: the slot, then the class and the vendor/device names from pci.ids, `(rev xx)` and
# `(prog-if xx)` after them), or with -n the numeric `class: vendor:device` form.
_LSPCI_LINE = re.compile(r"^(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] [^:]+: \S.*$")


def lspci_problems(text: str) -> tuple[str, ...]:
    """What in `lspci -d 1d0f:` is not lspci's listing: a line in no lspci shape, or no device at
    all. Every Nitro instance has at least its ENA (1d0f:ec20) and its EBS NVMe controller
    (1d0f:8061) on the bus, so an empty listing is a failed run (no /sys/bus/pci in a container,
    a cut-off capture), not an instance with no EFA: retest, never "0 EFA devices"."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ("empty output: `lspci -d 1d0f:` lists at least the instance's ENA and EBS controller on any Nitro "
                "instance",)
    odd = [ln.strip() for ln in lines if not _LSPCI_LINE.match(ln.strip())]
    if odd:
        return (f"{len(odd)} line(s) in no lspci shape: {odd[0][:120]!r}",)
    return ()
