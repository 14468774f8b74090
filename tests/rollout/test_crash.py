"""Crash safety: kill a rollout anywhere, resume it, and get exactly the uninterrupted result.

"Exactly": the same pool, the same admission records, the same simulated-cloud ledger (so nothing
was provisioned twice and no verdict was lost or redone differently). Kills come three ways:
in-process after the Nth journal append (most points: cheap; five rollouts each killed every few
events and resumed until done), a torn journal line (a kill in the middle of a write), and real
`gpufleet rollout` subprocesses SIGKILLed by the journal's test hook after the Nth append or by a
timer at a random moment; one full-size (1000-GPU) kill and resume.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

from gpufleet.rollout import journal as journal_mod
from gpufleet.rollout.journal import Journal, LocalJournalStore

from tests.rollout.e2e import journal_state, ledger_events, rollout, snapshot
from tests.rollout.project import make_project, seed_program_cache

pytestmark = pytest.mark.slow
STACK = "crash40"


class Crash(BaseException):
    """Stands in for SIGKILL inside the test process: nothing catches it."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("ref") / "p")
    result = rollout(project, STACK)
    assert result.exit_code == 0, result.output
    return project, snapshot(project, STACK), journal_state(project, STACK).events


def fresh(tmp_path, reference_project, name: str, stack: str = STACK):
    project = make_project(tmp_path / name)
    seed_program_cache(reference_project, project, stack)
    return project


def crash_after(monkeypatch, n: int, torn: bool = False) -> None:
    """The n-th append raises Crash after its line is durable (or, torn: after half a line)."""
    count = {"n": 0}
    original = LocalJournalStore.append

    def append(self, seq, line):
        count["n"] += 1
        if torn and count["n"] == n:
            with open(self.path, "ab") as f:
                f.write(line.encode()[: len(line) // 2])
            raise Crash()
        original(self, seq, line)
        if count["n"] == n:
            raise Crash()

    monkeypatch.setattr(LocalJournalStore, "append", append)


def test_killed_again_and_again_in_process_resumes_identically(reference, tmp_path, monkeypatch):
    """Five rollouts, each killed every few events (sometimes mid-line) and resumed until done."""
    ref_project, ref, total = reference
    assert total > 60
    kills = 0
    for chain in range(5):
        rng = random.Random(chain)
        project = fresh(tmp_path, ref_project, f"chain{chain}")
        while True:
            with monkeypatch.context() as m:
                crash_after(m, rng.randint(1, total // 5), torn=rng.random() < 0.15)
                try:
                    result = rollout(project, STACK, "--resume")
                except Crash:
                    kills += 1
                    continue
            break
        assert result.exit_code == 0, (chain, result.output)
        assert snapshot(project, STACK) == ref, chain
    assert kills >= 40


def _cli(project, *args, env=None):
    return subprocess.Popen([sys.executable, "-m", "gpufleet.cli", "--project", str(project), "rollout", "-s", STACK,
                             *args], env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def test_real_subprocesses_sigkilled_then_resumed(reference, tmp_path):
    ref_project, ref, total = reference
    rng = random.Random(7)
    kills = 0
    for k, n in enumerate(sorted(rng.sample(range(2, total), 6))):
        project = fresh(tmp_path, ref_project, f"s{n}")
        proc = _cli(project, env={journal_mod.KILL_ENV: str(n)})
        proc.wait(timeout=120)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
        kills += 1
        if k == 0:  # a corrupt tail on top of the kill: recovered with a warning
            with open(project / ".gpufleet" / STACK / "journal.jsonl", "ab") as f:
                f.write(b'{"seq": 99999, "type": "nod')
        result = rollout(project, STACK, "--resume")
        assert result.exit_code == 0, (n, result.output)
        if k == 0:
            assert "torn last line" in result.output
        assert snapshot(project, STACK) == ref, n
    # Timer kills, wherever the process happens to be: drawn inside an uninterrupted run's own wall
    # time on this machine (a fixed delay misses a fast machine's whole run), retried until enough land.
    started = time.monotonic()
    timing = _cli(fresh(tmp_path, ref_project, "timing"))
    assert timing.wait(timeout=120) == 0, timing.stderr.read()
    duration = time.monotonic() - started
    timer_kills = 0
    for t in range(12):
        if timer_kills == 3:
            break
        project = fresh(tmp_path, ref_project, f"t{t}")
        proc = _cli(project)
        time.sleep(rng.uniform(0.15, 0.85) * duration)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            timer_kills += 1
        proc.wait(timeout=120)
        result = rollout(project, STACK, "--resume")
        assert result.exit_code == 0, result.output
        assert snapshot(project, STACK) == ref
    assert kills == 6 and timer_kills == 3


def test_the_full_size_rollout_killed_and_resumed(tmp_path):
    ref_project = make_project(tmp_path / "ref")
    assert rollout(ref_project, "local").exit_code == 0
    ref = snapshot(ref_project, "local")
    total = journal_state(ref_project, "local").events
    project = fresh(tmp_path, ref_project, "killed", "local")
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet.cli", "--project", str(project), "rollout", "-s", "local"],
                            env={**os.environ, journal_mod.KILL_ENV: str(total * 2 // 3)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert proc.wait(timeout=300) == -signal.SIGKILL
    state = Journal(LocalJournalStore(project / ".gpufleet" / "local" / "journal.jsonl"), "local").load(repair=False)
    assert state.unfinished and state.events == total * 2 // 3
    result = rollout(project, "local", "--resume")
    assert result.exit_code == 0, result.output
    assert snapshot(project, "local") == ref


def test_fifty_sigkills_at_random_points_with_batches_in_flight(reference, tmp_path):
    """Issue 21: with post-canary batches in flight together (crash40: four at once), 50 real
    `gpufleet rollout` processes SIGKILLed after a random journal append and resumed end equal to the
    uninterrupted run: the same pool (admitted set, quarantines and their reasons, replacements),
    the same records, and the simulator's own ledger of launches and stops (nothing bought twice)."""
    ref_project, ref, total = reference
    ref_state = journal_state(ref_project, STACK)
    assert len([b for b in ref_state.batches.values()]) > 2
    rng = random.Random(21)
    for trial in range(50):
        n = rng.randrange(2, total)
        project = fresh(tmp_path, ref_project, f"k{trial}")
        proc = _cli(project, env={journal_mod.KILL_ENV: str(n)})
        proc.wait(timeout=120)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
        result = rollout(project, STACK, "--resume")
        assert result.exit_code == 0, (trial, n, result.output)
        assert snapshot(project, STACK) == ref, (trial, n)
        state = journal_state(project, STACK)
        assert {s: (x.stage, x.reason_code, x.replacements) for s, x in state.nodes.items()} == {
            s: (x.stage, x.reason_code, x.replacements) for s, x in ref_state.nodes.items()}, (trial, n)
        launches = [e["slot"] for e in ledger_events(project, STACK) if e["event"] == "launch"]
        stops = [e["slot"] for e in ledger_events(project, STACK) if e["event"] in ("stop", "terminate")]
        assert len(launches) - len(stops) == len(set(launches)), (trial, n)  # one running instance per slot
        shutil.rmtree(project)
