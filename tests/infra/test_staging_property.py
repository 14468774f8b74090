"""Slot-safe staging, driven by Hypothesis over random (old layout, new layout, recorded deployment).

The layouts are real plans (`build_plan`, pure) of the dev stack with the settings that
re-slice slots drawn at random: target GPUs, unit size, spares, batch size, canary fraction.
The oracle is the rule as DESIGN section 6 states it, written independently of the module:
a recorded slot survives iff the new plan still names it and its recorded or its planned batch
is within the target in force; otherwise the change is refused unless allowShrink, and a
dropped slot is never created again in the same update (that would replace its instance).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpufleet.cloud.staging import (Deployment, compact_names, decode_deployment, encode_deployment, layout_settings,
                                 resolve_staging)
from gpufleet.errors import ConfigError
from gpufleet.plan import build_plan
from gpufleet.spec import ClusterSpec, load_stack

BASE = load_stack("dev").model_dump(mode="json", by_alias=True, exclude_none=True)

layouts = st.fixed_dictionaries({
    "targetGpus": st.integers(8, 160),
    "unitGpus": st.sampled_from([4, 8, 10, 16]),
    "spareFraction": st.sampled_from([0.0, 0.05, 0.1]),
    "batchSize": st.integers(1, 12),
    "canaryFraction": st.sampled_from([0.05, 0.1, 0.3, 0.5]),
})
targets = st.one_of(st.none(), st.integers(0, 12))


def _spec(layout: dict) -> ClusterSpec:
    raw = {**BASE, "cluster": {**BASE["cluster"], "targetGpus": layout["targetGpus"], "unitGpus": layout["unitGpus"],
                               "spareFraction": layout["spareFraction"]},
           "rollout": {**BASE.get("rollout", {}), "batchSize": layout["batchSize"],
                       "canaryFraction": layout["canaryFraction"]}}
    raw.pop("partitions", None)  # partitions only label blocks; they never re-slice slots
    return ClusterSpec.from_raw(raw, source="property")


def _deploy(layout: dict, target: int | None, recorded: Deployment | None, allow_shrink: bool):
    spec = _spec(layout)
    plan = build_plan(spec)
    staging = resolve_staging(plan.nodes, len(plan.batches), target, recorded, allow_shrink, layout_settings(spec))
    return spec, plan, staging


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(old=layouts, first=st.integers(0, 12), new=layouts, target=targets, shrink=st.booleans(),
       ami=st.sampled_from(["ami-00000000000000001", "ami-00000000000000002"]))
def test_a_recorded_slot_is_never_dropped_renamed_or_duplicated(old, first, new, target, shrink, ami):
    spec, _, before = _deploy(old, first, None, allow_shrink=False)
    recorded = decode_deployment(encode_deployment(before.deployment(spec.cluster.name, layout_settings(spec), ami)))
    names = {recorded.name(r): r for r in recorded.slots}
    new_spec = _spec(new)
    new_plan = build_plan(new_spec)
    planned = {s.name: s.batch for s in new_plan.nodes}
    active = min(recorded.batches if target is None else target, len(new_plan.batches))
    lost = sorted(n for n, r in names.items() if n not in planned or min(r.batch, planned[n]) > active)
    try:
        after = resolve_staging(new_plan.nodes, len(new_plan.batches), target, recorded, shrink,
                                layout_settings(new_spec))
    except ConfigError as exc:
        event("refused")
        assert lost and not shrink, f"refused without cause: {exc}"
        first_lost = names[lost[0]]
        assert compact_names(recorded.cluster, [first_lost]) in str(exc) or "more range" in str(exc)
        return
    event("dropped with allowShrink" if lost else "kept every recorded slot")
    assert shrink or not lost, f"dropped {lost[:3]} without allowShrink"
    got = {s.name: s for s in after.slots}
    assert len(got) == len(after.slots), "duplicate slot name"
    assert len({s.index for s in after.slots}) == len(after.slots), "two instances for one node index"
    assert sorted(after.dropped) == lost
    for name, r in names.items():
        if name in lost:
            assert name not in got
            continue
        kept = got[name]  # same name: never renamed
        assert (kept.existing, kept.protected, kept.batch, kept.block, kept.ami) == (True, True, r.batch, r.block, ami)
    for s in after.slots:
        assert s.name in planned and (s.existing or s.batch <= active) and s.existing == (s.name in names)
    assert len(got) == len(after.slots) == len({s.index for s in after.slots})


@settings(max_examples=100, deadline=None)
@given(layout=layouts, target=st.integers(0, 12))
def test_the_recorded_output_round_trips(layout, target):
    spec, _, staging = _deploy(layout, target, None, allow_shrink=False)
    d = staging.deployment(spec.cluster.name, layout_settings(spec), "ami-0123456789abcdef0")
    encoded = encode_deployment(d)
    assert decode_deployment(encoded) == d
    assert len(encoded["runs"]) <= max(1, len({s.block for s in staging.slots}))  # one run per block at most


def test_every_deployed_slot_is_protected_including_the_latest_batch():
    layout = {"targetGpus": 64, "unitGpus": 8, "spareFraction": 0.0, "batchSize": 2, "canaryFraction": 0.1}
    spec, plan, first = _deploy(layout, 2, None, allow_shrink=False)
    assert first.slots and not any(s.protected for s in first.slots)  # nothing existed before this update
    recorded = first.deployment(spec.cluster.name, layout_settings(spec), "ami-00000000000000001")
    _, _, second = _deploy(layout, 3, recorded, allow_shrink=False)
    batch = {s.name: s.batch for s in plan.nodes}
    assert {s.name for s in second.slots if s.protected} == {s.name for s in first.slots}
    assert max(batch[s.name] for s in second.slots if s.protected) == 2
    assert {batch[s.name] for s in second.slots if not s.protected} == {3}


def test_a_smaller_batch_size_keeps_the_slots_in_their_recorded_batches():
    layout = {"targetGpus": 96, "unitGpus": 8, "spareFraction": 0.0, "batchSize": 4, "canaryFraction": 0.1}
    spec, _, first = _deploy(layout, 2, None, allow_shrink=False)
    recorded = first.deployment(spec.cluster.name, layout_settings(spec), "ami-00000000000000001")
    _, plan, after = _deploy({**layout, "batchSize": 1}, None, recorded, allow_shrink=False)
    assert {s.name: s.batch for s in after.slots} == {recorded.name(r): r.batch for r in recorded.slots}
    assert max(s.batch for s in plan.nodes if s.name in {x.name for x in after.slots}) > 2  # the layout moved them


def test_a_new_block_size_is_refused_naming_the_slots_and_the_setting():
    layout = {"targetGpus": 64, "unitGpus": 8, "spareFraction": 0.0, "batchSize": 2, "canaryFraction": 0.1}
    spec, _, first = _deploy(layout, 3, None, allow_shrink=False)
    recorded = first.deployment(spec.cluster.name, layout_settings(spec), None)
    with pytest.raises(ConfigError) as err:
        _deploy({**layout, "unitGpus": 16}, None, recorded, allow_shrink=False)
    text = str(err.value)
    assert "dev-b0001-n00001" in text and "cluster.unitGpus 8 -> 16" in text and "allowShrink" in text
    assert err.value.field == "gpufleet:cluster.unitGpus"
    _, _, shrunk = _deploy({**layout, "unitGpus": 16}, None, recorded, allow_shrink=True)
    assert "dev-b0001-n00001" in shrunk.dropped and "dev-b0000-n00001" in {s.name for s in shrunk.slots}


def test_a_lower_target_is_refused_naming_the_target():
    layout = {"targetGpus": 64, "unitGpus": 8, "spareFraction": 0.0, "batchSize": 2, "canaryFraction": 0.1}
    spec, _, first = _deploy(layout, 3, None, allow_shrink=False)
    recorded = first.deployment(spec.cluster.name, layout_settings(spec), None)
    # the canary holds the smoke job's 2 nodes (b0000-b0001), so batch 3 is b0004-b0005
    with pytest.raises(ConfigError, match=r"dev-b0004-n00004..b0005-n00005 are in batches above targetBatch 2") as err:
        _deploy(layout, 2, recorded, allow_shrink=False)
    assert err.value.field == "gpufleet:rollout.targetBatch"


def test_compact_names_groups_consecutive_nodes_of_a_block():
    from gpufleet.cloud.staging import SlotRecord

    slots = [SlotRecord(i, i // 5, 1) for i in (0, 1, 2, 3, 4, 5, 6, 9)]
    assert compact_names("c", slots) == "c-b0000-n00000..b0001-n00006, c-b0001-n00009"
    assert compact_names("c", slots[1:4]) == "c-b0000-n00001..00003"
    assert compact_names("c", [SlotRecord(i, i, 1) for i in range(0, 40, 2)], limit=2) == \
        "c-b0000-n00000, c-b0002-n00002 and 18 more range(s)"


@pytest.mark.parametrize("bad", [None, [], {"format": 2}, {"format": 1, "cluster": "c"},
                                 {"format": 1, "cluster": "c", "batches": 1, "amis": [], "runs": [[0, 1, 3, 2, -1]]},
                                 {"format": 1, "cluster": "c", "batches": 1, "amis": [], "runs": [[0, 1, 0, 1, 4]]},
                                 {"format": 1, "cluster": "c", "batches": 1, "amis": [],
                                  "runs": [[0, 1, 0, 1, -1], [0, 1, 1, 2, -1]]}])
def test_a_malformed_record_is_a_config_error_naming_the_output(bad):
    with pytest.raises(ConfigError, match="deployedSlots"):
        decode_deployment(bad)
