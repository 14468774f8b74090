"""The pool contract against a real slurmctld with one slurmd per node (see conftest.py)."""

from __future__ import annotations

import re

import pytest

from gpufleet.pool.protocol import PendingNode
from gpufleet.pool.slurm.adapter import SlurmPool
from gpufleet.pool.slurm.cli import SlurmCli
from gpufleet.pool.slurm.local import free_ports

from . import contract


@pytest.fixture
def make_subject(slurm_cluster, tmp_path) -> contract.SubjectFactory:
    plan = slurm_cluster.plan
    picked = [plan.nodes[i] for i in (0, 1, 5, 6)]
    nodes = [PendingNode(slot=n.name, block=n.block, partition=plan.blocks[n.block].partition,
                         instance_id=f"i-{n.index:017x}") for n in picked]

    def down() -> SlurmPool:
        """The same cluster's configuration, but the controller's port has nothing behind it."""
        etc = tmp_path / "down"
        etc.mkdir(exist_ok=True)
        for f in slurm_cluster.slurm.conf_path.parent.iterdir():
            text = f.read_text()
            if f.name == "slurm.conf":
                text = re.sub(r"^SlurmctldPort=\d+$", f"SlurmctldPort={free_ports(1)[0]}", text, flags=re.M)
            (etc / f.name).write_text(text)
        return SlurmPool(SlurmCli(conf=etc / "slurm.conf", timeout_s=3), version=slurm_cluster.version)

    def make(failures_before_blacklist: int) -> contract.Subject:
        slurm_cluster.reset()
        pool = SlurmPool(slurm_cluster.slurm.cli(), version=slurm_cluster.version,
                         failures_before_blacklist=failures_before_blacklist)
        return contract.Subject(pool=pool, nodes=nodes, missing_partition="inference", down=down)

    return make


@pytest.mark.parametrize("check", contract.CHECKS, ids=contract.check_id)
def test_contract(check, make_subject):
    check(make_subject)
