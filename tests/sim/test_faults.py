"""Fault mix configuration and seeded placement (pure)."""

from __future__ import annotations

import pytest

from gpufleet.errors import ConfigError, ConfigErrors
from gpufleet.plan import build_plan
from gpufleet.sim.faults import EFFECTS, active_faults, fault_counts, place_faults

from .conftest import ALL_KINDS, make_spec


def test_the_effect_table_covers_every_configurable_kind():
    from typing import get_args

    from gpufleet.spec import SimFaultKind

    assert set(get_args(SimFaultKind)) == set(EFFECTS) == set(ALL_KINDS)


def test_counts_and_shares():
    spec = make_spec(faults={"xid-79": 2, "xid-48": 0.05, "xid-64": 0.001, "nvlink-down": 0})
    assert dict(fault_counts(spec.simulator, 40)) == {"xid-79": 2, "xid-48": 2, "xid-64": 1}


@pytest.mark.parametrize("faults, where", [({"xid-80": 1}, "faults.xid-80"), ({"xid-79": 1.5}, "faults"),
                                          ({"xid-79": -1}, "faults")])
def test_a_bad_fault_mix_names_the_field(faults, where):
    with pytest.raises(ConfigErrors) as exc:
        make_spec(faults=faults)
    assert any(e.field.startswith(f"gpufleet:simulator.{where}") for e in exc.value.errors), exc.value


def test_placement_is_seeded_spread_and_one_fault_per_node():
    spec = make_spec(target_gpus=1000, faults={k: 1 for k in ALL_KINDS}, badLinks=2)
    plan = build_plan(spec)
    fp = place_faults(plan, spec.simulator)
    assert fp == place_faults(plan, spec.simulator)
    assert sorted(fp.faults.values()) == sorted(ALL_KINDS)
    linked = {s for link in fp.bad_links for s in link}
    assert len(fp.bad_links) == 2 and linked.isdisjoint(fp.faults)
    for a, b in fp.bad_links:  # the first two slots of a batch
        batch = plan.batch_nodes(plan.nodes[[s.name for s in plan.nodes].index(a)].batch)
        assert (a, b) == (batch[0].name, batch[1].name)
    per_batch = {}
    for slot in fp.faults:
        per_batch[fp.batch_of[slot]] = per_batch.get(fp.batch_of[slot], 0) + 1
    for b in plan.batches:  # in proportion to the batch's size, give or take one
        assert per_batch.get(b.number, 0) <= round(len(ALL_KINDS) * b.node_count / len(plan.nodes)) + 1


def test_too_many_faults_for_the_fleet_is_an_error():
    spec = make_spec(target_gpus=80, faults={"xid-79": 11})
    with pytest.raises(ConfigError, match="do not fit") as exc:
        place_faults(build_plan(spec), spec.simulator)
    assert exc.value.field == "gpufleet:simulator.faults"
    bad_batch = make_spec(target_gpus=80, capacityShortfall={"batch": 9, "count": 1})
    with pytest.raises(ConfigError, match="batch 9"):
        place_faults(build_plan(bad_batch), bad_batch.simulator)


def test_what_a_remediation_clears():
    assert active_faults("row-remap-pending", ["reset-gpu"]) is None
    assert active_faults("row-remap-pending", ["reboot"]) is None
    assert active_faults("xid-119", ["reset-gpu"]) == "xid-119"
    assert active_faults("xid-119", ["reboot"]) is None
    assert active_faults("ecc-uncorrectable", ["reset-gpu", "reboot"]) == "ecc-uncorrectable"
    assert active_faults(None, []) is None
