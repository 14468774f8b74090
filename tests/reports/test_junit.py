"""JUnit: the golden sample, validity against the junit-10 XSD, counts, escaping."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from gpufleet.reports.document import CaseStatus, Document, Section, Status, TestCase, TestCases
from gpufleet.reports.render import junit
from tests.reports.sample import WHEN, sample_document

XSD = Path(__file__).resolve().parents[1] / "fixtures" / "reports" / "junit.xsd"


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(XSD))


def test_sample_matches_golden(golden):
    golden.check("sample-junit.xml", junit.render(sample_document()))


def test_sample_is_valid_and_counts_are_right(schema):
    xml = junit.render(sample_document())
    schema.validate(xml)
    root = ET.fromstring(xml.split("\n", 1)[1])
    assert root.tag == "testsuites" and root.get("name") == "gpufleet-sample"
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("time")) == ("5", "1", "1", "30.250")
    gate, audit = root.findall("testsuite")
    assert (gate.get("name"), gate.get("tests"), gate.get("failures"), gate.get("errors"), gate.get("skipped")) == \
        ("gpufleet-gate", "4", "1", "1", "0")
    assert (audit.get("name"), audit.get("tests"), audit.get("skipped")) == ("gpufleet-audit", "1", "1")
    failure = gate.find("testcase[@classname='gate.node-02']/failure")
    assert failure.get("type") == "QUARANTINE" and failure.get("message") == "busbw-low: 301.25 < 430 GB/s"
    assert failure.text == 'measured: 301.25\nexpected: >= 430 <GB/s> & "quoted"'  # escaped, NUL removed
    assert gate.find("testcase[@classname='gate.node-04']/error").get("type") == "no-facts"
    assert audit.find("testcase").get("classname") == "gpufleet-audit"  # classname defaults to the suite
    assert gate.find("testcase[@name='xid']/system-out").text == "WARN xid-13: Xid 13 seen once"


def test_a_schema_violation_is_detected(schema):
    """The XSD is not vacuous: a wrong count type and a misplaced element fail."""
    good = junit.render(sample_document())
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        schema.validate(good.replace('tests="5"', 'tests="five"', 1))
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        schema.validate(good.replace("<skipped ", "<skip ", 1))


def test_no_cases_is_an_empty_valid_document(schema):
    doc = Document(kind="drift", title="t", generated_at=WHEN, status=Status.OK, sections=[Section(title="s")])
    xml = junit.render(doc)
    schema.validate(xml)
    assert ET.fromstring(xml.split("\n", 1)[1]).get("tests") == "0"


def test_control_characters_and_long_messages(schema):
    nasty = "a\x00b\x1bc\ud800d\uffffe<>&\"'\t"
    case = TestCase(suite=nasty, classname=nasty, name=nasty, status=CaseStatus.FAIL, message="m" * 2_000 + nasty,
                    details=nasty, output=nasty)
    doc = Document(kind="x", title="t", generated_at=WHEN, status=Status.FAILED,
                   sections=[Section(title="s", blocks=[TestCases(cases=[case])])])
    xml = junit.render(doc)
    schema.validate(xml)
    tc = ET.fromstring(xml.split("\n", 1)[1]).find(".//testcase")
    assert tc.get("name") == "abcde<>&\"'\t"
    assert len(tc.find("failure").get("message")) == junit.MESSAGE_LIMIT
