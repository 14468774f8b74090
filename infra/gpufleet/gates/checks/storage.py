"""Storage: the Lustre client mounted and writable."""

from __future__ import annotations

from gpufleet.gates import bundle as B
from gpufleet.gates.checks.common import P, R, absent_tool, result
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.checks.readable import unreadable_result
from gpufleet.gates.parsers import system
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult, not_collected


def check_lustre(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "lustre.mount", "R", "DESIGN.md section 1 (consistency: Lustre client, broken mounts)"
    if not s.expect_lustre:
        return []
    text = ev.text(B.LUSTRE)
    if text is None:
        return [not_collected(cid, sev, "mounted, writable", B.LUSTRE, rref)]
    if (absent := absent_tool(ev, cid, sev, "mounted, writable", B.LUSTRE, rref)) is not None:
        return [absent]
    lc = system.parse_lustre_check(text)
    if lc.problems:  # not the collector's two lines (a cut-off or failed run): says nothing about the mount
        return [unreadable_result(cid, sev, "mounted, writable", B.LUSTRE, lc.problems, rref)]
    if not lc.mount:
        return [result(cid, sev, "not mounted", "mounted, writable", R, "lustre-unmounted",
                       "no Lustre file system mounted", rref)]
    if lc.writable is not True:
        return [result(cid, sev, f"{lc.mount}, not writable", "mounted, writable", R, "lustre-readonly",
                       "the Lustre mount is not writable", rref)]
    return [result(cid, sev, lc.mount, "mounted, writable", P, None, "", rref)]
