"""JUnit XML for gate results: one testcase per node and check, so CI shows failed gates natively.

Why QUARANTINE and REMEDIATE are failures and WARN is not: a warned node is admitted.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Sequence

from infra.gates.admission import AdmissionRecord
from infra.gates.verdict import Verdict


def render(records: Sequence[AdmissionRecord], suite: str = "gpufleet-gate") -> str:
    cases = [(r, c) for r in records for c in r.checks]
    failures = sum(1 for _, c in cases if c.verdict.blocks_admission)
    root = ET.Element("testsuites", name=suite, tests=str(len(cases)), failures=str(failures))
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)), failures=str(failures), errors="0",
                       skipped="0")
    for r, c in cases:
        tc = ET.SubElement(ts, "testcase", classname=f"gate.{r.slot}", name=c.check_id)
        if c.verdict.blocks_admission:
            f = ET.SubElement(tc, "failure", type=c.verdict.value, message=f"{c.reason_code}: {c.message}"[:500])
            f.text = f"measured: {c.measured}\nexpected: {c.expected}\nref: {c.research_ref}"
        elif c.verdict is Verdict.WARN:
            out = ET.SubElement(tc, "system-out")
            out.text = f"WARN {c.reason_code}: {c.message} (measured {c.measured}, expected {c.expected})"
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
