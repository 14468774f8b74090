"""Multi-node runs judged with the gates' parser (ranks, hosts, wrong results, floors per node
count), the communication baseline file, and the rollout report's renderings."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from io import StringIO

import pytest

from gpufleet.errors import PoolError
from gpufleet.gates import synth
from gpufleet.pool.protocol import LaunchResult
from gpufleet.reports import rollout as report
from gpufleet.rollout.baselines import judge, ranks_and_hosts, scale_summary
from gpufleet.rollout.display import PlainDisplay
from gpufleet.plan import build_plan

from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator, settings, small_spec

T = datetime(2026, 7, 14, 8, 0, tzinfo=timezone.utc)


def output(busbw: float, ranks: int = 0, hosts: int = 2, wrong: bool = False) -> str:
    head = [f"#  Rank {r:2d} Group  0 Pid {1000 + r} on ip-10-0-0-{4 + r * hosts // max(ranks, 1)} device {r % 8} "
            "[0x53] NVIDIA H100 80GB HBM3" for r in range(ranks)]
    faults = frozenset({"wrong_counts"}) if wrong else frozenset()
    return "\n".join(head + [synth.nccl_intra(synth.NodeSpec(slot="a", intra_busbw=busbw, faults=faults))])


def result(text: str, nodes=("a", "b"), code: int = 0) -> LaunchResult:
    return LaunchResult(name="gate-a-b", nodes=tuple(nodes), exit_code=code, output=text, started=T,
                        ended=T + timedelta(seconds=75))


def test_a_pair_is_judged_against_the_multi_node_floor_not_the_intra_node_one():
    s = settings()
    ok = judge(result(output(365.0, ranks=16)), ("a", "b"), 16, s)
    # p5's floor follows its measured curve (gpufleet.gates.settings.MULTI_NODE_CURVES; issue 19), not one 330
    assert ok.passed and ok.measured and ok.floor_gbs == s.busbw_floor(2) and ok.busbw_gbs == 365.0 and ok.seconds == 75
    slow = judge(result(output(200.0)), ("a", "b"), 16, s)
    assert not slow.passed and slow.measured and f"below the floor {s.busbw_floor(2):g}" in slow.problem
    assert s.busbw_floor(1) == 430.0  # one node: the intra-node floor


@pytest.mark.parametrize("text,code,problem", [
    (output(365.0, ranks=8), 0, "ran 8 ranks, expected 16"),
    (output(365.0, ranks=16, hosts=1), 0, "ran on 1 host(s)"),
    (output(365.0, wrong=True), 0, "#wrong"),
    ("", 0, "no result rows"),
    (output(365.0), 137, "exit code 137"),
])
def test_a_run_that_measured_the_wrong_thing_fails(text, code, problem):
    r = judge(result(text, code=code), ("a", "b"), 16, settings())
    assert not r.passed and not r.measured and problem in r.problem


def test_a_launcher_answering_for_other_nodes_is_an_error():
    with pytest.raises(PoolError, match="not the spec's"):
        judge(result(output(365.0), nodes=("a", "c")), ("a", "b"), 16, settings())


def test_ranks_and_hosts_come_from_the_device_lines():
    assert ranks_and_hosts(output(1.0, ranks=16)) == (16, {"ip-10-0-0-4", "ip-10-0-0-5"})
    assert ranks_and_hosts(output(1.0)) is None


def test_scale_summary_per_node_count():
    runs = [{"nodes": ["a", "b"], "busbw_gbs": 360.0, "passed": True, "floor_gbs": 330.0},
            {"nodes": ["c", "d"], "busbw_gbs": 120.0, "passed": False, "floor_gbs": 330.0},
            {"nodes": ["a", "b", "c", "d"], "busbw_gbs": None, "passed": False, "floor_gbs": 330.0}]
    s = scale_summary(runs)
    assert s["2"] == {"runs": 2, "passed": 1, "floor_gbs": 330.0, "median_gbs": 240.0, "min_gbs": 120.0,
                      "max_gbs": 360.0}
    assert s["4"]["median_gbs"] is None and s["4"]["runs"] == 1


def test_the_report_renders_markdown_and_junit_from_the_journal(tmp_path):
    spec = small_spec(maxFailureRate=0.5)
    slot = "tst-b0002-n00002"
    cloud = FakeCloud(faults={slot: frozenset({"nvlink_down"})}, configure_fail={"tst-b0007-n00007"})
    out = orchestrator(tmp_path, cloud, spec).run()
    plan = build_plan(spec)
    rep = report.build(plan, out.state, "tst", True, out.short, now=T)
    assert rep.status == "complete" and rep.admitted_gpus == 96 and rep.spares_used == 2
    assert {q.slot: q.reason_code for q in rep.quarantined} == {slot: "nvlink-down", "tst-b0007-n00007": "configure-failed"}
    assert [(r.slot, r.old_instance != r.new_instance) for r in rep.replacements] == [(slot, True), ("tst-b0007-n00007", True)]
    assert rep.partitions[0].units_available == rep.partitions[0].units_planned == 12
    from gpufleet.gates.admission import AdmissionRecord
    records = [AdmissionRecord.model_validate(n.record) for n in out.state.nodes.values() if n.record]
    paths = {p.name: p for p in report.write(rep, records, tmp_path / "reports")}
    assert set(paths) == {"rollout.json", "rollout.md", "rollout-junit.xml", "rollout.html"}
    assert json.loads(paths["rollout.json"].read_text())["schema_version"] == 1
    assert report.RolloutReport.model_validate_json(paths["rollout.json"].read_text()) == rep
    md = paths["rollout.md"].read_text()
    assert "Rollout of `tst`: complete" in md and "nvlink-down" in md
    root = ET.fromstring(paths["rollout-junit.xml"].read_text().split("\n", 1)[1])
    cases = root.iter("testcase")
    names = {(c.get("classname"), c.get("name")): c.find("failure") is not None for c in cases}
    assert names[("rollout.tst-b0007-n00007", "node.i-0000701")] is True  # no record: its own failing case
    assert names[("rollout", "target.tst")] is False  # the target was reached


def test_the_plain_display_prints_a_line_when_a_batch_changes_stage(tmp_path):
    spec = small_spec()
    buf = StringIO()
    o = orchestrator(tmp_path, FakeCloud(), spec)
    o.journal.listeners.append(PlainDisplay(build_plan(spec), lambda: 3725.0, buf))
    o.run()
    lines = buf.getvalue().splitlines()
    assert any(line.startswith("batch 1 (canary)") and "passed" in line and "admitted     3" in line for line in lines)
    assert all("elapsed 1:02:05" in line for line in lines)
    assert len(lines) == len(set(lines))


def test_a_terminal_gets_the_rich_table(tmp_path):
    from gpufleet.rollout.display import RichDisplay, make_display

    class Tty(StringIO):
        def isatty(self) -> bool:
            return True

    spec = small_spec()
    buf = Tty()
    display = make_display(build_plan(spec), lambda: 60.0, buf)
    assert isinstance(display, RichDisplay)
    o = orchestrator(tmp_path, FakeCloud(), spec)
    o.journal.listeners.append(display)
    o.run()
    display.close()
    text = buf.getvalue()
    assert "gpufleet rollout" in text and "passed" in text and "0:01:00" in text
