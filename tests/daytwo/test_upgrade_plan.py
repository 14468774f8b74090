"""The upgrade's grouping, pure: whole blocks, a one-block canary, growing groups, and never more
than a partition's allowance of units out of service, on the 1000-GPU `local` plan."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.daytwo.upgrade_plan import limits, plan_groups, units_out
from gpufleet.errors import ConfigError
from gpufleet.plan import build_plan
from gpufleet.spec import ClusterSpec, UpgradeConfig

REPO = Path(__file__).resolve().parents[2]


def local_plan():
    raw = yaml.safe_load((REPO / "stacks" / "Pulumi.local.yaml").read_text())["config"]
    spec = ClusterSpec.from_raw({k.split(":", 1)[1]: v for k, v in raw.items() if k.startswith("gpufleet:")},
                                source="local")
    return build_plan(spec)


def test_groups_cover_every_node_in_whole_blocks_canary_first_then_growing():
    plan = local_plan()
    todo = {n.name for n in plan.nodes}
    cfg = UpgradeConfig()
    groups = plan_groups(plan, todo, cfg)
    assert sorted(s for g in groups for s in g.slots) == sorted(todo)
    assert len(groups[0].blocks) == 1 and groups[0].canary
    by_block = {b.id: {plan.nodes[i].name for i in b.nodes} for b in plan.blocks}
    split = {b.id for b in plan.blocks if {plan.units[u].partition for u in b.units} == {"debug"}}
    for g in groups:  # whole blocks, but for the one holding all of debug's units (see below)
        assert set(g.slots) - set().union(*(by_block[b] for b in split)) == \
            set().union(*(by_block[b] for b in g.blocks if b not in split))
    sizes = [len(g.blocks) for g in groups]
    assert sizes[1] > sizes[0]  # growing, up to the allowance
    loose = plan_groups(plan, todo, UpgradeConfig(max_unavailable_units={"train": 80, "sim": 16, "debug": 4}))
    assert [len(g.blocks) for g in loose][:4] == [1, 2, 4, 8]  # groupGrowth 2
    allowed = limits(plan, cfg)
    for g in groups:
        for partition, n in units_out(plan, set(g.slots)).items():
            assert n <= allowed[partition], (g.number, partition, n)


def test_the_allowance_per_partition_caps_the_groups():
    plan = local_plan()
    todo = {n.name for n in plan.nodes}
    tight = plan_groups(plan, todo, UpgradeConfig(max_unavailable_units={"train": 4, "sim": 4, "debug": 4}))
    loose = plan_groups(plan, todo, UpgradeConfig(max_unavailable_units={"train": 40, "sim": 8, "debug": 4}))
    assert len(tight) > len(loose)
    for g in tight:
        out = units_out(plan, set(g.slots))
        assert all(n <= 4 for n in out.values())


def test_only_blocks_with_nodes_to_upgrade_are_grouped():
    plan = local_plan()
    todo = {plan.nodes[i].name for i in plan.blocks[3].nodes} | {plan.nodes[i].name for i in plan.blocks[7].nodes}
    groups = plan_groups(plan, todo, UpgradeConfig())
    assert [g.blocks for g in groups] == [(3,), (7,)]


def test_a_partition_whose_units_all_sit_in_one_block_keeps_units_in_service():
    """`local`'s debug partition: 4 units, all in block 24. Upgrading that block whole would stop its
    queue; it is upgraded in pieces instead, and at every group some debug units still run."""
    plan = local_plan()
    todo = {n.name for n in plan.nodes}
    units = {p.name: p.units for p in plan.partitions}
    groups = plan_groups(plan, todo, UpgradeConfig())
    assert sorted(s for g in groups for s in g.slots) == sorted(todo)
    for g in groups:
        for partition, n in units_out(plan, set(g.slots)).items():
            assert n < units[partition], (g.number, partition, n)
    debug_block = next(b for b in plan.blocks if {plan.units[u].partition for u in b.units} == {"debug"})
    pieces = [g for g in groups if debug_block.id in g.blocks]
    assert len(pieces) > 1
    assert set().union(*(g.slots for g in pieces)) >= {plan.nodes[i].name for i in debug_block.nodes}


def test_blocks_that_fit_their_partition_stay_whole():
    plan = local_plan()
    groups = plan_groups(plan, {n.name for n in plan.nodes}, UpgradeConfig())
    by_block = {b.id: {plan.nodes[i].name for i in b.nodes} for b in plan.blocks}
    train_blocks = [b for b in plan.blocks if {plan.units[u].partition for u in b.units} == {"train"}]
    for b in train_blocks:  # train: 80 units, blocks of 4: never split
        holding = [g for g in groups if b.id in g.blocks]
        assert len(holding) == 1 and set(holding[0].slots) >= by_block[b.id]


def test_an_allowance_below_one_nodes_units_is_refused_before_anything():
    """10-GPU units on 8-GPU nodes share nodes: one node can belong to two units, so an allowance of
    one unit cannot be kept by any group."""
    plan = local_plan()
    with pytest.raises(ConfigError) as err:
        plan_groups(plan, {n.name for n in plan.nodes}, UpgradeConfig(max_unavailable_units={"debug": 1}))
    assert err.value.field == "gpufleet:upgrade.maxUnavailableUnits.debug"
    assert "at least 2" in str(err.value.expected)


@settings(max_examples=40, deadline=None)
@given(train=st.integers(2, 80), sim=st.integers(2, 16), debug=st.integers(2, 4),
       growth=st.floats(1.0, 4.0), picked=st.sets(st.integers(0, 124), min_size=1, max_size=125))
def test_any_allowance_and_any_subset_is_covered_exactly_within_the_allowance(train, sim, debug, growth, picked):
    plan = PLAN
    todo = {plan.nodes[i].name for i in picked if i < len(plan.nodes)}
    cfg = UpgradeConfig(max_unavailable_units={"train": train, "sim": sim, "debug": debug}, group_growth=growth)
    groups = plan_groups(plan, todo, cfg)
    slots = [s for g in groups for s in g.slots]
    assert sorted(slots) == sorted(todo) and len(slots) == len(set(slots))
    for g in groups:
        assert all(n <= cfg.max_unavailable_units[p] for p, n in units_out(plan, set(g.slots)).items())


PLAN = local_plan()
