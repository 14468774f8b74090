"""Staged batches through the real program (DESIGN section 6): targets only grow the fleet;
every deployed instance is protected and kept, whatever the layout now says."""

from __future__ import annotations

import pytest

from gpufleet import tagging as t
from gpufleet.program.capture import capture_program
from gpufleet.cloud.staging import decode_deployment
from gpufleet.errors import ConfigError

INSTANCE = "aws:ec2/instance:Instance"


def _nodes(cap):
    return {r.name: r for r in cap.of_type(INSTANCE) if r.inputs["tags"][t.ROLE] == "gpu-node"}


def _grow(stack, targets, **kw):
    caps, recorded = [], None
    for n in targets:
        caps.append(capture_program(stack, target_batch=n, recorded_outputs=recorded, **kw))
        recorded = caps[-1].outputs
    return caps


def test_raising_the_target_only_adds_instances_and_protects_every_deployed_one():
    caps = _grow("local", (1, 2, 3))
    sets = [_nodes(c) for c in caps]
    batches = caps[0].plan.batches
    assert [len(s) for s in sets] == [sum(b.node_count for b in batches[:n]) for n in (1, 2, 3)]
    for before, after in zip(sets, sets[1:]):
        assert set(before) < set(after)
        for name, reg in before.items():
            assert after[name].inputs == reg.inputs
    batch = {name: int(r.inputs["tags"][t.BATCH]) for name, r in sets[-1].items()}
    for name, reg in sets[-1].items():  # recorded: batches 1-2, the latest one too; batch 3 is new
        assert reg.options["protect"] == (batch[name] <= 2)
        assert set(reg.options["ignoreChanges"]) == ({"ami", "userData", "launchTemplate"} if batch[name] <= 2 else set())
    recorded = decode_deployment(caps[-1].outputs["deployedSlots"])
    assert {recorded.name(r) for r in recorded.slots} == set(sets[-1]) and caps[-1].outputs["deployedBatches"] == 3


def test_a_new_batch_size_on_a_deployed_stack_keeps_every_instance_where_it_is():
    before = _grow("local", (1, 2))[-1]
    after = capture_program("local", recorded_outputs=before.outputs,
                            overrides={"rollout": {"batchSize": 10, "canaryFraction": 0.05}})
    kept, old = _nodes(after), _nodes(before)
    assert set(old) <= set(kept)
    for name, reg in old.items():  # the recorded batch stays on the instance, whatever the layout says now
        assert kept[name].inputs == reg.inputs and kept[name].options["protect"]
    assert any(s.batch != int(old[s.name].inputs["tags"][t.BATCH]) for s in after.plan.nodes if s.name in old)


def test_a_new_block_size_is_refused_naming_the_slots_and_the_setting():
    before = capture_program("dev", target_batch=2)
    cluster = before.spec.cluster.model_dump(mode="json", by_alias=True, exclude_none=True)
    with pytest.raises(ConfigError, match=r"dev-b0001-n00001 would be removed or renamed.*cluster.unitGpus 8 -> 16") \
            as err:
        capture_program("dev", recorded_outputs=before.outputs, overrides={
            "cluster": {**cluster, "unitGpus": 16}, "partitions": [{"name": "debug", "mode": "interactive", "units": 1}]})
    assert err.value.field == "gpufleet:cluster.unitGpus"


def _three(**kw):
    """dev grown to three nodes: the canary holds the smoke job's two (b0000, b0001), batch 2 is b0002.
    (dev as shipped is one two-node batch: its canary is sized for the smoke job.)"""
    dev = capture_program("dev").spec
    cluster = dev.cluster.model_dump(mode="json", by_alias=True, exclude_none=True)
    overrides = {"cluster": {**cluster, "targetGpus": 24},
                 "partitions": [{"name": "debug", "mode": "interactive", "units": 3, "priority": 10}],
                 **kw.pop("overrides", {})}
    return capture_program("dev", overrides=overrides, **kw)


def test_missing_target_keeps_what_was_deployed_and_fresh_stacks_start_empty():
    assert not _nodes(_three())
    first = _three(target_batch=1)
    kept = _three(recorded_outputs=first.outputs)
    assert sorted(_nodes(kept)) == ["dev-b0000-n00000", "dev-b0001-n00001"] and kept.outputs["deployedBatches"] == 1


def test_program_refuses_to_shrink_the_recorded_fleet_unless_allowed():
    deployed = _three(target_batch=2)
    with pytest.raises(ConfigError, match="dev-b0002-n00002 are in batches above targetBatch 1"):
        _three(target_batch=1, recorded_outputs=deployed.outputs)
    shrunk = _three(target_batch=1, recorded_outputs=deployed.outputs,
                    overrides={"rollout": {"allowShrink": True, "targetBatch": 1}})
    assert sorted(_nodes(shrunk)) == ["dev-b0000-n00000", "dev-b0001-n00001"]


def test_a_stack_with_only_the_legacy_batch_count_keeps_its_batches_and_gains_the_slot_record():
    kept = _three(recorded_batches=1, recorded_images={"1": "ami-00000000000000001"})
    nodes = _nodes(kept)
    assert sorted(nodes) == ["dev-b0000-n00000", "dev-b0001-n00001"]
    assert all(n.options["protect"] and n.inputs["ami"] == "ami-00000000000000001" for n in nodes.values())
    recorded = decode_deployment(kept.outputs["deployedSlots"])
    assert [(recorded.name(r), r.ami) for r in recorded.slots] == [
        ("dev-b0000-n00000", "ami-00000000000000001"), ("dev-b0001-n00001", "ami-00000000000000001")]
    with pytest.raises(ConfigError, match="above targetBatch 0"):
        _three(target_batch=0, recorded_batches=1)


def test_a_new_ami_reaches_new_slots_only():
    old = _three(target_batch=1)
    first = _nodes(old)["dev-b0000-n00000"]
    new = _three(target_batch=2, recorded_outputs=old.outputs,
                 overrides={"image": {"os": "ubuntu-22.04", "amiId": "ami-0123456789abcdef0"}})
    existing, added = _nodes(new)["dev-b0000-n00000"], _nodes(new)["dev-b0002-n00002"]
    assert existing.inputs == first.inputs
    assert existing.options["ignoreChanges"] == ["ami", "userData", "launchTemplate"]
    assert added.inputs["ami"] == "ami-0123456789abcdef0" != first.inputs["ami"]
    assert added.options["ignoreChanges"] == [] and not added.options["protect"]
    recorded = decode_deployment(new.outputs["deployedSlots"])
    assert {recorded.name(r): r.ami for r in recorded.slots} == {
        "dev-b0000-n00000": first.inputs["ami"], "dev-b0001-n00001": first.inputs["ami"],
        "dev-b0002-n00002": "ami-0123456789abcdef0"}


def _dev(nodes: int, **kw):
    """dev at `nodes` one-node blocks, debug asking for all of them (grown by raising the last partition)."""
    dev = capture_program("dev").spec
    cluster = dev.cluster.model_dump(mode="json", by_alias=True, exclude_none=True)
    rollout = {**dev.rollout.model_dump(mode="json", by_alias=True, exclude_none=True), **kw.pop("rollout", {})}
    overrides = {"cluster": {**cluster, "targetGpus": 8 * nodes},
                 "partitions": [{"name": "debug", "mode": "interactive", "units": nodes, "priority": 10}],
                 "rollout": rollout}
    return capture_program("dev", overrides=overrides, **kw)


def test_a_grown_layout_adds_the_new_blocks_in_the_rollouts_new_batch_and_moves_nothing():
    """gpufleet:rollout.layout (issue 23 item 1 on Pulumi stacks): the program registers exactly the
    rollout's slots, the grown ones in the batch the rollout gave them, every deployed one as it was."""
    from gpufleet.plan.resize import decide, encode_layout, read_record, record_of

    three = _dev(3)
    deployed = _dev(3, target_batch=len(three.plan.batches))
    grown = decide(read_record(record_of(three.plan)), _dev(5).plan, batch_size=three.spec.rollout.batch_size)
    assert grown.kind == "grow" and grown.new_batches
    first_new = grown.new_batches[0]
    after = _dev(5, target_batch=first_new, recorded_outputs=deployed.outputs,
                 rollout={"layout": encode_layout(grown.plan)})
    before, now = _nodes(deployed), _nodes(after)
    for name, reg in before.items():  # deployed: kept exactly, protected
        assert now[name].inputs == reg.inputs and now[name].options["protect"]
    added = {s.name for s in grown.added if s.batch == first_new}
    assert set(now) - set(before) == added and added
    assert {int(now[n].inputs["tags"][t.BATCH]) for n in added} == {first_new}
    # without the layout the program's own fresh plan re-slices the batches: at the same target it
    # buys both new blocks at once (the fresh plan has them in batches 2 and 3) and tags them so
    fresh = _nodes(_dev(5, target_batch=first_new, recorded_outputs=deployed.outputs))
    assert set(fresh) - set(before) == {"dev-b0003-n00003", "dev-b0004-n00004"} != added
    assert fresh["dev-b0003-n00003"].inputs["tags"][t.BATCH] == "2"


def test_a_shrunk_layout_drops_the_released_slots_without_allow_shrink_and_refuses_without_it():
    from gpufleet.plan.resize import decide, encode_layout, read_record, record_of

    five = _dev(5)
    deployed = _dev(5, target_batch=len(five.plan.batches))
    shrunk = decide(read_record(record_of(five.plan)), _dev(3).plan, batch_size=five.spec.rollout.batch_size)
    assert shrunk.kind == "shrink"
    gone = {s.name for s in shrunk.released}
    after = _dev(3, target_batch=len(five.plan.batches), recorded_outputs=deployed.outputs,
                 rollout={"layout": encode_layout(shrunk.plan)})
    assert set(_nodes(after)) == set(_nodes(deployed)) - gone
    recorded = decode_deployment(after.outputs["deployedSlots"])
    assert not {recorded.name(r) for r in recorded.slots} & gone
    with pytest.raises(ConfigError, match="would be removed or renamed"):  # the fresh plan: a shrink by hand
        _dev(3, target_batch=len(five.plan.batches), recorded_outputs=deployed.outputs)


def test_a_malformed_layout_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as err:
        _dev(3, rollout={"layout": '{"format":1,"blocks":[[2,1,1,null]]}'})
    assert err.value.field == "gpufleet:rollout.layout"
