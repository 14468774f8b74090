"""`gpufleet:image.slotAmis` through the real program under mocks: the overridden slots alone get the
new image (unprotected, image and launch template no longer ignored, deleted before their
replacement is created); every other deployed instance registers exactly as before; the stack
records the override, so the next update freezes and protects the slot again."""

from __future__ import annotations

import pytest

from gpufleet import tagging as t
from gpufleet.program.capture import capture_program
from gpufleet.cloud.staging import decode_deployment
from gpufleet.errors import ConfigError, ConfigErrors

INSTANCE = "aws:ec2/instance:Instance"
OLD, NEW = "ami-0aaaaaaaaaaaaaaa1", "ami-0bbbbbbbbbbbbbbb2"
FROZEN = {"ami", "userData", "launchTemplate"}


def _image(ami: str, slot_amis: dict[str, str] | None = None) -> dict:
    image = {"os": "ubuntu-22.04", "bom": "images/bom.yaml", "amiId": ami}
    return {"image": {**image, "slotAmis": slot_amis}} if slot_amis else {"image": image}


def _nodes(cap):
    return {r.name: r for r in cap.of_type(INSTANCE) if r.inputs["tags"][t.ROLE] == "gpu-node"}


def _recorded_amis(cap) -> dict[str, str | None]:
    d = decode_deployment(cap.outputs["deployedSlots"])
    return {d.name(s): s.ami for s in d.slots}


@pytest.fixture(scope="module")
def deployed():
    """The dev stack with both batches deployed from OLD."""
    return capture_program("dev", target_batch=99, overrides=_image(OLD))


def test_only_the_overridden_slot_changes_image_and_loses_its_protection(deployed):
    before = _nodes(deployed)
    moved, kept = sorted(before)
    after = capture_program("dev", target_batch=99, recorded_outputs=deployed.outputs,
                            overrides=_image(NEW, {moved: NEW}))
    nodes = _nodes(after)
    assert set(nodes) == set(before)
    # the untouched slot registers exactly as before: same inputs, protected, every image property frozen
    assert nodes[kept].inputs == before[kept].inputs == {**before[kept].inputs, "ami": OLD}
    assert nodes[kept].options["protect"] and set(nodes[kept].options["ignoreChanges"]) == FROZEN
    assert not nodes[kept].options["deleteBeforeReplace"]
    # the overridden one boots NEW and may be replaced (deleted first: no capacity for a second instance)
    assert nodes[moved].inputs["ami"] == NEW
    assert {k: v for k, v in nodes[moved].inputs.items() if k != "ami"} == {
        k: v for k, v in before[moved].inputs.items() if k != "ami"}
    assert not nodes[moved].options["protect"] and nodes[moved].options["ignoreChanges"] == ["userData"]
    assert nodes[moved].options["deleteBeforeReplace"]
    # the shared launch template follows the stack's image (only new and reimaged slots read it again)
    template, = after.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    assert template.inputs["imageId"] == NEW
    assert _recorded_amis(after) == {moved: NEW, kept: OLD}


def test_once_deployed_the_reimaged_slot_is_frozen_and_protected_again(deployed):
    moved, kept = sorted(_nodes(deployed))
    first = capture_program("dev", target_batch=99, recorded_outputs=deployed.outputs,
                            overrides=_image(OLD, {moved: NEW}))
    again = capture_program("dev", target_batch=99, recorded_outputs=first.outputs,
                            overrides=_image(OLD, {moved: NEW}))
    nodes = _nodes(again)
    for slot, ami in ((moved, NEW), (kept, OLD)):
        assert nodes[slot].inputs["ami"] == ami
        assert nodes[slot].options["protect"] and set(nodes[slot].options["ignoreChanges"]) == FROZEN
    assert _recorded_amis(again) == {moved: NEW, kept: OLD}


def test_an_override_of_a_slot_not_yet_deployed_is_its_first_image():
    # dev grown to three nodes: the canary holds the smoke job's two, b0002 is batch 2
    cluster = capture_program("dev").spec.cluster.model_dump(mode="json", by_alias=True, exclude_none=True)
    three = {"cluster": {**cluster, "targetGpus": 24},
             "partitions": [{"name": "debug", "mode": "interactive", "units": 3, "priority": 10}]}
    fresh = capture_program("dev", target_batch=1, overrides={**three, **_image(OLD, {"dev-b0002-n00002": NEW})})
    nodes = _nodes(fresh)
    assert set(nodes) == {"dev-b0000-n00000", "dev-b0001-n00001"}  # batch 2 is above the target: nothing to boot yet
    grown = capture_program("dev", target_batch=2, recorded_outputs=fresh.outputs,
                            overrides={**three, **_image(OLD, {"dev-b0002-n00002": NEW})})
    nodes = _nodes(grown)
    assert nodes["dev-b0002-n00002"].inputs["ami"] == NEW and not nodes["dev-b0002-n00002"].options["protect"]
    assert nodes["dev-b0000-n00000"].inputs["ami"] == OLD and nodes["dev-b0000-n00000"].options["protect"]
    assert _recorded_amis(grown) == {"dev-b0000-n00000": OLD, "dev-b0001-n00001": OLD, "dev-b0002-n00002": NEW}


def test_a_slot_outside_the_plan_is_refused_naming_the_field(deployed):
    with pytest.raises(ConfigError, match="not in the plan: dev-b0009-n00042") as err:
        capture_program("dev", target_batch=99, recorded_outputs=deployed.outputs,
                        overrides=_image(OLD, {"dev-b0009-n00042": NEW}))
    assert err.value.field == "gpufleet:image.slotAmis.dev-b0009-n00042"


def test_a_malformed_ami_id_is_refused_naming_the_slot():
    with pytest.raises(ConfigErrors) as err:
        capture_program("dev", target_batch=99, overrides=_image(OLD, {"dev-b0000-n00000": "ami-NOTHEX"}))
    e, = err.value.errors
    assert e.field == "gpufleet:image.slotAmis.dev-b0000-n00000" and "ami-NOTHEX" in str(e)
    assert "ami-[0-9a-f]{8,17}" in (e.expected or "")
