"""What every node check shares: the verdict shorthands, the research citation, the result row,
and the two ways a source can be missing (not collected, or its tool absent)."""

from __future__ import annotations

import functools
import re

from gpufleet.gates import bundle as B
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.checks.readable import source_unreadable
from gpufleet.gates.parsers.common import absent_command, missing_tool
from gpufleet.gates.verdict import CheckResult, Verdict, check_result, not_collected

P, W, R, Q = Verdict.PASS, Verdict.WARN, Verdict.REMEDIATE, Verdict.QUARANTINE
NO_DEVICES = "No devices were found"  # what nvidia-smi prints when the driver sees no GPU


@functools.cache
def ref(n: int | str) -> str:
    return f"gates-research.md (a) #{n}"


def result(check_id: str, severity: str, measured: object, expected: object, verdict: Verdict, code: str | None,
           message: str, research_ref: str) -> CheckResult:
    return check_result(check_id, severity, str(measured), str(expected), verdict, code if verdict is not P else None,
                        message, research_ref)


def absent_tool(ev: NodeEvidence, check_id: str, severity: str, expected: object, name: str, research_ref: str,
                verdict: Verdict = R) -> CheckResult | None:
    """The file's command could not run its tool: say so (not a garbled measurement), or None.

    REMEDIATE by default: install the tool (or fix PATH) and collect again; a second miss
    quarantines through the retest rule.
    """
    f = ev.bundle.get(name)
    if not f.collected:
        return None
    line = missing_tool(f.text, f.exit_code)
    if line is None:
        return None
    tool = re.sub(r"[^A-Za-z0-9._-]", "-", absent_command(line) or name.rsplit(".", 1)[0])
    return result(check_id, severity, f"tool missing: {line}", expected, verdict, f"tool-missing-{tool}"[:63],
                  f"{tool} is not installed or not on PATH ({line}); install it and collect again", research_ref)


def gpu_source_missing(ev: NodeEvidence, check_id: str, sev: str, expected: object, rref: str) -> CheckResult | None:
    if ev.query_table is None and ev.smi_q is None:
        return not_collected(check_id, sev, expected, B.QUERY_GPU, rref)
    if not ev.gpus:  # nvidia-smi absent: no GPU can be shown; gpu.count quarantines, the rest say why
        absent = absent_tool(ev, check_id, sev, expected, B.QUERY_GPU, rref, Q if check_id == "gpu.count" else R)
        if absent is not None:
            return absent
        f = ev.bundle.get(B.QUERY_GPU)
        if check_id == "gpu.count" and f.collected and f.exit_code not in (None, 0):
            return None  # nvidia-smi ran and failed (NVML not responsive): gpu.count's own verdict
        if NO_DEVICES in (ev.text(B.QUERY_GPU) or "") or NO_DEVICES in (ev.text(B.SMI_Q) or ""):
            return None  # nvidia-smi's own words for zero GPUs: a reading, not an unreadable output
        # an output that does not parse says nothing about the GPUs: retest, never "0 GPUs visible"
        return source_unreadable(ev, check_id, sev, expected, B.QUERY_GPU, B.SMI_Q, research_ref=rref)
    return None


def per_gpu(ev: NodeEvidence, key: str) -> list[object]:
    return [g.get(key) for g in ev.gpus]
