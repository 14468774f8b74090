"""One rollout per stack: a lock that names its holder (pid, host, start).

Why flock plus a record: the kernel drops an flock when its process dies (even by SIGKILL), so on
this host a live holder is never mistaken for a dead one; the JSON record says who holds it, for
the message and for the cases flock cannot see. A lock whose pid is dead on this host is taken
over with a warning. A lock from another host is never taken silently: this host cannot tell
whether that process lives (a shared folder, a CI runner that vanished), so it takes
`--force-unlock`, which the operator gives once they know the other run is gone.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from gpufleet.errors import GpufleetError, LockHeld


BRIEF_HOLDERS = ("ops serve",)  # commands that hold the lock for milliseconds: waited for, not refused
BRIEF_WAIT_S = 10.0


@dataclass(frozen=True)
class LockInfo:
    pid: int
    host: str
    started: str
    stack: str
    command: str = "rollout"

    @classmethod
    def mine(cls, stack: str, command: str = "rollout") -> "LockInfo":
        return cls(pid=os.getpid(), host=socket.gethostname(), started=datetime.now(timezone.utc).isoformat(),
                   stack=stack, command=command)

    def describe(self) -> str:
        return f"`gpufleet {self.command}` pid {self.pid} on {self.host}, started {self.started}"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def parse(cls, text: str) -> "LockInfo | None":
        try:
            d = json.loads(text)
            return cls(pid=int(d["pid"]), host=str(d["host"]), started=str(d["started"]), stack=str(d["stack"]),
                       command=str(d.get("command", "rollout")))
        except (ValueError, KeyError, TypeError):
            return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def stale_or_raise(holder: LockInfo, me: LockInfo, force: bool, where: str, warn: Callable[[str], None]) -> None:
    """Decide about a recorded holder that does not (visibly) hold the lock: take over or raise.

    Shared by the file lock and the DynamoDB lock so both say the same thing."""
    if holder.pid == me.pid and holder.host == me.host:
        return
    if force:
        warn(f"{where}: --force-unlock: taking the lock of {holder.describe()}")
        return
    if holder.host != me.host:
        raise LockHeld(f"{where}: the stack {me.stack} is locked by {holder.describe()}; gpufleet cannot check a "
                       f"process on another host. If that rollout is gone, rerun with --force-unlock")
    if pid_alive(holder.pid):
        raise LockHeld(f"{where}: the stack {me.stack} is locked by {holder.describe()}, which is still running")
    warn(f"{where}: taking over the lock of {holder.describe()}: that process is gone")


class FileLock:
    """`<state_dir>/lock`. Use as a context manager."""

    def __init__(self, path: Path, info: LockInfo, force: bool = False,
                 warn: Callable[[str], None] = lambda _m: None) -> None:
        self.path, self.info, self.force, self.warn = path, info, force, warn
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        brief_until = time.monotonic() + BRIEF_WAIT_S
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:  # a folder (or an unwritable file) where the lock file goes
                raise GpufleetError(f"{self.path}: cannot open the stack's lock file: {exc.strerror or exc}; "
                                    "move whatever is there aside (a lock is an ordinary file gpufleet creates)"
                                    ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = LockInfo.parse(_read_fd(fd))
                os.close(fd)
                if (holder is None or holder.command in BRIEF_HOLDERS) and time.monotonic() < brief_until:
                    time.sleep(0.02)  # `ops serve` holds it per notification and pauses between them
                    continue
                who = holder.describe() if holder else "another process (its record is not written yet)"
                raise LockHeld(f"{self.path}: the stack {self.info.stack} is locked by {who}, which is still "
                               "running") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the holder removed the file between our open and flock: try the new one
        try:
            holder = LockInfo.parse(_read_fd(fd))
            if holder is not None:
                stale_or_raise(holder, self.info, self.force, str(self.path), self.warn)
            os.ftruncate(fd, 0)
            os.pwrite(fd, self.info.to_json().encode(), 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> "FileLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_fd(fd: int) -> str:
    chunks = []
    offset = 0
    while True:
        chunk = os.pread(fd, 65536, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks).decode("utf-8", "replace")
