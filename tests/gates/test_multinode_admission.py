"""Multi-node isolation folded into admission records (admission.with_multinode / apply_isolation)."""

from __future__ import annotations

import json

from gpufleet.gates import bundle as B, synth
from gpufleet.gates.admission import (MULTINODE_CHECK, AdmissionRecord, BatchNetworkResult, apply_isolation,
                                   with_multinode)
from gpufleet.gates.evaluate import gate_cohort
from gpufleet.gates.isolation import isolate, node_isolation
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import Action, Verdict

FLOOR = 330.0
SETTINGS = GateSettings(expected_versions=synth.DEFAULT_VERSIONS)


class FakeRounds:
    """A round runner over a modelled fabric: a group is slow when it holds the bad node or has the
    faulty link between ring neighbours (a pair is a ring of two)."""

    def __init__(self, bad: set[str], links: set[tuple[str, str]]) -> None:
        self.bad, self.links, self.calls = bad, {tuple(sorted(p)) for p in links}, 0

    def __call__(self, groups):
        self.calls += 1
        out = []
        for g in groups:
            adj = {tuple(sorted((g[i], g[(i + 1) % len(g)]))) for i in range(len(g))}
            slow = bool(set(g) & self.bad) or bool(adj & self.links)
            out.append(118.5 if slow else 401.25 + len(g) / 100)
        return out


def _records(slots: list[str]) -> list[AdmissionRecord]:
    bundles = []
    for s in slots:
        spec = synth.NodeSpec(slot=s)
        files = synth.node_files(spec)
        bundles.append(B.Bundle(path=s, manifest=synth.manifest(spec, files), files=files))
    return gate_cohort(bundles, SETTINGS)


def _batch():
    slots = [f"n{i:02d}" for i in range(12)]
    records = _records(slots)
    assert all(r.verdict is Verdict.PASS for r in records)  # preflight clean: all go to the network gates
    bad, link = "n05", ("n08", "n09")  # n08+n09 are paired in round 1
    runner = FakeRounds({bad}, {link})
    result = isolate(slots, ["a0", "a1"], runner, FLOOR)
    return slots, records, result, bad, link


def test_isolation_outcome_folded_into_records():
    slots, records, result, bad, link = _batch()
    assert result.quarantined == {bad: "efa-pair-fail"} and result.link_faults == (link,)
    out, batch = apply_isolation(records, result)
    by = {r.slot: r for r in out}

    # the bad node: QUARANTINE with the isolation's code, its failing pairs recorded
    q = by[bad]
    assert q.verdict is Verdict.QUARANTINE and q.action is Action.QUARANTINE and not q.admitted
    assert q.reason_codes == ("efa-pair-fail",)
    assert q.busbw.multi_node_gbs and all(v == 118.5 for k, v in q.busbw.multi_node_gbs.items()
                                          if not k.startswith("ring:"))
    assert len([k for k in q.busbw.multi_node_gbs if not k.startswith("ring:")]) >= 2  # >= 2 good partners
    mcheck = [c for c in q.checks if c.check_id == MULTINODE_CHECK]
    assert len(mcheck) == 1 and mcheck[0].verdict is Verdict.QUARANTINE and mcheck[0].reason_code == "efa-pair-fail"

    # healthy nodes (including both ends of the faulty link): PASS, with their pair and ring figures
    for s in slots:
        if s == bad:
            continue
        r = by[s]
        assert r.verdict is Verdict.PASS and r.action is Action.ADMIT and r.reason_codes == (), s
        pairs = {k: v for k, v in r.busbw.multi_node_gbs.items() if not k.startswith("ring:")}
        rings = {k: v for k, v in r.busbw.multi_node_gbs.items() if k.startswith("ring:")}
        assert pairs and rings and all(v >= FLOOR for v in rings.values()), s
        assert r.busbw.intra_node_gbs is not None  # preflight figures kept
        assert [c.check_id for c in r.checks][:-1] == [c.check_id for c in records[slots.index(s)].checks]
    # the link's ends carry the slow pair figure against each other, yet stay admitted
    assert by["n08"].busbw.multi_node_gbs["n09"] == 118.5 and by["n09"].busbw.multi_node_gbs["n08"] == 118.5
    assert any(v >= FLOOR for k, v in by["n08"].busbw.multi_node_gbs.items() if k not in ("n09",))

    # the link fault is batch-level, for escalation, not a node quarantine
    assert isinstance(batch, BatchNetworkResult)
    assert batch.link_faults == (link,) and batch.quarantined == {bad: "efa-pair-fail"}
    assert set(batch.quarantined).isdisjoint(link) and batch.runs == result.runs
    # records still serialise (journal / annotation) and round-trip
    for r in out:
        assert AdmissionRecord.model_validate_json(r.model_dump_json()) == r
    json.loads(by["n08"].model_dump_json())


def test_with_multinode_is_pure_idempotent_and_worst_of():
    slots, records, result, bad, _ = _batch()
    rec = records[slots.index(bad)]
    iso = node_isolation(result, bad)
    once = with_multinode(rec, iso)
    assert rec.verdict is Verdict.PASS and not rec.busbw.multi_node_gbs  # input untouched
    assert with_multinode(once, iso) == once  # re-applying replaces its own check
    # a node already quarantined by preflight keeps its codes first and gains the network code
    pre = rec.model_copy(update={"verdict": Verdict.QUARANTINE, "action": Action.QUARANTINE,
                                 "reason_codes": ("xid-79",), "message": "Xid 79"})
    both = with_multinode(pre, iso)
    assert both.reason_codes == ("xid-79", "efa-pair-fail") and both.verdict is Verdict.QUARANTINE
    # a PASS from the network never improves a worse preflight verdict
    good = node_isolation(result, "n00")
    warn = records[0].model_copy(update={"verdict": Verdict.WARN, "reason_codes": ("persistence-off",)})
    assert with_multinode(warn, good).verdict is Verdict.WARN
    assert with_multinode(warn, good).reason_codes == ("persistence-off",)


def test_unresolved_node_goes_to_retest():
    # two nodes, no admitted partner, the pair fails: nobody is blamed, both unresolved -> retest
    records = _records(["x", "y"])
    result = isolate(["x", "y"], [], FakeRounds({"x"}, set()), FLOOR)
    assert not result.quarantined and set(result.unresolved) == {"x", "y"}
    out, batch = apply_isolation(records, result)
    assert all(r.verdict is Verdict.REMEDIATE and r.action is Action.RETEST for r in out)
    assert all(r.reason_codes == ("multinode-unresolved",) for r in out)
    assert batch.unresolved == ("x", "y")
