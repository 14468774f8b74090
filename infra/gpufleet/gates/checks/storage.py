"""Storage: the Lustre client mounted and writable."""

from __future__ import annotations

from gpufleet.gates import bundle as B
from gpufleet.gates.checks.common import P, R, result
from gpufleet.gates.checks.evidence import NodeEvidence
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
    lc = system.parse_lustre_check(text)
    if not lc.mount:
        return [result(cid, sev, "not mounted", "mounted, writable", R, "lustre-unmounted",
                       "no Lustre file system mounted", rref)]
    if lc.writable is not True:
        return [result(cid, sev, f"{lc.mount}, not writable", "mounted, writable", R, "lustre-readonly",
                       "the Lustre mount is not writable", rref)]
    return [result(cid, sev, lc.mount, "mounted, writable", P, None, "", rref)]
