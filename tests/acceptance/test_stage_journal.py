"""Acceptance stages as journal events: the fold's rules, the simulator's seeded faults seen in the
journal, the live display and every report format, a crash inside a stage rerunning that stage
alone, a retried failed stage, and outcome files from before the stages were journaled.

In-process over the rollout tests' fake cloud (milliseconds to seconds); the CLI-level checks
(the local stack, real SIGKILLs, an old-style journal resumed) are in test_stage_journal_cli.py.
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import xmlschema

from gpufleet import catalog
from gpufleet.gates.admission import AdmissionRecord
from gpufleet.reports import rollout as report
from gpufleet.reports.render import html, junit, markdown
from gpufleet.reports.rollout_document import rollout_document
from gpufleet.rollout import state as st
from gpufleet.rollout.acceptance import AcceptanceHooks, AcceptanceRunner, sample_pairs
from gpufleet.rollout.display import PlainDisplay, key_figures
from gpufleet.sim.acceptance import AcceptanceFaults, SimAcceptanceCollector
from gpufleet.spec import ClusterSpec
from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator

# 12 nodes in units (and blocks) of two, so the canary's blocks hold node pairs for the network stage
SPEC = ClusterSpec.from_raw({
    "cluster": {"name": "tst", "region": "us-east-1", "availabilityZone": "us-east-1a", "instanceType": "p5.48xlarge",
                "targetGpus": 96, "unitGpus": 16, "spareFraction": 0.25},
    "partitions": [{"name": "train", "mode": "data-parallel", "units": 6}],
    "rollout": {"canaryFraction": 0.25, "batchSize": 4}, "pool": {"type": "sim"}}, source="test")

XSD = Path(__file__).resolve().parents[1] / "fixtures" / "reports" / "junit.xsd"
OUTCOME_OK = {"stage": "storage", "verdict": "PASS", "passed": True, "reason_codes": [], "checks": []}
OUTCOME_BAD = {"stage": "storage", "verdict": "QUARANTINE", "passed": False, "reason_codes": ["storage-write-slow"],
               "checks": []}


def ev(seq, **kw):
    return {"seq": seq, "type": "acceptance", **kw}


# ------------------------------------------------------------------ the fold

def test_a_started_stage_takes_its_verdict_and_is_never_started_again():
    state = st.fold([{"seq": 1, "type": "rollout", "to": "started", "at": "2026-01-01T00:00:00+00:00"},
                     ev(2, stage="storage", to="started", nodes=["a", "b"], bundle="acceptance/storage/1"),
                     ev(3, stage="storage", to="passed", outcome=OUTCOME_OK, duration_s=12.5, timing="modelled")])
    a = state.acceptance["storage"]
    assert (a.status, a.attempt, a.nodes, a.bundle, a.duration_s, a.timing) == (
        st.StageStatus.PASSED, 1, ["a", "b"], "acceptance/storage/1", 12.5, "modelled")
    assert state.started_at == "2026-01-01T00:00:00+00:00"
    with pytest.raises(st.IllegalTransition, match="verdict is journaled"):
        st.apply(state, ev(4, stage="storage", to="started"))


@pytest.mark.parametrize("events, match", [
    ([ev(1, stage="storage", to="passed", outcome=OUTCOME_OK)], "without a started attempt"),
    ([ev(1, stage="storage", to="started"), ev(2, stage="storage", to="passed", outcome=OUTCOME_BAD)],
     "does not match its outcome"),
    ([ev(1, stage="fsck", to="started")], "unknown acceptance stage"),
    ([ev(1, stage="storage", to="started"), ev(2, stage="storage", to="retry")], "only a failed stage"),
    ([{"seq": 1, "type": "rollout", "to": "halted", "reason": "x"}, ev(2, stage="network", to="started")],
     "the rollout is halted"),
    ([ev(1, stage="storage", to="started"), ev(2, stage="storage", to="done")], "cannot go to"),
])
def test_illegal_stage_events_raise(events, match):
    with pytest.raises(st.IllegalTransition, match=match):
        st.fold(events)


def test_a_started_stage_without_verdict_starts_again_as_the_next_attempt():
    state = st.fold([ev(1, stage="network", to="started", bundle="acceptance/network/1"),
                     ev(2, stage="network", to="started", bundle="acceptance/network/2"),
                     ev(3, stage="network", to="passed", outcome={**OUTCOME_OK, "stage": "network"})])
    assert state.acceptance["network"].attempt == 2 and state.acceptance["network"].bundle == "acceptance/network/2"


def test_a_retry_reopens_only_a_failed_stage_and_lifts_its_halt():
    state = st.fold([{"seq": 1, "type": "rollout", "to": "started"},
                     ev(2, stage="storage", to="started", bundle="acceptance/storage/1"),
                     ev(3, stage="storage", to="failed", outcome=OUTCOME_BAD),
                     {"seq": 4, "type": "rollout", "to": "halted", "reason": "acceptance storage failed"}])
    assert state.halted and not state.unfinished
    st.apply(state, ev(5, stage="storage", to="retry"))
    a = state.acceptance["storage"]
    assert not state.halted and state.unfinished and a.status is st.StageStatus.RETRY and a.outcome is None
    assert a.failures == [{"attempt": 1, "reason_codes": ["storage-write-slow"], "bundle": "acceptance/storage/1"}]
    st.apply(state, ev(6, stage="storage", to="started", bundle="acceptance/storage/2"))
    st.apply(state, ev(7, stage="storage", to="passed", outcome=OUTCOME_OK))
    assert (a.status, a.attempt) == (st.StageStatus.PASSED, 2)


def test_an_imported_verdict_needs_no_start_but_never_overrides_one():
    state = st.fold([ev(1, stage="storage", to="failed", outcome=OUTCOME_BAD, imported="/s/acceptance/storage.json",
                        nodes=["a"], pairs=[["a", "b"]])])
    a = state.acceptance["storage"]
    assert (a.status, a.attempt, a.imported, a.pairs) == (st.StageStatus.FAILED, 1, "/s/acceptance/storage.json",
                                                          [("a", "b")])
    with pytest.raises(st.IllegalTransition, match="nothing to import"):
        st.apply(state, ev(2, stage="storage", to="passed", outcome=OUTCOME_OK, imported="again"))


# ------------------------------------------------------------------ through the orchestrator

class Counting(SimAcceptanceCollector):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.stages: list[str] = []

    def collect(self, stage, nodes, pairs, out):
        self.stages.append(stage)
        return super().collect(stage, nodes, pairs, out)


class Crash(BaseException):
    """Stands in for SIGKILL: nothing catches it."""


def _rollout(tmp_path, faults=AcceptanceFaults(), cloud=None, listeners=()):
    cloud = cloud or FakeCloud()
    o = orchestrator(tmp_path, cloud, SPEC)
    sku = catalog.get(SPEC.cluster.instance_type)
    collector = Counting(SPEC.storage, o.plan.storage, sku, SPEC.acceptance, seed=1, faults=faults)
    o.hooks = AcceptanceHooks(AcceptanceRunner(SPEC, o.plan, tmp_path / "state", collector, sku, journal=o.journal))
    o.journal.listeners.extend(listeners)
    return o, collector, cloud


def _journal(tmp_path):
    return [json.loads(line) for line in (tmp_path / "state" / "journal.jsonl").read_text().splitlines()]


def _victims(tmp_path):
    """A node of the first sampled network pair, and the canary's second node (a smoke rank)."""
    o = orchestrator(tmp_path / "probe", FakeCloud(), SPEC)
    blocks: dict[int, list[str]] = {}
    for n in o.plan.batch_nodes(1):
        blocks.setdefault(n.block, []).append(n.name)
    pairs = sample_pairs(blocks, SPEC.acceptance.efa_pairs_per_block, seed=sum(map(len, blocks.values())))
    return pairs[0][1], [n.name for n in o.plan.batch_nodes(1)][1]


def _report(o, out):
    rep = report.build(o.plan, out.state, "t", True, out.short)
    records = [AdmissionRecord.model_validate(n.record) for n in out.state.nodes.values() if n.record]
    return rep, rollout_document(rep, records)


@pytest.mark.parametrize("fault, stage, code", [
    ("slow_storage", "storage", "storage-write-slow"),
    ("bad_mgmt", "network", "mgmt-tcp-slow"),
    ("diverging", "smoke", "smoke-ranks-diverged"),
])
def test_a_seeded_fault_fails_its_stage_in_the_journal_the_display_and_every_report(tmp_path, fault, stage, code):
    link, rank = _victims(tmp_path)
    faults = {"slow_storage": AcceptanceFaults(slow_storage=0.3),
              "bad_mgmt": AcceptanceFaults(bad_mgmt_nodes=frozenset({link})),
              "diverging": AcceptanceFaults(diverging_node=rank)}[fault]
    shown = io.StringIO()
    o, collector, _ = _rollout(tmp_path, faults)
    o.journal.listeners.append(PlainDisplay(o.plan, lambda: 0.0, shown))
    out = o.run()
    assert out.halted and collector.stages[-1] == stage
    verdicts = [(e["stage"], e["to"]) for e in _journal(tmp_path) if e["type"] == "acceptance" and e["to"] != "started"]
    assert verdicts[-1] == (stage, "failed") and all(to == "passed" for _, to in verdicts[:-1])
    failed = next(e for e in _journal(tmp_path) if e["type"] == "acceptance" and e["to"] == "failed")
    assert code in failed["outcome"]["reason_codes"] and failed["duration_s"] > 0
    assert failed["timing"] == "modelled"
    lines = shown.getvalue().splitlines()
    line = next(x for x in lines if x.startswith(f"acceptance {stage}") and "FAILED" in x)
    assert code in line
    assert any(x.startswith(f"acceptance {stage}") and " running " in x for x in lines)

    rep, doc = _report(o, out)
    by_stage = {a.stage: a for a in rep.acceptance}
    assert by_stage[stage].status == "failed" and code in by_stage[stage].reason_codes
    assert [a.stage for a in rep.acceptance] == ["storage", "network", "smoke"]
    bad = [c for c in by_stage[stage].checks if c.reason_code == code]
    assert bad and all(c.verdict.blocks_admission for c in bad)
    reloaded = report.RolloutReport.model_validate_json(rep.model_dump_json())
    assert reloaded.acceptance == rep.acceptance
    cases = ET.fromstring(junit.render(doc)).iter("testcase")
    stage_cases = [c for c in cases if c.get("classname") == f"acceptance.{stage}"]
    assert len(stage_cases) == len(by_stage[stage].checks)
    failing = [c for c in stage_cases if c.find("failure") is not None]
    assert failing and all(code in c.find("failure").get("message") for c in failing if c.get("name") in
                           {x.check_id for x in bad})
    md = markdown.render(doc)
    assert "## Acceptance" in md and f"`{code}`" in md
    assert f"{stage}: failed, attempt 1" in md and code in html.render(doc)


def test_healthy_stages_are_shown_with_their_figures_and_reported_with_floors(tmp_path):
    shown = io.StringIO()
    o, _, _ = _rollout(tmp_path)
    o.journal.listeners.append(PlainDisplay(o.plan, lambda: 0.0, shown))
    out = o.run()
    assert out.finished
    passed = [x for x in shown.getvalue().splitlines() if x.startswith("acceptance") and " passed " in x]
    assert [x.split()[1] for x in passed] == ["storage", "network", "smoke"]
    assert "seq-write" in passed[0] and "Gbit/s" in passed[1] and "samples/s" in passed[2]
    assert all("s modelled)" in x for x in passed)
    rep, doc = _report(o, out)
    assert [(a.stage, a.status, a.verdict, a.attempts) for a in rep.acceptance] == [
        ("storage", "passed", "PASS", 1), ("network", "passed", "PASS", 1), ("smoke", "passed", "PASS", 1)]
    seq_write = next(c for c in rep.acceptance[0].checks if c.check_id == "storage.seq-write")
    assert seq_write.expected.startswith(">= ") and "MB/s" in seq_write.measured
    xml = junit.render(doc)
    xmlschema.XMLSchema(str(XSD)).validate(xml)
    junit_cases = [c for c in ET.fromstring(xml).iter("testcase") if c.get("classname", "").startswith("acceptance.")]
    assert len(junit_cases) == sum(len(a.checks) for a in rep.acceptance)
    assert all(c.find("failure") is None for c in junit_cases)


def test_key_figures_of_the_network_are_ranges_over_the_pairs():
    checks = [{"check_id": "net.tcp[a--b]", "measured": "90.5 Gbit/s, 3 retransmits"},
              {"check_id": "net.tcp[c--d]", "measured": "88 Gbit/s, 0 retransmits"},
              {"check_id": "net.rtt[a--b]", "measured": "avg 0.07 ms, loss 0%"},
              {"check_id": "net.rtt[c--d]", "measured": "avg 0.07 ms, loss 0%"},
              {"check_id": "net.efa-bw[a--b]", "measured": "iperf3 failed: unreachable"}]
    assert key_figures("network", checks) == "tcp 88-90.5 Gbit/s; rtt 0.07 ms over 2 pairs"


def test_a_crash_between_a_stage_start_and_its_verdict_reruns_that_stage_only(tmp_path):
    def crash_on_network_start(event, _state):
        if event.get("type") == "acceptance" and event["stage"] == "network" and event["to"] == "started":
            raise Crash()  # after the line is durable, before the collector ran

    o, collector, cloud = _rollout(tmp_path, listeners=[crash_on_network_start])
    with pytest.raises(Crash):
        o.run()
    assert collector.stages == ["storage"]
    first = o.journal.state.acceptance["network"]
    assert first.status is st.StageStatus.RUNNING and first.attempt == 1
    (tmp_path / "state" / first.bundle).mkdir(parents=True, exist_ok=True)  # what a collector cut short leaves
    o.journal.close()

    again, collector, _ = _rollout(tmp_path, cloud=cloud)
    out = again.run()
    assert out.finished and collector.stages == ["network", "smoke"]
    acc = out.state.acceptance
    assert (acc["storage"].attempt, acc["network"].attempt, acc["smoke"].attempt) == (1, 2, 1)
    assert not (tmp_path / "state" / first.bundle).exists()
    assert (tmp_path / "state" / acc["network"].bundle / "manifest.json").is_file()
    starts = [e["stage"] for e in _journal(tmp_path) if e["type"] == "acceptance" and e["to"] == "started"]
    assert starts == ["storage", "network", "network", "smoke"]


def test_a_retried_stage_runs_again_and_the_rollout_continues(tmp_path):
    o, _, cloud = _rollout(tmp_path, AcceptanceFaults(slow_storage=0.3))
    assert o.run().halted
    o.journal.append({"type": "acceptance", "stage": "storage", "to": "retry"})  # what --retry-stage journals
    o.journal.close()
    again, collector, _ = _rollout(tmp_path, cloud=cloud)  # the file system fixed
    out = again.run()
    assert out.finished and collector.stages == ["storage", "network", "smoke"]
    storage = out.state.acceptance["storage"]
    assert storage.attempt == 2 and storage.status is st.StageStatus.PASSED
    rep, doc = _report(again, out)
    assert rep.acceptance[0].earlier[0].reason_codes[0] == "storage-write-slow"
    assert "attempt 1 failed (storage-write-slow" in markdown.render(doc)


# ------------------------------------------------------------------ outcome files from before the journal

class Refuses:
    def collect(self, *args):
        raise AssertionError("an adopted stage must not be collected again")


def _legacy_file(state_dir, stage, at, outcome):
    path = state_dir / "acceptance" / f"{stage}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"stage": stage, "at": at.isoformat(), "bundle": str(state_dir / "old-bundle"),
                                "nodes": ["n1"], "pairs": [], "outcome": outcome}))


def test_outcome_files_of_this_rollout_are_adopted_once_and_older_ones_ignored(tmp_path):
    o, _, _ = _rollout(tmp_path)
    o.journal.append({"type": "rollout", "to": "started", "layout": o.layout(), "batches": [1, 2, 3]})
    started = datetime.fromisoformat(o.journal.state.started_at)
    sd = tmp_path / "state"
    _legacy_file(sd, "storage", started + timedelta(seconds=5), OUTCOME_OK)
    _legacy_file(sd, "network", started - timedelta(days=1), {**OUTCOME_BAD, "stage": "network"})  # archived run
    runner = AcceptanceRunner(SPEC, o.plan, sd, Refuses(), catalog.get(SPEC.cluster.instance_type),
                              journal=o.journal)
    assert runner.adopt_recorded_files() == ["storage"]
    assert runner.adopt_recorded_files() == []  # once
    storage = o.journal.state.acceptance["storage"]
    assert storage.imported == str(sd / "acceptance" / "storage.json") and storage.bundle == "old-bundle"
    assert runner.recorded("storage").passed and "network" not in o.journal.state.acceptance


def test_the_terminal_table_shows_each_stage_under_its_status(tmp_path):
    from rich.console import Console

    from gpufleet.rollout.display import RichDisplay

    check = {"check_id": "net.tcp[a--b]", "severity": "Q", "measured": "1.5 Gbit/s", "expected": ">= 50 Gbit/s",
             "verdict": "QUARANTINE", "reason_code": "mgmt-tcp-slow", "message": "TCP [a--b] 1.5 Gbit/s is under 50",
             "research_ref": "x"}
    state = st.fold([ev(1, stage="storage", to="started", nodes=["a"]),
                     ev(2, stage="storage", to="passed", outcome={**OUTCOME_OK, "checks": [
                         {**check, "check_id": "storage.seq-write", "measured": "900 MB/s", "verdict": "PASS",
                          "reason_code": None, "message": ""}]}, duration_s=30.0, timing="modelled"),
                     ev(3, stage="network", to="started", nodes=["a", "b"], pairs=[["a", "b"]]),
                     ev(4, stage="network", to="failed", outcome={
                         "stage": "network", "verdict": "QUARANTINE", "passed": False,
                         "reason_codes": ["mgmt-tcp-slow"], "checks": [check]}, duration_s=9.0)])
    plan = orchestrator(tmp_path, FakeCloud(), SPEC).plan
    display = RichDisplay(plan, lambda: 0.0, io.StringIO())
    display.live.stop()
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(display._table(state))
    text = console.export_text()
    assert "acceptance stages" in text and "gpufleet rollout" in text
    storage = next(line for line in text.splitlines() if "storage" in line)
    network = next(line for line in text.splitlines() if "network" in line)
    assert "passed" in storage and "seq-write 900 MB/s" in storage and "30 s modelled" in storage
    assert "failed" in network and "mgmt-tcp-slow: TCP [a--b] 1.5 Gbit/s is under 50" in network


def test_a_note_is_a_line_on_the_plain_display_and_printed_above_the_rich_table():
    from gpufleet.plan import build_plan
    from gpufleet.rollout.display import RichDisplay

    plain = io.StringIO()
    PlainDisplay(build_plan(SPEC), lambda: 75.0, plain).note("acceptance storage: configuring the clients")
    assert plain.getvalue() == "acceptance storage: configuring the clients  elapsed 0:01:15\n"
    rich = io.StringIO()
    display = RichDisplay(build_plan(SPEC), lambda: 75.0, rich)
    display.note("acceptance storage: 4 storage client(s) ready: [a], b")  # brackets are text, not markup
    display.close()
    assert "acceptance storage: 4 storage client(s) ready: [a], b  elapsed 0:01:15" in rich.getvalue()


# ------------------------------------------------------------------ after a storage change

def _with_storage(spec: ClusterSpec, **changes) -> ClusterSpec:
    return spec.model_copy(update={"storage": spec.storage.model_copy(update=changes)})


def _on(tmp_path, spec, cloud, faults=AcceptanceFaults()):
    o = orchestrator(tmp_path, cloud, spec)
    sku = catalog.get(spec.cluster.instance_type)
    collector = Counting(spec.storage, o.plan.storage, sku, spec.acceptance, seed=1, faults=faults)
    o.hooks = AcceptanceHooks(AcceptanceRunner(spec, o.plan, tmp_path / "state", collector, sku, journal=o.journal))
    return o, collector


def test_a_storage_change_after_the_rollout_rechecks_storage_alone_and_a_shortfall_halts(tmp_path):
    o, _, cloud = _rollout(tmp_path)
    assert o.run().finished
    o.journal.close()
    bought = list(cloud.ledger)

    same, collector = _on(tmp_path, SPEC, cloud)
    assert same.run().finished and collector.stages == []  # nothing changed: nothing runs again
    same.journal.close()

    resized = _with_storage(SPEC, dataset_tib=40)
    again, collector = _on(tmp_path, resized, cloud)
    out = again.run()
    assert out.finished and collector.stages == ["storage"] and cloud.ledger == bought
    storage = out.state.acceptance["storage"]
    assert storage.attempt == 2 and storage.status is st.StageStatus.PASSED
    assert storage.inputs["storage.datasetTib"] == 40
    recheck = next(e for e in _journal(tmp_path) if e.get("to") == "recheck")
    assert recheck["reason"].startswith("storage changed since attempt 1: storage.datasetTib 10.0 -> 40")
    rep, doc = _report(again, out)
    assert rep.status == "complete" and "storage.datasetTib" in rep.acceptance[0].earlier[0].recheck
    assert "attempt 1 rechecked (storage changed since attempt 1" in markdown.render(doc)
    again.journal.close()

    slower = _with_storage(resized, throughput_per_tib=125)
    halted, collector = _on(tmp_path, slower, cloud, AcceptanceFaults(slow_storage=0.3))
    out = halted.run()
    assert out.halted and collector.stages == ["storage"] and cloud.ledger == bought
    assert out.halt_reason.startswith("acceptance storage failed (storage-write-slow")
    halted.journal.append({"type": "acceptance", "stage": "storage", "to": "retry"})  # --retry-stage storage
    halted.journal.close()

    fixed, collector = _on(tmp_path, slower, cloud)
    out = fixed.run()
    assert out.finished and not out.halted and collector.stages == ["storage"]
    assert out.state.acceptance["storage"].attempt == 4


def test_recheck_events_are_refused_where_they_make_no_sense():
    start = {"seq": 1, "type": "rollout", "to": "started", "batches": [1]}
    with pytest.raises(st.IllegalTransition, match="only a decided stage is rechecked"):
        st.fold([start, ev(2, stage="storage", to="started"), ev(3, stage="storage", to="recheck", reason="x")])
    with pytest.raises(st.IllegalTransition, match="halted by something else"):
        st.fold([start, ev(2, stage="storage", to="started"), ev(3, stage="storage", to="passed", outcome=OUTCOME_OK),
                 {"seq": 4, "type": "rollout", "to": "halted", "reason": "the canary failed"},
                 ev(5, stage="storage", to="recheck", reason="x")])
    state = st.fold([start, ev(2, stage="storage", to="started"), ev(3, stage="storage", to="passed", outcome=OUTCOME_OK),
                     {"seq": 4, "type": "rollout", "to": "finished"}, ev(5, stage="storage", to="recheck", reason="x")])
    assert not state.finished and state.acceptance["storage"].status is st.StageStatus.RETRY
