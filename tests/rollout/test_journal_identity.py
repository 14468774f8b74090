"""The journal reconciled with the world on resume (issue 21 item 6): every event names its stack
and cluster and a journal from another stack or cluster is refused; a journal behind the provider
follows the provider's instances; the communication baseline file is rebuilt from the journal."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from gpufleet.errors import ConfigError
from gpufleet.rollout.display import PlainDisplay
from gpufleet.rollout.journal import Journal, LocalJournalStore
from gpufleet.rollout.state import NodeStage

from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator, small_spec


def _journal(tmp_path):
    return tmp_path / "state" / "journal.jsonl"


def test_every_event_names_its_stack_and_cluster(tmp_path):
    orchestrator(tmp_path, FakeCloud(), until_batch=1).run()
    lines = [json.loads(x) for x in _journal(tmp_path).read_text().splitlines()]
    assert lines and all(e["stack"] == "t" and e["cluster"] == "tst" for e in lines)


def test_a_journal_of_another_cluster_is_refused(tmp_path):
    orchestrator(tmp_path, FakeCloud(), until_batch=1).run()
    spec = small_spec()
    other = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"name": "other"})})
    with pytest.raises(ConfigError, match="belongs to stack 't', cluster 'tst', not stack 't', cluster 'other'"):
        orchestrator(tmp_path, FakeCloud(), other).run()


def test_a_journal_copied_from_another_stack_is_refused(tmp_path):
    orchestrator(tmp_path, FakeCloud(), until_batch=1).run()
    o = orchestrator(tmp_path, FakeCloud())
    o.stack = "prod"  # the same files resumed as another stack's
    with pytest.raises(ConfigError, match="belongs to stack 't'"):
        o.run()


def test_a_journal_with_a_line_of_another_stack_is_refused(tmp_path):
    orchestrator(tmp_path, FakeCloud(), until_batch=1).run()
    path = _journal(tmp_path)
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    foreign = {**last, "seq": last["seq"] + 1, "stack": "prod", "cluster": "prod",
               "type": "batch", "batch": 2, "to": "running"}
    path.write_text("\n".join([*lines, json.dumps(foreign)]) + "\n")
    with pytest.raises(ConfigError, match=f"event {foreign['seq']} belongs to stack 'prod'"):
        orchestrator(tmp_path, FakeCloud()).run()


def test_a_journal_from_before_cluster_stamps_resumes(tmp_path):
    cloud = FakeCloud()
    orchestrator(tmp_path, cloud, until_batch=1).run()
    path = _journal(tmp_path)
    old = [{k: v for k, v in json.loads(x).items() if k != "cluster"} for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(e) + "\n" for e in old))
    out = orchestrator(tmp_path, cloud).run()
    assert out.finished
    j = Journal(LocalJournalStore(path), "t")
    assert j.load(repair=False).foreign == []


def test_the_communication_baseline_is_rebuilt_from_the_journal_on_resume(tmp_path):
    cloud = FakeCloud()
    orchestrator(tmp_path, cloud, until_batch=2).run()
    baseline = tmp_path / "state" / "baselines" / "communication.json"
    before = json.loads(baseline.read_text())
    assert set(before["batches"]) == {"1", "2"}
    baseline.unlink()  # a kill between batch 2's journal line and the file's rename
    orchestrator(tmp_path, cloud, until_batch=2).run()
    after = json.loads(baseline.read_text())
    assert after["batches"] == before["batches"] and after["scales"] == before["scales"]


def test_a_truncated_journal_follows_the_provider_instead_of_failing_healthy_slots(tmp_path):
    """Cut the journal before the gates that quarantined a node: the provider already runs its
    replacement. On resume the difference is journaled and shown, and the slot is gated on the
    provider's instance (not on the stopped one the journal names: the admission record would name
    an instance that does not run, and on the simulator it is unreachable, then blacklisted), with
    its spare counted and nothing bought twice."""
    slot = "tst-b0004-n00004"
    spec = small_spec(maxFailureRate=0.5)
    cloud = FakeCloud(faults={slot: frozenset({"nvlink_down"})})
    orchestrator(tmp_path, cloud, spec).run()
    launches = [x for x in cloud.ledger if x[0] == "launch"]
    path = _journal(tmp_path)
    lines = path.read_text().splitlines()
    cut = next(i for i, x in enumerate(lines) if json.loads(x)["type"] == "gated" and slot in json.loads(x)["nodes"])
    path.write_text("\n".join(lines[:cut]) + "\n")
    shown = io.StringIO()
    o = orchestrator(tmp_path, cloud, spec)
    o.journal.listeners.append(PlainDisplay(o.plan, lambda: 0.0, shown))
    out = o.run()
    assert out.finished and out.short == [] and not out.halted
    n = out.state.nodes[slot]
    assert n.stage is NodeStage.ADMITTED and n.instance_id == cloud.instances[slot].instance_id and not n.blacklisted
    assert out.state.spares_used == 1
    assert [x for x in cloud.ledger if x[0] == "launch"] == launches  # nothing launched again
    rec = [json.loads(x) for x in path.read_text().splitlines() if json.loads(x)["type"] == "reconciled"]
    assert rec and rec[0]["nodes"][slot]["action"] == "adopt"
    assert rec[0]["nodes"][slot]["provider_instance"] == cloud.instances[slot].instance_id
    assert f"gpufleet: reconcile node={slot} action=adopt" in shown.getvalue()


def test_on_resume_a_real_stacks_pending_creates_are_settled_first_and_shown(tmp_path):
    class Interrupted(FakeCloud):
        settled: list[str] = []

        def settle_pending_creates(self):
            self.settled.append("called")
            return {"tst-b0003-n00003": ["i-orphan"]} if len(self.settled) == 1 else {}

    cloud = Interrupted()
    orchestrator(tmp_path, cloud, until_batch=1).run()
    assert cloud.settled == []  # a fresh rollout: nothing can be pending
    shown = io.StringIO()
    o = orchestrator(tmp_path, cloud)
    o.journal.listeners.append(PlainDisplay(o.plan, lambda: 0.0, shown))
    events_before = o.state.events
    out = o.run()
    assert out.finished and cloud.settled == ["called"]
    first_new = [json.loads(x) for x in _journal(tmp_path).read_text().splitlines()][events_before]
    assert first_new["type"] == "reconciled"
    assert first_new["nodes"] == {"tst-b0003-n00003": {"action": "cleared-pending-create", "terminated": ["i-orphan"]}}
    assert "gpufleet: reconcile node=tst-b0003-n00003 action=cleared-pending-create terminated=i-orphan" in \
        shown.getvalue()


def test_a_journal_with_no_world_behind_it_is_refused(tmp_path):
    """The provider runs none of the instances the journal names (copied from another project,
    or the cloud torn down since): refused, finished or not, never reported as a pool."""
    orchestrator(tmp_path / "half", FakeCloud(), until_batch=1).run()
    with pytest.raises(ConfigError, match=r"the journal names 3 instance\(s\) and the provider runs none of them"):
        orchestrator(tmp_path / "half", FakeCloud()).run()
    orchestrator(tmp_path / "done", FakeCloud()).run()
    with pytest.raises(ConfigError, match="provider runs none of them.*or --restart"):
        orchestrator(tmp_path / "done", FakeCloud()).run()


def test_a_finished_journal_behind_the_provider_is_reported_not_acted_on(tmp_path):
    """After the rollout, an admitted slot's instance was replaced outside it: the resume says so
    (journaled, one greppable line) and gates nothing again."""
    cloud = FakeCloud()
    orchestrator(tmp_path, cloud).run()
    slot = "tst-b0004-n00004"
    before = cloud.instances[slot]
    cloud.instances[slot] = dataclasses.replace(before, instance_id="i-outside")
    shown = io.StringIO()
    o = orchestrator(tmp_path, cloud)
    o.journal.listeners.append(PlainDisplay(o.plan, lambda: 0.0, shown))
    launches = len(cloud.ledger)
    out = o.run()
    assert out.finished and out.state.nodes[slot].stage is NodeStage.ADMITTED
    assert len(cloud.ledger) == launches  # nothing bought, stopped or gated again
    rec = [json.loads(x) for x in _journal(tmp_path).read_text().splitlines() if json.loads(x)["type"] == "reconciled"]
    assert rec[-1]["nodes"][slot]["action"] == "report" and rec[-1]["nodes"][slot]["provider_instance"] == "i-outside"
    assert f"gpufleet: reconcile node={slot} action=report journal={before.instance_id} provider=i-outside" in \
        shown.getvalue()
