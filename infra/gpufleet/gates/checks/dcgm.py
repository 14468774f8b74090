"""DCGM diagnostics: the level it ran at and the worst of its results."""

from __future__ import annotations

import re

from gpufleet.gates import bundle as B
from gpufleet.gates.checks.common import P, Q, R, W, absent_tool, ref, result
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.parsers import dcgm
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult, not_collected


# DCGM test names (JSON names are lower-case plugin names; text names are display names)
_LEVEL_TESTS = {2: ("pcie", "memory", "gpu memory")}
_CMD_LEVEL = re.compile(r"(?:-r|--run)\s*['\"]?(\d)")


def check_dcgm(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "dcgm.diag", "Q/R/W", ref("21-23")
    expected = f"level {s.dcgm_level}: all Pass/Skip"
    diag = ev.dcgm
    if diag is None:
        return [not_collected(cid, sev, expected, B.DCGM_DIAG, rref)]
    if (absent := absent_tool(ev, cid, sev, expected, B.DCGM_DIAG, rref)) is not None:
        return [absent]
    if diag.runtime_error:
        return [result(cid, sev, "runtime error", expected, R, "dcgm-runtime-error", diag.runtime_error[:300], rref)]
    if not diag.results:
        return [result(cid, sev, "no results", expected, R, "dcgm-unreadable", "; ".join(diag.problems), rref)]
    record = ev.bundle.get(B.DCGM_DIAG).record
    level = None
    if record is not None:
        m = _CMD_LEVEL.search(record.command)
        level = int(m.group(1)) if m else None
    if level is None:  # infer from the tests present
        names = {t.lower() for t in diag.tests}
        level = 2 if any(n in names for n in _LEVEL_TESTS[2]) else 1
    if level < s.dcgm_level:
        return [result(cid, sev, f"level {level}", expected, R, "dcgm-level-low",
                       f"DCGM ran at level {level}, the stack asks for {s.dcgm_level}", rref)]
    worst, code, msgs = P, None, []
    for res in diag.results:
        st = res.status_norm
        sevs = {w.severity for w in res.warnings if w.severity is not None}
        if st == "fail":
            if dcgm.DcgmSeverity.ISOLATE in sevs:
                v, c = Q, "dcgm-isolate"
            elif dcgm.DcgmSeverity.RESET in sevs:
                v, c = R, "dcgm-reset"
            else:
                v, c = Q, "dcgm-fail"
        elif st == "warn" or (sevs and sevs <= {dcgm.DcgmSeverity.MONITOR}):
            v, c = W, "dcgm-warn"
        else:
            continue
        where = f"GPU {res.gpu}" if res.gpu is not None else "node"
        msgs.append(f"{res.test} {res.status} on {where}" + (f": {res.warnings[0].text}" if res.warnings else ""))
        if v.rank > worst.rank:
            worst, code = v, c
    measured = f"level {level}, {len(diag.results)} results, DCGM {diag.version or '?'}"
    partial = [p for p in diag.problems if p.startswith("partial")]  # judged on what it holds, said so
    return [result(cid, sev, measured, expected, worst, code, "; ".join(msgs[:5] + partial), rref)]
