"""The spare budget across a journal cut by hand (issue 21 item 6): every instance the provider
launches carries its replacement generation as a tag, and on resume the spares used are the larger
of the journal's count and the tags' per slot, so a resumed rollout never buys past its budget.

Observed before: a rollout bought every spare, the journal was cut to show one of them, and the
resumed rollout bought the spares again (7 replacements on a budget of 4) while its report said
"spares used 4/4"."""

from __future__ import annotations

import io
import json
import shutil

import pytest

from gpufleet.ports import Instance
from gpufleet.rollout import reconcile
from gpufleet.rollout.display import PlainDisplay, log_lines
from gpufleet.rollout.state import apply, fold

from tests.rollout.e2e import journal_state, ledger_events, rollout
from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator, small_spec
from tests.rollout.project import make_project

STACK = "spares16"  # tests/fixtures/stacks: 4 spares, 6 slots failing, one of them twice


def _events(*nodes: tuple[str, int, str]) -> list[dict]:
    """A journal: batch 1 running, each (slot, replacements, instance) provisioned, then failed at
    configure and replaced that often; each slot ends provisioned on instance `<instance>-<replacements>`."""
    out: list[dict] = [{"type": "rollout", "to": "started"}, {"type": "batch", "batch": 1, "to": "running"}]

    def move(slot: str, to: str, **data) -> None:
        out.append({"type": "nodes", "batch": 1, "to": to, "nodes": {slot: data}})
    for slot, replaced, iid in nodes:
        move(slot, "provisioning")
        move(slot, "provisioned", instance_id=f"{iid}-0", private_ip="10.0.0.1")
        for n in range(1, replaced + 1):
            _fail_and_replace(move, slot, f"{iid}-{n}")
    return out


def _fail_and_replace(move, slot: str, new: str) -> None:
    move(slot, "configuring")
    move(slot, "configured")
    move(slot, "quarantined", reason_code="configure-failed")
    move(slot, "replaced")
    move(slot, "provisioned", instance_id=new, private_ip="10.0.0.2")


def _inst(slot: str, iid: str, generation: int, batch: int = 1) -> Instance:
    return Instance(slot=slot, instance_id=iid, batch=batch, block=0, private_ip="10.0.0.9", generation=generation)


def test_spares_are_per_slot_the_larger_of_the_journal_and_the_tags():
    state = fold(_events(("a", 1, "i-a"), ("b", 0, "i-b"), ("c", 2, "i-c")))
    assert state.spares_used == 3
    inventory = {"a": _inst("a", "i-a-1", 3),   # the tags know two more than the journal
                 "b": _inst("b", "i-b-0", 0),
                 "c": _inst("c", "i-c-2", 1),   # a tag below the journal (hand-edited): the journal rules
                 "d": _inst("d", "i-d-9", 2, batch=2)}  # a slot the cut journal never reached
    found = reconcile.differences(state, inventory, {})
    assert found == {}
    sp = reconcile.spares(state, inventory, found, budget=8)
    assert sp == {"journal": 3, "provider": 6, "used": 3 + 0 + 2 + 2, "budget": 8,
                  "slots": {"a": {"journal": 1, "provider": 3}, "d": {"journal": 0, "provider": 2}}}
    apply(state, {"type": "reconciled", "nodes": found, "spares": sp})
    assert state.spares_used == sp["used"] == 7 and state.replacements_of("a") == 3
    assert state.replacements_of("c") == 2 and state.replacements_of("d") == 2
    # replacements the journal records later count on top of the floor, never twice
    def move(slot: str, to: str, **data) -> None:
        apply(state, {"type": "nodes", "batch": 1, "to": to, "nodes": {slot: data}})
    _fail_and_replace(move, "a", "i-a-2")
    assert state.replacements_of("a") == 3 and state.spares_used == 7  # 2 in the journal: the tag's 3 rules
    for n in (3, 4):
        _fail_and_replace(move, "a", f"i-a-{n}")
    assert state.replacements_of("a") == 4 and state.spares_used == 4 + 0 + 2 + 2


def test_an_adopted_slot_counts_its_tag_and_untagged_instances_leave_the_journal_alone():
    state = fold(_events(("a", 0, "i-a"), ("b", 0, "i-b")))
    # a: the provider runs its third instance; b: a newer instance launched before tags existed
    inventory = {"a": _inst("a", "i-a-new", 2), "b": _inst("b", "i-b-new", 0)}
    found = reconcile.differences(state, inventory, {})
    assert {s: (d["action"], d["provider_generation"]) for s, d in found.items()} == {"a": ("adopt", 2),
                                                                                      "b": ("adopt", 0)}
    sp = reconcile.spares(state, inventory, found, budget=4)
    assert sp == {"journal": 0, "provider": 2, "used": 3, "budget": 4, "slots": {"a": {"journal": 0, "provider": 2}}}
    apply(state, {"type": "reconciled", "nodes": found, "spares": sp})
    assert state.spares_used == 3  # a: its tag's 2; b: the one spare adopting it proves
    untagged = fold(_events(("a", 1, "i-a")))
    assert reconcile.spares(untagged, {"a": _inst("a", "i-a-1", 0)}, {}, budget=4) is None


def test_a_resumed_rollout_over_fakes_never_buys_past_the_spares(tmp_path):
    """The orchestrator's own accounting: 3 spares, 5 first instances failing; the journal cut after the
    first replacement; resumed, the fake cloud is asked for no replacement beyond the 3 it made."""
    # batches of 3, 4, 4 and 1 nodes: at most half of any batch fails (maxFailureRate 0.5)
    faulty = ["tst-b0000-n00000", "tst-b0004-n00004", "tst-b0006-n00006", "tst-b0008-n00008", "tst-b0009-n00009"]
    spec = small_spec(maxFailureRate=0.5)
    cloud = FakeCloud(faults={s: frozenset({"nvlink_down"}) for s in faulty})
    first = orchestrator(tmp_path, cloud, spec).run()
    budget = first.state.spares_used
    replaced = [x for x in cloud.ledger if x[0] in ("stop-and-report", "terminate")]
    assert budget == len(replaced) == 3 and first.spares_exhausted
    path = tmp_path / "state" / "journal.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    cut = next(i for i, x in enumerate(lines) if json.loads(x).get("to") == "replaced") + 1
    path.write_text("".join(lines[:cut]))
    shown = io.StringIO()
    o = orchestrator(tmp_path, cloud, spec)
    assert o.state.spares_used == 1
    o.journal.listeners.append(PlainDisplay(o.plan, lambda: 0.0, shown))
    out = o.run()
    assert [x for x in cloud.ledger if x[0] in ("stop-and-report", "terminate")] == replaced  # none bought again
    assert out.state.spares_used == 3 and out.short == ["tst-b0008-n00008", "tst-b0009-n00009"]
    assert "gpufleet: reconcile spares journal=1 provider=3 used=3 budget=3" in shown.getvalue()


@pytest.mark.slow
def test_a_journal_cut_after_the_first_of_four_replacements_buys_no_more_on_the_simulator(tmp_path):
    """Through `gpufleet rollout` and the simulator's own world: the ledger, not the journal, counts
    what the cloud launched."""
    project = make_project(tmp_path / "p")
    first = rollout(project, STACK)
    assert first.exit_code == 3, first.output  # short: more slots failed than there are spares
    launched = [e for e in ledger_events(project, STACK) if e["event"] == "launch" and e["by"] == "replace"]
    budget = journal_state(project, STACK).spares_used
    assert len(launched) == budget == 4 and len({e["slot"] for e in launched}) == 3  # one slot twice
    # the simulator's instances carry the tag: each slot's running instance names its replacements
    current = {}
    for e in ledger_events(project, STACK):
        if e["event"] == "launch":
            current[e["slot"]] = e["tag_generation"]
    assert {s: g for s, g in current.items() if g} == {
        s: sum(1 for e in launched if e["slot"] == s) for s in {e["slot"] for e in launched}}

    cut = tmp_path / "cut"
    shutil.copytree(project, cut, symlinks=True)
    path = cut / ".gpufleet" / STACK / "journal.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, x in enumerate(lines) if json.loads(x).get("to") == "replaced") + 1
    path.write_text("".join(lines[:at]))
    assert journal_state(cut, STACK).spares_used == 1
    resumed = rollout(cut, STACK, "--resume")
    assert resumed.exit_code == 3, resumed.output
    assert "spares used 4/4" in resumed.output
    again = [e for e in ledger_events(cut, STACK) if e["event"] == "launch" and e["by"] == "replace"]
    assert again == launched  # the cloud launched no replacement after the resume
    state = journal_state(cut, STACK)
    assert state.spares_used == 4
    rec = [json.loads(x) for x in path.read_text().splitlines() if json.loads(x)["type"] == "reconciled"]
    assert rec and rec[0]["spares"]["used"] == 4 and rec[0]["spares"]["provider"] == 4
    # the line the live view prints for it (the CLI's view writes to the process's stdout)
    assert any(x.startswith("gpufleet: reconcile spares journal=1 provider=4 used=4 budget=4 ")
               for x in log_lines(rec[0], state))
    report = json.loads((cut / "reports" / STACK / "rollout.json").read_text())
    assert report["spares_used"] == 4
