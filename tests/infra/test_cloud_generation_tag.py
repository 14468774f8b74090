"""The replacement-generation tag through the real program under mocks (issue 21 item 6): every GPU
instance is tagged `gpufleet.io/generation`, 0 unless `gpufleet:rollout.slotGenerations` names the
slot (what the rollout sets before a replacement's targeted `up`), and the `nodes` output the
rollout reads carries the same number; no other instance changes."""

from __future__ import annotations

from gpufleet import tagging as t
from gpufleet.program.capture import capture_program
from gpufleet.spec import load_stack

INSTANCE = "aws:ec2/instance:Instance"


def _nodes(cap):
    return {r.name: r for r in cap.of_type(INSTANCE) if r.inputs["tags"][t.ROLE] == "gpu-node"}


def test_a_replaced_slot_is_tagged_with_its_generation_every_other_with_0():
    spec = load_stack("dev")
    before = capture_program(spec, stack="dev", target_batch=99)
    replaced, kept = sorted(_nodes(before))[:2]
    again = spec.model_copy(update={"rollout": spec.rollout.model_copy(update={"slot_generations": {replaced: 3}})})
    after = capture_program(again, stack="dev", target_batch=99, recorded_outputs=before.outputs)
    nodes = _nodes(after)
    assert {s: r.inputs["tags"][t.GENERATION] for s, r in _nodes(before).items()} == {s: "0" for s in nodes}
    assert nodes[replaced].inputs["tags"][t.GENERATION] == "3"
    assert {s: r.inputs["tags"][t.GENERATION] for s, r in nodes.items() if s != replaced} == {
        s: "0" for s in nodes if s != replaced}
    assert nodes[kept].inputs == _nodes(before)[kept].inputs  # nothing else about the others moves
    rows = {row["slot"]: row["generation"] for rows in after.outputs["nodes"].values() for row in rows}
    assert rows[replaced] == 3 and {s: g for s, g in rows.items() if s != replaced} == {
        s: 0 for s in rows if s != replaced}


def test_the_tag_reads_back_as_a_count_and_a_missing_or_odd_one_as_0():
    assert t.generation_of({t.GENERATION: "3"}) == 3
    assert t.generation_of({}) == t.generation_of(None) == t.generation_of({t.GENERATION: "x"}) == 0
    assert t.generation_of({t.GENERATION: "-1"}) == 0
    assert t.GENERATION not in t.NODE_REQUIRED  # an instance launched before the tag is still a valid node
