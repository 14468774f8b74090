"""The state machine: legal moves fold, illegal ones raise, retest once, spares counted."""

from __future__ import annotations

import pytest

from gpufleet.rollout.state import BatchStage, IllegalTransition, NodeStage, fold

OUTCOME = {"verdict": "REMEDIATE", "action": "retest", "attempt": 1, "reason_codes": ["busbw-outlier"]}
RECORD_FREE = {"action": "quarantine", "reason_code": "xid-79", "reason": "fell off the bus"}


def nodes(to: str, *slots: str, batch: int = 1, **data) -> dict:
    return {"type": "nodes", "batch": batch, "to": to, "nodes": {s: dict(data) for s in slots}}


def happy_path(slot: str = "a") -> list[dict]:
    return [
        {"type": "rollout", "to": "started", "batches": [1, 2]},
        {"type": "batch", "batch": 1, "to": "running"},
        nodes("provisioning", slot),
        nodes("provisioned", slot, instance_id="i-1"),
        nodes("configuring", slot),
        nodes("configured", slot),
        nodes("preflight", slot, bundle="bundles/1/1/a"),
        nodes("baseline", slot, record={"slot": slot}),
        {"type": "decided", "batch": 1, "nodes": {slot: {"action": "admit", "record_digest": "sha256:x",
                                                          "record": {"slot": slot}}}},
        nodes("admitted", slot),
        {"type": "batch", "batch": 1, "to": "passed"},
    ]


def test_the_happy_path_folds_to_admitted():
    s = fold(happy_path())
    n = s.nodes["a"]
    assert n.stage is NodeStage.ADMITTED and n.instance_id == "i-1" and n.record_digest == "sha256:x"
    assert s.batches[1].stage is BatchStage.PASSED and s.batches[2].stage is BatchStage.PENDING
    assert s.batches[1].preflight_rounds == 1
    assert [h[0] for h in n.history][:3] == ["provisioning", "provisioned", "configuring"]


@pytest.mark.parametrize("cut,bad", [
    (3, nodes("configured", "a")),  # skips configuring
    (2, nodes("admitted", "a")),  # admitted without anything
    (7, nodes("admitted", "a")),  # admitted without an admit decision
    (10, nodes("provisioning", "a")),  # admitted is terminal
])
def test_illegal_node_moves_raise(cut, bad):
    events = happy_path()[:cut] + [bad]
    with pytest.raises(IllegalTransition, match="a: "):
        fold(events)


def test_admit_decided_before_the_baselines_is_refused():
    events = happy_path()[:6] + [{"type": "decided", "batch": 1, "nodes": {"a": {"action": "admit"}}}]
    with pytest.raises(IllegalTransition, match="before the multi-node baselines"):
        fold(events)


def test_batch_moves_are_validated_and_a_halted_rollout_moves_no_batch():
    base = [{"type": "rollout", "to": "started", "batches": [1, 2]}]
    with pytest.raises(IllegalTransition, match="pending -> passed"):
        fold(base + [{"type": "batch", "batch": 1, "to": "passed"}])
    halted = base + [{"type": "batch", "batch": 1, "to": "running"},
                     {"type": "batch", "batch": 1, "to": "halted", "reason": "canary"},
                     {"type": "rollout", "to": "halted", "reason": "canary"}]
    s = fold(halted)
    assert s.halted and s.halt_reason == "canary" and not s.unfinished
    with pytest.raises(IllegalTransition, match="halted"):
        fold(halted + [{"type": "batch", "batch": 2, "to": "running"}])


def test_remediate_allows_one_retest_only():
    events = happy_path()[:7]
    once = events + [{"type": "retest", "batch": 1, "nodes": {"a": {"outcome": OUTCOME}}}]
    s = fold(once)
    assert s.nodes["a"].stage is NodeStage.CONFIGURED and s.nodes["a"].attempt == 2
    assert s.nodes["a"].previous.verdict.value == "REMEDIATE"
    twice = once + [nodes("preflight", "a", bundle="b2"),
                    {"type": "retest", "batch": 1, "nodes": {"a": {"outcome": OUTCOME}}}]
    with pytest.raises(IllegalTransition, match="one retest"):
        fold(twice)


def test_quarantine_replace_counts_spares_and_first_failures_only():
    events = happy_path()[:5] + [
        {"type": "decided", "batch": 1, "nodes": {"a": RECORD_FREE}},
        nodes("quarantined", "a"),
        nodes("replaced", "a"),
        nodes("provisioned", "a", instance_id="i-2"),
        nodes("configuring", "a"),
        {"type": "decided", "batch": 1, "nodes": {"a": RECORD_FREE}},
        nodes("quarantined", "a", blacklisted=True),
    ]
    s = fold(events)
    n = s.nodes["a"]
    assert (n.stage, n.instance_id, n.replacements, n.blacklisted) == (NodeStage.QUARANTINED, "i-2", 1, True)
    assert s.spares_used == 1 and s.batches[1].first_failures == {"a"}
    with pytest.raises(IllegalTransition, match="blacklisted"):
        fold(events + [nodes("replaced", "a")])


def test_a_quarantine_needs_a_reason_and_sequence_numbers_increase():
    with pytest.raises(IllegalTransition, match="reason code"):
        fold(happy_path()[:5] + [nodes("quarantined", "a")])
    with pytest.raises(IllegalTransition, match="sequence"):
        fold([{"type": "rollout", "to": "started", "seq": 2}, {"type": "batch", "batch": 1, "to": "running", "seq": 2}])
    with pytest.raises(IllegalTransition, match="unknown event type"):
        fold([{"type": "nope"}])


def test_shortfall_is_asked_again_and_counts_requests():
    events = happy_path()[:3] + [nodes("provisioning", "a", shortfall="InsufficientInstanceCapacity"),
                                 nodes("provisioning", "a")]
    n = fold(events).nodes["a"]
    assert n.stage is NodeStage.PROVISIONING and n.provision_requests == 2 and n.shortfall is None


def test_a_gating_step_lands_all_its_outcomes_at_once():
    events = happy_path()[:6] + [nodes("configuring", "b"), nodes("configured", "b"),
                                 nodes("preflight", "a", bundle="x"), nodes("preflight", "b", bundle="y")]
    events = events[:4] + [nodes("provisioning", "b"), nodes("provisioned", "b", instance_id="i-2")] + events[4:]
    gated = {"type": "gated", "batch": 1, "nodes": {
        "a": {"result": "pass", "record": {"slot": "a"}},
        "b": {"result": "remediate", "record": {"slot": "b", "verdict": "REMEDIATE", "reason_codes": ["x"]}}}}
    s = fold(events + [gated])
    assert s.nodes["a"].stage is NodeStage.BASELINE and s.nodes["a"].gate_record == {"slot": "a"}
    assert s.nodes["b"].stage is NodeStage.PREFLIGHT and s.nodes["b"].remediation["reason_codes"] == ["x"]
    with pytest.raises(IllegalTransition, match="gated twice"):
        fold(events + [gated, {"type": "gated", "batch": 1, "nodes": {"b": {"result": "pass"}}}])
    retested = events + [gated, {"type": "retest", "batch": 1, "nodes": {"b": {"outcome": OUTCOME}}},
                         nodes("preflight", "b", bundle="z")]
    assert fold(retested).nodes["b"].remediation is None
    with pytest.raises(IllegalTransition, match="one retest"):
        fold(retested + [{"type": "gated", "batch": 1, "nodes": {"b": {"result": "remediate"}}}])
