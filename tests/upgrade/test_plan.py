"""The upgrade's grouping, pure: whole blocks, a one-block canary, growing groups, and never more
than a partition's allowance of units out of service, on the 1000-GPU `local` plan."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra.errors import ConfigError
from infra.plan import build_plan
from infra.spec import ClusterSpec, UpgradeConfig
from infra.upgrade.plan import limits, plan_groups, units_out

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
    for g in groups:
        assert set(g.slots) == set().union(*(by_block[b] for b in g.blocks))  # whole blocks
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


def test_a_block_larger_than_the_allowance_is_refused_before_anything():
    plan = local_plan()
    block = plan.blocks[0]
    units = units_out(plan, {plan.nodes[i].name for i in block.nodes})
    partition, n = next(iter(units.items()))
    if n < 2:
        pytest.skip("the local plan's blocks hold one unit")
    with pytest.raises(ConfigError) as err:
        plan_groups(plan, {plan.nodes[i].name for i in block.nodes},
                    UpgradeConfig(max_unavailable_units={partition: n - 1}))
    assert "maxUnavailableUnits" in err.value.field
