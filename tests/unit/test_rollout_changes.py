"""gpufleet.rollout.changes: the rollout's change set from the plan and the journal's state (pure)."""

from __future__ import annotations

from pathlib import Path

from gpufleet.plan import plan_stack
from gpufleet.rollout.changes import rollout_changes
from gpufleet.rollout.state import NodeStage, NodeState, RolloutState
from gpufleet.spec import load_stack_path

REPO = Path(__file__).resolve().parents[2]


def _plan():
    return plan_stack(load_stack_path(REPO / "tests" / "fixtures" / "stacks" / "Pulumi.crash40.yaml"))


def test_a_fresh_rollout_launches_every_slot_and_creates_the_storage():
    plan = _plan()
    cs = rollout_changes(plan, RolloutState(), "crash40", usd_per_hour=10.0, storage_clients=(4, "c6in.8xlarge"))
    assert cs.targets("launch", "instance") == [s.name for s in plan.nodes]
    assert cs.targets("admit", "pool-node") == [s.name for s in plan.nodes]
    assert cs.count("create", "storage") == 1 and cs.count("create", "storage-client") == 4
    assert cs.usd_per_hour_delta == 10.0 * len(plan.nodes)


def test_what_the_journal_decided_is_left_out_and_what_is_under_way_is_configured():
    plan = _plan()
    first, second, third = (s.name for s in plan.batch_nodes(1)[:3])
    state = RolloutState(started=True)
    state.nodes[first] = NodeState(slot=first, batch=1, stage=NodeStage.ADMITTED)
    state.nodes[second] = NodeState(slot=second, batch=1, stage=NodeStage.CONFIGURING, instance_id="i-1")
    state.nodes[third] = NodeState(slot=third, batch=1, stage=NodeStage.REPLACED)
    state.acceptance["storage"] = object()  # type: ignore[assignment]  # the storage check has begun
    cs = rollout_changes(plan, state, "crash40", until_batch=1)
    assert first not in cs.targets("launch") and first not in cs.targets("admit")
    assert cs.targets("configure", "instance") == [second]
    assert third in cs.targets("launch") and cs.count("create") == 0
    assert set(cs.targets("launch")) | {first, second} == {s.name for s in plan.batch_nodes(1)}
    assert any("--until-batch" in n for n in cs.notes)


def test_a_halted_journal_changes_nothing_until_the_halt_is_lifted():
    plan = _plan()
    state = RolloutState(started=True, halted=True, halt_reason="smoke failed")
    cs = rollout_changes(plan, state, "crash40")
    assert cs.empty and "smoke failed" in cs.notes[0]
    state.halted = False  # what `--retry-stage` does to the command's copy before it asks
    assert not rollout_changes(plan, state, "crash40").empty
