"""Versions: each component the BOM pins, for the node's OS, against what the node reports."""

from __future__ import annotations

from gpufleet.gates import versions
from gpufleet.gates.checks.common import P, Q, R, per_gpu, ref, result
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult


def measured_versions(ev: NodeEvidence) -> dict[str, str]:
    """Versions from versions.json, filled from nvidia-smi and NCCL's own INFO lines."""
    found = dict(ev.versions.versions) if ev.versions is not None else {}
    if "nvidia_driver" not in found:
        drivers = {str(d) for d in per_gpu(ev, "driver") if d}
        if not drivers and ev.smi_q is not None and ev.smi_q.driver_version:
            drivers = {ev.smi_q.driver_version}
        if len(drivers) == 1:
            found["nvidia_driver"] = drivers.pop()
    if ev.net is not None:
        if "nccl" not in found and ev.net.nccl_version:
            found["nccl"] = ev.net.nccl_version
        if "aws_ofi_nccl" not in found and ev.net.plugin_version:
            found["aws_ofi_nccl"] = ev.net.plugin_version
    return found


def _expected_for_node(ev: NodeEvidence, s: GateSettings) -> tuple[dict[str, str], CheckResult | None]:
    """The BOM pins for this node's OS, or the result that says why there are none."""
    if not s.expected_by_os:
        return s.expected_versions, None
    node_os = ev.versions.node_os if ev.versions is not None else None
    if node_os is None:
        if len(s.expected_by_os) == 1:
            return next(iter(s.expected_by_os.values())), None
        return {}, result("versions.os", "Q", "not reported", " or ".join(s.expected_by_os), R, "node-os-unknown",
                          "the node's OS was not collected (versions.json os_release); cannot pick the BOM's pins",
                          ref(3))
    if node_os not in s.expected_by_os:
        return {}, result("versions.os", "Q", node_os, " or ".join(s.expected_by_os), Q, "node-os",
                          f"the node runs {node_os}; the BOM/stack pins {', '.join(s.expected_by_os)}", ref(3))
    return s.expected_by_os[node_os], None


def check_versions(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    """Each pinned component, read and compared its own way (gpufleet.gates.versions)."""
    rref = ref(3)
    expected_all, problem = _expected_for_node(ev, s)
    if problem is not None:
        return [problem]
    have = measured_versions(ev)
    missing = ev.versions.missing if ev.versions is not None else {}
    any_agent = versions.agent_for(s.pool) is None
    out = []
    for key, expected in sorted(expected_all.items()):
        if key == "fabric_manager" and not s.sku.nvswitch:
            continue
        got = have.get(key)
        if got is None and any_agent and key in versions.AGENT_KEYS:
            continue  # no pool named: compare the agent the node runs, if any
        cid, dashed = f"versions.{key}", key.replace("_", "-")
        want = versions.expected_text(key, expected)
        if got is not None and versions.matches(key, expected, got):
            out.append(result(cid, "Q", got, want, P, None, "", rref))
        elif got is not None:
            out.append(result(cid, "Q", got, want, Q, f"version-{dashed}",
                              f"{key}: found {got}, the BOM pins {want}", rref))
        elif key in missing:
            tool = versions.BY_KEY[key].tool if key in versions.BY_KEY else key
            out.append(result(cid, "Q", f"tool missing: {missing[key]}", want, R, f"tool-missing-{dashed}",
                              f"{key}: {tool} is not installed or not on PATH ({missing[key]}); the BOM pins {want}",
                              rref))
        else:
            out.append(result(cid, "Q", "not measured", want, R, f"missing-version-{dashed}",
                              f"{key}: version not collected or not readable; the BOM pins {want}", rref))
    return out
