"""The rollout report through the shared renderers: a rollout on the fake cloud with a quarantine
(a gated node) and a configure failure (no record), rendered in every format."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

import pytest
import xmlschema

from gpufleet.gates.admission import AdmissionRecord
from gpufleet.plan import build_plan
from gpufleet.reports import rollout as report
from gpufleet.reports.document import BarChart, HeatMap, Status, Timeline
from gpufleet.reports.render import html, junit, markdown
from gpufleet.reports.rollout_document import rollout_document, timeline_spans
from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator, small_spec

T = datetime(2026, 7, 14, 8, 0, tzinfo=timezone.utc)
XSD = Path(__file__).resolve().parents[1] / "fixtures" / "reports" / "junit.xsd"


@pytest.fixture(scope="module")
def rollout(tmp_path_factory):
    spec = small_spec(maxFailureRate=0.5)
    cloud = FakeCloud(faults={"tst-b0002-n00002": frozenset({"nvlink_down"})}, configure_fail={"tst-b0007-n00007"})
    out = orchestrator(tmp_path_factory.mktemp("rollout"), cloud, spec).run()
    rep = report.build(build_plan(spec), out.state, "tst", True, out.short, now=T)
    records = [AdmissionRecord.model_validate(n.record) for n in out.state.nodes.values() if n.record]
    return rep, records


def _blocks(doc, kind):
    return [b for s in doc.sections for b in s.blocks if isinstance(b, kind)]


def test_document_of_a_complete_rollout(rollout):
    rep, records = rollout
    doc = rollout_document(rep, records)
    assert doc.status is Status.OK and doc.title == "Rollout of `tst`: complete" and doc.generated_at == T
    (chart,) = _blocks(doc, BarChart)
    assert {b.label for b in chart.bars} == {r.slot for r in records}
    assert _blocks(doc, HeatMap)
    (tl,) = _blocks(doc, Timeline)
    ends = rep.timeline["batch_end_s"]
    lanes = tl.lanes()
    assert len(lanes) == len(ends) and lanes[0].endswith("(canary)")
    assert [max(s.end for s in tl.spans if s.lane == lane) for lane in lanes] == pytest.approx(ends)
    for b in rep.batches:  # every stage's seconds drawn as they were reported
        lane = f"batch {b.number}" + (" (canary)" if b.canary else "")
        assert {s.stage: s.end - s.start for s in tl.spans if s.lane == lane} == pytest.approx(b.seconds)


def test_junit_has_the_gates_the_record_less_quarantine_and_the_target(rollout):
    rep, records = rollout
    xml = junit.render(rollout_document(rep, records))
    xmlschema.XMLSchema(str(XSD)).validate(xml)
    root = ET.fromstring(xml.split("\n", 1)[1])
    cases = root.findall(".//testcase")
    assert int(root.get("tests")) == len(cases) == sum(len(r.checks) for r in records) + 3
    names = {(c.get("classname"), c.get("name")): c for c in cases}
    assert names[("rollout.tst-b0007-n00007", "node.i-0000701")].find("failure").get("type") == "QUARANTINE"
    assert names[("rollout", "target.tst")].find("failure") is None  # complete
    assert int(root.get("failures")) == len(root.findall(".//failure")) == 2


def test_a_short_rollout_fails_its_target(rollout):
    rep, records = rollout
    short = rep.model_copy(update={"status": "short", "short": ["tst-b0011-n00011"]})
    doc = rollout_document(short, records)
    assert doc.status is Status.FAILED
    root = ET.fromstring(junit.render(doc).split("\n", 1)[1])
    target = root.find(".//testcase[@name='target.tst']/failure")
    assert target.get("type") == "short" and target.get("message") == "1 slot(s) short"
    assert "## Short of target: 1 slot(s) without an admitted node" in markdown.render(doc)


def test_markdown_and_html(rollout):
    rep, records = rollout
    doc = rollout_document(rep, records)
    md = markdown.render(doc)
    assert md.startswith("# Rollout of `tst`: complete\n")
    assert "| tst-b0002-n00002 | i-0000201 | 1 | `nvlink-down` |" in md
    page = html.render(doc)
    assert "<h1>Rollout of <code>tst</code>: complete</h1>" in page
    assert page.count('class="span"') == sum(len(b.seconds) for b in rep.batches)


def test_spans_of_a_batch_with_no_provisioning_time_never_start_before_zero():
    """Static hosts provision in no time; the timeline's end, rounded to 0.1 s, can then fall a hair
    short of the batch's unrounded seconds (a rehearsal's report failed to build on -7e-15)."""
    line = report.BatchLine(number=1, canary=True, stage="done", nodes=2, admitted=2, quarantined=0,
                            first_failure_rate=0.0, seconds={"provision": 0.0, "configure": 0.04, "preflight": 0.1})
    rep = report.RolloutReport.model_construct(batches=[line], timeline={"batch_end_s": [0.1]})
    spans = timeline_spans(rep)
    assert [(s.stage, s.start) for s in spans] == [("provision", 0.0), ("configure", 0.0), ("preflight", 0.04)]
    assert all(s.end >= s.start >= 0.0 for s in spans)
