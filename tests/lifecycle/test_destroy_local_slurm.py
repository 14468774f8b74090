"""`gpufleet destroy` on a simulated stack whose pool is a REAL local Slurm (issue 23 item 3): the
admitted nodes are drained in Slurm, a running job holds the destroy at its deadline (exit 1, the
job named), `--cancel-jobs` on the rerun scancels it, the nodes leave the pool (Slurm's reason says
released) before the world is emptied, and the local Slurm is stopped. Two nodes, to stay short."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.lifecycle import sim_world
from gpufleet.pool.slurm.local import LocalSlurm
from gpufleet.pool.slurm.nodes import RELEASED_REASON
from tests.pool.conftest import ensure_slurm

pytestmark = pytest.mark.slow  # a real slurmctld, slurmdbd and two slurmd

REPO = Path(__file__).resolve().parents[2]
STACK = (REPO / "stacks" / "Pulumi.dev.yaml").read_text() + "  gpufleet:simulator:\n    seed: 1\n"  # pool.type slurm
SLOTS = ["dev-b0000-n00000", "dev-b0001-n00001"]


def _cli(project: Path, *args: str):
    return CliRunner().invoke(main, ["--project", str(project), *args])


def test_destroy_drains_cancels_and_removes_the_real_slurm_nodes(monkeypatch):
    ensure_slurm()
    short = Path(tempfile.mkdtemp(prefix="gfd", dir="/tmp"))  # slurmstepd's socket paths stay under 108 bytes
    project = short / "p"
    (project / "stacks").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", project / "Pulumi.yaml")
    for d in ("images", "playbooks"):
        (project / d).symlink_to(REPO / d)
    (project / "stacks" / "Pulumi.dev.yaml").write_text(STACK)
    local = LocalSlurm(project / ".gpufleet" / "dev" / "slurm")
    try:
        up = _cli(project, "pool", "up", "-s", "dev")
        assert up.exit_code == 0, up.output
        rolled = _cli(project, "rollout", "-s", "dev")
        assert rolled.exit_code == 0, rolled.output
        cli = local.cli()
        job = cli.run(["sbatch", "--parsable", "-p", "debug", "--nodes=1", "--gpus=8", f"-w{SLOTS[0]}",
                       "--output=/dev/null", "--wrap", "sleep 600"]).strip().split(";")[0]
        for _ in range(50):  # until Slurm runs it
            if cli.run(["squeue", "-h", "-j", job, "-o", "%T"]).strip() == "RUNNING":
                break
            time.sleep(0.2)

        held = _cli(project, "destroy", "-s", "dev", "--jobs-timeout", "2")
        assert held.exit_code == 1, held.output
        assert "destroy step jobs failed" in held.output and f"debug/job/{job}" in held.output
        nodes = cli.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"])
        states = {line.split("|")[0]: line.split("|")[1:] for line in nodes.splitlines()}
        assert states[SLOTS[0]][0] == "draining" and states[SLOTS[1]][0] == "drained", nodes  # real Slurm drains
        assert all(reason == "gpufleet: pending gates" for _, reason in states.values())

        seen: dict[str, str] = {}
        remove = sim_world.SimWorldRemover.remove

        def spy(self, targets):  # the moment before the world is emptied: what Slurm says then
            seen["nodes"] = cli.run(["scontrol", "-o", "show", "node"])
            seen["jobs"] = cli.run(["squeue", "-h", "-o", "%i"])
            return remove(self, targets)

        monkeypatch.setattr(sim_world.SimWorldRemover, "remove", spy)
        done = _cli(project, "destroy", "-s", "dev", "--cancel-jobs", "--jobs-timeout", "60")
        assert done.exit_code == 0, done.output
        assert "resuming the destroy of dev at step jobs" in done.output
        assert seen["jobs"].strip() == ""  # scancelled
        for slot in SLOTS:  # released: out of the pool, kept drained with gpufleet's reason
            line = next(row for row in seen["nodes"].splitlines() if f"NodeName={slot} " in row)
            assert f"Reason={RELEASED_REASON}" in line and "DRAIN" in line, line
        assert not local.running() and not (project / ".gpufleet" / "dev" / "slurm").exists()
        again = _cli(project, "destroy", "-s", "dev")
        assert again.exit_code == 0 and "nothing to destroy" in again.output
    finally:
        if local.root.exists():
            local.down()
        shutil.rmtree(short, ignore_errors=True)
