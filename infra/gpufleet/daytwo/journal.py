"""The day-two journal: every pool change made after the rollout (blacklist, clear, a patrol's
quarantine, a slot replacement, an upgrade's groups), with who asked and why.

Why a journal of its own beside the rollout's: the rollout's fold (`gpufleet.rollout.state`) refuses
event types it does not know, so day-two events in `journal.jsonl` would make `gpufleet rollout
--resume` fail on a stack that has been patrolled. The day-two journal uses the same stores (a
local fsync'd JSONL, or one S3 object per event), the same torn-tail recovery and the same lock
file as the rollout, so a day-two operation never runs beside a rollout of the same stack, and a
crash resumes from what was journaled. State is `fold(events)`, nothing else.

Events (the journal adds seq, at, stack, version):

    {"type": "pool", "slot": ..., "action": "blacklist" | "clear" | "quarantine" | "readmit", "who": ..., "why": ...,
     "reason_code": ..., "state": <pool state after>, "failures": n, "source": "operator" | "patrol"}
    {"type": "replace", "slot": ..., "to": "requested", "old_instance": ..., "who": ..., "why": ...}
    {"type": "replace", "slot": ..., "to": "provisioned", "instance_id": ..., "private_ip": ...}
    {"type": "replace", "slot": ..., "to": "decided", "action": "admit" | "quarantine", "record": ..., ...}
    {"type": "replace", "slot": ..., "to": "done", "state": <pool state after>}
    {"type": "patrol", "who": ..., "checked": [...], "skipped_busy": [...], "failed": {slot: {...}}}
    {"type": "upgrade", ...}  (gpufleet.daytwo.state)
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import gpufleet
from gpufleet.errors import GpufleetError
from gpufleet.rollout.journal import KILL_ENV, JournalStore, LocalJournalStore, _json_default

FILE = "daytwo.jsonl"


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


@dataclass
class DayTwoState:
    last_seq: int = 0
    changes: list[PoolChange] = field(default_factory=list)
    replacing: dict[str, ReplaceOp] = field(default_factory=dict)  # open replacements by slot
    replaced: list[ReplaceOp] = field(default_factory=list)  # finished ones, in order
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # slot -> record of a day-two admission
    instances: dict[str, str] = field(default_factory=dict)  # slot -> instance id after a replacement
    patrols: list[dict[str, Any]] = field(default_factory=list)  # patrol summaries (no node lists)
    upgrade: Any = None  # gpufleet.daytwo.state.UpgradeState, folded by that module's handlers
    clock: str | None = None  # the ports' clock at the latest event (the simulator's virtual time resumes from it)


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
    from gpufleet.daytwo.state import apply_upgrade  # the upgrade's own transitions

    apply_upgrade(state, e)


HANDLERS: dict[str, Callable[[DayTwoState, Mapping[str, Any]], None]] = {
    "pool": _pool, "replace": _replace, "patrol": _patrol, "upgrade": _upgrade}


def apply(state: DayTwoState, event: Mapping[str, Any]) -> DayTwoState:
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


def fold(events: Any) -> DayTwoState:
    state = DayTwoState()
    for e in events:
        apply(state, e)
    return state


class DayTwoJournal:
    """Numbered, stamped, durable day-two events and the state they fold to (as `gpufleet.rollout.journal.Journal`)."""

    def __init__(self, store: JournalStore, stack: str, now: Callable[[], datetime] | None = None,
                 kill_after: int | None = None, clock: Callable[[], datetime] | None = None) -> None:
        self.store, self.stack = store, stack
        self.now = now or (lambda: datetime.now(timezone.utc))
        self.clock = clock  # the ports' clock (virtual on the simulator), stamped as "clock"
        self.state = DayTwoState()
        self.appended = 0
        env = os.environ.get(KILL_ENV)
        self.kill_after = kill_after if kill_after is not None else (int(env) if env else None)
        self.on_append: Callable[[int], None] | None = None  # in-process crash tests raise from here

    def load(self, repair: bool = True) -> DayTwoState:
        self.state = fold(self.store.read(repair))
        return self.state

    def append(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """Validate against the state, make durable, return the event as written."""
        stamped = {"seq": self.state.last_seq + 1, "at": self.now().isoformat(), "stack": self.stack,
                   "version": gpufleet.__version__, **event}
        if self.clock is not None:
            stamped.setdefault("clock", self.clock().isoformat())
        apply(self.state, stamped)
        self.store.append(stamped["seq"], json.dumps(stamped, separators=(",", ":"), default=_json_default))
        self.appended += 1
        if self.on_append is not None:
            self.on_append(self.appended)
        if self.kill_after is not None and self.appended >= self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
        return stamped

    def close(self) -> None:
        self.store.close()


def daytwo_store(rollout_store: JournalStore, state_dir: Path, stack: str,
                 warn: Callable[[str], None] = lambda _m: None) -> JournalStore:
    """The day-two store next to the stack's rollout journal: `<state_dir>/daytwo.jsonl`, or the
    same S3 bucket under `<prefix>/daytwo/<stack>/journal/`."""
    if isinstance(rollout_store, LocalJournalStore):
        return LocalJournalStore(state_dir / FILE, warn=warn)
    from gpufleet.rollout.backends import S3JournalStore

    if isinstance(rollout_store, S3JournalStore):
        prefix = rollout_store.base[: -len(f"{stack}/journal/")].rstrip("/")
        return S3JournalStore(rollout_store.client, rollout_store.bucket, f"{prefix}/daytwo".lstrip("/"), stack)
    raise GpufleetError(f"no day-two journal for a rollout journal at {rollout_store.location}")
