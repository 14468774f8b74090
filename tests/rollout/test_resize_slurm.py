"""Shrink on `local-slurm`-style stacks: real Slurm nodes drained, their jobs waited for,
then released (DRAIN with gpufleet's released reason) and their simulated instances terminated
(issue 23 item 1)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.daytwo.fleet import gpufleet
from tests.daytwo.test_patrol_slurm import sh
from tests.pool.conftest import ensure_slurm
from tests.rollout.e2e import journal_state, ledger_events
from tests.rollout.project import make_project

pytestmark = pytest.mark.slow
STACK = "prs"  # short: slurmstepd socket paths hold the slot name twice
STACK_FILE = """config:
  aws:region: us-east-1
  gpufleet:cluster:
    name: prs
    region: us-east-1
    availabilityZone: us-east-1a
    instanceType: p5.48xlarge
    targetGpus: {gpus}
    spareFraction: 0.0
    unitGpus: 16
  gpufleet:partitions:
    - name: train
      mode: data-parallel
      units: 1
  gpufleet:rollout:
    canaryFraction: 0.25
    batchSize: 2
  gpufleet:pool:
    type: slurm
  gpufleet:image:
    os: al2023
    bom: images/bom.yaml
  gpufleet:upgrade:
    drainTimeoutS: 60
  gpufleet:simulator:
    seed: 1
"""


def running(root: Path) -> set[str]:
    current: set[str] = set()
    for e in ledger_events(root, STACK):
        if e["event"] == "launch":
            current.add(e["slot"])
        elif e["event"] in ("terminate", "stop"):
            current.discard(e["slot"])
    return current


def test_shrink_drains_and_releases_real_slurm_nodes():
    ensure_slurm()
    short = Path(tempfile.mkdtemp(prefix="gfr", dir="/tmp"))
    root = make_project(short / "p")
    stack_file = root / "stacks" / f"Pulumi.{STACK}.yaml"
    stack_file.write_text(STACK_FILE.format(gpus=64))  # 8 nodes, 4 blocks of 2
    conf = root / ".gpufleet" / STACK / "slurm" / "etc" / "slurm.conf"
    try:
        up = gpufleet(root, "pool", "up", "-s", STACK)
        assert up.exit_code == 0, up.output
        rolled = gpufleet(root, "rollout", "-s", STACK)
        assert rolled.exit_code == 0, rolled.output
        assert len(journal_state(root, STACK).nodes) == 8
        stack_file.write_text(STACK_FILE.format(gpus=32))
        shrunk = gpufleet(root, "rollout", "-s", STACK)
        assert shrunk.exit_code == 0, shrunk.output
        st = journal_state(root, STACK)
        kept = ["prs-b0000-n00000", "prs-b0000-n00001", "prs-b0001-n00002", "prs-b0001-n00003"]
        assert sorted(st.nodes) == kept and st.resize is None
        assert running(root) == set(kept)
        # drained with gpufleet's released reason while the shrink ran (journaled), then out of slurm.conf
        states = dict(line.split("|", 1) for line in sh(conf, "sinfo", "-h", "-N", "-o", "%N|%T|%E").splitlines())
        assert sorted(states) == kept, states
        for slot in kept:
            assert "drain" not in states[slot].lower(), (slot, states[slot])
        assert "prs-b0002" not in conf.read_text()
        assert "4 released node(s) removed" in shrunk.output, shrunk.output[-2000:]
    finally:
        gpufleet(root, "pool", "down", "-s", STACK)
        shutil.rmtree(short, ignore_errors=True)



GROW_FILE = STACK_FILE.replace("      units: 1\n", "      units: {units}\n")


def test_grow_adds_real_slurm_nodes_keeping_every_admitted_one_then_shrink_removes_them():
    """4 -> 8 nodes with the partition raised over the new blocks: the new nodes join the running
    local Slurm drained until gated (the old ones stay idle, never re-drained), pass their gates and
    serve the partition; back to 4, the released blocks leave slurm.conf. `gpufleet pool` shows the
    cluster as it stands throughout."""
    ensure_slurm()
    short = Path(tempfile.mkdtemp(prefix="gfg", dir="/tmp"))
    root = make_project(short / "p")
    stack_file = root / "stacks" / f"Pulumi.{STACK}.yaml"
    stack_file.write_text(GROW_FILE.format(gpus=32, units=2))  # 4 nodes, 2 blocks of 2, both train's
    conf = root / ".gpufleet" / STACK / "slurm" / "etc" / "slurm.conf"

    def sinfo() -> dict[str, str]:
        """train's nodes and states, once none reads not responding (`idle*` for a moment after
        the rollout's closing `scontrol reconfigure`, until each slurmd answers the next ping)."""
        deadline = time.monotonic() + 30
        while True:
            rows = dict(line.split("|", 1) for line in
                        sh(conf, "sinfo", "-h", "-N", "-p", "train", "-o", "%N|%T").splitlines())
            if not any(v.endswith("*") for v in rows.values()) or time.monotonic() > deadline:
                return rows
            time.sleep(0.5)
    try:
        assert gpufleet(root, "pool", "up", "-s", STACK).exit_code == 0
        rolled = gpufleet(root, "rollout", "-s", STACK)
        assert rolled.exit_code == 0, rolled.output
        old = sorted(sinfo())
        assert len(old) == 4 and all(s == "idle" for s in sinfo().values()), sinfo()
        stack_file.write_text(GROW_FILE.format(gpus=64, units=4))
        shown = gpufleet(root, "pool", "-s", STACK)  # before the grow: the cluster as it stands
        assert shown.exit_code == 0, shown.output
        grown = gpufleet(root, "rollout", "-s", STACK)
        assert grown.exit_code == 0, grown.output
        assert "4 node(s) joined, drained until gated" in grown.output, grown.output[-2000:]
        assert len(journal_state(root, STACK).nodes) == 8
        states = sinfo()
        assert sorted(states) == sorted(old + ["prs-b0002-n00004", "prs-b0002-n00005", "prs-b0003-n00006",
                                               "prs-b0003-n00007"]), states
        assert all(s == "idle" for s in states.values()), states  # the new ones admitted, the old ones kept
        launches = [e["slot"] for e in ledger_events(root, STACK) if e["event"] == "launch"]
        assert sorted(launches) == sorted(states), launches  # each slot launched once: no old one moved
        before = {n: s.batch for n, s in journal_state(root, STACK).nodes.items() if n in old}
        assert before == {"prs-b0000-n00000": 1, "prs-b0000-n00001": 1, "prs-b0001-n00002": 2,
                          "prs-b0001-n00003": 2}, before
        assert gpufleet(root, "pool", "up", "-s", STACK).exit_code == 0  # already up with the grown nodes
        assert sinfo() == states
        pool = gpufleet(root, "pool", "-s", STACK, "--json")
        assert pool.exit_code == 0, pool.output
        stack_file.write_text(GROW_FILE.format(gpus=32, units=2))
        shrunk = gpufleet(root, "rollout", "-s", STACK)
        assert shrunk.exit_code == 0, shrunk.output
        assert sorted(sinfo()) == old, sinfo()
        assert "4 released node(s) removed" in shrunk.output, shrunk.output[-2000:]
        assert gpufleet(root, "pool", "-s", STACK).exit_code == 0
    finally:
        gpufleet(root, "pool", "down", "-s", STACK)
        shutil.rmtree(short, ignore_errors=True)
