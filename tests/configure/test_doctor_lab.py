"""gpufleet doctor's reachability probes over its real transport: `read_node` through the
AnsibleExecutor over SSH into a network-namespace host (tests/configure/netns_lab.py), probing its
peers on the lab's bridge the way a node probes the EKS endpoint, slurmctld or FSx: a peer's sshd
(listening), a port nothing listens on, an address nobody answers, and a peer whose link is cut."""

from __future__ import annotations

import pytest

from configure_host import PROJECT_ROOT, ensure_system_packages, require_root
from netns_lab import NetnsLab
from gpufleet.configure import doctor as d
from gpufleet.configure import reachability as r
from gpufleet.configure.doctor_command import read_node
from gpufleet.configure.executor import AnsibleExecutor
from gpufleet.configure.inventory import SshConnection
from gpufleet.configure.runner import AnsibleConfigurator
from gpufleet.ports import Instance


@pytest.mark.requires_root
@pytest.mark.slow
def test_probes_from_a_real_node_over_ssh_name_each_unreachable_peer(base_rootfs, collections_dir, tmp_path):
    require_root("network namespaces with sshd")
    ensure_system_packages("openssh-server", "openssh-client", "iproute2")
    with NetnsLab(tmp_path / "lab") as lab:
        lab.add_host("node", root=lab.overlay_root("node", [base_rootfs]))
        controller = lab.add_host("controller")
        gone = lab.add_host("gone")
        lab.cut("gone")
        reach = [r.Target("slurmctld", "a listening peer", controller.address, 22, "test"),
                 r.Target("fsx_lustre", "a peer port nothing listens on", controller.address, 988, "test"),
                 r.Target("eks_api", "an address nobody answers", lab.dead_address(), 443, "test"),
                 r.Target("cut", "a peer whose link is down", gone.address, 22, "test")]
        runner = AnsibleConfigurator(tmp_path / "state", playbook_dir=PROJECT_ROOT / "playbooks",
                                     collections=collections_dir, forks=4)
        executor = AnsibleExecutor(runner, SshConnection(user="root", private_key_file=lab.key, connect_timeout_s=3),
                                   {}, context={"ansible_python_interpreter": "/usr/bin/python3"})
        node = Instance(slot="doctor", instance_id="", batch=0, block=0, private_ip=lab.hosts["node"].address)
        collected = read_node(executor, node, "slurm", tmp_path / "out", reach)
    got = {u.target.name: u.code for u in r.unreachable(reach, collected)}
    assert got["fsx_lustre"] == "reach-refused", collected
    assert "slurmctld" not in got, collected
    # ARP finds nobody: "No route to host" after ~3 s (observed); a cached neighbour would make it a timeout
    assert got["eks_api"] in ("reach-no-route", "reach-timeout") and got["cut"] in ("reach-no-route",
                                                                                   "reach-timeout"), collected
    assert {x.check for x in d.reach_differences(collected, reach)} == {"reach.fsx_lustre", "reach.eks_api",
                                                                       "reach.cut"}
