"""The rollout journal: append-only events, each durable before the action it records counts as done.

Why append-only JSON lines: a crash can only ever tear the last line, which is recovered by
truncating it (the action it recorded did not count as done, so it is simply redone); any other
damage is a clear error naming the line. State is `state.fold(events)`, nothing else.

Where the events live is a `JournalStore` (`backends.py`: a local file by default, S3 for CI
runners). `Journal` numbers events, stamps them (time, stack, code version) and folds them.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

import gpufleet
from gpufleet.durable import fsync_dir
from gpufleet.errors import GpufleetError
from gpufleet.masking import PRIVATE_MODE, mask
from gpufleet.rollout import state as st

KILL_ENV = "GPUFLEET_TEST_KILL_AFTER_APPENDS"  # test hook: SIGKILL this process after the Nth append


class JournalError(GpufleetError):
    """The journal cannot be read (a corrupt line that is not the torn tail). Exit code 1."""


class JournalStore(Protocol):
    location: str

    def exists(self) -> bool: ...

    def read(self, repair: bool) -> list[dict[str, Any]]:
        """Every event in order; a torn tail is dropped with a warning (and cut off when `repair`)."""
        ...

    def append(self, seq: int, line: str) -> None:
        """Make one event durable; returns only once it is."""
        ...

    def archive(self) -> str:
        """Move the journal aside (for --restart); returns where it went."""
        ...

    def close(self) -> None: ...


class LocalJournalStore:
    """`<state_dir>/journal.jsonl`: each line written with one write(2), then fsync'd (and the folder
    fsync'd when the file is created, so the file itself survives a power loss)."""

    def __init__(self, path: Path, warn: Callable[[str], None] = lambda _m: None) -> None:
        self.path = path
        self.location = str(path)
        self.warn = warn
        self._fd: int | None = None

    def exists(self) -> bool:
        return self.path.is_file() and self.path.stat().st_size > 0

    def read(self, repair: bool) -> list[dict[str, Any]]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        lines = data.split(b"\n")
        complete, tail = lines[:-1], lines[-1]  # `tail` is b"" when the file ends with a newline
        events: list[dict[str, Any]] = []
        good_end = 0
        for number, raw in enumerate(complete, start=1):
            try:
                event = json.loads(raw)
                if not isinstance(event, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                if number == len(complete) and not tail:
                    tail = raw  # the last line, garbled while its newline made it: torn all the same
                    break
                raise JournalError(f"{self.path}: line {number} is not a journal event ({exc}); the journal is "
                                   "damaged before its last line, which a crash cannot do: restore it from a "
                                   "backup or archive it with --restart") from None
            events.append(event)
            good_end += len(raw) + 1
        if tail:
            self.warn(f"{self.path}: dropped a torn last line ({len(tail)} bytes, a write cut short by a crash); "
                      "the action it recorded had not counted as done and is redone")
            if repair:
                with open(self.path, "r+b") as f:
                    f.truncate(good_end)
                    f.flush()
                    os.fsync(f.fileno())
        return events

    def append(self, seq: int, line: str) -> None:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            created = not self.path.exists()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_MODE)
            if created:
                fsync_dir(self.path.parent)
        payload = (line + "\n").encode()
        written = os.write(self._fd, payload)
        if written != len(payload):  # a short write on a regular file: disk full
            raise JournalError(f"{self.path}: short write ({written} of {len(payload)} bytes); disk full?")
        os.fsync(self._fd)

    def archive(self) -> str:
        self.close()
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        target = self.path.with_name(f"journal.{stamp}.jsonl")
        os.replace(self.path, target)
        fsync_dir(self.path.parent)
        return str(target)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Journal:
    """Numbered, stamped, durable events and the state they fold to."""

    def __init__(self, store: JournalStore, stack: str, now: Callable[[], datetime] | None = None,
                 kill_after: int | None = None, on_append: Callable[[int], None] | None = None) -> None:
        self.store = store
        self.stack = stack
        self.now = now or (lambda: datetime.now(timezone.utc))
        self.state = st.RolloutState()
        self.appended = 0
        env = os.environ.get(KILL_ENV)
        self.kill_after = kill_after if kill_after is not None else (int(env) if env else None)
        self.on_append = on_append  # in-process crash tests raise from here
        self.listeners: list[Callable[[dict[str, Any], st.RolloutState], None]] = []  # the live display
        self.cluster: str | None = None  # the plan's cluster, stamped on every event once the orchestrator sets it

    def load(self, repair: bool = True) -> st.RolloutState:
        self.state = st.fold(self.store.read(repair))
        return self.state

    def append(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """Validate the event against the state, make it durable, and return it as written.

        Validation first: an illegal transition raises before anything reaches the store."""
        who = {"cluster": self.cluster} if self.cluster is not None else {}
        stamped = {"seq": self.state.last_seq + 1, "at": self.now().isoformat(), "stack": self.stack, **who,
                   "version": gpufleet.__version__, **event}
        st.apply(self.state, stamped)
        self.store.append(stamped["seq"], json.dumps(mask(stamped), separators=(",", ":"), default=_json_default))
        self.appended += 1
        for listen in self.listeners:
            listen(stamped, self.state)
        if self.on_append is not None:
            self.on_append(self.appended)
        if self.kill_after is not None and self.appended >= self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
        return stamped

    def close(self) -> None:
        self.store.close()


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
