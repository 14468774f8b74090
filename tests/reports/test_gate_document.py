"""Admission records -> document: the busbw chart against the floor, pairs, JUnit per node and check."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from gpufleet.gates import bundle as B, synth
from gpufleet.gates.evaluate import gate_cohort
from gpufleet.gates.settings import GateSettings
from gpufleet.reports.document import BarChart, CaseStatus, HeatMap, Status, TestCases
from gpufleet.reports.gate_document import gate_document, gate_junit


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    d = tmp_path_factory.mktemp("bundles")
    specs = [synth.NodeSpec(slot="good-0", intra_busbw=481.0), synth.NodeSpec(slot="good-1", intra_busbw=479.0),
             synth.NodeSpec(slot="slow", intra_busbw=300.0),
             synth.NodeSpec(slot="bad", xids=(79,), faults=frozenset({"efa_missing"})),
             synth.NodeSpec(slot="retest", faults=frozenset({"remap_pending"}))]
    for s in specs:
        synth.write_node(d / s.slot, s)
    bundles = [B.read_bundle(f) for f in B.find_bundles(d)]
    return gate_cohort(bundles, GateSettings(expected_by_os={}, bom_digest="none"), None)


def _blocks(doc, kind):
    return [b for s in doc.sections for b in s.blocks if isinstance(b, kind)]


def test_busbw_chart_against_the_floor(records):
    doc = gate_document(records)
    assert doc.status is Status.FAILED and doc.kind == "gate"
    (chart,) = _blocks(doc, BarChart)
    by = {b.label: b for b in chart.bars}
    assert set(by) == {r.slot for r in records}
    assert by["slow"].value == 300.0 and chart.floor == records[0].busbw.intra_node_floor_gbs
    assert [b.label for b in chart.below_floor()] == ["slow"]
    assert by["bad"].note == "quarantine" and by["good-0"].note == ""


def test_one_case_per_node_and_check_and_the_same_junit_as_the_gate_command(records):
    doc = gate_document(records)
    (cases,) = _blocks(doc, TestCases)
    assert len(cases.cases) == sum(len(r.checks) for r in records)
    failed = {(c.classname, c.name) for c in cases.cases if c.status is CaseStatus.FAIL}
    assert ("gate.bad", "kernel.xid") in failed and ("gate.retest", "ecc.row_remap") in failed
    assert not any(c.startswith("gate.good") for c, _ in failed)
    root = ET.fromstring(gate_junit(records).split("\n", 1)[1])
    assert int(root.get("tests")) == len(cases.cases) and int(root.get("failures")) == len(failed)


def test_pairs_become_a_heat_map_and_rings_a_table(records):
    r0, r1 = records[0], records[1]
    with_pairs = [r0.model_copy(update={"busbw": r0.busbw.model_copy(update={"multi_node_gbs": {
                      r1.slot: 385.0, "ring:r1:4nodes": 370.0}})}), *records[1:]]
    doc = gate_document(with_pairs)
    (heat,) = _blocks(doc, HeatMap)
    assert heat.row_labels == sorted({r0.slot, r1.slot})
    (cell,) = heat.cells
    assert (heat.row_labels[cell.row], heat.col_labels[cell.col], cell.value) == (r0.slot, r1.slot, 385.0)
    rings = next(b for s in doc.sections for b in s.blocks if getattr(b, "title", "") == "Ring busbw")
    assert rings.rows == [[r0.slot, "ring:r1:4nodes", 370.0]]


def test_all_admitted_is_ok(records):
    good = [r for r in records if r.admitted]
    doc = gate_document(good)
    assert doc.status is Status.OK and "0 quarantined" in doc.title
    assert gate_document(good).model_dump_json() == doc.model_dump_json()  # deterministic: no clock


def test_gate_command_writes_the_report(tmp_path):
    import json

    from click.testing import CliRunner

    from gpufleet.cli import main

    d = tmp_path / "bundles"
    for s in (synth.NodeSpec(slot="ok"), synth.NodeSpec(slot="slow", intra_busbw=300.0)):
        synth.write_node(d / s.slot, s)
    r = CliRunner().invoke(main, ["gate", str(d), "--no-versions", "--workers", "1", "--out", str(tmp_path / "report")])
    assert r.exit_code == 3, r.output
    assert "deprecated" not in r.stderr
    names = sorted(p.name for p in (tmp_path / "report").iterdir())
    assert names == ["gate-junit.xml", "gate.html", "gate.json", "gate.md", "junit.xml", "ok.json", "slow.json"]
    assert [x["slot"] for x in json.loads((tmp_path / "report" / "gate.json").read_text())] == ["ok", "slow"]
    assert (tmp_path / "report" / "gate-junit.xml").read_text() == (tmp_path / "report" / "junit.xml").read_text()
    assert 'data-label="slow"' in (tmp_path / "report" / "gate.html").read_text()
    assert "**❌ FAILED**" in (tmp_path / "report" / "gate.md").read_text()


def _two_bundles(tmp_path):
    d = tmp_path / "bundles"
    for s in (synth.NodeSpec(slot="ok"), synth.NodeSpec(slot="slow", intra_busbw=300.0)):
        synth.write_node(d / s.slot, s)
    return d


def test_report_dir_is_a_hidden_deprecated_name_of_out(tmp_path):
    """One flag name per concept (issue 23 item 8): --report-dir still writes what --out writes, with
    a one-line note on stderr, and is gone from --help."""
    import json

    from click.testing import CliRunner

    from gpufleet.cli import main

    d = _two_bundles(tmp_path)
    base = ["gate", str(d), "--no-versions", "--workers", "1"]
    old = CliRunner().invoke(main, [*base, "--report-dir", str(tmp_path / "old")])
    new = CliRunner().invoke(main, [*base, "--out", str(tmp_path / "new")])
    assert old.exit_code == new.exit_code == 3, old.output
    notes = [line for line in old.stderr.splitlines() if "deprecated" in line]
    assert notes == ["gpufleet: warning: gate --report-dir is deprecated; use --out (the same folder)"]
    assert sorted(p.name for p in (tmp_path / "old").iterdir()) == sorted(p.name for p in (tmp_path / "new").iterdir())
    verdicts = lambda top: {x["slot"]: x["action"] for x in json.loads((top / "gate.json").read_text())}  # noqa: E731
    assert verdicts(tmp_path / "old") == verdicts(tmp_path / "new") == {"ok": "admit", "slow": "quarantine"}
    helped = CliRunner().invoke(main, ["gate", "--help"])
    assert "--out" in helped.output and "--report-dir" not in helped.output
    same = CliRunner().invoke(main, [*base, "--out", str(tmp_path / "x"), "--report-dir", str(tmp_path / "x")])
    assert same.exit_code == 3, same.output
    both = CliRunner().invoke(main, [*base, "--out", str(tmp_path / "a"), "--report-dir", str(tmp_path / "b")])
    assert both.exit_code == 2 and "name different folders" in both.output
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_node_named_like_the_report_is_refused_before_anything_is_written(tmp_path):
    from click.testing import CliRunner

    from gpufleet.cli import main

    synth.write_node(tmp_path / "bundles" / "gate", synth.NodeSpec(slot="gate"))
    r = CliRunner().invoke(main, ["gate", str(tmp_path / "bundles"), "--no-versions", "--workers", "1",
                                  "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and "gate.json" in r.output, r.output
    assert not (tmp_path / "out").exists()
