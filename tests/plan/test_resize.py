"""The pure grow/shrink decision (gpufleet.plan.resize): whole blocks only, no existing slot moves."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.changeset import ChangeSetBuilder
from gpufleet.errors import ConfigError
from gpufleet.plan import build_plan
from gpufleet.plan.resize import add_changes, decide, layout_digest, read_record, record_of
from gpufleet.spec import ClusterSpec


def spec(nodes: int, unit: int = 16, partitions: list[dict[str, Any]] | None = None, batch: int = 4,
         canary: float = 0.25) -> ClusterSpec:
    raw = {"cluster": {"name": "tst", "region": "us-east-1", "availabilityZone": "us-east-1a",
                       "instanceType": "p5.48xlarge", "targetGpus": 8 * nodes, "unitGpus": unit, "spareFraction": 0.1},
           "partitions": partitions if partitions is not None else [{"name": "train", "mode": "data-parallel",
                                                                     "units": 2}],
           "rollout": {"canaryFraction": canary, "batchSize": batch}, "pool": {"type": "sim"}}
    return ClusterSpec.from_raw(raw, source="test")


def recorded(nodes: int, **kw: Any):
    return read_record(record_of(build_plan(spec(nodes, **kw))))


def test_same_target_is_unchanged():
    plan = build_plan(spec(8))
    r = decide(recorded(8), plan, batch_size=4)
    assert r.kind == "unchanged" and r.plan is plan


def test_grow_appends_whole_blocks_as_new_batches_and_moves_nothing():
    old = build_plan(spec(8))  # 2-node blocks (16-GPU units); canary 1 block, then 2-block batches
    new = build_plan(spec(16))
    assert [s.batch for s in new.nodes[:8]] != [s.batch for s in old.nodes]  # a fresh plan would re-slice
    r = decide(read_record(record_of(old)), new, batch_size=4)
    assert r.kind == "grow"
    kept = {s.name: (s.index, s.block, s.batch) for s in r.plan.nodes[:8]}
    assert kept == {s.name: (s.index, s.block, s.batch) for s in old.nodes}
    last = max(b.number for b in old.batches)
    assert r.new_batches == (last + 1, last + 2)
    assert [s.name for s in r.added] == [s.name for s in new.nodes[8:]]
    assert {s.block for s in r.added} == {4, 5, 6, 7} and all(s.batch > last for s in r.added)
    assert [(b.number, b.first_node, b.last_node) for b in r.plan.batches][-2:] == [(last + 1, 8, 11),
                                                                                   (last + 2, 12, 15)]
    # each batch of the effective plan holds its own nodes
    for b in r.plan.batches:
        assert all(s.batch == b.number for s in r.plan.batch_nodes(b.number))
    assert r.plan.topology.nodes == 16 and len(r.plan.blocks) == 8
    # once grown, the journal's layout is the effective plan's: run again, nothing changes
    again = decide(read_record(record_of(r.plan)), new, batch_size=4, basis=r.basis)
    assert again.kind == "unchanged" and layout_digest(again.plan.nodes) == layout_digest(r.plan.nodes)
    with pytest.raises(ConfigError):  # without the basis it recorded, the same count is a re-slice
        decide(read_record(record_of(r.plan)), new, batch_size=4)


def test_grow_refused_when_a_partition_would_take_an_existing_block():
    parts = [{"name": "a", "mode": "independent", "units": 1}, {"name": "b", "mode": "independent", "units": 1}]
    rec = recorded(8, partitions=parts)
    bigger = [{"name": "a", "mode": "independent", "units": 2}, {"name": "b", "mode": "independent", "units": 1}]
    with pytest.raises(ConfigError) as e:
        decide(rec, build_plan(spec(12, partitions=bigger)), batch_size=4)
    assert e.value.field == "gpufleet:partitions[1].gpus" or e.value.field == "gpufleet:partitions[0].gpus"
    assert "block 1" in e.value.message


def test_grow_refused_when_the_unit_size_changes_block_names():
    rec = recorded(8)
    with pytest.raises(ConfigError) as e:
        decide(rec, build_plan(spec(16, unit=32)), batch_size=4)
    assert "cluster.unitGpus" in (e.value.field or "")


def test_grow_refused_from_a_partial_last_block():
    rec = recorded(9, partitions=[])  # 2-node blocks: the last holds 1 node
    with pytest.raises(ConfigError) as e:
        decide(rec, build_plan(spec(12, partitions=[])), batch_size=4)
    assert e.value.field == "gpufleet:cluster.targetGpus" and "1 of 2 nodes" in e.value.message


def test_other_layout_change_keeps_the_old_refusal():
    with pytest.raises(ConfigError) as e:
        decide(recorded(8), build_plan(spec(8, canary=0.5)), batch_size=4)
    assert "--restart" in (e.value.expected or "")


def test_shrink_releases_the_emptiest_whole_blocks_never_part_of_one():
    rec = recorded(12, partitions=[])  # 6 blocks of 2 nodes
    busy = {"tst-b0005-n00010": 2, "tst-b0004-n00008": 1, "tst-b0001-n00002": 1}
    r = decide(rec, build_plan(spec(7, partitions=[])), batch_size=4, busy=busy)
    # down to at least 7 nodes: 2 whole blocks (4 nodes) go, not 5 nodes; idle blocks first, highest id first
    assert r.kind == "shrink" and r.released_blocks == (2, 3)
    assert len(r.released) == 4 and {s.block for s in r.released} == {2, 3}
    assert r.plan.topology.nodes == 8
    names = {s.name for s in r.plan.nodes}
    assert names == {n for n in rec if rec[n][1] not in (2, 3)}
    for s in r.plan.nodes:
        assert (s.index, s.block, s.batch) == rec[s.name][:3]
    for b in r.plan.batches:
        assert all(s.batch == b.number for s in r.plan.batch_nodes(b.number))
    assert [b.number for b in r.plan.batches] == list(range(1, len(r.plan.batches) + 1))
    # the shrunk layout stands on the next run (it has gaps)
    again = decide(read_record(record_of(r.plan)), build_plan(spec(7, partitions=[])), batch_size=4, basis=r.basis)
    assert again.kind == "unchanged" and layout_digest(again.plan.nodes) == layout_digest(r.plan.nodes)


def test_shrink_prefers_blocks_with_fewer_busy_nodes():
    rec = recorded(8, partitions=[])
    busy = {n: 1 for n in rec if rec[n][1] in (2, 3)}  # the tail blocks run jobs
    r = decide(rec, build_plan(spec(6, partitions=[])), batch_size=4, busy=busy)
    assert r.released_blocks == (1,)


def test_shrink_less_than_a_block_is_refused():
    with pytest.raises(ConfigError) as e:
        decide(recorded(8, partitions=[]), build_plan(spec(7, partitions=[])), batch_size=4)
    assert e.value.field == "gpufleet:cluster.targetGpus" and "whole block" in e.value.message


def test_shrink_takes_blocks_from_the_partition_that_asks_for_less():
    parts = [{"name": "a", "mode": "independent", "units": 2}, {"name": "b", "mode": "independent", "units": 2}]
    rec = recorded(8, partitions=parts)  # a: blocks 0-1, b: blocks 2-3
    less = [{"name": "a", "mode": "independent", "units": 1}, {"name": "b", "mode": "independent", "units": 2}]
    busy = {n: 1 for n in rec if rec[n][1] in (2, 3)}  # b's blocks are busy, a's are idle: a's still go
    r = decide(rec, build_plan(spec(6, partitions=less)), batch_size=4, busy=busy)
    assert r.released_blocks == (1,) and r.block_partition == {1: "a"}
    assert {p.name: p.blocks for p in r.plan.partitions} == {"a": (0,), "b": (2, 3)}


def test_shrink_keeps_partition_blocks_when_free_blocks_can_go():
    parts = [{"name": "train", "mode": "data-parallel", "units": 2}]  # blocks 0-1; 2-3 unassigned
    r = decide(recorded(8, partitions=parts), build_plan(spec(4, partitions=parts)), batch_size=4)
    assert r.released_blocks == (2, 3)
    assert r.plan.partitions[0].blocks == (0, 1)


def test_change_set_lines():
    old = build_plan(spec(8))
    r = decide(read_record(record_of(old)), build_plan(spec(12)), batch_size=4)
    b = ChangeSetBuilder("rollout", "tst", simulated=True)
    add_changes(b, r, usd_per_hour=55.0)
    cs = b.build()
    assert cs.targets("launch", "instance") == [s.name for s in r.added] and cs.usd_per_hour_delta == 4 * 55.0
    s = decide(read_record(record_of(old)), build_plan(spec(4)), batch_size=4)
    b = ChangeSetBuilder("rollout", "tst")
    add_changes(b, s, usd_per_hour=55.0, instances={s.released[0].name: "i-1"})
    cs = b.build()
    gone = [x.name for x in s.released]
    assert cs.targets("drain") == gone and cs.targets("release") == gone and cs.targets("terminate") == gone
    assert "block" in cs.changes[0].detail and cs.usd_per_hour_delta == -4 * 55.0


def test_a_grow_whose_blocks_no_partition_asks_for_says_so_in_the_change_set():
    """Partitions keep their units: raising only targetGpus buys blocks no queue sends work to. The
    change set says so before anything is bought; raising the last partition puts them to work."""
    old = build_plan(spec(8))  # train: 2 units = blocks 0-1; blocks 2-3 join no partition already
    r = decide(read_record(record_of(old)), build_plan(spec(12)), batch_size=4)
    b = ChangeSetBuilder("rollout", "tst", simulated=True)
    add_changes(b, r)
    assert any("block(s) 4, 5 join no partition" in n for n in b.build().notes), b.build().notes
    raised = [{"name": "train", "mode": "data-parallel", "units": 2},
              {"name": "more", "mode": "independent", "units": 2}]
    parted = decide(read_record(record_of(build_plan(spec(8, partitions=raised[:1] + [
        {"name": "more", "mode": "independent", "units": 2}])))), build_plan(spec(12, partitions=[
            raised[0], {"name": "more", "mode": "independent", "units": 4}])), batch_size=4)
    b = ChangeSetBuilder("rollout", "tst", simulated=True)
    add_changes(b, parted)
    assert parted.kind == "grow" and not any("join no partition" in n for n in b.build().notes)
    assert {parted.plan.block(s.block).partition for s in parted.added} == {"more"}


def test_a_pulumi_stack_takes_the_rollouts_layout_exactly_when_it_was_resized():
    """gpufleet.rollout.wiring.resized: the real provisioner writes gpufleet:rollout.layout only for a
    plan the stack file would not lay out afresh (or once the stack carries one: kept up to date)."""
    from gpufleet.plan.resize import encode_layout
    from gpufleet.rollout.wiring import resized

    old_spec, new_spec = spec(8), spec(12)
    assert not resized(old_spec, build_plan(old_spec))
    grown = decide(read_record(record_of(build_plan(old_spec))), build_plan(new_spec), batch_size=4)
    assert resized(new_spec, grown.plan)
    raw = new_spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["rollout"]["layout"] = encode_layout(grown.plan)
    carried = ClusterSpec.from_raw(raw, source="test")
    assert resized(carried, build_plan(carried))
    raw["rollout"]["layout"] = "not json"
    with pytest.raises(ConfigError) as err:
        ClusterSpec.from_raw(raw, source="test")
    assert "rollout.layout" in str(err.value.field)
