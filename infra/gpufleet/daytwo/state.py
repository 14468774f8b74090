"""The upgrade's state in the day-two journal: events of type "upgrade", folded here.

    {"to": "started", "target_digest": ..., "target_bom": <snapshot path>, "previous": {digest: <snapshot path>},
     "method": "inplace" | "reimage", "target_ami": <AMI id or null>,
     "groups": [{"number": n, "blocks": [...], "slots": [...]}]}
    {"to": "group-started", "group": n, "previous": {slot: {"bom_digest": ..., "ami": ..., "record": {...}}}}
    {"to": "group-drained", "group": n}
    {"to": "reimage-requested", "group": n, "purpose": "upgrade" | "rollback", "ami": ..., "slots": [...],
     "from": {slot: instance id}}
    {"to": "reimaged", "group": n, "purpose": ..., "ami": ..., "instances": {slot: instance id}, "seconds": s}
    {"to": "group-gated", "group": n, "result": "pass" | "fail", "records": {slot: record}, "failed": {...},
     "before": {...}, "after": {...}, "reason": ..., "seconds": s}
    {"to": "group-admitted", "group": n}
    {"to": "group-rolled-back", "group": n, "records": {slot: record}, "failed": {...}}
    {"to": "halted" | "finished" | "rollback-started" | "rolled-back", "reason": ...}

Why the previous version per node in "group-started": it is written before any node of the group is
drained, so a crash at any later point still knows what to roll back to (its BOM and its image).
A reimage is journaled as an intent before the provider is asked and as done after; the group's
stage does not move (a reimage happens inside "drained" on the way up and inside a rollback on the
way back), and the provider is idempotent by image, so a crash between the two only repeats a
call that launches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

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


def apply_upgrade(state: Any, e: Mapping[str, Any]) -> None:
    """Apply one upgrade event to the day-two state (`gpufleet.daytwo.journal.DayTwoState`)."""
    from gpufleet.daytwo.journal import DayTwoTransitionError

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
        _apply_reimage(g, to, e)
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


def _apply_reimage(g: GroupState, to: str, e: Mapping[str, Any]) -> None:
    """A reimage on the way up happens while the group is drained; one on the way back while it is
    rolled back (after failed gates, or from `--rollback` of an admitted group)."""
    from gpufleet.daytwo.journal import DayTwoTransitionError

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
