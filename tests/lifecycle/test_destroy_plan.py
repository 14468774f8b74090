"""The destroy's pure planner (issue 23 item 3): the order of the steps, how each file system's data
is kept (backup, export, skip, or a refusal), the job policy, the journal's fold and resuming from
every step, and the change set's content."""

from __future__ import annotations

import pytest

from gpufleet.errors import UsageError
from gpufleet.lifecycle import destroy_plan as dp

NODES = tuple(dp.NodeRef(f"gpu-b{b:04d}-n{i:05d}", batch, f"i-{i:017x}")
              for i, (b, batch) in enumerate([(0, 1), (0, 1), (1, 2), (1, 2), (2, 3)]))
PERSISTENT = dp.FileSystem("fs-0aaa", "gpu-fsx", "PERSISTENT_2", urn="urn:pulumi:gpu::gpufleet::fsx::gpu-fsx")
LINKED = dp.FileSystem("fs-0bbb", "gpu-data", "PERSISTENT_2", ("s3://bucket/datasets",),
                       urn="urn:pulumi:gpu::gpufleet::fsx::gpu-data")
SCRATCH = dp.FileSystem("fs-0ccc", "gpu-tmp", "SCRATCH_2")
VPC = dp.StackResource("urn:pulumi:gpu::gpufleet::aws:ec2/vpc:Vpc::gpu-vpc", "aws:ec2/vpc:Vpc")
HEAD = dp.StackResource("urn:pulumi:gpu::gpufleet::aws:ec2/instance:Instance::gpu-slurm-head",
                        "aws:ec2/instance:Instance", protected=True)


def world(**kw) -> dp.World:
    base = dict(simulated=False, nodes=NODES, pool_slots=tuple(n.slot for n in NODES),
                file_systems=(PERSISTENT,), resources=(VPC, HEAD), journal=True)
    return dp.World(**{**base, **kw})


def test_the_order_drain_jobs_batches_last_first_storage_stack_forget():
    steps = dp.plan_steps(world())
    assert [s.id for s in steps] == ["drain", "jobs", "terminate-b0003", "terminate-b0002", "terminate-b0001",
                                     "storage-fs-0aaa", "stack", "forget"]
    assert steps[0].targets == tuple(sorted(n.slot for n in NODES))
    assert steps[2].targets == ("gpu-b0002-n00004",) and steps[2].batch == 3
    assert steps[4].targets == ("gpu-b0000-n00000", "gpu-b0000-n00001")
    # the stack step deletes (and so unprotects) the other resources and the file systems, nothing else
    assert steps[6].targets == (VPC.urn, HEAD.urn, PERSISTENT.urn)


def test_nothing_exists_nothing_to_do():
    assert dp.plan_steps(dp.World(simulated=True)) == []
    assert dp.World(simulated=True).empty
    # a journal alone (every instance already gone) is still something to end
    assert [s.id for s in dp.plan_steps(dp.World(simulated=False, journal=True))] == ["forget"]


def test_a_pool_without_nodes_to_drain_has_no_drain_or_jobs_step():
    steps = dp.plan_steps(world(pool_slots=()))
    assert [s.kind for s in steps][:2] == ["terminate", "terminate"]


@pytest.mark.parametrize("policy", ["wait", "cancel"])
def test_the_job_policy_is_the_jobs_step_action(policy):
    jobs = [s for s in dp.plan_steps(world(), policy=policy) if s.kind == "jobs"]
    assert [s.action for s in jobs] == [policy]


def test_an_unknown_policy_is_a_usage_error():
    with pytest.raises(UsageError):
        dp.plan_steps(world(), policy="ignore")


def test_backup_export_or_skip_per_file_system():
    steps = {s.targets[0]: s.action for s in dp.plan_steps(world(file_systems=(PERSISTENT, LINKED)))
             if s.kind == "storage"}
    assert steps == {"fs-0aaa": "backup", "fs-0bbb": "export"}  # S3-linked file systems take no backups
    skipped = {s.targets[0]: s.action for s in dp.plan_steps(world(file_systems=(PERSISTENT, LINKED, SCRATCH)),
                                                            skip_backup=True) if s.kind == "storage"}
    assert skipped == {"fs-0aaa": "skip", "fs-0bbb": "skip", "fs-0ccc": "skip"}


def test_a_scratch_file_system_without_a_repository_is_refused_unless_skipped():
    with pytest.raises(UsageError) as err:
        dp.plan_steps(world(file_systems=(SCRATCH,)))
    assert "--skip-backup" in str(err.value.expected) and "fs-0ccc" in str(err.value)
    assert dp.save_action(SCRATCH, skip_backup=True) == "skip"
    assert dp.save_action(dp.FileSystem("fs-1", "x", "SCRATCH_2", ("s3://b/p",)), False) == "export"


def _events(steps, done_upto: int, running: bool = False) -> list[dict]:
    ev = [{"to": "planned", "steps": [s.to_json() for s in steps]}]
    for s in steps[:done_upto]:
        ev += [{"to": "step-started", "step": s.id}, {"to": "step-done", "step": s.id, "result": {"ok": s.id}}]
    if running and done_upto < len(steps):
        ev.append({"to": "step-started", "step": steps[done_upto].id})
    return ev


def test_resume_from_each_step_runs_exactly_the_rest():
    steps = dp.plan_steps(world(file_systems=(PERSISTENT, LINKED)))
    for i in range(len(steps) + 1):
        for running in (False, True):
            state = dp.fold(_events(steps, i, running))
            assert [s.id for s in state.remaining()] == [s.id for s in steps[i:]], (i, running)
            assert state.unfinished
            assert state.running == (steps[i].id if running and i < len(steps) else None)
    # the journal keeps the plan as confirmed: the steps come back whole from it
    assert dp.fold(_events(steps, 0)).steps == steps


def test_a_failed_step_is_still_to_do_and_finishing_needs_every_step():
    steps = dp.plan_steps(world())
    state = dp.fold(_events(steps, 2) + [{"to": "step-started", "step": "terminate-b0003"},
                                         {"to": "step-failed", "step": "terminate-b0003", "reason": "boom"}])
    assert state.remaining()[0].id == "terminate-b0003" and state.failed == {"terminate-b0003": "boom"}
    with pytest.raises(dp.DestroyJournalError):
        dp.apply(state, {"to": "finished"})
    done = dp.fold(_events(steps, len(steps)) + [{"to": "finished"}])
    assert done.finished and not done.unfinished and done.remaining() == []


def test_events_that_do_not_follow_are_refused():
    steps = dp.plan_steps(world())
    state = dp.fold(_events(steps, 0))
    with pytest.raises(dp.DestroyJournalError):
        dp.apply(state, {"to": "step-done", "step": "terminate-b0009"})
    with pytest.raises(dp.DestroyJournalError):
        dp.apply(state, {"to": "planned", "steps": []})  # a second plan over an unfinished one
    with pytest.raises(dp.DestroyJournalError):
        dp.apply(state, {"to": "exploded"})


def test_the_change_set_lists_what_the_steps_do_and_the_hourly_saving():
    w = world(file_systems=(PERSISTENT, LINKED))
    steps = dp.plan_steps(w)
    cs = dp.change_set("gpu", w, steps, usd_per_instance_hour=55.04, price_note="test price", deadline_s=600)
    assert cs.targets("terminate", "instance") == [s for st in steps if st.kind == "terminate" for s in st.targets]
    assert cs.count("drain", "pool-node") == len(NODES) == cs.count("release", "pool-node")
    assert cs.usd_per_hour_delta == pytest.approx(-55.04 * len(NODES))
    assert cs.targets("backup", "storage") == ["gpu-fsx (fs-0aaa)", "gpu-data (fs-0bbb)"]
    assert cs.targets("delete", "storage") == ["gpu-fsx (fs-0aaa)", "gpu-data (fs-0bbb)"]
    assert cs.targets("delete", "stack-resource") == ["gpu-vpc", "gpu-slurm-head"]
    assert any("protected" in c.detail for c in cs.changes if c.target == "gpu-slurm-head")
    assert any("600 s" in n for n in cs.notes) and not cs.simulated
    skip = dp.change_set("gpu", w, dp.plan_steps(w, skip_backup=True), usd_per_instance_hour=None)
    assert skip.count("backup") == 0 and any("WITHOUT a backup" in n for n in skip.notes)
    assert skip.usd_per_hour_delta is None  # no price: no partial sum
