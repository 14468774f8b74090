"""Fabric and NVLink: every link up, every GPU pair at full NVLink width, and on NVSwitch
systems the fabric manager active and each GPU registered with the fabric."""

from __future__ import annotations

from gpufleet.gates import bundle as B
from gpufleet.gates.checks.common import P, Q, R, absent_tool, ref, result
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.parsers import system
from gpufleet.gates.parsers.common import first_line
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult, not_collected


def check_nvlink(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "nvlink.status", "Q", ref(17)
    expected = f"{s.sku.gpus} GPUs x {s.sku.nvlinks_per_gpu} active links"
    if ev.nvlink is None:
        return [not_collected(cid, sev, expected, B.NVLINK_S, rref)]
    if (absent := absent_tool(ev, cid, sev, expected, B.NVLINK_S, rref)) is not None:
        return [absent]
    st = ev.nvlink
    bad = {g.index: f"{g.active}/{s.sku.nvlinks_per_gpu}" for g in st.gpus if g.active != s.sku.nvlinks_per_gpu}
    if len(st.gpus) != s.sku.gpus or bad:
        detail = f"{len(st.gpus)} GPUs listed; links up per bad GPU {bad}"
        return [result(cid, sev, detail, expected, Q, "nvlink-down", f"NVLinks down: {detail}", rref)]
    if ev.topo is not None and ev.topo.matrix:
        gpus = [d for d in ev.topo.devices if d.startswith("GPU")]
        n, cell, topo = s.sku.nvlinks_per_gpu, f"NV{s.sku.nvlinks_per_gpu}", ev.topo
        # `cell ==` first: the usual cell; nvlinks_between decides the rest (e.g. 'NV018')
        off = [(a, b, topo.matrix.get(a, {}).get(b)) for a in gpus for b in gpus
               if a != b and topo.matrix.get(a, {}).get(b) != cell and topo.nvlinks_between(a, b) != n]
        if off:
            return [result(cid, sev, f"topo {off[:4]}", f"NV{s.sku.nvlinks_per_gpu} between every GPU pair", Q,
                           "nvlink-topology", f"nvidia-smi topo -m shows {len(off)} GPU pair(s) not at "
                           f"NV{s.sku.nvlinks_per_gpu}", rref)]
    return [result(cid, sev, expected, expected, P, None, "", rref)]


def check_fabric_manager(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "fabric_manager", "R/Q", ref(19)
    if not s.sku.nvswitch:
        return []
    text = ev.text(B.FABRICMANAGER)
    if text is None:
        return [not_collected(cid, sev, "active", B.FABRICMANAGER, rref)]
    if (absent := absent_tool(ev, cid, sev, "active", B.FABRICMANAGER, rref)) is not None:
        return [absent]
    state = system.parse_systemctl_is_active(text)
    if state != "active":
        shown = state if state in system.SYSTEMCTL_STATES else (first_line(text) or "no output")[:200]
        return [result(cid, sev, shown, "active", R, "fabricmanager-inactive",
                       "nvidia-fabricmanager is not active; restart it and retest (CUDA init fails with 802 without it)",
                       rref)]
    fab = {(g.get("fabric_state"), g.get("fabric_status")) for g in ev.gpus if g.get("fabric_state") is not None}
    bad = sorted(str(f) for f in fab if f != ("Completed", "Success"))
    if bad:
        return [result(cid, sev, f"fabric {bad}", "active; Completed/Success", R, "fabric-not-ready",
                       f"GPU fabric registration not complete: {bad}", rref)]
    return [result(cid, sev, "active", "active", P, None, "", rref)]
