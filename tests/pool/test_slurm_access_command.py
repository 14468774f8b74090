"""`gpufleet pool up` / `pool access apply` / `sacct` on local-slurm, through the CLI, on the real
local Slurm with its slurmdbd (MariaDB, slurmdbd, slurmctld, 125 slurmd)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.pool.slurm.local import LocalSlurm
from gpufleet.pool.factory import local_slurm_root
from gpufleet.project import load_project

from .conftest import ensure_slurm

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # 125 slurmd, MariaDB and slurmdbd: ~60 s


def test_pool_up_runs_slurmdbd_and_access_apply_is_idempotent(tmp_path: Path):
    ensure_slurm()
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copytree(REPO / "stacks", root / "stacks")
    shutil.copytree(REPO / "images", root / "images")
    project = load_project(root)
    runner = CliRunner()
    args = ["--project", str(root), "pool"]
    try:
        up = runner.invoke(main, [*args, "up", "-s", "local-slurm"])
        assert up.exit_code == 0 and "slurmdbd, slurmctld and 125 slurmd up" in up.output, up.output
        done = runner.invoke(main, [*args, "access", "apply", "-s", "local-slurm"])
        assert done.exit_code == 0 and "slurm access of local-slurm: unchanged" in done.output, done.output
        env = LocalSlurm(local_slurm_root(project, "local-slurm")).cli().env()
        qos = subprocess.run(["sacctmgr", "-n", "-P", "show", "qos", "format=name,grptres"], env=env,
                             capture_output=True, text=True, timeout=30).stdout
        # each partition's quota is its whole capacity here, so its QOS carries no GPU limit of its own
        # (f5272cc: Slurm never preempts for a QOS limit, and the patrol's holds must be preemptible)
        assert {"part-train|", "part-sim|", "part-debug|", "gpufleet-patrol|"} <= set(qos.split()), qos
        subprocess.run(["sacctmgr", "-i", "modify", "qos", "where", "name=part-sim", "set", "GrpTRES=gres/gpu=1"],
                       env=env, check=True, capture_output=True, timeout=30)
        fixed = runner.invoke(main, ["--project", str(root), "pool", "-s", "local-slurm", "access", "apply"])
        assert fixed.exit_code == 0 and "name=part-sim set GrpTRES=gres/gpu=-1" in fixed.output, fixed.output
        assert "1 change(s)" in fixed.output
        sacct = subprocess.run(["sacct", "-a", "-n", "-X"], env=env, capture_output=True, text=True, timeout=30)
        assert sacct.returncode == 0, sacct.stderr  # slurmdbd answers (no jobs yet)
    finally:
        down = runner.invoke(main, [*args, "down", "-s", "local-slurm"])
    assert down.exit_code == 0 and "stopped 128 daemon(s)" in down.output, down.output  # + slurmdbd, mariadbd
