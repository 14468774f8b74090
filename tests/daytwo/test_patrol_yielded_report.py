"""`gpufleet patrol` says which nodes it left to real jobs (issue 22 item 6): per node an outcome
(`yielded` for a node a job took before its round or whose lowest-priority hold a real job
preempted), counts per outcome, the preempted ones named, in the JSON envelope, the text lines
and the Markdown report. The holds here are the pool port's (`HoldsForPatrol`); the real ones are
tested on real Slurm (tests/pool/test_slurm_patrol_real.py) and through KubeApi against the fake
API server (tests/pool/test_kubernetes_patrol_job.py)."""

from __future__ import annotations

import json

import pytest

from gpufleet.daytwo import patrol_run
from gpufleet.daytwo.patrol_report import OUTCOMES, build
from tests.daytwo.fleet import STACK, admitted, gpufleet


class Holds:
    """Holds every node but `refused` (a job took it first); `preempted` loses its hold mid-round."""

    def __init__(self, refused: str, preempted: str) -> None:
        self.refused, self.preempted = refused, preempted

    def hold(self, partitions):
        return {s: f"job-{s}" for s in partitions if s != self.refused}

    def lost(self, holds):
        return sorted(s for s in holds if s == self.preempted)

    def release(self, holds):
        return None


@pytest.fixture
def held(fleet, monkeypatch):
    first, refused, preempted = admitted(fleet)[:3]
    real = patrol_run.run_patrol

    def with_holds(d, collector):
        d.pool.patrol_holds = lambda: Holds(refused, preempted)
        return real(d, collector)
    monkeypatch.setattr(patrol_run, "run_patrol", with_holds)
    return fleet, first, refused, preempted


def test_the_json_names_each_nodes_outcome_and_counts_the_yielded(held):
    fleet, first, refused, preempted = held
    out = gpufleet(fleet, "patrol", "-s", STACK, "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output[out.output.index("{"):])
    assert doc["held"] is True and doc["rounds"] >= 1 and doc["budget"]
    assert doc["preempted"] == [preempted] and sorted(doc["yielded"]) == sorted({refused, preempted})
    assert doc["outcomes"][refused] == doc["outcomes"][preempted] == "yielded"
    assert doc["outcomes"][first] == "passed"
    assert set(doc["outcomes"].values()) <= set(OUTCOMES)
    assert doc["counts"]["yielded"] == 2 and doc["counts"]["passed"] == len(doc["checked"])
    assert sum(doc["counts"].values()) == len(doc["outcomes"])
    saved = json.loads((fleet / "reports" / STACK / "patrol.json").read_text())
    assert saved["outcomes"] == doc["outcomes"] and saved["preempted"] == [preempted]
    md = (fleet / "reports" / STACK / "patrol.md").read_text()
    assert "Yielded to real jobs" in md and preempted in md and refused in md and "taken before its round" in md


def test_the_text_says_which_nodes_yielded_and_which_were_preempted(held):
    fleet, _first, refused, preempted = held
    out = gpufleet(fleet, "patrol", "-s", STACK)
    assert out.exit_code == 0, out.output
    assert "yielded 2 to real jobs (1 preempted)" in out.output, out.output
    assert f"yielded      {preempted}: its patrol job was preempted by a real job" in out.output
    assert f"yielded      {refused}: a real job took it before its round" in out.output


def test_a_patrol_with_nothing_yielded_says_so(fleet):
    out = gpufleet(fleet, "patrol", "-s", STACK, "--json")
    doc = json.loads(out.output[out.output.index("{"):])
    assert doc["yielded"] == [] and doc["preempted"] == [] and "yielded" not in doc["counts"]
    assert doc["held"] is False and all(v == "passed" for k, v in doc["outcomes"].items() if k not in doc["skipped_busy"])


def test_a_deferred_node_is_deferred_not_failed():
    from datetime import datetime, timezone

    from gpufleet.daytwo.patrol import PatrolResult
    out = patrol_run.PatrolOutcome(stack="s", started=datetime(2026, 12, 2, tzinfo=timezone.utc), who="w",
                                   checked=[PatrolResult("a", False, "xid-48", "x", (), None, None),
                                            PatrolResult("b", True, None, "", (), None, None)],
                                   deferred=["a"], yielded=["c"], preempted=["c"], skipped_busy=["d"])
    report, _ = build(out)
    assert report.outcomes == {"a": "deferred", "b": "passed", "c": "yielded", "d": "skipped-busy"}
    assert report.counts == {"passed": 1, "deferred": 1, "yielded": 1, "skipped-busy": 1}
