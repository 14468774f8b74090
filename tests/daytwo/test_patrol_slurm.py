"""The patrol against a real local Slurm (slurmctld and one slurmd per node, `gpufleet pool up`):
a node running a job is never touched, an idle node whose tools start reporting an Xid is drained
by Slurm with the patrol's reason."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from gpufleet.plan import build_plan
from gpufleet.pool.slurm.conf import unit_request_args
from gpufleet.spec import load_stack_path
from tests.daytwo.fleet import gpufleet
from tests.pool.conftest import ensure_slurm
from tests.rollout.project import make_project

STACK = "pss"  # short: slurmstepd socket paths hold the slot name twice
STACK_FILE = """config:
  aws:region: us-east-1
  gpufleet:cluster:
    name: pss
    region: us-east-1
    availabilityZone: us-east-1a
    instanceType: p5.48xlarge
    targetGpus: 64
    spareFraction: 0.0
    unitGpus: 8
  gpufleet:partitions:
    - name: train
      mode: data-parallel
      units: 8
  gpufleet:rollout:
    canaryFraction: 0.5
    batchSize: 4
  gpufleet:pool:
    type: slurm
  gpufleet:image:
    os: al2023
    bom: images/bom.yaml
  gpufleet:simulator:
    seed: 1
"""


def sh(conf: Path, *argv: str) -> str:
    return subprocess.run(argv, env={**os.environ, "SLURM_CONF": str(conf)}, capture_output=True, text=True,
                          check=True, timeout=60).stdout


@pytest.fixture
def slurm_project():
    ensure_slurm()
    short = Path(tempfile.mkdtemp(prefix="gfp", dir="/tmp"))  # slurmstepd's socket paths must stay under 108 bytes
    root = make_project(short / "p")
    (root / "stacks" / f"Pulumi.{STACK}.yaml").write_text(STACK_FILE)
    out = gpufleet(root, "pool", "up", "-s", STACK)
    assert out.exit_code == 0, out.output
    try:
        yield root, root / ".gpufleet" / STACK / "slurm" / "etc" / "slurm.conf"
    finally:
        gpufleet(root, "pool", "down", "-s", STACK)
        shutil.rmtree(short, ignore_errors=True)


def test_patrol_on_real_slurm_skips_the_busy_node_and_drains_the_idle_one(slurm_project):
    root, conf = slurm_project
    if not conf.exists():
        conf = next((root / ".gpufleet" / STACK / "slurm").rglob("slurm.conf"))
    out = gpufleet(root, "rollout", "-s", STACK)
    assert out.exit_code == 0, out.output
    busy, idle = "pss-b0000-n00000", "pss-b0001-n00001"
    plan = build_plan(load_stack_path(root / "stacks" / f"Pulumi.{STACK}.yaml"))
    job = sh(conf, "sbatch", "--parsable", *unit_request_args(plan, "train", 1, "tree"), f"--nodelist={busy}",
             f"--output={root}/job-%j.out", "--wrap", "sleep 600").strip()
    try:
        deadline = time.monotonic() + 30
        while sh(conf, "squeue", "-h", "-j", job, "-o", "%T").strip() != "RUNNING":
            assert time.monotonic() < deadline, sh(conf, "squeue", "-h", "-j", job, "-o", "%T|%r|%N")
            time.sleep(0.3)
        for slot in (busy, idle):
            assert gpufleet(root, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", "xid-48").exit_code == 0
        out = gpufleet(root, "patrol", "-s", STACK)
        assert out.exit_code == 3, out.output
        assert idle in out.output and busy not in out.output.split("reports:")[0].split("quarantined", 1)[1]
        shown = sh(conf, "scontrol", "show", "node", idle)
        assert "DRAIN" in shown and "xid-48" in shown
        assert "DRAIN" not in sh(conf, "scontrol", "show", "node", busy).split("Reason=")[0].split("State=")[1][:40]
        assert sh(conf, "squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING"  # the job was not disturbed
    finally:
        subprocess.run(["scancel", job], env={**os.environ, "SLURM_CONF": str(conf)}, timeout=30)
