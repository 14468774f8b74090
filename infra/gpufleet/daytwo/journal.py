"""The day-two journal: every pool change made after the rollout (blacklist, clear, a patrol's
quarantine, a slot replacement, an upgrade's groups), with who asked and why.

Why a journal of its own beside the rollout's: the rollout's fold (`gpufleet.rollout.state`) refuses
event types it does not know, so day-two events in `journal.jsonl` would make `gpufleet rollout
--resume` fail on a stack that has been patrolled. The day-two journal uses the same stores (a
local fsync'd JSONL, or one S3 object per event), the same torn-tail recovery and the same lock
file as the rollout, so a day-two operation never runs beside a rollout of the same stack, and a
crash resumes from what was journaled. State is `fold(events)`, nothing else.

The events and the state they fold to are `gpufleet.daytwo.state`; this module only stamps,
validates (through that fold) and stores them.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import gpufleet
from gpufleet.daytwo.state import DayTwoState, apply, fold
from gpufleet.errors import GpufleetError
from gpufleet.masking import mask
from gpufleet.rollout.backends import S3JournalStore
from gpufleet.rollout.journal import KILL_ENV, JournalStore, LocalJournalStore, _json_default

FILE = "daytwo.jsonl"


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
        self.store.append(stamped["seq"], json.dumps(mask(stamped), separators=(",", ":"), default=_json_default))
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
    if isinstance(rollout_store, S3JournalStore):
        prefix = rollout_store.base[: -len(f"{stack}/journal/")].rstrip("/")
        return S3JournalStore(rollout_store.client, rollout_store.bucket, f"{prefix}/daytwo".lstrip("/"), stack)
    raise GpufleetError(f"no day-two journal for a rollout journal at {rollout_store.location}")
