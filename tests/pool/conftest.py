"""A real local Slurm for the pool tests: slurm-wlm installed when missing (as root), one slurmctld
and one slurmd per planned node under a temporary folder, stopped at the end of the session."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Iterator

import pytest

from gpufleet.plan import build_plan
from gpufleet.plan.model import ClusterPlan
from gpufleet.pool.slurm.local import LocalSlurm, slurm_version
from gpufleet.spec import ClusterSpec, load_stack

APT = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "-y", "-q"]


def small_spec(target_gpus: int = 120, **pool: object) -> ClusterSpec:
    """The local stack shrunk to three 5-node blocks of 4 units: train on blocks 0-1, debug (quota
    1 unit, so at most 2 nodes a job) on block 2."""
    raw = load_stack("local").model_dump(by_alias=True, mode="json", exclude_none=True)
    raw["cluster"]["targetGpus"] = target_gpus
    raw["cluster"]["spareFraction"] = 0
    raw["partitions"] = [
        {"name": "train", "mode": "data-parallel", "units": 8, "priority": 100, "quotaUnits": 8},
        {"name": "debug", "mode": "interactive", "units": 4, "priority": 10, "quotaUnits": 1},
    ]
    raw["pool"] = {"type": "slurm", **pool}
    return ClusterSpec.from_raw(raw, source="tests/pool/conftest.py")


def ensure_slurm() -> None:
    """Install slurm-wlm when missing and root; skip (with the reason) when it cannot be."""
    if shutil.which("slurmctld") and shutil.which("slurmd"):
        return
    if os.geteuid() != 0:
        pytest.skip("slurm-wlm is not installed and installing it needs root (apt-get install slurm-wlm)")
    proc = subprocess.run([*APT, "install", "slurm-wlm"], capture_output=True, text=True)
    if proc.returncode != 0:  # a fresh machine may have no package lists yet
        subprocess.run([*APT, "update"], capture_output=True, text=True)
        proc = subprocess.run([*APT, "install", "slurm-wlm"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


class Cluster:
    def __init__(self, slurm: LocalSlurm, spec: ClusterSpec, plan: ClusterPlan) -> None:
        self.slurm, self.spec, self.plan = slurm, spec, plan
        self.version = slurm_version()

    def sh(self, *argv: str, check: bool = True, timeout_s: int = 20) -> str:
        """A Slurm command against this cluster (what an operator would type)."""
        proc = subprocess.run(["timeout", str(timeout_s), *argv], env=self.slurm.cli().env(), capture_output=True,
                              text=True)
        if check:
            assert proc.returncode == 0, f"{argv}: {proc.stdout}{proc.stderr}"
        return proc.stdout + proc.stderr

    def reset(self) -> None:
        """Every node back to the configuration's start: drained as pending, no comment, no jobs."""
        self.sh("scancel", "--full", "-u", "root", check=False)
        names = ",".join(n.name for n in self.plan.nodes)
        self.sh("scontrol", "update", f"NodeName={names}", "State=DRAIN", "Reason=gpufleet: pending gates", "Comment=")
        self.sh("scontrol", "delete", "ReservationName=all", check=False)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    ensure_slurm()
    spec = small_spec()
    plan = build_plan(spec)
    slurm = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    slurm.up(spec, plan)
    try:
        yield Cluster(slurm, spec, plan)
    finally:
        slurm.down()


@pytest.fixture
def cluster(slurm_cluster: Cluster) -> Cluster:
    slurm_cluster.reset()
    return slurm_cluster
