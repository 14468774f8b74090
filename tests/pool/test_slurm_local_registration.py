"""The local Slurm is up only once every slurmd has registered: a node the configuration drains
reads "drained" in sinfo before its slurmd ever registered, and Slurm 22.05 refuses State=RESUME
on it ("Invalid node state specified"), which failed the smoke tests on a loaded CI machine."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time

import pytest

from gpufleet.errors import PoolError
from gpufleet.plan import build_plan
from gpufleet.pool.slurm.local import LocalSlurm, free_ports, listen_range, registration_deadline, unregistered_nodes

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


def test_the_registration_wait_is_extended_only_while_nodes_keep_registering():
    assert registration_deadline(100.0, 100.0, 90.0) == 190.0  # nothing registered yet: the plain budget
    assert registration_deadline(100.0, 250.0, 90.0) == 340.0  # still registering: another budget from the last
    assert registration_deadline(100.0, 400.0, 90.0) == 460.0  # never past four budgets
    assert registration_deadline(100.0, 100.0, 0.0) == 100.0


def _start_slurmd(cluster: LocalSlurm, name: str) -> None:
    (cluster.root / "spool" / name).mkdir(parents=True, exist_ok=True)
    subprocess.run(["slurmd", "-N", name], env=cluster.cli().env(), check=True, capture_output=True, timeout=30)


@pytest.mark.slow
@pytest.mark.requires_root
def test_a_cluster_that_keeps_registering_past_the_budget_is_waited_for(tmp_path):
    """The CI failure this fixes: 125 slurmd with accounting on two busy cores, 5 still unregistered
    when a fixed 90 s counted from before MariaDB started ran out. Here the slurmd start one by one
    over about three budgets; each registers within a budget of the one before."""
    ensure_slurm()
    spec = small_spec()
    plan = build_plan(spec)
    cluster = LocalSlurm(tmp_path)
    cluster.up(spec, plan, with_nodes=False)
    names = [n.name for n in plan.nodes]
    try:
        def stagger() -> None:
            for name in names:
                _start_slurmd(cluster, name)
                time.sleep(0.8)

        starter = threading.Thread(target=stagger)
        began = time.monotonic()
        starter.start()
        cluster.wait_registered(names, 4.0, stop_on_failure=False)
        took = time.monotonic() - began
        starter.join()
        assert took > 8.0, took  # more than the 4 s budget: it was extended, not met
        assert cluster.unregistered() == []
    finally:
        cluster.down()


@pytest.mark.slow
@pytest.mark.requires_root
def test_a_slurmd_that_cannot_bind_its_port_fails_the_wait_at_once_with_its_error(tmp_path):
    """What happened in CI: a node's port taken after it was found free (there by a client
    connection's ephemeral port; here by a listener). Its slurmd exits at start, the launcher's
    exit code is still 0, and the node would read "drained" until the budget ran out."""
    ensure_slurm()
    spec = small_spec()
    plan = build_plan(spec)
    cluster = LocalSlurm(tmp_path)
    cluster.up(spec, plan, with_nodes=False)
    names = [n.name for n in plan.nodes]
    first_node = json.loads((tmp_path / "etc" / "ports.json").read_text())["first_node"]
    try:
        with socket.socket() as taken:
            taken.bind(("0.0.0.0", first_node + plan.nodes[0].index))
            taken.listen()
            for name in names:
                _start_slurmd(cluster, name)
            began = time.monotonic()
            with pytest.raises(PoolError, match=rf"1 of {len(names)} slurmd exited before registering "
                                                 rf"\(first: {names[0]}\): Unable to bind listen port"):
                cluster.wait_registered(names, 60.0, stop_on_failure=False)
            assert time.monotonic() - began < 30  # not the 60 s budget, let alone its extensions
    finally:
        cluster.down()


def test_local_ports_stay_out_of_the_kernels_client_ports():
    assert listen_range((32768, 60999), 126) == (10000, 32767)
    assert listen_range((10000, 60000), 126) == (60001, 65535)
    assert listen_range((1024, 65535), 126) == (10000, 65535)  # nothing outside: the whole range, as before
    assert listen_range(None, 126) == (10000, 65535)
    low, high = listen_range((32768, 60999), 1251)
    assert high - low + 1 >= 1251
    for _ in range(20):
        controller, first = free_ports(126)
        assert 10000 <= controller and first + 124 <= 32767
