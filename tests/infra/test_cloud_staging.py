"""Staged batches (DESIGN section 6): targets only grow the fleet; nothing admitted is lost."""

from __future__ import annotations

import pytest

from infra.cloud.capture import capture_program
from infra.cloud.staging import resolve_staging
from infra.errors import ConfigError

INSTANCE = "aws:ec2/instance:Instance"


def _instances(cap):
    return {r.name: r for r in cap.of_type(INSTANCE)}


@pytest.mark.parametrize("target,recorded,batches,active", [
    (None, 0, 6, 0), (None, 3, 6, 3), (2, 0, 6, 2), (99, 0, 6, 6), (4, 4, 6, 4)])
def test_resolve_staging(target, recorded, batches, active):
    assert resolve_staging(target, recorded, batches, allow_shrink=False).active == active


def test_lower_target_fails_unless_shrink_is_allowed():
    with pytest.raises(ConfigError, match="would remove batches 3..4"):
        resolve_staging(2, 4, 6, allow_shrink=False)
    assert resolve_staging(2, 4, 6, allow_shrink=True).active == 2


def test_raising_the_target_only_adds_instances_and_keeps_earlier_inputs():
    caps = [capture_program("local", target_batch=n, recorded_batches=n - 1) for n in (1, 2, 3)]
    sets = [_instances(c) for c in caps]
    assert [len(s) for s in sets] == [caps[0].plan.batches[0].node_count,
                                      sum(b.node_count for b in caps[0].plan.batches[:2]),
                                      sum(b.node_count for b in caps[0].plan.batches[:3])]
    for before, after in zip(sets, sets[1:]):
        assert set(before) < set(after)
        for name, reg in before.items():
            assert after[name].inputs == reg.inputs
    assert caps[-1].outputs["deployedBatches"] == 3
    batch = {name: int(r.inputs["tags"]["gpufleet.io/batch"]) for name, r in sets[-1].items()}
    for name, reg in sets[-1].items():  # recorded 2: batch 1 protected, batches 1-2 frozen, batch 3 new
        assert reg.options["protect"] == (batch[name] < 2)
        assert bool(reg.options["ignoreChanges"]) == (batch[name] <= 2)
        if reg.options["ignoreChanges"]:
            assert set(reg.options["ignoreChanges"]) == {"ami", "userData", "launchTemplate"}


def test_missing_target_keeps_what_was_deployed_and_fresh_stacks_start_empty():
    assert not capture_program("dev").of_type(INSTANCE)
    kept = capture_program("dev", recorded_batches=1)
    assert len(kept.of_type(INSTANCE)) == 1 and kept.outputs["deployedBatches"] == 1


def test_program_refuses_to_shrink_the_recorded_fleet():
    with pytest.raises(ConfigError, match="deployedBatches=2"):
        capture_program("dev", target_batch=1, recorded_batches=2)


def test_a_new_ami_reaches_new_batches_only():
    old = capture_program("dev", target_batch=1)
    first = _instances(old)["dev-b0000-n00000"]
    new = capture_program("dev", target_batch=2, recorded_batches=1, recorded_images=old.outputs["batchImages"],
                          overrides={"image": {"os": "ubuntu-22.04", "amiId": "ami-0123456789abcdef0"}})
    existing, added = _instances(new)["dev-b0000-n00000"], _instances(new)["dev-b0001-n00001"]
    assert existing.inputs == first.inputs
    assert existing.options["ignoreChanges"] == ["ami", "userData", "launchTemplate"]
    assert added.inputs["ami"] == "ami-0123456789abcdef0" != first.inputs["ami"]
    assert added.options["ignoreChanges"] == [] and not added.options["protect"]
    assert new.outputs["batchImages"] == {"1": first.inputs["ami"], "2": "ami-0123456789abcdef0"}
