"""A lock is this process's own only when both its pid and its host are ours.

Pids repeat across hosts (containers often run as pid 1 or a small number): a record naming our pid
on another host is someone else's live rollout, never ours to walk through.
"""

from __future__ import annotations

import os
import socket

import pytest

from gpufleet.errors import LockHeld
from gpufleet.rollout.lock import FileLock, LockInfo, stale_or_raise

OTHER_HOST = "ci-runner-7"


def _raise(message: str) -> None:
    raise AssertionError(f"unexpected warning: {message}")


def test_our_pid_on_another_host_is_not_our_lock() -> None:
    me = LockInfo.mine("t")
    holder = LockInfo(pid=me.pid, host=OTHER_HOST, started="2026-07-14T08:00:00+00:00", stack="t")
    with pytest.raises(LockHeld, match=f"pid {me.pid} on {OTHER_HOST}.*--force-unlock"):
        stale_or_raise(holder, me, False, "lock", _raise)


def test_our_pid_on_our_host_is_our_lock() -> None:
    me = LockInfo.mine("t")
    stale_or_raise(LockInfo(pid=me.pid, host=me.host, started="x", stack="t"), me, False, "lock", _raise)


def test_a_file_lock_recording_our_pid_on_another_host_is_held(tmp_path) -> None:
    path = tmp_path / "lock"
    path.write_text(LockInfo(pid=os.getpid(), host=OTHER_HOST, started="x", stack="t").to_json())
    assert OTHER_HOST != socket.gethostname()
    with pytest.raises(LockHeld, match=f"pid {os.getpid()} on {OTHER_HOST}"):
        FileLock(path, LockInfo.mine("t")).acquire()
    assert LockInfo.parse(path.read_text()).host == OTHER_HOST  # the record is left as it was
