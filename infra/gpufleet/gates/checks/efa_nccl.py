"""EFA and NCCL: the EFA devices and libfabric provider, NCCL using the EFA network with
GPUDirect RDMA, and the node's own all-reduce (correctness and the absolute busbw floor)."""

from __future__ import annotations

from gpufleet.gates import baseline, bundle as B
from gpufleet.gates.checks.common import P, Q, R, W, absent_tool, ref, result
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.checks.readable import source_unreadable
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult, not_collected


def check_efa(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    n = s.sku.efa_interfaces
    out = []
    fi, lspci = ev.fi_info, ev.lspci
    if fi is None and lspci is None:
        return [not_collected("efa.count", "Q", n, B.FI_INFO, ref(28))]
    fi_absent = absent_tool(ev, "efa.provider", "Q", "provider efa, FI_EP_RDM", B.FI_INFO, ref(29))
    lspci_absent = absent_tool(ev, "efa.count", "Q", n, B.LSPCI_EFA, ref(28))
    fi = None if fi_absent is not None else fi  # an absent tool counts nothing
    if fi is not None and (unread := source_unreadable(ev, "efa.provider", "Q", "provider efa, FI_EP_RDM", B.FI_INFO,
                                                       research_ref=ref(29))) is not None:
        fi, fi_absent = None, unread  # a block in no known shape counts nothing: retest, not "EFA missing"
    lspci = None if lspci_absent is not None else lspci
    lspci_unread = source_unreadable(ev, "efa.count", "Q", n, B.LSPCI_EFA, research_ref=ref(28)) \
        if lspci is not None else None
    lspci = None if lspci_unread is not None else lspci  # an empty or garbled listing is not "0 EFA devices"
    if fi is None and lspci is None:
        count = lspci_absent or lspci_unread or absent_tool(ev, "efa.count", "Q", n, B.FI_INFO, ref(28))
        if count is None and fi_absent is not None and (fi_absent.reason_code or "").startswith("unreadable-"):
            count = fi_absent.model_copy(update={"check_id": "efa.count", "expected": str(n), "research_ref": ref(28)})
        return [count or not_collected("efa.count", "Q", n, B.FI_INFO, ref(28)),
                fi_absent or not_collected("efa.provider", "Q", "provider efa, FI_EP_RDM", B.FI_INFO, ref(29))]
    counts = {k: v for k, v in (("fi_info", fi.devices if fi else None), ("lspci", lspci.efa_devices if lspci else None))
              if v is not None}
    low = min(counts.values())
    if low < n:
        out.append(result("efa.count", "Q", counts, n, Q, "efa-missing", f"{low} of {n} EFA devices visible {counts}",
                          ref(28)))
    elif max(counts.values()) > n:
        out.append(result("efa.count", "Q", counts, n, W, "efa-count-unexpected", f"more EFA devices than {n}",
                          ref(28)))
    else:
        out.append(result("efa.count", "Q", counts, n, P, None, "", ref(28)))
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
        out.append(result("efa.provider", "Q", why, "provider efa, FI_EP_RDM", Q, "efa-provider",
                          f"libfabric has no usable EFA provider ({why})", ref(29)))
    else:
        out.append(result("efa.provider", "Q", "efa", "provider efa, FI_EP_RDM", P, None, "", ref(29)))
    return out


def check_nccl_net(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    expected = "Using network (AWS) Libfabric, Selected provider efa"
    if (absent := absent_tool(ev, "efa.nccl_net", "Q", expected, B.NCCL_EFA_LOOPBACK, ref(36))) is not None:
        return [absent]
    used = baseline.check_efa_used(ev.net, "efa.nccl_net", B.NCCL_EFA_LOOPBACK)
    return [used, *nccl_nics(ev, s), *nccl_gdrdma(ev, s)] if used.verdict is P else [used]


# aws-ofi-nccl 1.14.2 (RELEASENOTES.md): "Enable DMA-BUF by default, but blocklist DMA-BUF on EFA versions
# 1-3 due to a known issue on those platforms": on p4d/p5/p5en GPUDirect RDMA over EFA needs a peer-memory
# module (efa_nv_peermem, which the EFA installer builds against the NVIDIA driver, or nvidia_peermem).
DMABUF_BLOCKED_EFA_GENERATIONS = frozenset({1, 2, 3})
PEERMEM_MODULES = ("efa_nv_peermem", "nvidia_peermem")
GDR_REF = "node-config-review M9; NVIDIA/nccl src/transport/net.cc (\"/GDRDMA\"); aws-ofi-nccl 1.14.2 release notes"


def nccl_gdrdma(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    """The loopback's NET channels must use GPUDirect RDMA, and a peer-memory module must be loaded.

    Why: "Using network Libfabric" and "Selected provider is efa" are printed at init whatever the
    data path; only the channel lines say whether the NIC reads GPU memory (`/GDRDMA`) or NCCL stages
    every byte through host memory, which a healthy busbw floor on one node can hide. Where DMA-BUF
    is blocklisted (EFA 1-3) GPUDirect RDMA needs efa_nv_peermem or nvidia_peermem: a driver change
    without the EFA installer rerun leaves it unloaded (node-config-review F13).
    """
    net = ev.net
    if net is None:  # check_efa_used said so already
        return []
    expected = "every NET channel via .../GDRDMA"
    out: list[CheckResult] = []
    measured = f"{net.gdr_channels} of {net.net_channels} NET channels with GDRDMA"
    modules = "none" if net.peermem == () else ", ".join(net.peermem or ())
    hint = f"; peer-memory modules loaded: {modules}" if net.peermem is not None else ""
    if net.net_channels == 0:
        out.append(result("efa.gdrdma", "Q", "no NET channel lines", expected, R, "efa-gdrdma-unproven",
                          "the loopback log has no 'Channel .. via NET/..' line, so the data path is unproven; "
                          "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET", GDR_REF))
    elif net.gdr_channels == 0:
        out.append(result("efa.gdrdma", "Q", measured + hint, expected, Q, "efa-gdrdma-off",
                          "NCCL stages every byte through host memory: no NET channel uses GPUDirect RDMA "
                          f"(no /GDRDMA){hint}; check the peer-memory module and rerun the EFA installer after a "
                          "driver change", GDR_REF))
    elif net.gdr_channels < net.net_channels:
        out.append(result("efa.gdrdma", "Q", measured + hint, expected, R, "efa-gdrdma-partial",
                          "some NET channels stage through host memory (no /GDRDMA): check the GPU/NIC topology "
                          "NCCL sees (NCCL_TOPO_FILE, PCIe switches), then retest", GDR_REF))
    else:
        out.append(result("efa.gdrdma", "Q", measured, expected, P, None, "", GDR_REF))
    if s.sku.efa_generation in DMABUF_BLOCKED_EFA_GENERATIONS:
        out.append(_peermem(net.peermem, s))
    return out


def _peermem(loaded: tuple[str, ...] | None, s: GateSettings) -> CheckResult:
    cid, expected = "efa.peermem", " or ".join(PEERMEM_MODULES) + " loaded"
    if loaded is None:
        return result(cid, "Q", "not in the log", expected, P, None,
                      "the loopback log has no 'gpufleet peermem:' line (an older preflight): not compared", GDR_REF)
    found = [m for m in loaded if m in PEERMEM_MODULES]
    if not found:
        return result(cid, "Q", "none loaded", expected, Q, "peermem-missing",
                      f"no peer-memory module is loaded, and aws-ofi-nccl uses no DMA-BUF on EFA "
                      f"{s.sku.efa_generation} ({s.sku.name}): GPUDirect RDMA is off; reinstall or rebuild "
                      "efa_nv_peermem for the running driver (rerun the EFA installer) and reboot", GDR_REF)
    return result(cid, "Q", ", ".join(found), expected, P, None, "", GDR_REF)


def nccl_nics(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    """The NICs aws-ofi-nccl found (`Selected provider is efa ... (found N nics)`) against the
    instance type's EFA count (catalog): a plugin that sees 16 of a p5's 32 EFA devices halves
    the inter-node bandwidth while every other check passes. A log without the count proves
    nothing either way and says so."""
    n, net = s.sku.efa_interfaces, ev.net
    cid, expected = "efa.nccl_nics", f"{n} NICs (the {s.sku.name}'s EFA devices)"
    if net is None or net.nics is None:
        return [result(cid, "Q", "not in the log", expected, P, None,
                       "NCCL's log names no NIC count (no 'found N nics'): not compared", ref(36))]
    if net.nics < n:
        return [result(cid, "Q", f"{net.nics} NICs", expected, R, "nccl-nics-short",
                       f"aws-ofi-nccl found {net.nics} NICs, the {s.sku.name} has {n} EFA devices: check the plugin's "
                       "topology and the EFA devices, then retest", ref(36))]
    return [result(cid, "Q", f"{net.nics} NICs", expected, P, None, "", ref(36))]


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
