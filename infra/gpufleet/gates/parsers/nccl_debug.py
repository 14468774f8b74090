"""NCCL_DEBUG=INFO lines that prove which network NCCL used.

Why: a missing or broken aws-ofi-nccl plugin makes NCCL fall back silently to TCP sockets and
run ~10x slower; only the INFO lines say so (research check #36). The evidence, strongest first:
`Using network <name>` (NCCL's choice), `Assigned NET plugin <name> to comm` (NCCL 2.2x),
the transport in channel/connection lines (`via NET/<name>/<dev>`). aws-ofi-nccl names its
transport `Libfabric` (current) or `AWS Libfabric` (older builds, which also print
`NET/OFI Using aws-ofi-nccl X` instead of `NET/OFI Initializing aws-ofi-nccl X`), and proves
the provider with `NET/OFI Selected provider is efa`. libfabric's own
`fi_getinfo: provider efa output empty list` says the EFA provider found no device.

Which memory the NIC reads and writes: NCCL's channel lines end the transport with `/GDRDMA` when
the connection uses GPUDirect RDMA (NVIDIA/nccl src/transport/net.cc: "Channel %02d/%d : %d[%d] ->
%d[%d] [send|receive] via NET/%s/%d%s%s", `req.useGdr ? "/GDRDMA" : ""`, then `(PCI)` or `/Shared`);
without it data is staged through host memory (node-config-review M9). The preflight's loopback
prints `gpufleet peermem: <modules>` first: the peer-memory modules loaded (efa_nv_peermem,
nvidia_peermem), which GPUDirect RDMA over EFA needs where aws-ofi-nccl does not use DMA-BUF.
"""

from __future__ import annotations

import re

from gpufleet.gates.parsers.common import ParseModel

_PROVIDER = re.compile(r"Selected provider is ([\w.;-]+?),?(?:\s|$)", re.IGNORECASE)
_NICS = re.compile(r"found (\d+) nics", re.IGNORECASE)
_USING = re.compile(r"Using network (.+?)\s*$")
_ASSIGNED = re.compile(r"Assigned NET plugin (.+?) to comm")
_VIA = re.compile(r"\bvia NET/(.+?)/\d")
_OFI_VERSION = re.compile(r"NET/OFI (?:Initializing|Using) aws-ofi-nccl v?(\S+)")
_NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
_CHANNEL_NET = re.compile(r"\bChannel \d+(?:/\d+)? : .*\bvia NET/[^/]+/\d+(\S*)")
_DMABUF = re.compile(r"NET/OFI Support for DMA-BUF registrations: (true|false)", re.IGNORECASE)
PEERMEM_PREFIX = "gpufleet peermem:"
EFA_EMPTY = "provider efa output empty list"


class NcclNet(ParseModel):
    network: str | None = None  # "AWS Libfabric", "Libfabric", "Socket", "IB", ... (the strongest evidence)
    provider: str | None = None  # "efa"
    nics: int | None = None
    socket_fallback: bool = False  # positive evidence that NCCL moved data over TCP sockets
    plugin_version: str | None = None
    nccl_version: str | None = None
    efa_absent: str | None = None  # libfabric's "fi_getinfo: provider efa output empty list" line, verbatim
    lines: int = 0
    net_channels: int = 0  # channel connections over a NET transport ("Channel 00/0 : ... via NET/...")
    gdr_channels: int = 0  # of them, with GPUDirect RDMA ("/GDRDMA" after the device)
    dmabuf: bool | None = None  # aws-ofi-nccl's "Support for DMA-BUF registrations: true|false"
    peermem: tuple[str, ...] | None = None  # the preflight's "gpufleet peermem:" line; None: not in the log

    @property
    def libfabric(self) -> bool:
        return self.network is not None and "libfabric" in self.network.lower()

    @property
    def efa_used(self) -> bool:
        return (not self.socket_fallback and self.provider is not None and self.provider.startswith("efa")
                and self.libfabric)


def parse_net(text: str) -> NcclNet:
    using = assigned = via = provider = plugin = nccl = efa_absent = None
    nics = dmabuf = peermem = None
    socket_init = False
    n = net_channels = gdr_channels = 0
    for line in text.splitlines():
        if line.startswith(PEERMEM_PREFIX):
            peermem = tuple(m for m in re.split(r"[\s,]+", line[len(PEERMEM_PREFIX):]) if m)
            continue
        if EFA_EMPTY in line:
            efa_absent = efa_absent or line.strip()
            continue
        if "NCCL" not in line and "NET/" not in line:
            continue
        n += 1
        if "elected" in line and (m := _PROVIDER.search(line)):
            provider = m.group(1)
            m2 = _NICS.search(line)
            nics = int(m2.group(1)) if m2 else nics
        if "Using network" in line and (m := _USING.search(line)):
            using = m.group(1)
        elif "Assigned NET plugin" in line and (m := _ASSIGNED.search(line)):
            assigned = m.group(1)
        elif via is None and "via NET/" in line and (m := _VIA.search(line)):
            via = m.group(1)
        if "NET/Socket" in line and "Using" in line:
            socket_init = True
        if plugin is None and "aws-ofi-nccl" in line and (m := _OFI_VERSION.search(line)):
            plugin = m.group(1)
        if nccl is None and "NCCL version" in line and (m := _NCCL_VERSION.search(line)):
            nccl = m.group(1)
        if "via NET/" in line and (m := _CHANNEL_NET.search(line)):
            net_channels += 1
            gdr_channels += m.group(1).startswith("/GDRDMA")
        if "DMA-BUF registrations" in line and (m := _DMABUF.search(line)):
            dmabuf = m.group(1).lower() == "true"
    network = using or assigned or via
    if network is None and socket_init and plugin is None and provider is None:
        network = "Socket"  # NCCL set up its socket transport and nothing else
    socket = network is not None and network.lower().startswith("socket")
    return NcclNet(network=network, provider=provider, nics=nics, socket_fallback=socket, plugin_version=plugin,
                   nccl_version=nccl, efa_absent=efa_absent, lines=n, net_channels=net_channels,
                   gdr_channels=gdr_channels, dmabuf=dmabuf, peermem=peermem)
