"""The EFA loopback proves GPUDirect RDMA, not only that the plugin loaded (node-config-review M9,
second half).

Why: `Using network Libfabric` and `Selected provider is efa` are printed at init whatever the data
path. NCCL's channel lines end the NET transport with `/GDRDMA` only when the NIC reads and writes
GPU memory (NVIDIA/nccl src/transport/net.cc); without it every byte is staged through host memory.
aws-ofi-nccl blocklists DMA-BUF on EFA 1-3 (1.14.2 release notes), so on p4d/p5/p5en GPUDirect RDMA
needs efa_nv_peermem or nvidia_peermem, which the preflight's first loopback line lists.
"""

from __future__ import annotations

from gpufleet.gates import bundle as B, synth
from gpufleet.gates.bundle import Bundle, Manifest
from gpufleet.gates.checks.efa_nccl import check_nccl_net
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.parsers.nccl_debug import parse_net
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import Verdict

from .conftest import read_real

CHANNELS = "nccl_debug_channels_gdrdma__p5en_8xh200__nvidia_nccl_issue1597.txt"
INIT = "nccl_debug_ofi_found_16_nics__p5en_8xh200__nvidia_nccl_issue1597.txt"
P5EN = GateSettings(instance_type="p5en.48xlarge")
P5 = GateSettings(instance_type="p5.48xlarge")


def _checks(text: str, settings: GateSettings = P5EN) -> dict[str, tuple[Verdict, str | None, str]]:
    ev = NodeEvidence(Bundle(path="/mem/n0", manifest=Manifest(slot="n0"), files={B.NCCL_EFA_LOOPBACK: text}))
    return {r.check_id: (r.verdict, r.reason_code, r.message) for r in check_nccl_net(ev, settings)}


def _real_log(peermem: str | None = "efa_nv_peermem", strip_gdr: bool = False) -> str:
    """The real init lines and the real channel lines of the same nodes (NVIDIA/nccl#1597), with the
    preflight's peer-memory line first; `strip_gdr`: the same channels without GPUDirect RDMA."""
    channels = read_real(CHANNELS)
    if strip_gdr:
        channels = channels.replace("/GDRDMA", "")
    head = f"gpufleet peermem: {peermem}\n" if peermem is not None else ""
    return head + read_real(INIT) + channels


def test_the_real_channel_lines_read_as_gdrdma_in_the_old_plugin_name():
    net = parse_net(read_real(CHANNELS))
    assert (net.net_channels, net.gdr_channels) == (11, 11)
    assert net.network == "AWS Libfabric"  # the transport in the channel lines, with its space
    init = parse_net(read_real(INIT))
    assert init.dmabuf is False and init.provider == "efa" and init.nics == 16  # "Support for DMA-BUF ...: false"


def test_a_real_loopback_with_gdrdma_and_peermem_passes():
    found = _checks(_real_log())
    assert found["efa.nccl_net"][0] is Verdict.PASS
    assert found["efa.gdrdma"][0] is Verdict.PASS
    assert found["efa.peermem"][:2] == (Verdict.PASS, None)


def test_the_same_channels_without_gdrdma_quarantine_naming_the_missing_module():
    found = _checks(_real_log(peermem="", strip_gdr=True))
    verdict, code, message = found["efa.gdrdma"]
    assert (verdict, code) == (Verdict.QUARANTINE, "efa-gdrdma-off")
    assert "host memory" in message and "peer-memory modules loaded: none" in message
    assert found["efa.peermem"][:2] == (Verdict.QUARANTINE, "peermem-missing")
    assert "EFA 3" in found["efa.peermem"][2]


def test_some_channels_without_gdrdma_are_a_retest():
    text = _real_log()
    cut = text.replace("Channel 07/0 : 1[1] -> 0[0] [send] via NET/AWS Libfabric/1/GDRDMA",
                       "Channel 07/0 : 1[1] -> 0[0] [send] via NET/AWS Libfabric/1")
    assert cut != text
    assert _checks(cut)["efa.gdrdma"][:2] == (Verdict.REMEDIATE, "efa-gdrdma-partial")


def test_an_init_only_log_leaves_the_data_path_unproven():
    verdict, code, message = _checks(read_real(INIT))["efa.gdrdma"]
    assert (verdict, code) == (Verdict.REMEDIATE, "efa-gdrdma-unproven")
    assert "NCCL_DEBUG_SUBSYS=INIT,NET" in message


def test_a_log_without_the_peermem_line_is_not_compared():
    verdict, code, message = _checks(_real_log(peermem=None))["efa.peermem"]
    assert (verdict, code) == (Verdict.PASS, None) and "not compared" in message


def test_nvidia_peermem_counts_too():
    assert _checks(_real_log(peermem="nvidia_peermem"))["efa.peermem"][:2] == (Verdict.PASS, None)


def test_the_simulated_loopback_passes_and_its_gdrdma_fault_quarantines():
    healthy = synth.nccl_efa_loopback(synth.NodeSpec(slot="n0"))
    found = _checks(healthy, P5)
    assert found["efa.gdrdma"][0] is Verdict.PASS and found["efa.peermem"][0] is Verdict.PASS
    assert parse_net(healthy).net_channels == 8 * 2 * 2  # 8 ranks, 2 channels, receive and send
    off = synth.nccl_efa_loopback(synth.NodeSpec(slot="n0", faults=frozenset({"gdrdma_off"})))
    found = _checks(off, P5)
    assert found["efa.gdrdma"][1] == "efa-gdrdma-off" and found["efa.peermem"][1] == "peermem-missing"
