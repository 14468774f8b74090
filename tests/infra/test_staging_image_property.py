"""`Staging.with_images` (the program's `image.slotAmis`), driven by Hypothesis over random deployed
fleets and random overrides. The oracle, written apart from the module: a slot not named keeps
exactly what it had; a named slot boots its override; only a deployed slot whose recorded AMI
differs from its override is unprotected and lets `ami` and `launch_template` change; what the
stack records next holds the override for every named slot and the old AMI for every other."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.cloud.staging import FROZEN_PROPERTIES, Deployment, SlotRecord, resolve_staging
from gpufleet.plan.model import NodeSlot
from gpufleet.plan.topology import slot_name

AMIS = ["ami-0aaaaaaaaaaaaaaa1", "ami-0bbbbbbbbbbbbbbb2", "ami-0ccccccccccccccc3"]


@st.composite
def fleets(draw):
    n = draw(st.integers(1, 30))
    per_batch = draw(st.integers(1, 8))
    slots = [NodeSlot(name=slot_name("c", i // 4, i), index=i, block=i // 4, batch=1 + i // per_batch, units=(i,))
             for i in range(n)]
    deployed = draw(st.integers(0, n))  # the first `deployed` slots have instances
    recorded = Deployment(cluster="c", batches=slots[deployed - 1].batch if deployed else 0, slots=tuple(
        SlotRecord(index=s.index, block=s.block, batch=s.batch, ami=draw(st.sampled_from(AMIS + [None])))
        for s in slots[:deployed]))
    names = [s.name for s in slots]
    overrides = draw(st.dictionaries(st.sampled_from(names), st.sampled_from(AMIS), max_size=n))
    return slots, recorded, overrides


@settings(max_examples=200, deadline=None)
@given(fleets(), st.sampled_from(AMIS))
def test_only_named_slots_change_and_only_those_on_another_image_are_unfrozen(fleet, current):
    slots, recorded, overrides = fleet
    base = resolve_staging(slots, len({s.batch for s in slots}), None, recorded, False)
    staged = base.with_images(overrides, slots)
    before = {s.name: s for s in base.slots}
    recorded_ami = {recorded.name(r): r.ami for r in recorded.slots}
    assert [s.name for s in staged.slots] == [s.name for s in base.slots]
    for s in staged.slots:
        if s.name not in overrides:
            assert s == before[s.name]
            continue
        assert s.ami == overrides[s.name]
        moving = s.name in recorded_ami and recorded_ami[s.name] != overrides[s.name]
        assert s.reimage == moving and s.protected == (s.existing and not moving)
        if moving:
            assert set(s.frozen_properties or []) == set(FROZEN_PROPERTIES) - {"ami", "launch_template"}
        elif s.existing:
            assert s.frozen_properties == FROZEN_PROPERTIES
    record = {recorded.name(r): r.ami for r in staged.deployment("c", {}, current).slots}
    for s in staged.slots:
        want = overrides.get(s.name, recorded_ami[s.name] if s.existing else current)
        assert record[s.name] == want
