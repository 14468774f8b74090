"""Walking the destroy's steps over fake ports: each step journaled, jobs waited for up to the
deadline (then a resumable failure) or cancelled, a crash mid-step resumed by running the step again,
and nothing after a failed step touched."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.lifecycle import destroy_plan as dp
from gpufleet.lifecycle import destroy_run as dr
from gpufleet.lifecycle.destroy_journal import DestroyJournal, journal_path
from gpufleet.pool.protocol import Holder, NodeState, PoolNode, PoolState

SLOTS = ["gpu-b0000-n00000", "gpu-b0000-n00001", "gpu-b0001-n00002"]
NODES = (dp.NodeRef(SLOTS[0], 1, "i-0"), dp.NodeRef(SLOTS[1], 1, "i-1"), dp.NodeRef(SLOTS[2], 2, "i-2"))
FS = dp.FileSystem("fs-0aaa", "gpu-fsx", "PERSISTENT_2", urn="urn:fsx")


class FakePool:
    """The pool port as the steps use it; `busy_polls[slot]`: how many reads the slot stays busy."""

    kind = "fake"

    def __init__(self, log: list, busy_polls: dict[str, int] | None = None) -> None:
        self.log = log
        self.nodes = {s: PoolNode(slot=s, state=NodeState.ADMITTED, block=i // 2, partition="train",
                                  instance_id=f"i-{i}") for i, s in enumerate(SLOTS)}
        self.busy_polls = dict(busy_polls or {})

    def state(self) -> PoolState:
        out = {}
        for s, n in self.nodes.items():
            left = self.busy_polls.get(s, 0)
            if left:
                self.busy_polls[s] = left - 1 if left > 0 else left  # -1: busy until cancelled
            out[s] = replace(n, busy=left != 0)
        return PoolState(nodes=out)

    def register_pending(self, nodes) -> None:
        self.log.append(("drain", tuple(n.slot for n in nodes)))
        for n in nodes:
            self.nodes[n.slot] = replace(self.nodes[n.slot], state=NodeState.PENDING)

    def release(self, slot: str) -> None:
        self.log.append(("release", slot))
        self.nodes.pop(slot, None)

    def holders(self, slots):
        return [Holder(slot=s, workload=f"train/job/4{i} big-run (user ml)") for i, s in enumerate(slots)]


class FakeJobs:
    def __init__(self, pool: FakePool, log: list) -> None:
        self.pool, self.log = pool, log

    def cancel(self, slots) -> None:
        self.log.append(("cancel", tuple(slots)))
        for s in slots:
            self.pool.busy_polls[s] = 0


class Cloud:
    def __init__(self, log: list) -> None:
        self.log = log
        self.running = {n.slot: n.instance_id for n in NODES}

    def terminate(self, batch, slots):
        gone = [self.running.pop(s) for s in slots if s in self.running]
        self.log.append(("terminate", batch, tuple(gone)))
        return gone

    def remove(self, targets):
        self.log.append(("remove", tuple(targets)))
        return {"deleted": len(targets)}


class Saver:
    def __init__(self, log: list) -> None:
        self.log = log

    def backup(self, fs):
        self.log.append(("backup", fs.fs_id))
        return "backup-0123456789abcdef0"

    def export(self, fs):
        self.log.append(("export", fs.fs_id))
        return "task-0123456789abcdef0"


def setup(tmp_path, busy=None, policy="wait", on_append=None):
    log: list = []
    pool = FakePool(log, busy)
    cloud = Cloud(log)
    ports = dr.Ports(pool=pool, jobs=FakeJobs(pool, log), terminator=cloud, storage=Saver(log), remover=cloud,
                     forget=lambda: log.append(("forget",)) or {"rollout_journal": "archived"},
                     file_systems={FS.fs_id: FS}, sleep=lambda s: clock.append(clock[-1] + s),
                     monotonic=lambda: clock[-1])
    clock = [0.0]
    world = dp.World(simulated=False, nodes=NODES, pool_slots=tuple(SLOTS), file_systems=(FS,),
                     resources=(dp.StackResource("urn:vpc", "aws:ec2/vpc:Vpc"),), journal=True)
    journal = DestroyJournal(tmp_path, "gpu", on_append=on_append)
    journal.load()
    journal.append({"to": "planned", "steps": [s.to_json() for s in dp.plan_steps(world, policy=policy)]})
    return journal, ports, log, clock


def test_every_step_in_order_each_journaled(tmp_path):
    journal, ports, log, _ = setup(tmp_path)
    ran = dr.run(journal, ports, dr.Options(deadline_s=60, poll_s=5))
    assert ran == ["drain", "jobs", "terminate-b0002", "terminate-b0001", "storage-fs-0aaa", "stack", "forget"]
    assert log == [("drain", tuple(SLOTS)), ("release", SLOTS[2]), ("terminate", 2, ("i-2",)),
                   ("release", SLOTS[0]), ("release", SLOTS[1]), ("terminate", 1, ("i-0", "i-1")),
                   ("backup", "fs-0aaa"), ("remove", ("urn:vpc", "urn:fsx")), ("forget",)]
    again = DestroyJournal(tmp_path, "gpu").load()
    assert again.finished and again.done["storage-fs-0aaa"] == {"saved": "backup-0123456789abcdef0", "how": "backup"}
    assert journal_path(tmp_path).exists()


def test_wait_policy_waits_for_jobs_that_end_before_the_deadline(tmp_path):
    journal, ports, log, clock = setup(tmp_path, busy={SLOTS[0]: 3})
    dr.run(journal, ports, dr.Options(deadline_s=60, poll_s=5))
    assert not [e for e in log if e[0] == "cancel"]
    # busy for three reads: the drain's, then two polls of the jobs step (5 s apart), idle at the third
    assert journal.state.done["jobs"]["waited_s"] == 10.0 and clock[-1] == 10.0


def test_wait_policy_stops_at_the_deadline_resumably_and_cancel_then_finishes(tmp_path):
    journal, ports, log, clock = setup(tmp_path, busy={SLOTS[1]: -1})
    with pytest.raises(dr.StepFailed) as err:
        dr.run(journal, ports, dr.Options(deadline_s=30, poll_s=10))
    text = str(err.value)
    assert "destroy step jobs failed" in text and "train/job/40 big-run" in text and "--cancel-jobs" in text
    assert "resumes at jobs" in text and clock[-1] == 30.0
    assert not [e for e in log if e[0] in ("terminate", "backup", "remove", "forget")]  # nothing after it
    state = DestroyJournal(tmp_path, "gpu").load()
    assert "jobs" in state.failed and [s.id for s in state.remaining()][0] == "jobs" and state.unfinished
    # the rerun, now with --cancel-jobs: the drain is not redone, the jobs are cancelled, the rest follows
    log.clear()
    resumed = DestroyJournal(tmp_path, "gpu")
    resumed.load()
    ran = dr.run(resumed, ports, dr.Options(policy="cancel", deadline_s=30, poll_s=10))
    assert ran[0] == "jobs" and log[0] == ("cancel", (SLOTS[1],)) and ("drain", tuple(SLOTS)) not in log
    assert resumed.state.finished


def test_cancel_policy_cancels_the_busy_nodes_jobs(tmp_path):
    journal, ports, log, _ = setup(tmp_path, busy={SLOTS[0]: -1, SLOTS[2]: -1}, policy="cancel")
    dr.run(journal, ports, dr.Options(policy="cancel", deadline_s=30, poll_s=10))
    assert ("cancel", (SLOTS[0], SLOTS[2])) in log
    assert journal.state.done["jobs"]["cancelled"] == [SLOTS[0], SLOTS[2]]


class Crash(Exception):
    pass


def test_a_crash_mid_step_reruns_that_step_only(tmp_path):
    def crash(event):
        if event.get("to") == "step-started" and event.get("step") == "terminate-b0001":
            raise Crash  # the process dies after journaling the start, before terminating anything

    journal, ports, log, _ = setup(tmp_path, on_append=crash)
    with pytest.raises(Crash):
        dr.run(journal, ports, dr.Options(deadline_s=60))
    state = DestroyJournal(tmp_path, "gpu").load()
    assert state.running == "terminate-b0001" and list(state.done) == ["drain", "jobs", "terminate-b0002"]
    log.clear()
    resumed = DestroyJournal(tmp_path, "gpu")
    resumed.load()
    assert dr.run(resumed, ports, dr.Options(deadline_s=60)) == ["terminate-b0001", "storage-fs-0aaa", "stack",
                                                                  "forget"]
    assert log[:3] == [("release", SLOTS[0]), ("release", SLOTS[1]), ("terminate", 1, ("i-0", "i-1"))]
    assert ("terminate", 2, ()) not in log  # batch 2 was done: never asked again


def test_an_idempotent_step_run_twice_changes_nothing_more(tmp_path):
    journal, ports, log, _ = setup(tmp_path)
    step = next(s for s in journal.state.steps if s.id == "terminate-b0002")
    first = dr._do(step, ports, dr.Options())
    second = dr._do(step, ports, dr.Options())
    assert first == {"released": [SLOTS[2]], "terminated": ["i-2"]}
    assert second == {"released": [], "terminated": []}


from tests.unit.moto_server import moto_client, moto_endpoint  # noqa: E402,F401 (fixtures)


def test_a_stack_with_its_journal_in_s3_keeps_the_destroy_journal_there_so_another_runner_resumes(
        tmp_path, moto_client):  # noqa: F811
    """A destroy cut short on one CI runner resumes on the next: with the rollout journal in S3 the
    destroy journal is beside it (`<prefix>/destroy/<stack>/journal/`), never a runner-local file."""
    from gpufleet.lifecycle.destroy_journal import destroy_store
    from gpufleet.rollout.backends import S3JournalStore
    from gpufleet.rollout.journal import LocalJournalStore

    s3 = moto_client("s3", "us-east-1")
    s3.create_bucket(Bucket="gpufleet-state")
    rollout = S3JournalStore(s3, "gpufleet-state", "clusters", "gpu")

    def crash(event):
        if event.get("to") == "step-started" and event.get("step") == "terminate-b0001":
            raise Crash

    journal, ports, log, _ = setup(tmp_path / "runner-1", on_append=crash)
    remote = DestroyJournal(tmp_path / "runner-1", "gpu", store=destroy_store(rollout, tmp_path / "runner-1", "gpu"),
                            on_append=crash)
    remote.load()
    remote.append({"to": "planned", "steps": [s.to_json() for s in journal.state.steps]})
    with pytest.raises(Crash):
        dr.run(remote, ports, dr.Options(deadline_s=60))
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="gpufleet-state")["Contents"]]
    assert keys and all(k.startswith("clusters/destroy/gpu/journal/") for k in keys), keys
    # a fresh runner: no local files, the same bucket
    fresh = DestroyJournal(tmp_path / "runner-2", "gpu", store=destroy_store(rollout, tmp_path / "runner-2", "gpu"))
    state = fresh.load()
    assert state.running == "terminate-b0001" and list(state.done) == ["drain", "jobs", "terminate-b0002"]
    assert not journal_path(tmp_path / "runner-2").exists()
    assert dr.run(fresh, ports, dr.Options(deadline_s=60))[0] == "terminate-b0001" and fresh.state.finished
    local = destroy_store(LocalJournalStore(tmp_path / "j.jsonl"), tmp_path, "gpu")
    assert isinstance(local, LocalJournalStore)
