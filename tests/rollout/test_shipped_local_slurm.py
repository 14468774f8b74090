"""The shipped `local-slurm` stack as shipped (issue 23 item 4: every shipped stack's rollout reaches
its target): a real local Slurm of 125 slurmd, the 1,000-GPU rollout gated through it, every node
admitted into its partition in Slurm itself, then the pool stopped."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.daytwo.fleet import gpufleet
from tests.daytwo.test_patrol_slurm import sh
from tests.pool.conftest import ensure_slurm
from tests.rollout.project import REPO, make_project

pytestmark = pytest.mark.slow  # 125 real slurmd and a 1,000-GPU rollout through them: ~5 minutes on 2 cores
STACK = "local-slurm"


def test_the_shipped_local_slurm_stack_rolls_out_to_its_target_on_a_real_slurm(tmp_path):
    """In a project under a long path, as a user's is: slurmstepd's sockets live in a short spool
    (LocalFlavour.spool); under the state dir they passed 108 bytes at job 100, every srun after it
    failed and the gates quarantined healthy pairs (efa-pair-fail, exit code 255)."""
    ensure_slurm()
    root = make_project(tmp_path / "a-project-folder-under-a-long-path" / "gpufleet")
    shutil.copy(REPO / "stacks" / f"Pulumi.{STACK}.yaml", root / "stacks")
    conf = root / ".gpufleet" / STACK / "slurm" / "etc" / "slurm.conf"
    try:
        up = gpufleet(root, "pool", "up", "-s", STACK)
        assert up.exit_code == 0, up.output
        rolled = gpufleet(root, "rollout", "-s", STACK)
        assert rolled.exit_code == 0, rolled.output[-3000:]
        report = json.loads((root / "reports" / STACK / "rollout.json").read_text())
        assert report["status"] == "complete" and report["admitted_nodes"] == report["target_nodes"] == 125
        # Slurm itself: every planned node in its partition, none drained (the replaced ones readmitted)
        rows = [line.split("|") for line in sh(conf, "sinfo", "-h", "-N", "-o", "%N|%P|%T").splitlines()]
        shown = {(n, p.rstrip("*")) for n, p, _s in rows if p != "gpufleet-gates"}
        assert len({n for n, _p in shown}) == 125 and {p for _n, p in shown} == {"train", "sim", "debug"}
        assert not [r for r in rows if "drain" in r[2] or r[2].startswith("down")], rows
        pool = gpufleet(root, "pool", "-s", STACK, "--json")
        assert pool.exit_code == 0 and json.loads(pool.stdout)["counts"]["admitted"] == 125, pool.output[-2000:]
    finally:
        gpufleet(root, "pool", "down", "-s", STACK)
