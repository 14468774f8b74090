"""The day-two state and its one fold: every event of the day-two journal (`gpufleet.daytwo.journal`)
folded into one `DayTwoState`: the blacklist lifecycle, patrols, upgrades and their reimages.

Why one fold in a module of its own: the journal (the I/O: append, read, the store) and every
operation (lifecycle, patrol, upgrade) read the same state, so the state and its transitions sit
below all of them and import nothing of day two; a journal replayed after a crash and a journal
appended to live go through the same `apply`. State is `fold(events)`, nothing else.

Events (the journal adds seq, at, stack, version, and the ports' clock):

    {"type": "pool", "slot": ..., "action": "blacklist" | "clear" | "quarantine" | "readmit", "who": ..., "why": ...,
     "reason_code": ..., "state": <pool state after>, "failures": n, "source": "operator" | "patrol"}
    {"type": "replace", "slot": ..., "to": "requested", "old_instance": ..., "who": ..., "why": ...}
    {"type": "replace", "slot": ..., "to": "provisioned", "instance_id": ..., "private_ip": ...}
    {"type": "replace", "slot": ..., "to": "decided", "action": "admit" | "quarantine", "record": ..., ...}
    {"type": "replace", "slot": ..., "to": "done", "state": <pool state after>}
    {"type": "patrol", "who": ..., "checked": [...], "skipped_busy": [...], "failed": {slot: {...}}}
    {"type": "upgrade", "to": "started", "target_digest": ..., "target_bom": <snapshot path>,
     "previous": {digest: <snapshot path>}, "method": "inplace" | "reimage", "target_ami": <AMI id or null>,
     "groups": [{"number": n, "blocks": [...], "slots": [...]}]}
    {"type": "upgrade", "to": "group-started", "group": n,
     "previous": {slot: {"bom_digest": ..., "ami": ..., "record": {...}}}}
    {"type": "upgrade", "to": "group-drained", "group": n}
    {"type": "upgrade", "to": "reimage-requested", "group": n, "purpose": "upgrade" | "rollback", "ami": ...,
     "slots": [...], "from": {slot: instance id}}
    {"type": "upgrade", "to": "reimaged", "group": n, "purpose": ..., "ami": ..., "instances": {slot: instance id},
     "seconds": s}
    {"type": "upgrade", "to": "group-gated", "group": n, "result": "pass" | "fail", "records": {slot: record},
     "failed": {...}, "before": {...}, "after": {...}, "reason": ..., "seconds": s}
    {"type": "upgrade", "to": "group-admitted", "group": n}
    {"type": "upgrade", "to": "group-rolled-back", "group": n, "records": {slot: record}, "failed": {...}}
    {"type": "upgrade", "to": "halted" | "finished" | "rollback-started" | "rolled-back", "reason": ...}
    {"type": "breaker", "to": "tripped", "scope": "partition train" | "fleet", "wanted": n, "limit": n,
     "slots": [...], "reason": ...}
    {"type": "breaker", "to": "reset", "who": ..., "why": ...}
    {"type": "remediation", "slot": ..., "to": "started", "code": ..., "steps": [...], "who": ..., "why": ...}
    {"type": "remediation", "slot": ..., "to": "step", "step": ..., "result": "cured" | "failed" | "for-service",
     "detail": ..., "seconds": s}
    {"type": "remediation", "slot": ..., "to": "finished" | "stopped", "state": <pool state after>, "reason": ...}

Why the previous version per node in an upgrade's "group-started": it is written before any node
of the group is drained, so a crash at any later point still knows what to roll back to (its BOM
and its image). A reimage is journaled as an intent before the provider is asked and as done
after; the group's stage does not move (a reimage happens inside "drained" on the way up and
inside a rollback on the way back), and the provider is idempotent by image, so a crash between
the two only repeats a call that launches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from gpufleet.errors import GpufleetError


class DayTwoTransitionError(GpufleetError):
    """A day-two event the state forbids (a bug, or a journal edited by hand). Exit code 1."""


@dataclass
class PoolChange:
    seq: int
    at: str
    slot: str
    action: str
    who: str
    why: str
    source: str = "operator"
    state: str | None = None
    reason_code: str | None = None


@dataclass
class ReplaceOp:
    """One slot replacement in flight: requested -> provisioned -> decided -> done."""

    slot: str
    stage: str
    who: str
    why: str
    old_instance: str | None = None
    instance_id: str | None = None
    private_ip: str | None = None
    decision: dict[str, Any] | None = None


REPLACE_STAGES = {"requested": {"provisioned"}, "provisioned": {"decided"}, "decided": {"done"}}


GROUP_NEXT = {"planned": {"started"}, "started": {"drained", "halted"}, "drained": {"gated"},
              "gated": {"admitted", "rolled-back"}, "admitted": {"rolled-back"}, "rolled-back": set(), "halted": set()}


@dataclass
class GroupState:
    number: int
    blocks: list[int]
    slots: list[str]
    stage: str = "planned"
    previous: dict[str, dict[str, Any]] = field(default_factory=dict)
    result: str | None = None
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, Any] = field(default_factory=dict)
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    seconds: float = 0.0
    rolled_back: bool = False
    reimages: dict[str, dict[str, Any]] = field(default_factory=dict)  # "purpose:ami" -> {slots, from, instances}

    def reimage_requested(self, purpose: str, ami: str) -> bool:
        return f"{purpose}:{ami}" in self.reimages

    def reimaged(self, purpose: str, ami: str) -> bool:
        return "instances" in self.reimages.get(f"{purpose}:{ami}", {})

    def reimaged_slots(self) -> set[str]:
        return {s for r in self.reimages.values() for s in r.get("instances", {})}


@dataclass
class UpgradeState:
    target_digest: str
    target_bom: str
    previous: dict[str, str]  # digest -> snapshot path of each previous BOM
    groups: dict[int, GroupState]
    stage: str = "running"  # running | halted | finished | rolling-back | rolled-back
    reason: str = ""
    started_clock: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)  # earlier upgrades of the stack, summarised
    method: str = "inplace"  # inplace | reimage (the nodes whose AMI is not target_ami are replaced)
    target_ami: str | None = None

    @property
    def active(self) -> bool:
        return self.stage in ("running", "rolling-back")


@dataclass
class BreakerState:
    """The circuit breaker (`gpufleet.daytwo.breaker`): open from a trip until a person resets it."""

    open: bool = False
    tripped: dict[str, Any] | None = None  # the latest trip event
    reset_at: str | None = None  # the latest reset's time: the window counts only what came after
    history: list[dict[str, Any]] = field(default_factory=list)  # every trip and reset, in order


@dataclass
class DayTwoState:
    last_seq: int = 0
    changes: list[PoolChange] = field(default_factory=list)
    replacing: dict[str, ReplaceOp] = field(default_factory=dict)  # open replacements by slot
    replaced: list[ReplaceOp] = field(default_factory=list)  # finished ones, in order
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # slot -> record of a day-two admission
    instances: dict[str, str] = field(default_factory=dict)  # slot -> instance id after a replacement
    patrols: list[dict[str, Any]] = field(default_factory=list)  # patrol summaries (no node lists)
    upgrade: UpgradeState | None = None  # the latest upgrade (earlier ones summarised in its history)
    clock: str | None = None  # the ports' clock at the latest event (the simulator's virtual time resumes from it)
    breaker: BreakerState = field(default_factory=BreakerState)
    remediating: dict[str, dict[str, Any]] = field(default_factory=dict)  # slot -> the ladder climbing now
    remediations: list[dict[str, Any]] = field(default_factory=list)  # finished or stopped ladders, in order


def _pool(state: DayTwoState, e: Mapping[str, Any]) -> None:
    if e.get("action") not in ("blacklist", "clear", "quarantine", "readmit"):
        raise DayTwoTransitionError(f"unknown pool action {e.get('action')!r}")
    if not e.get("who") or not e.get("why"):
        raise DayTwoTransitionError(f"{e.get('slot')}: a pool change must say who asked and why")
    state.changes.append(PoolChange(seq=int(e.get("seq", 0)), at=str(e.get("at", "")), slot=e["slot"],
                                    action=e["action"], who=e["who"], why=e["why"],
                                    source=e.get("source", "operator"), state=e.get("state"),
                                    reason_code=e.get("reason_code")))


def _replace(state: DayTwoState, e: Mapping[str, Any]) -> None:
    slot, to = e["slot"], e["to"]
    op = state.replacing.get(slot)
    if to == "requested":
        if op is not None:
            raise DayTwoTransitionError(f"{slot}: a replacement is already in flight ({op.stage})")
        if not e.get("who") or not e.get("why"):
            raise DayTwoTransitionError(f"{slot}: a replacement must say who asked and why")
        state.replacing[slot] = ReplaceOp(slot=slot, stage="requested", who=e["who"], why=e["why"],
                                          old_instance=e.get("old_instance"))
        return
    if op is None or to not in REPLACE_STAGES.get(op.stage, set()):
        raise DayTwoTransitionError(f"{slot}: replacement {op.stage if op else 'none'} -> {to} is not allowed")
    op.stage = to
    if to == "provisioned":
        if not e.get("instance_id"):
            raise DayTwoTransitionError(f"{slot}: provisioned without an instance id")
        op.instance_id, op.private_ip = e["instance_id"], e.get("private_ip")
        state.instances[slot] = e["instance_id"]
    elif to == "decided":
        if e.get("action") not in ("admit", "quarantine"):
            raise DayTwoTransitionError(f"{slot}: unknown decision {e.get('action')!r}")
        op.decision = {k: e.get(k) for k in ("action", "record", "record_digest", "reason_code", "reason")}
        if e["action"] == "admit":
            if not e.get("record"):
                raise DayTwoTransitionError(f"{slot}: admitted without an admission record")
            state.records[slot] = e["record"]
    elif to == "done":
        state.replaced.append(state.replacing.pop(slot))


def _patrol(state: DayTwoState, e: Mapping[str, Any]) -> None:
    state.patrols.append({"seq": e.get("seq"), "at": e.get("at"), "who": e.get("who"),
                          "checked": len(e.get("checked", ())), "skipped_busy": len(e.get("skipped_busy", ())),
                          "failed": dict(e.get("failed") or {})})


def _upgrade(state: DayTwoState, e: Mapping[str, Any]) -> None:
    """The upgrade's stages and its groups' (`GROUP_NEXT`); an admitted or rolled-back group's
    records become the nodes' admission records."""
    to = e.get("to")
    up: UpgradeState | None = state.upgrade
    if to == "started":
        if up is not None and up.active:
            raise DayTwoTransitionError(f"an upgrade to {up.target_digest} is still {up.stage}")
        history = (up.history + [{"target_digest": up.target_digest, "stage": up.stage, "reason": up.reason}]
                   if up is not None else [])
        state.upgrade = UpgradeState(target_digest=e["target_digest"], target_bom=e["target_bom"],
                                     previous=dict(e.get("previous") or {}), started_clock=e.get("clock"),
                                     groups={int(g["number"]): GroupState(int(g["number"]), list(g["blocks"]),
                                                                          list(g["slots"])) for g in e["groups"]},
                                     history=history, method=e.get("method", "inplace"),
                                     target_ami=e.get("target_ami"))
        return
    if up is None:
        raise DayTwoTransitionError(f"upgrade event {to!r} without a started upgrade")
    if to in ("halted", "finished", "rollback-started", "rolled-back"):
        allowed = {"halted": ("running",), "finished": ("running",), "rollback-started": ("running", "halted",
                                                                                            "finished"),
                   "rolled-back": ("rolling-back",)}[to]
        if up.stage not in allowed:
            raise DayTwoTransitionError(f"upgrade {up.stage} -> {to} is not allowed")
        up.stage = {"rollback-started": "rolling-back"}.get(to, to)
        up.reason = e.get("reason", up.reason)
        return
    g = up.groups.get(int(e["group"]))
    if g is None:
        raise DayTwoTransitionError(f"upgrade group {e['group']} is not in the plan")
    if to in ("reimage-requested", "reimaged"):
        _reimage(g, to, e)
        return
    stage = to.removeprefix("group-") if isinstance(to, str) else ""
    if stage not in GROUP_NEXT.get(g.stage, set()):
        raise DayTwoTransitionError(f"upgrade group {g.number}: {g.stage} -> {stage} is not allowed")
    g.stage = stage
    if stage == "started":
        g.previous = dict(e["previous"])
    elif stage == "halted":
        g.reason = e.get("reason", "")
    elif stage == "gated":
        g.result, g.reason = e["result"], e.get("reason", "")
        g.records, g.failed = dict(e.get("records") or {}), dict(e.get("failed") or {})
        g.before, g.after = dict(e.get("before") or {}), dict(e.get("after") or {})
        g.seconds += float(e.get("seconds") or 0.0)
    elif stage == "admitted":
        state.records.update(g.records)  # the nodes' admission records are the upgraded ones now
    elif stage == "rolled-back":
        g.rolled_back = True
        g.records, g.failed = dict(e.get("records") or {}), dict(e.get("failed") or {})
        g.seconds += float(e.get("seconds") or 0.0)
        state.records.update(g.records)


REIMAGE_STAGES = {"upgrade": ("drained",), "rollback": ("gated", "admitted")}


def _reimage(g: GroupState, to: str, e: Mapping[str, Any]) -> None:
    """A reimage on the way up happens while the group is drained; one on the way back while it is
    rolled back (after failed gates, or from `--rollback` of an admitted group)."""
    purpose = e.get("purpose")
    if purpose not in REIMAGE_STAGES or g.stage not in REIMAGE_STAGES[purpose]:
        raise DayTwoTransitionError(f"upgrade group {g.number}: a {purpose} reimage while {g.stage} is not allowed")
    key = f"{purpose}:{e['ami']}"
    if to == "reimage-requested":
        if key in g.reimages:
            raise DayTwoTransitionError(f"upgrade group {g.number}: a {purpose} reimage to {e['ami']} was requested "
                                        "already")
        g.reimages[key] = {"slots": list(e["slots"]), "from": dict(e.get("from") or {})}
        return
    asked = g.reimages.get(key)
    if asked is None:
        raise DayTwoTransitionError(f"upgrade group {g.number}: reimaged to {e['ami']} without a request for it")
    asked["instances"] = dict(e["instances"])
    g.seconds += float(e.get("seconds") or 0.0)


def _breaker(state: DayTwoState, e: Mapping[str, Any]) -> None:
    """A trip opens a closed breaker; only a reset that says who and why closes it."""
    b, to = state.breaker, e.get("to")
    if to == "tripped":
        if b.open:
            raise DayTwoTransitionError("the circuit breaker is open already")
        b.open, b.tripped = True, dict(e)
    elif to == "reset":
        if not b.open:
            raise DayTwoTransitionError("the circuit breaker is closed: nothing to reset")
        if not e.get("who") or not e.get("why"):
            raise DayTwoTransitionError("a breaker reset must say who asked and why")
        b.open, b.reset_at = False, str(e.get("at", "")) or None
    else:
        raise DayTwoTransitionError(f"unknown breaker transition {to!r}")
    b.history.append({k: e.get(k) for k in ("seq", "at", "to", "scope", "reason", "who", "why")})


def _remediation(state: DayTwoState, e: Mapping[str, Any]) -> None:
    """A ladder: started (who, why, its steps) -> a step at a time, each from the ladder, in order -> finished or stopped."""
    slot, to = e.get("slot"), e.get("to")
    run = state.remediating.get(str(slot))
    if to == "started":
        if run is not None:
            raise DayTwoTransitionError(f"{slot}: a remediation ladder is already climbing")
        if not e.get("who") or not e.get("why") or not e.get("steps"):
            raise DayTwoTransitionError(f"{slot}: a remediation must say who asked, why, and its steps")
        state.remediating[str(slot)] = {"slot": slot, "code": e.get("code"), "steps": list(e["steps"]), "done": [],
                                        "who": e["who"], "why": e["why"], "at": e.get("at")}
        return
    if run is None:
        raise DayTwoTransitionError(f"{slot}: remediation {to!r} without a ladder started")
    if to == "step":
        left = run["steps"][len(run["done"]):]
        if not left or e.get("step") != left[0]:
            raise DayTwoTransitionError(f"{slot}: remediation step {e.get('step')!r} is not the ladder's next "
                                        f"({left[0] if left else 'none left'})")
        run["done"].append({"step": e["step"], "result": e.get("result"), "detail": e.get("detail")})
    elif to in ("finished", "stopped"):
        state.remediations.append({**state.remediating.pop(str(slot)), "end": to, "state": e.get("state"),
                                   "reason": e.get("reason")})
    else:
        raise DayTwoTransitionError(f"{slot}: unknown remediation transition {to!r}")


HANDLERS: dict[str, Callable[[DayTwoState, Mapping[str, Any]], None]] = {
    "pool": _pool, "replace": _replace, "patrol": _patrol, "upgrade": _upgrade, "breaker": _breaker,
    "remediation": _remediation}


def apply(state: DayTwoState, event: Mapping[str, Any]) -> DayTwoState:
    """Check one event against the state and apply it: the journal does this before it writes the
    event, so a forbidden one is never on record; a replay does the same, so both agree."""
    handler = HANDLERS.get(event.get("type"))  # type: ignore[arg-type]
    if handler is None:
        raise DayTwoTransitionError(f"event {event.get('seq')}: unknown day-two event type {event.get('type')!r}")
    seq = event.get("seq")
    if isinstance(seq, int):
        if seq <= state.last_seq:
            raise DayTwoTransitionError(f"event {seq}: sequence number not after {state.last_seq}")
        state.last_seq = seq
    handler(state, event)
    clock = event.get("clock")
    if isinstance(clock, str) and (state.clock is None or clock > state.clock):
        state.clock = clock
    return state


def fold(events: Iterable[Mapping[str, Any]]) -> DayTwoState:
    state = DayTwoState()
    for e in events:
        apply(state, e)
    return state
