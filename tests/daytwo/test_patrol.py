"""`gpufleet patrol` on a rolled-out simulated stack: idle admitted nodes rechecked, busy ones never
touched, a node whose tools start reporting an Xid (or whose busbw fell below its own admission)
quarantined and journaled, a slot failing again blacklisted and reported for replacement."""

from __future__ import annotations

import json

from gpufleet.daytwo.collect import collector_for
from gpufleet.daytwo.context import open_day_two
from gpufleet.daytwo.patrol import batches, concurrency_budget
from gpufleet.daytwo.patrol_run import run_patrol
from gpufleet.daytwo.upgrade_plan import limits
from gpufleet.spec import UpgradeConfig
from gpufleet.project import load_project
from tests.daytwo.test_upgrade_plan import local_plan
from tests.daytwo.fleet import STACK, admitted, daytwo_events, gpufleet, pool_doc, set_busy, state_dir


def patrol(project, *args):
    return gpufleet(project, "patrol", "-s", STACK, "--json", *args)


def test_a_clean_patrol_checks_every_idle_node_and_remembers_when(fleet):
    out = patrol(fleet)
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output[out.output.index("{"):])
    everyone = sorted(s for s, n in pool_doc(fleet)["nodes"].items() if n["state"] == "admitted")
    assert sorted(n["slot"] for n in doc["checked"]) == everyone and all(n["passed"] for n in doc["checked"])
    # same node, same bandwidth: admission kept the -J document's figure, patrol reads the text table's 2 decimals
    assert all(abs(n["busbw_gbs"] - n["admission_busbw_gbs"]) <= 0.005 for n in doc["checked"])
    last = json.loads((state_dir(fleet) / "patrol" / "last.json").read_text())
    assert sorted(last) == everyone
    reports = fleet / "reports" / STACK
    assert {p.name for p in reports.glob("patrol*")} == {"patrol.json", "patrol.md", "patrol-junit.xml", "patrol.html"}
    assert [e["type"] for e in daytwo_events(fleet)] == ["patrol"]


def test_patrol_skips_busy_nodes_and_quarantines_an_idle_node_with_a_new_xid(fleet):
    busy, idle = admitted(fleet)[:2]
    for slot in (busy, idle):
        assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", "xid-48").exit_code == 0
    set_busy(fleet, busy)
    out = patrol(fleet)
    assert out.exit_code == 3, out.output
    doc = json.loads(out.output[out.output.index("{"):out.output.rindex("}") + 1])
    assert busy in doc["skipped_busy"] and busy not in {n["slot"] for n in doc["checked"]}
    assert list(doc["quarantined"]) == [idle] and doc["quarantined"][idle]["reason_code"] == "xid-48"
    nodes = pool_doc(fleet)["nodes"]
    assert nodes[busy]["state"] == "admitted" and nodes[idle]["state"] == "quarantined"
    change = [e for e in daytwo_events(fleet) if e["type"] == "pool"]
    assert [(e["slot"], e["action"], e["source"], e["who"]) for e in change] == [
        (idle, "quarantine", "patrol", "alice@ops")]
    junit = (fleet / "reports" / STACK / "patrol-junit.xml").read_text()
    assert f'classname="patrol.{idle}"' in junit and "xid-48" in junit


def test_a_slowed_node_fails_against_its_own_admission_busbw(fleet):
    slot = admitted(fleet)[2]
    assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", "slow-nvlink").exit_code == 0
    out = patrol(fleet)
    assert out.exit_code == 3
    assert pool_doc(fleet)["nodes"][slot]["reason_code"] == "busbw-regressed"


def test_an_xid_that_appeared_while_the_node_was_busy_is_found_once_it_is_idle(fleet):
    slot = admitted(fleet)[4]
    assert patrol(fleet).exit_code == 0  # every node's last patrol recorded
    set_busy(fleet, slot)
    assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", "xid-119").exit_code == 0
    assert patrol(fleet).exit_code == 0  # busy: skipped, and its last patrol time is kept
    set_busy(fleet, slot, False)
    out = patrol(fleet)
    assert out.exit_code == 3  # its kernel log since its last patrol holds the Xid
    assert pool_doc(fleet)["nodes"][slot]["reason_code"] == "xid-119"
    assert patrol(fleet).exit_code == 0  # a quarantined node is no longer patrolled


def test_a_slot_that_fails_again_is_blacklisted_and_reported_for_replacement(fleet):
    slot = admitted(fleet)[6]
    assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", "xid-79").exit_code == 0
    assert patrol(fleet).exit_code == 3  # failure 1: quarantined
    out = gpufleet(fleet, "pool", "replace", "-s", STACK, slot, "--reason", "patrol found xid 79")
    assert out.exit_code == 0, out.output  # the fault was the instance's: the new one passes
    assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", "efa-missing").exit_code == 0
    out = gpufleet(fleet, "patrol", "-s", STACK)
    assert out.exit_code == 3
    assert f"replace {slot}" in out.output
    node = pool_doc(fleet)["nodes"][slot]
    assert node["state"] == "blacklisted" and node["failures"] == 2
    md = (fleet / "reports" / STACK / "patrol.md").read_text()
    assert "Blacklisted, to replace" in md and slot in md


def test_a_node_that_turns_busy_during_the_patrol_is_deferred_not_quarantined(fleet):
    slot = admitted(fleet)[8]
    assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", "xid-48").exit_code == 0
    with open_day_two(STACK, "patrol", project=load_project(fleet)) as d:
        inner = collector_for(d)

        class JobLands:
            def collect(self, instances, since, dest):
                result = inner.collect(instances, since, dest)
                if slot in [i.slot for i in instances]:
                    set_busy(fleet, slot)  # the scheduler placed a job while its bundle was collected
                return result

        outcome = run_patrol(d, JobLands())
    assert outcome.deferred == [slot] and not outcome.quarantined
    assert pool_doc(fleet)["nodes"][slot]["state"] == "admitted"


def test_the_patrol_checks_in_rounds_within_a_budget_from_the_plan_and_yields_to_a_job(fleet):
    """The budget is the plan's: each partition's nodes of the units an upgrade may take out at once;
    a wider allowance means fewer rounds. A node a job takes before its round is left to the job."""
    project = load_project(fleet)
    taken = []
    with open_day_two(STACK, "patrol", project=project) as d:
        inner = collector_for(d)
        partition_of = {s: n.partition for s, n in d.pool.state().nodes.items()}
        expected = concurrency_budget(d.plan, limits(d.plan, d.spec.upgrade))
        idle = admitted(fleet)
        later = idle[-1]

        class Rounds:
            def collect(self, instances, since, dest):
                taken.append([i.slot for i in instances])
                if len(taken) == 1:
                    set_busy(fleet, later)  # a real job lands on a node still waiting for its round
                return inner.collect(instances, since, dest)

        outcome = run_patrol(d, Rounds())
    assert outcome.budget == expected and outcome.rounds == len(taken) > 1
    for names in taken:  # no round holds more of a partition than its budget
        for part, cap in expected.items():
            assert sum(partition_of[s] == part for s in names) <= cap, (part, names)
    assert outcome.yielded == [later] and later not in {s for names in taken for s in names}
    everyone = {s for s, n in pool_doc(fleet)["nodes"].items() if n["state"] == "admitted"}
    assert {r.slot for r in outcome.checked} == everyone - {later} - set(outcome.unreachable)
    (event,) = [e for e in daytwo_events(fleet) if e["type"] == "patrol"]
    assert event["budget"] == expected and event["rounds"] == outcome.rounds and event["yielded"] == [later]

    stack = fleet / "stacks" / f"Pulumi.{STACK}.yaml"  # a wider allowance: bigger rounds, fewer of them
    stack.write_text(stack.read_text().replace("config:\n", "config:\n  gpufleet:upgrade:\n    maxUnavailableFraction: 0.5\n", 1))
    set_busy(fleet, later, False)
    with open_day_two(STACK, "patrol", project=load_project(fleet)) as d:
        wider = run_patrol(d, collector_for(d))
    assert all(wider.budget[p] >= expected[p] for p in expected) and wider.budget != expected
    assert wider.rounds < outcome.rounds



def test_the_budget_follows_the_plan_and_rounds_respect_it():
    """On the 1000-GPU `local` plan: the nodes of each partition's allowed units, one node at the
    least; a wider allowance, a wider budget; rounds never exceed it."""
    plan = local_plan()
    budget = concurrency_budget(plan, limits(plan, UpgradeConfig()))
    per_unit = {u.partition: len(u.nodes) for u in plan.units if u.partition is not None}
    assert budget == {p: n * per_unit[p] for p, n in limits(plan, UpgradeConfig()).items()}  # whole units' nodes
    assert budget["train"] > budget["sim"] >= budget["debug"] >= 1
    wide = concurrency_budget(plan, limits(plan, UpgradeConfig(max_unavailable_fraction=0.5)))
    assert wide["train"] > budget["train"]
    partition_of = {}
    for u in plan.units:
        for i in u.nodes:
            partition_of[plan.nodes[i].name] = u.partition
    slots = sorted(partition_of)
    rounds = batches(slots, partition_of, budget)
    assert sorted(s for r in rounds for s in r) == slots
    for r in rounds:
        for part, cap in budget.items():
            assert sum(partition_of[s] == part for s in r) <= cap
    assert len(rounds) == max(-(-sum(v == p for v in partition_of.values()) // budget[p]) for p in budget)


def test_held_rounds_leave_a_preempted_node_and_an_unheld_one_to_the_job_with_no_verdict(fleet):
    """A pool that runs the recheck as its lowest-priority job (Slurm's patrol QOS, proven on real
    Slurm in tests/pool/test_slurm_patrol_real.py) answers which nodes it held and which a real job
    preempted. Both kinds, even with an Xid on them, are yielded: never judged, never quarantined,
    not marked as patrolled; every hold is released, the journal says which were preempted."""
    first, refused, preempted = admitted(fleet)[:3]
    for slot in (refused, preempted):
        assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", "xid-48").exit_code == 0

    class Holds:
        def __init__(self):
            self.live: dict[str, str] = {}
            self.released: list[str] = []

        def hold(self, partitions):
            got = {s: f"job-{s}" for s in partitions if s != refused}  # a job took `refused` first
            self.live.update(got)
            return got

        def lost(self, holds):
            return sorted(s for s in holds if s == preempted)

        def release(self, holds):
            self.released += sorted(holds)
            for s in holds:
                self.live.pop(s)

    holds = Holds()
    with open_day_two(STACK, "patrol", project=load_project(fleet)) as d:
        d.pool.patrol_holds = lambda: holds
        outcome = run_patrol(d, collector_for(d))
    assert outcome.held and holds.live == {} and first in holds.released and preempted in holds.released
    assert outcome.preempted == [preempted] and {refused, preempted} <= set(outcome.yielded)
    checked = {r.slot for r in outcome.checked}
    assert first in checked and not {refused, preempted} & checked
    assert outcome.quarantined == {} and not {refused, preempted} & set(outcome.unreachable)
    nodes = pool_doc(fleet)["nodes"]
    assert nodes[refused]["state"] == nodes[preempted]["state"] == "admitted"
    last = json.loads((state_dir(fleet) / "patrol" / "last.json").read_text())
    assert first in last and refused not in last and preempted not in last  # rechecked by the next patrol
    (event,) = [e for e in daytwo_events(fleet) if e["type"] == "patrol"]
    assert event["held"] is True and event["preempted"] == [preempted] and event["failed"] == {}
