"""The local Slurm is up only once every slurmd has registered: a node the configuration drains
reads "drained" in sinfo before its slurmd ever registered, and Slurm 22.05 refuses State=RESUME
on it ("Invalid node state specified"), which failed the smoke tests on a loaded CI machine."""

from __future__ import annotations

import pytest

from gpufleet.errors import PoolError
from gpufleet.plan import build_plan
from gpufleet.pool.slurm.local import LocalSlurm, unregistered_nodes

from .conftest import ensure_slurm, small_spec

# `scontrol -o show node` of Debian 12's slurmctld 22.05.8 before the node's slurmd started
# (captured on this project's CI image with LocalSlurm.up(with_nodes=False); nothing to mask).
BEFORE = ("NodeName=local-b0000-n00000 CoresPerSocket=48  CPUAlloc=0 CPUEfctv=192 CPUTot=192 CPULoad=N/A "
          "AvailableFeatures=block0000 ActiveFeatures=block0000 Gres=gpu:h100:8 NodeAddr=127.0.0.1 "
          "NodeHostName=localhost Port=50679  RealMemory=1992294 AllocMem=0 FreeMem=N/A Sockets=2 Boards=1 "
          "State=UNKNOWN+DRAIN ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=train  "
          "BootTime=None SlurmdStartTime=None LastBusyTime=Unknown CfgTRES=cpu=192,mem=1992294M,billing=192 "
          "AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
          "ExtSensorsTemp=n/s Reason=gpufleet: pending gates")


def test_an_unknown_base_state_is_unregistered_whatever_its_flags():
    after = BEFORE.replace("local-b0000-n00000", "local-b0000-n00001").replace("State=UNKNOWN+DRAIN", "State=IDLE+DRAIN")
    assert unregistered_nodes(f"{BEFORE}\n{after}\n") == ["local-b0000-n00000"]
    assert unregistered_nodes("") == []


@pytest.mark.slow
@pytest.mark.requires_root
def test_before_slurmd_registers_a_drained_node_cannot_be_resumed(tmp_path):
    ensure_slurm()
    spec = small_spec()
    plan = build_plan(spec)
    cluster = LocalSlurm(tmp_path)
    cluster.up(spec, plan, with_nodes=False)
    try:
        names = [n.name for n in plan.nodes]
        assert sorted(cluster.unregistered()) == sorted(names)
        assert set(cluster.health().values()) == {"drained"}  # what sinfo says: it cannot tell
        with pytest.raises(PoolError, match="Invalid node state specified"):
            cluster.cli().run(["scontrol", "update", f"NodeName={names[0]}", "State=RESUME"])
    finally:
        cluster.down()
