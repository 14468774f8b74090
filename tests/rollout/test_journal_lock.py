"""The journal (durable appends, torn-tail recovery, corrupt lines) and the local lock."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from gpufleet.errors import LockHeld
from gpufleet.rollout.journal import Journal, JournalError, LocalJournalStore
from gpufleet.rollout.lock import FileLock, LockInfo
from gpufleet.rollout.state import IllegalTransition

START = {"type": "rollout", "to": "started", "batches": [1]}
RUN = {"type": "batch", "batch": 1, "to": "running"}


def journal(path, warnings=None):
    store = LocalJournalStore(path, warn=(warnings.append if warnings is not None else lambda _m: None))
    j = Journal(store, "t")
    j.load()
    return j


def test_events_are_numbered_stamped_and_fold_back(tmp_path):
    path = tmp_path / "s" / "journal.jsonl"
    j = journal(path)
    j.append(START)
    j.append(RUN)
    j.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["seq"] for x in lines] == [1, 2]
    assert {"at", "stack", "version"} <= set(lines[0]) and lines[0]["stack"] == "t"
    again = journal(path)
    assert again.state.last_seq == 2 and again.state.batches[1].stage.value == "running"
    again.append({"type": "batch", "batch": 1, "to": "passed"})
    assert json.loads(path.read_text().splitlines()[-1])["seq"] == 3


def test_an_illegal_event_never_reaches_the_file(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = journal(path)
    j.append(START)
    with pytest.raises(IllegalTransition):
        j.append({"type": "batch", "batch": 1, "to": "passed"})
    assert len(path.read_text().splitlines()) == 1


@pytest.mark.parametrize("tail", [b'{"seq": 3, "type": "bat', b'{"seq": 3, "type"\x00\x00\n'])
def test_a_torn_last_line_is_cut_off_with_a_warning(tmp_path, tail):
    path = tmp_path / "journal.jsonl"
    j = journal(path)
    j.append(START)
    j.append(RUN)
    j.close()
    good = path.read_bytes()
    path.write_bytes(good + tail)
    warnings: list[str] = []
    again = journal(path, warnings)
    assert again.state.last_seq == 2
    assert len(warnings) == 1 and "torn last line" in warnings[0]
    assert path.read_bytes() == good  # repaired on disk
    again.append({"type": "batch", "batch": 1, "to": "passed"})
    assert journal(path).state.last_seq == 3


def test_a_read_only_load_leaves_the_torn_tail_on_disk(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_bytes(json.dumps({**START, "seq": 1}).encode() + b"\n{\"torn")
    store = LocalJournalStore(path)
    Journal(store, "t").load(repair=False)
    assert path.read_bytes().endswith(b'{"torn')


def test_a_corrupt_line_before_the_end_is_an_error_naming_it(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_text(json.dumps({**START, "seq": 1}) + "\nnot json\n" + json.dumps({**RUN, "seq": 3}) + "\n")
    with pytest.raises(JournalError, match="line 2 is not a journal event"):
        journal(path)


def test_the_kill_hook_sigkills_after_the_nth_append(tmp_path):
    code = textwrap.dedent(f"""
        from pathlib import Path
        from gpufleet.rollout.journal import Journal, LocalJournalStore
        j = Journal(LocalJournalStore(Path({str(tmp_path / 'journal.jsonl')!r})), "t", kill_after=2)
        j.load()
        j.append({START!r})
        j.append({RUN!r})
        j.append({{"type": "batch", "batch": 1, "to": "passed"}})
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert proc.returncode == -9
    assert len((tmp_path / "journal.jsonl").read_text().splitlines()) == 2


# ------------------------------------------------------------------------------- lock

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from gpufleet.rollout.lock import FileLock, LockInfo
    lock = FileLock(Path(sys.argv[1]), LockInfo.mine("t"))
    lock.acquire()
    print("held", flush=True)
    time.sleep(60)
""")


def test_a_live_holder_is_named_and_a_dead_one_is_taken_over(tmp_path):
    path = tmp_path / "lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld, match=f"pid {holder.pid} on {socket.gethostname()}.*still running"):
            FileLock(path, LockInfo.mine("t")).acquire()
    finally:
        holder.kill()
        holder.wait()
    warnings: list[str] = []
    with FileLock(path, LockInfo.mine("t"), warn=warnings.append):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert any(f"pid {holder.pid}" in w and "gone" in w for w in warnings)
    assert not path.exists()  # released


def test_a_lock_from_another_host_needs_force(tmp_path):
    path = tmp_path / "lock"
    other = LockInfo(pid=12345, host="ci-runner-7", started="2026-07-14T08:00:00+00:00", stack="t")
    path.write_text(other.to_json())
    with pytest.raises(LockHeld, match="ci-runner-7.*--force-unlock"):
        FileLock(path, LockInfo.mine("t")).acquire()
    warnings: list[str] = []
    with FileLock(path, LockInfo.mine("t"), force=True, warn=warnings.append):
        pass
    assert "force-unlock" in warnings[0]


def test_a_live_pid_on_this_host_without_the_flock_still_counts_as_held(tmp_path):
    path = tmp_path / "lock"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path.write_text(LockInfo(pid=sleeper.pid, host=socket.gethostname(), started="x", stack="t").to_json())
        with pytest.raises(LockHeld, match=f"pid {sleeper.pid}"):
            FileLock(path, LockInfo.mine("t")).acquire()
    finally:
        sleeper.kill()
        sleeper.wait()
    time.sleep(0.05)
    with FileLock(path, LockInfo.mine("t")):
        pass
