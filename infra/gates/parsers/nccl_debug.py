"""NCCL_DEBUG=INFO lines that prove which network NCCL used.

Why: a missing or broken aws-ofi-nccl plugin makes NCCL fall back silently to TCP sockets and
run ~10x slower; only the INFO lines say so (research check #36).
"""

from __future__ import annotations

import re

from infra.gates.parsers.common import ParseModel

_PROVIDER = re.compile(r"Selected provider is ([\w.-]+)", re.IGNORECASE)
_NICS = re.compile(r"found (\d+) nics", re.IGNORECASE)
_USING = re.compile(r"Using network (.+?)\s*$")
_OFI_VERSION = re.compile(r"NET/OFI Initializing aws-ofi-nccl (\S+)")
_NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")


class NcclNet(ParseModel):
    network: str | None = None  # "AWS Libfabric", "Libfabric", "Socket", "IB", ...
    provider: str | None = None  # "efa"
    nics: int | None = None
    socket_fallback: bool = False
    plugin_version: str | None = None
    nccl_version: str | None = None
    lines: int = 0

    @property
    def efa_used(self) -> bool:
        return (not self.socket_fallback and self.provider is not None and self.provider.startswith("efa")
                and self.network is not None and "libfabric" in self.network.lower())


def parse_net(text: str) -> NcclNet:
    network = provider = plugin = nccl = None
    nics = None
    socket = False
    n = 0
    for line in text.splitlines():
        if "NCCL" not in line and "NET/" not in line:
            continue
        n += 1
        m = _PROVIDER.search(line)
        if m:
            provider = m.group(1)
            m2 = _NICS.search(line)
            nics = int(m2.group(1)) if m2 else nics
        m = _USING.search(line)
        if m:
            network = m.group(1)
            if network.lower().startswith("socket"):
                socket = True
        if "NET/Socket" in line and "Using" in line:
            socket = True
        m = _OFI_VERSION.search(line)
        if m:
            plugin = m.group(1)
        m = _NCCL_VERSION.search(line)
        if m and nccl is None:
            nccl = m.group(1)
    return NcclNet(network=network, provider=provider, nics=nics, socket_fallback=socket, plugin_version=plugin,
                   nccl_version=nccl, lines=n)
