"""The journal reconciled with the world on resume (issue 21 item 6, the parts built): every event
names its stack and cluster and a journal from another stack or cluster is refused; the
communication baseline file is rebuilt from the journal."""

from __future__ import annotations

import json

import pytest

from gpufleet.errors import ConfigError
from gpufleet.rollout.journal import Journal, LocalJournalStore

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
    orchestrator(tmp_path, FakeCloud(), until_batch=1).run()
    path = _journal(tmp_path)
    old = [{k: v for k, v in json.loads(x).items() if k != "cluster"} for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(e) + "\n" for e in old))
    out = orchestrator(tmp_path, FakeCloud()).run()
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
