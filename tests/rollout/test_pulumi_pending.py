"""A SIGKILL in the middle of `pulumi up` (issue 21 item 7): the state keeps a `creating` pending
operation and EC2 may hold an instance the state never recorded. Before the next `up` the
provisioner finds it by its slot tag (boto3 against a real moto server), terminates it and imports
the state back without the pending operation, so no slot ever gets two instances.

The fake `PulumiCommand` (tests/rollout/test_pulumi_provisioner.py) replays the engine events of
fixtures/pulumi_events/; its `stack export` carries `pending_operations` in the shape Pulumi's
state export has (`{"resource": {...}, "type": "creating"}`), the resource taken from the
fixture's own create event for that slot.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet import tagging as t
from gpufleet.rollout.pending_creates import orphans, pending_instance_creates, without_pending
from tests.rollout.test_pulumi_provisioner import BATCH2, EVENTS, EXPORT, SELECT, STACK, FakePulumi, _argv, _provisioner
from tests.unit.moto_server import moto_client, moto_endpoint  # noqa: F401 (fixtures)

SLOT = "gpu-b0001-n00002"
IMPORT = ["stack", "import", "--file", "<file>", "--stack", STACK]


def _created(slot: str) -> dict:
    """The slot's instance as the batch-2 update's engine events describe it (urn, type, inputs)."""
    for line in (EVENTS / "up-batch2-created.jsonl").read_text().splitlines():
        event = json.loads(line).get("resOutputsEvent")
        if event and event["metadata"]["urn"].endswith("::" + slot):
            new = event["metadata"]["new"]
            return {"urn": new["urn"], "custom": True, "type": new["type"], "inputs": new["inputs"],
                    "parent": new.get("parent", ""), "provider": event["metadata"].get("provider", "")}
    raise AssertionError(slot)


class InterruptedPulumi(FakePulumi):
    """State with pending operations, and `stack import --file` replacing the state."""

    def __init__(self, ups) -> None:
        super().__init__(ups)
        self.pending: list[dict] = []
        self.imported: list[dict] = []

    def _answer(self, a):
        if a[:2] == ["stack", "export"]:
            return json.dumps({"version": 3, "deployment": {"manifest": {}, "resources": list(self.resources.values()),
                                                            "pending_operations": self.pending}}), "", 0
        if a[:2] == ["stack", "import"]:
            doc = json.loads(Path(a[a.index("--file") + 1]).read_text())
            self.imported.append(doc)
            self.resources = {r["urn"]: r for r in doc["deployment"]["resources"]}
            self.pending = list(doc["deployment"].get("pending_operations") or [])
            return "", "", 0
        return super()._answer(a)


def _masked(calls):
    return [[("<file>" if i and c[i - 1] == "--file" else x) for i, x in enumerate(c)] for c in _argv(calls)]


def _orphan(ec2, slot: str) -> str:
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    r = ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, InstanceType="p5.48xlarge", TagSpecifications=[
        {"ResourceType": "instance", "Tags": [{"Key": t.SLOT, "Value": slot}]}])
    return r["Instances"][0]["InstanceId"]


def _live(ec2, slot: str) -> list[str]:
    found = ec2.describe_instances(Filters=[{"Name": f"tag:{t.SLOT}", "Values": [slot]},
                                            {"Name": "instance-state-name", "Values": ["pending", "running"]}])
    return [i["InstanceId"] for r in found["Reservations"] for i in r["Instances"]]


def test_the_pending_create_is_read_and_dropped_from_a_real_shaped_export():
    export = {"version": 3, "deployment": {"resources": [], "pending_operations": [
        {"resource": _created(SLOT), "type": "creating"},
        {"resource": {"urn": "urn:pulumi:gpu::gpufleet::aws:ec2/launchTemplate:LaunchTemplate::lt",
                      "type": "aws:ec2/launchTemplate:LaunchTemplate"}, "type": "creating"}]}}
    pending = pending_instance_creates(export)
    assert [(p.slot, p.urn.endswith(SLOT)) for p in pending] == [(SLOT, True)]
    left = without_pending(export, [p.urn for p in pending])["deployment"]["pending_operations"]
    assert [op["resource"]["type"] for op in left] == ["aws:ec2/launchTemplate:LaunchTemplate"]
    assert orphans(pending, {SLOT: ["i-new", "i-known"]}, ["i-known"]) == {SLOT: ["i-new"]}


@pytest.mark.slow  # a moto server
def test_an_up_killed_mid_create_never_gives_a_slot_two_instances(tmp_path, moto_client):
    ec2 = moto_client("ec2", "us-east-1")
    fake = InterruptedPulumi([("up-batch2-created.jsonl", 0, "")])
    fake.seed("up-batch1-created.jsonl")
    fake.config["gpufleet:rollout.targetBatch"] = "2"
    fake.pending = [{"resource": _created(SLOT), "type": "creating"}]  # the killed update's
    orphan = _orphan(ec2, SLOT)  # EC2 launched it; the state never heard
    p, _ = _provisioner(fake, tmp_path, ec2=lambda: ec2)
    assert p.settle_pending_creates() == {SLOT: [orphan]}
    assert _masked(fake.calls) == [SELECT, EXPORT, IMPORT]
    assert fake.pending == [] and _live(ec2, SLOT) == []
    # the next update creates the slot's one instance
    result = p.provision(2, BATCH2)
    recorded = [r["id"] for r in fake.resources.values() if r["urn"].endswith("::" + SLOT)]
    assert len(recorded) == 1 and result.instances[SLOT].instance_id == recorded[0]
    assert len(set(recorded) | set(_live(ec2, SLOT))) == 1
    # settled once: a second resume finds nothing pending and calls nothing but the export
    fake.calls.clear()
    assert p.settle_pending_creates() == {} and _masked(fake.calls) == [EXPORT]


@pytest.mark.slow  # a moto server
def test_a_pending_create_that_never_reached_ec2_is_only_cleared(tmp_path, moto_client):
    ec2 = moto_client("ec2", "us-east-1")
    fake = InterruptedPulumi([])
    fake.seed("up-batch1-created.jsonl")
    fake.pending = [{"resource": _created("gpu-b0001-n00003"), "type": "creating"}]
    p, _ = _provisioner(fake, tmp_path, ec2=lambda: ec2)
    assert p.settle_pending_creates() == {"gpu-b0001-n00003": []}
    assert fake.pending == [] and len(fake.imported) == 1
    assert sorted(fake.resources) == sorted(r["urn"] for r in fake.imported[0]["deployment"]["resources"])


class WorldPulumi(InterruptedPulumi):
    """`up` also launches each instance it creates in EC2 (moto), tagged with its slot as the
    program tags it, so EC2 is the world's count of instances per slot, not the fake's state."""

    def __init__(self, ups, ec2) -> None:
        super().__init__(ups)
        self.ec2 = ec2

    def _up(self, a):
        fixture, code, stderr = self.ups[0]
        if fixture is None or "--event-log" not in a or a[a.index("--event-log") + 1] == "/dev/null":
            return super()._up(a)
        text = (EVENTS / fixture).read_text()
        for line in text.splitlines():
            event = json.loads(line).get("resOutputsEvent")
            if event and event["metadata"]["type"] == "aws:ec2/instance:Instance" and \
                    event["metadata"]["urn"] not in self.resources:
                slot = event["metadata"]["urn"].rsplit("::", 1)[-1]
                text = text.replace(event["metadata"]["new"]["id"], _orphan(self.ec2, slot))
        log = Path(a[a.index("--event-log") + 1])
        log.write_text(text)
        self.ups.pop(0)
        for line in text.splitlines():
            event = json.loads(line).get("resOutputsEvent")
            if event and event["metadata"]["type"] == "aws:ec2/instance:Instance":
                new = event["metadata"]["new"]
                self.resources[new["urn"]] = {"urn": new["urn"], "type": new["type"], "id": new["id"],
                                              "custom": True, "protect": True, "inputs": new["inputs"],
                                              "outputs": new["outputs"]}
        return "", stderr, code


def _interrupted(tmp_path, ec2):
    fake = WorldPulumi([("up-batch2-created.jsonl", 0, "")], ec2)
    fake.seed("up-batch1-created.jsonl")
    fake.config["gpufleet:rollout.targetBatch"] = "2"
    fake.pending = [{"resource": _created(SLOT), "type": "creating"}]
    orphan = _orphan(ec2, SLOT)
    p, _ = _provisioner(fake, tmp_path, ec2=lambda: ec2)
    return fake, p, orphan


@pytest.mark.slow  # a moto server
def test_in_ec2_the_slot_ends_with_one_instance_and_without_settling_it_would_have_two(tmp_path, moto_client):
    """EC2 (moto) counts the slot's running instances: the resumed update leaves one, the one the
    state records; the same update without settling first leaves the orphan beside it."""
    ec2 = moto_client("ec2", "us-east-1")
    fake, p, orphan = _interrupted(tmp_path / "settled", ec2)
    assert p.settle_pending_creates() == {SLOT: [orphan]}
    p.provision(2, BATCH2)
    recorded = [r["id"] for r in fake.resources.values() if r["urn"].endswith("::" + SLOT)]
    assert _live(ec2, SLOT) == recorded and len(recorded) == 1 and recorded != [orphan]
    for slot in {s.name for s in BATCH2}:
        assert len(_live(ec2, slot)) == 1, slot

    other = moto_client("ec2", "us-west-2")  # a second world: the same update, not settled first
    fake2, p2, orphan2 = _interrupted(tmp_path / "unsettled", other)
    p2.provision(2, BATCH2)
    assert sorted(_live(other, SLOT)) == sorted([orphan2, *[r["id"] for r in fake2.resources.values()
                                                            if r["urn"].endswith("::" + SLOT)]])
    assert len(_live(other, SLOT)) == 2
