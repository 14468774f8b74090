"""The acceptance stages in the modelled time-to-pool, the network stage's pairs when blocks hold one
node (across blocks; none at all: not applicable), and a canary too small for the smoke job (a
failed, retryable stage).

Pure timelines in microseconds; rollouts in-process over the rollout tests' fake cloud (seconds).
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import pytest

from gpufleet import catalog
from gpufleet.plan import build_plan
from gpufleet.reports import rollout as report
from gpufleet.reports.render import junit, markdown
from gpufleet.reports.rollout_document import ACCEPTANCE_LANE, rollout_document, timeline_spans
from gpufleet.rollout import state as st
from gpufleet.rollout.acceptance import AcceptanceHooks, AcceptanceRunner, sample_pairs
from gpufleet.rollout.command import _retry, _summary
from gpufleet.rollout.display import PlainDisplay
from gpufleet.rollout.timeline import BatchTimes, StackStages, rollout_timeline, timeline
from gpufleet.sim.acceptance import SimAcceptanceCollector
from tests.rollout.fakes import T0, FakeCloud
from tests.rollout.helpers import orchestrator, small_spec

BATCHES = [BatchTimes(1, 600, 900, 1500), BatchTimes(2, 600, 900, 1500), BatchTimes(3, 600, 900, 1500)]
STAGES = StackStages(storage=100, network=40, smoke=200)


# ------------------------------------------------------------------ the model

@pytest.mark.parametrize("pipelining", [False, True])
def test_the_stages_sit_on_the_critical_path_where_the_flow_runs_them(pipelining):
    bare, with_stages = timeline(BATCHES, pipelining), timeline(BATCHES, pipelining, STAGES)
    assert with_stages.sequential_s == bare.sequential_s + 340
    assert with_stages.pipelined_s == bare.pipelined_s + 340
    assert with_stages.lower_bound_s == bare.lower_bound_s + 340
    assert with_stages.acceptance_s == {
        "storage": (0, 100),  # before the canary is provisioned
        "network": (1600, 1640),  # on the canary's configured hosts, before its gates
        "smoke": (3140, 3340)}  # after the canary, before batch 2 is provisioned
    assert with_stages.batch_end_s[0] == 3140
    assert [e - b for e, b in zip(with_stages.batch_end_s, bare.batch_end_s, strict=True)] == [140, 340, 340]
    d = with_stages.to_dict()
    assert d["acceptance_s"]["smoke"] == [3140, 3340] and d["batch_end_s"][-1] == d[
        "pipelined_s" if pipelining else "sequential_s"]


def test_a_rollout_halted_before_the_canary_still_counts_its_stages():
    t = timeline([], True, StackStages(storage=100, network=40))
    assert t.sequential_s == t.pipelined_s == t.lower_bound_s == 140 and t.batch_end_s == ()
    assert t.acceptance_s == {"storage": (0, 100), "network": (100, 140)}
    assert timeline([], True).to_dict()["acceptance_s"] == {}


def test_the_journal_gives_each_decided_stage_its_seconds():
    ok = {"verdict": "PASS", "passed": True, "reason_codes": [], "checks": []}
    state = st.fold([
        {"seq": 1, "type": "rollout", "to": "started"},
        {"seq": 2, "type": "acceptance", "stage": "storage", "to": "started"},
        {"seq": 3, "type": "acceptance", "stage": "storage", "to": "passed", "duration_s": 90.5,
         "outcome": {**ok, "stage": "storage"}},
        {"seq": 4, "type": "acceptance", "stage": "network", "to": "not-applicable", "reason": "1 node(s)",
         "outcome": {**ok, "stage": "network"}},
        {"seq": 5, "type": "batch", "batch": 1, "to": "running"},
        {"seq": 6, "type": "stage", "batch": 1, "stage": "provision", "duration_s": 600},
        {"seq": 7, "type": "acceptance", "stage": "smoke", "to": "started"}])  # running: no seconds yet
    assert StackStages.from_state(state) == StackStages(storage=90.5)
    t = rollout_timeline(state, pipelining=True)
    assert t.pipelined_s == 690.5 and t.acceptance_s == {"storage": (0, 90.5)}


# ------------------------------------------------------------------ pairs across blocks

def test_single_node_blocks_pair_across_blocks_and_pairs_stay_disjoint():
    singles = {b: [f"n{b}"] for b in range(5)}
    pairs = sample_pairs(singles, 2, seed=3)
    assert len(pairs) == 2 and pairs == sample_pairs(singles, 2, seed=3)  # the fifth has nobody left
    mixed = {0: ["a0", "a1", "a2"], 1: ["b0"], 2: ["c0", "c1"], 3: ["d0"], 4: ["e0"]}
    pairs = sample_pairs(mixed, 2, seed=1)
    flat = [n for p in pairs for n in p]
    assert len(flat) == len(set(flat))
    covered = {n[0] for n in flat}
    assert covered == {"a", "b", "c", "d", "e"}  # every block: the odd single borrows from the largest
    assert any(p[0][0] != p[1][0] for p in pairs)
    assert sample_pairs({0: ["only"]}, 2, seed=1) == []


def test_blocks_of_two_or_more_sample_as_before():
    blocks = {0: [f"a{i}" for i in range(5)], 1: ["b0", "b1"]}
    pairs = sample_pairs(blocks, 2, seed=1)
    assert len(pairs) == 3 and all(x[0] == y[0] for x, y in pairs)


# ------------------------------------------------------------------ through the orchestrator

def _rollout(tmp_path, spec, cloud=None):
    o = orchestrator(tmp_path, cloud or FakeCloud(), spec)
    sku = catalog.get(spec.cluster.instance_type)
    collector = SimAcceptanceCollector(spec.storage, o.plan.storage, sku, spec.acceptance, seed=1)
    o.hooks = AcceptanceHooks(AcceptanceRunner(spec, o.plan, tmp_path / "state", collector, sku, journal=o.journal))
    shown = io.StringIO()
    o.journal.listeners.append(PlainDisplay(o.plan, lambda: 0.0, shown))
    return o, shown


def test_a_rollout_reports_the_stages_inside_its_time_to_pool(tmp_path):
    spec = small_spec()  # a canary of three single-node blocks
    o, _ = _rollout(tmp_path, spec)
    out = o.run()
    assert out.finished and not out.halted
    network = out.state.acceptance["network"]
    assert network.status is st.StageStatus.PASSED and len(network.pairs) == 1
    assert network.outcome["checks"]  # evidence: the cross-block pair was tested
    rep = report.build(o.plan, out.state, "tst", True, out.short, wall_seconds=1.0)
    seconds = {a.stage: a.seconds for a in rep.acceptance}
    assert all(seconds.values())
    t = rep.timeline
    bare = timeline([BatchTimes.from_durations(n, b.durations) for n, b in sorted(out.state.batches.items())], True)
    assert t["pipelined_s"] == pytest.approx(bare.pipelined_s + sum(seconds.values()), abs=0.2)
    assert t["lower_bound_s"] == pytest.approx(bare.lower_bound_s + sum(seconds.values()), abs=0.2)
    assert f"time-to-pool (modelled): {t['pipelined_s']:.0f} s" in _summary(rep, True)
    clock = o.ports.clock  # the simulator's virtual clock follows the same timeline
    assert (clock.now() - T0).total_seconds() == pytest.approx(t["pipelined_s"], abs=0.2)
    lane = [s for s in timeline_spans(rep) if s.lane == ACCEPTANCE_LANE]
    assert [s.stage for s in lane] == ["storage", "network", "smoke"]
    assert {s.stage: s.end - s.start for s in lane} == pytest.approx(seconds, abs=0.2)


def test_one_node_cluster_network_not_applicable_and_smoke_failed(tmp_path):
    spec = small_spec(nodes=1, spare_fraction=0)  # the whole cluster (and so its canary) is one node
    o, shown = _rollout(tmp_path, spec)
    out = o.run()
    network, smoke = out.state.acceptance["network"], out.state.acceptance["smoke"]
    assert network.status is st.StageStatus.NOT_APPLICABLE and "no node pair" in network.reason
    assert smoke.status is st.StageStatus.FAILED and smoke.reason_codes == ["smoke-too-few-nodes"]
    assert out.halted and "smoke-too-few-nodes" in out.halt_reason
    lines = shown.getvalue().splitlines()
    assert any(x.startswith("acceptance network") and "not-applicable" in x and "no node pair" in x for x in lines)
    assert any(x.startswith("acceptance smoke") and "FAILED" in x and "smoke-too-few-nodes" in x for x in lines)

    rep = report.build(o.plan, out.state, "tst", True, out.short, wall_seconds=1.0)
    assert "acceptance network  not-applicable: 1 node(s): no node pair to test" in _summary(rep, True)
    by_stage = {a.stage: a for a in rep.acceptance}
    assert by_stage["network"].status == "not-applicable" and not by_stage["network"].checks
    assert by_stage["smoke"].reason_codes == ["smoke-too-few-nodes"]
    doc = rollout_document(rep, [])
    assert "no node pair" in markdown.render(doc) and "`smoke-too-few-nodes`" in markdown.render(doc)
    cases = {c.get("classname"): c for c in ET.fromstring(junit.render(doc).split("\n", 1)[1]).iter("testcase")}
    assert cases["acceptance.network"].find("skipped") is not None  # not a pass
    assert cases["acceptance.smoke"].find("failure") is not None


def test_a_canary_left_with_one_node_fails_the_smoke_job_then_retried(tmp_path):
    # the canary holds the smoke job's two nodes; one stays broken and no spare replaces it, so the
    # canary ends with one admitted node (within its failure budget) and the smoke job cannot run
    spec = small_spec(nodes=4, spare_fraction=0, canaryMaxFailureRate=0.5)
    broken = build_plan(spec).batch_nodes(1)[1].name
    o, shown = _rollout(tmp_path, spec, FakeCloud(sticky={broken: frozenset({"nvlink_down"})}))
    out = o.run()
    smoke = out.state.acceptance["smoke"]
    assert smoke.status is st.StageStatus.FAILED and smoke.reason_codes == ["smoke-too-few-nodes"]
    assert out.halted and "1 admitted" in out.halt_reason
    assert any(x.startswith("acceptance smoke") and "FAILED" in x for x in shown.getvalue().splitlines())

    _retry(o.journal, "smoke", "tst")  # `--retry-stage smoke`, after the canary got a second node
    assert not o.journal.state.halted
    assert o.hooks.after_canary([n.name for n in o.plan.nodes[:2]]) is None
    assert o.journal.state.acceptance["smoke"].status is st.StageStatus.PASSED
    assert o.journal.state.acceptance["smoke"].failures[0]["reason_codes"] == ["smoke-too-few-nodes"]
