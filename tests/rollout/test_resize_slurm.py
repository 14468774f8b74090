"""Shrink on `local-slurm`-style stacks: real Slurm nodes drained, their jobs waited for,
then released (DRAIN with gpufleet's released reason) and their simulated instances terminated
(issue 23 item 1)."""

from __future__ import annotations

import shutil
import tempfile
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
        states = dict(line.split("|", 1) for line in sh(conf, "sinfo", "-h", "-N", "-o", "%N|%T|%E").splitlines())
        for slot in ("prs-b0002-n00004", "prs-b0002-n00005", "prs-b0003-n00006", "prs-b0003-n00007"):
            state, reason = states[slot].split("|", 1)
            assert "drain" in state.lower() and "released" in reason, (slot, states[slot])
        for slot in kept:
            assert "drain" not in states[slot].lower(), (slot, states[slot])
    finally:
        gpufleet(root, "pool", "down", "-s", STACK)
        shutil.rmtree(short, ignore_errors=True)

