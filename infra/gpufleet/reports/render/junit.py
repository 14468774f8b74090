"""JUnit XML: one testsuite per suite of the document's test cases, one testcase per node and check.

Why this dialect: the Jenkins xUnit plugin's junit-10 schema is what CI systems (GitHub test
reporters, GitLab, Jenkins) read; tests validate against an XSD of it. A failing check is a
<failure> (the gate said no), a case that could not run an <error> (no facts, unreachable), a
<skipped> a check not applicable. XML 1.0 cannot carry most control characters, so they are
removed before ElementTree escapes the rest.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from gpufleet.reports.document import CaseStatus, Document, TestCase
from gpufleet.reports.render.text import clean

MESSAGE_LIMIT = 500
"""Characters of a failure message attribute; the full text goes into the element body."""


def _counts(cases: Sequence[TestCase]) -> dict[str, str]:
    def n(status: CaseStatus) -> str:
        return str(sum(1 for c in cases if c.status is status))

    out = {"tests": str(len(cases)), "failures": n(CaseStatus.FAIL), "errors": n(CaseStatus.ERROR)}
    seconds = [c.seconds for c in cases if c.seconds is not None]
    if seconds:
        out["time"] = f"{sum(seconds):.3f}"
    return out


def _case(parent: ET.Element, c: TestCase) -> None:
    attrs = {"classname": clean(c.classname or c.suite), "name": clean(c.name)}
    if c.seconds is not None:
        attrs["time"] = f"{c.seconds:.3f}"
    tc = ET.SubElement(parent, "testcase", attrs)
    if c.status is CaseStatus.SKIP:
        ET.SubElement(tc, "skipped", message=clean(c.message)[:MESSAGE_LIMIT])
    elif c.status in (CaseStatus.FAIL, CaseStatus.ERROR):
        tag = "failure" if c.status is CaseStatus.FAIL else "error"
        el = ET.SubElement(tc, tag, type=clean(c.failure_type or c.status.value), message=clean(c.message)[:MESSAGE_LIMIT])
        if c.details:
            el.text = clean(c.details)
    if c.output:
        ET.SubElement(tc, "system-out").text = clean(c.output)


def render_cases(cases: Sequence[TestCase], name: str) -> str:
    """`cases` as a JUnit document named `name`: a testsuite per suite, in first-seen order."""
    root = ET.Element("testsuites", {"name": clean(name), **_counts(cases)})
    by_suite: dict[str, list[TestCase]] = {}
    for c in cases:
        by_suite.setdefault(c.suite, []).append(c)
    for suite, members in by_suite.items():
        counts = _counts(members)
        skipped = str(sum(1 for c in members if c.status is CaseStatus.SKIP))
        ts = ET.SubElement(root, "testsuite", {"name": clean(suite), **counts, "skipped": skipped})
        for c in members:
            _case(ts, c)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def render(doc: Document) -> str:
    """Every test case of the document. A document without cases still yields a valid, empty
    <testsuites>, so a CI step that always uploads JUnit never fails on a missing file."""
    return render_cases(doc.test_cases(), f"gpufleet-{doc.kind}")
