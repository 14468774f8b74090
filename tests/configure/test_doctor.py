"""gpufleet doctor: the first-real-node checks (gpufleet.configure.doctor) on the tools' own output
formats, and playbooks/doctor.yml really run (read-only) against this host.

The outputs are the formats the tools print: `ldconfig -p` lines, `apt-mark showhold` (a package per
line), `dnf versionlock list` (name-epoch:version-release.*), `systemctl show -p X --value`, limits.d
lines; fi_info's from the EFA installer's vendor rows (gpufleet.vendor_releases).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet import vendor_releases as vendor
from gpufleet.bom import load_bom
from gpufleet.configure import doctor as d

REPO = Path(__file__).resolve().parents[2]
UBUNTU = 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\nID_LIKE=debian\n'
AL2023 = 'NAME="Amazon Linux"\nVERSION="2023"\nID="amzn"\nID_LIKE="fedora"\nVERSION_ID="2023"\n'
KERNEL_U = "6.8.0-1029-aws"
KERNEL_AL = "6.1.141-155.222.amzn2023.x86_64"


def _node(os_release: str, **outputs: str) -> dict:
    return {"os_release": {"output": os_release, "exit_code": 0}} | {
        k: {"output": v, "exit_code": 0} for k, v in outputs.items()}


GOOD_U = dict(
    kernel=KERNEL_U + "\n",
    loader="\tlibnccl-net.so (libc6,x86-64) => /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so\n",
    holds_apt=f"libnccl2\nlinux-aws\nlinux-image-{KERNEL_U}\nnvidia-driver-570-open\n",
    fstab_units="network-online.target: found\n",
    limits_memlock="*    soft    memlock    unlimited\n*    hard    memlock    unlimited\n",
    slurmd_memlock="infinity\n",
)
# `containerd config dump` prints the merged TOML (containerd 1.7, version 2 schema); these are its CRI lines
DUMP_OK = ('version = 2\n[plugins]\n  [plugins."io.containerd.grpc.v1.cri"]\n    enable_cdi = true\n'
           '    [plugins."io.containerd.grpc.v1.cri".containerd]\n      default_runtime_name = "nvidia"\n'
           '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n'
           '        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
           '          runtime_type = "io.containerd.runc.v2"\n'
           '          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
           '            SystemdCgroup = true\n')
GOOD_U["containerd_config"] = DUMP_OK


def _checks(diffs: list[d.Difference]) -> set[str]:
    return {x.check for x in diffs if not x.check.startswith("version.")}


def test_a_node_as_the_roles_leave_it_has_no_differences_beyond_versions():
    assert _checks(d.findings(_node(UBUNTU, **GOOD_U), load_bom(), "slurm")) == set()


@pytest.mark.parametrize("broken, check", [
    ({"loader": ""}, "loader.aws_ofi_nccl"),                                  # F4: NCCL would use sockets
    ({"holds_apt": "libnccl2\n"}, "kernel.hold"),                             # F12
    ({"fstab_units": "network.service: not found\n"}, "fstab.requires"),     # F11
    ({"limits_memlock": ""}, "memlock.pam"),
    ({"slurmd_memlock": "8388608\n"}, "memlock.slurmd"),                      # M7
    ({"containerd_config": DUMP_OK.replace("SystemdCgroup = true", "SystemdCgroup = false")},
     "containerd.runc_cgroup"),                                                # M4
])
def test_each_difference_a_reviewer_looks_for_is_named(broken, check):
    assert _checks(d.findings(_node(UBUNTU, **(GOOD_U | broken)), load_bom(), "slurm")) == {check}


def test_al2023_reads_the_versionlock_list():
    node = GOOD_U | {"kernel": KERNEL_AL + "\n", "holds_apt": "",
                     "holds_dnf": "kernel-0:6.1.141-155.222.amzn2023.*\nnvidia-driver-3:570.172.08-1.amzn2023.*\n"}
    assert "kernel.hold" not in _checks(d.findings(_node(AL2023, **node), load_bom(), "kubernetes"))
    node["holds_dnf"] = "nvidia-driver-3:570.172.08-1.amzn2023.*\n"
    assert "kernel.hold" in _checks(d.findings(_node(AL2023, **node), load_bom(), "kubernetes"))


def test_installed_versions_are_compared_with_the_bom():
    bom = load_bom()
    installer = bom.components.efa_installer.version
    old = _node(UBUNTU, libfabric=vendor.fi_info_version("1.41.0"), **GOOD_U)
    [diff] = [x for x in d.findings(old, bom, "slurm") if x.check == "version.libfabric"]
    assert diff.found == "2.1.0amzn2.0" and "2.1.0amzn5.0" in diff.expected
    pinned = _node(UBUNTU, libfabric=vendor.fi_info_version(installer), **GOOD_U)
    assert not [x for x in d.findings(pinned, bom, "slurm") if x.check == "version.libfabric"]


def test_a_system_the_bom_does_not_pin_is_said_first():
    diffs = d.findings(_node('ID=debian\nVERSION_ID="12"\n', **GOOD_U), load_bom(), None)
    assert [x.check for x in diffs] == ["os"]


def test_the_doctor_playbook_reads_a_host_and_changes_nothing(tmp_path):
    """playbooks/doctor.yml for real, against this host (no sudo): every command's output and exit code."""
    exe = Path(sys.executable).with_name("ansible-playbook")
    commands = d.doctor_commands("slurm")
    res = subprocess.run(
        [str(exe), "-i", "localhost,", "-c", "local", str(REPO / "playbooks" / "doctor.yml"),
         "-e", json.dumps({"ansible_python_interpreter": sys.executable, "gpufleet_become": False,
                           "gpufleet_bundle_dir": str(tmp_path / "out"), "gpufleet_remote_dir": str(tmp_path / "node"),
                           "gpufleet_doctor_commands": commands})],
        capture_output=True, text=True, timeout=300, env={"ANSIBLE_LOCALHOST_WARNING": "0", "PATH": "/usr/bin:/bin",
                                                          "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    collected = json.loads((tmp_path / "out" / "localhost" / d.DOCTOR_FILE).read_text())
    assert set(collected) == {c["key"] for c in commands}
    assert all(isinstance(v["exit_code"], int) for v in collected.values())
    assert collected["kernel"]["output"].strip() == subprocess.run(["uname", "-r"], capture_output=True,
                                                                   text=True).stdout.strip()
