"""The circuit breaker: a storm of alerts trips it (journaled, audited, paged, shown by `gpufleet pool`),
automatic quarantine stops while it is open, and only `gpufleet ops breaker reset --reason` closes it.

Pure cases on `breaker.admit`; the storm end to end through the webhook's `handle` on the rolled-out
simulated crash40 stack (40 nodes, all in partition train; breaker defaults: 20% of a partition,
10% of the fleet, 60 minutes)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from gpufleet.daytwo import breaker
from gpufleet.daytwo.state import DayTwoState, fold
from gpufleet.ops.actions import handle
from gpufleet.ops.webhook import Notification
from gpufleet.project import load_project
from tests.daytwo.fleet import STACK, daytwo_events, gpufleet, pool_doc, state_dir
from tests.ops.alertmanager import alert, notification

NOW = datetime(2026, 12, 2, 1, 0, tzinfo=timezone.utc)
POLICY = breaker.Policy(partition_share=0.2, fleet_share=0.5, window=timedelta(minutes=60))
PARTITIONS = {**{f"t{i:02d}": "train" for i in range(80)}, **{f"d{i}": "debug" for i in range(5)}}


def _quarantined(slot: str, minutes_ago: float, source: str = "alert", seq: int = 1) -> dict:
    return {"type": "pool", "seq": seq, "at": (NOW - timedelta(minutes=minutes_ago)).isoformat(), "slot": slot,
            "action": "quarantine", "who": "alertmanager", "why": "alert", "source": source}


def test_a_storm_takes_nodes_up_to_the_limit_then_trips() -> None:
    storm = [f"t{i:02d}" for i in range(32)]  # 40% of train
    v = breaker.admit(DayTwoState(), PARTITIONS, POLICY, NOW, decided=storm[:20], wanted=storm)
    assert v.allowed == storm[:16] and v.held == storm[16:20]  # 20% of 80
    assert v.trip is not None and (v.trip.scope, v.trip.wanted, v.trip.limit) == ("partition train", 32, 16)
    assert "gpufleet ops breaker reset -s crash40" in v.trip.reason(POLICY, "crash40")


def test_a_single_fatal_fault_in_a_small_partition_is_not_a_storm() -> None:
    v = breaker.admit(DayTwoState(), PARTITIONS, POLICY, NOW, decided=["d3"], wanted=["d3"])
    assert v.allowed == ["d3"] and v.trip is None
    two = breaker.admit(DayTwoState(), PARTITIONS, POLICY, NOW, decided=["d3"], wanted=["d3", "d4"])
    assert two.allowed == ["d3"] and two.trip is not None and two.trip.scope == "partition debug"


def test_the_window_slides_and_counts_only_automatic_take_outs() -> None:
    old = [_quarantined(f"t{i:02d}", 90, seq=i + 1) for i in range(16)]  # before the window
    hand = [_quarantined(f"t{i:02d}", 5, "operator", seq=20 + i) for i in range(16, 32)]  # by a person
    recent = [_quarantined(f"t{i:02d}", 10, seq=40 + i) for i in range(40, 55)]  # 15 in the window
    state = fold(old + hand + recent)
    assert breaker.taken(state, NOW, POLICY.window) == {f"t{i:02d}" for i in range(40, 55)}
    v = breaker.admit(state, PARTITIONS, POLICY, NOW, decided=["t60", "t61"], wanted=["t60", "t61"])
    assert v.allowed == ["t60"] and v.held == ["t61"] and v.trip is not None and v.trip.wanted == 17


def test_an_open_breaker_holds_everything_until_a_reset_and_the_window_restarts_there() -> None:
    events = [_quarantined(f"t{i:02d}", 10, seq=i + 1) for i in range(16)]
    events.append({**breaker.Trip("partition train", 17, 16, ()).event(POLICY, "s"), "seq": 20,
                   "at": (NOW - timedelta(minutes=9)).isoformat()})
    state = fold(events)
    v = breaker.admit(state, PARTITIONS, POLICY, NOW, decided=["d1"], wanted=["d1"])
    assert v.was_open and v.allowed == [] and v.held == ["d1"] and v.trip is None
    state = fold(events + [{"type": "breaker", "to": "reset", "seq": 21, "who": "alice", "why": "rule fixed",
                            "at": (NOW - timedelta(minutes=1)).isoformat()}])
    assert not state.breaker.open and breaker.taken(state, NOW, POLICY.window) == set()
    assert breaker.admit(state, PARTITIONS, POLICY, NOW, decided=["t70"], wanted=["t70"]).allowed == ["t70"]


def _audit(project) -> list[dict]:
    return [json.loads(line) for line in (state_dir(project) / "audit.jsonl").read_text().splitlines()]


def _note(*slots: str, name: str = "GpuXidFatal") -> Notification:
    return Notification.model_validate(notification(*(alert(s, name) for s in slots)))


def test_a_storm_of_alerts_trips_the_breaker_which_only_a_reset_with_a_reason_closes(fleet) -> None:
    stack = fleet / "stacks" / f"Pulumi.{STACK}.yaml"  # a budget wide enough that the breaker is what holds
    stack.write_text(stack.read_text().replace("config:\n", "config:\n  gpufleet:ops:\n    maxQuarantineShare: 0.5\n", 1))
    project = load_project(fleet)
    admitted = sorted(s for s, n in pool_doc(fleet)["nodes"].items() if n["state"] == "admitted")
    storm = admitted[:16]  # 40% of the fleet at once
    first = handle(_note(*storm[:10]), STACK, project=project)
    assert len(first.quarantine) == 4  # the fleet's 10%, then held: the budget alone would have taken 10
    assert any(p.alertname == "CircuitBreaker" and "gpufleet ops breaker reset" in p.why for p in first.page)
    trips = [e for e in daytwo_events(fleet) if e["type"] == "breaker"]
    assert [(t["to"], t["scope"], t["limit"]) for t in trips] == [("tripped", "partition train", 8)]
    assert [a["what"] for a in _audit(fleet)].count("breaker trip") == 1
    shown = gpufleet(fleet, "pool", "-s", STACK)
    assert shown.exit_code == 0 and "circuit breaker OPEN" in shown.output, shown.output
    assert json.loads(gpufleet(fleet, "pool", "-s", STACK, "--json").output)["breaker"]["open"] is True

    later = handle(_note(admitted[30], name="GpuRowRemapFailure"), STACK, project=project)  # a real fault, later
    assert later.quarantine == [] and [p.slot for p in later.page] == [admitted[30]]  # within the budget
    assert "circuit breaker OPEN" in later.page[0].why
    assert pool_doc(fleet)["nodes"][admitted[30]]["state"] == "admitted"
    assert gpufleet(fleet, "ops", "breaker", "status", "-s", STACK).exit_code == 3

    refused = gpufleet(fleet, "ops", "breaker", "reset", "-s", STACK)
    assert refused.exit_code == 2 and "needs a reason" in refused.output
    done = gpufleet(fleet, "ops", "breaker", "reset", "-s", STACK, "--reason", "the bad rule is fixed")
    assert done.exit_code == 0, done.output
    resets = [a for a in _audit(fleet) if a["what"] == "breaker reset"]
    assert [(a["who"], a["why"]) for a in resets] == [("alice@ops", "the bad rule is fixed")]
    again = gpufleet(fleet, "ops", "breaker", "reset", "-s", STACK, "--reason", "twice")
    assert again.exit_code == 2 and "nothing to reset" in again.output

    after = handle(_note(admitted[30], name="GpuRowRemapFailure"), STACK, project=project)
    assert [q.slot for q in after.quarantine] == [admitted[30]]  # the window restarted at the reset
