"""gpufleet doctor's security-group reachability (gpufleet.configure.reachability): the targets a node
must reach, from the stack's outputs; the verdict from what bash's /dev/tcp printed; and the probes
really run by playbooks/doctor.yml against 127.0.0.1 (one port listening, one closed, one dropping).

The probe outputs below were captured on this project's CI host (bash 5.1, Ubuntu), each as
doctor.yml runs it (`timeout 60 bash -c "timeout N bash -c '</dev/tcp/H/P'" 2>&1`):
  127.0.0.1/1 (nothing listens)        -> rc 1, CONNECTION_REFUSED
  no-such-host.invalid/988             -> rc 1, NAME_UNKNOWN
  192.0.2.99/443 (on-link, no host)    -> rc 1, NO_ROUTE
  a listener whose backlog is full     -> rc 124, no output (SYNs dropped, as a security group drops them)
  a listener                           -> rc 0, no output
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.bom import load_bom
from gpufleet.cloud.eks import kubeconfig
from gpufleet.configure import doctor as d
from gpufleet.configure import reachability as r
from tests.configure.test_doctor import GOOD_U, UBUNTU, _node

REPO = Path(__file__).resolve().parents[2]
CONNECTION_REFUSED = ("bash: connect: Connection refused\n"
                      "bash: line 1: /dev/tcp/127.0.0.1/1: Connection refused\n")
NAME_UNKNOWN = ("bash: line 1: no-such-host.invalid: Name or service not known\n"
                "bash: line 1: /dev/tcp/no-such-host.invalid/988: Invalid argument\n")
NO_ROUTE = "bash: connect: No route to host\nbash: line 1: /dev/tcp/192.0.2.99/443: No route to host\n"
ENDPOINT = "https://0123456789ABCDEF0123456789ABCDEF.gr7.us-east-1.eks.amazonaws.com"
FSX = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"
EKS_OUTPUTS = {"kubeconfig": kubeconfig("prod", ENDPOINT, "LS0tLS1CRUdJTg==", "us-east-1"), "fsxDnsName": FSX,
               "bucket": "gpufleet-prod-artifacts"}
SLURM_OUTPUTS = {"slurmControllerIp": "10.64.128.10", "fsxDnsName": FSX}


def _names(found):
    return {t.name: (t.host, t.port) for t in found}


def test_a_kubernetes_node_must_reach_the_eks_endpoint_and_the_file_system():
    found, notes = r.targets("kubernetes", EKS_OUTPUTS)
    assert _names(found) == {"eks_api": (ENDPOINT.removeprefix("https://").lower(), 443), "fsx_lustre": (FSX, 988)}
    [webhook] = notes  # the control plane opens 9443 towards the pods: said, not faked
    assert webhook.check == "reach.kueue_webhook" and "control plane -> node" in webhook.detail


def test_a_slurm_node_must_reach_slurmctld_and_slurmdbd_is_a_note():
    found, notes = r.targets("slurm", SLURM_OUTPUTS, slurmdbd_port=6819)
    assert _names(found) == {"slurmctld": ("10.64.128.10", 6817), "fsx_lustre": (FSX, 988)}
    assert [n.check for n in notes] == ["reach.slurmdbd"]
    assert [n.check for n in r.targets("slurm", SLURM_OUTPUTS)[1]] == []  # no accounting, no slurmdbd


@pytest.mark.parametrize("outputs, error, said", [
    ({}, None, "has no `slurmControllerIp` output"),
    (None, "error: no stack named 'dev' found", "could not be read (error: no stack named 'dev' found)"),
    ({"slurmControllerIp": "10.0.0.1; reboot", "fsxDnsName": FSX}, None, "is no IP or DNS name"),
])
def test_an_unknown_or_unsafe_address_is_a_note_never_a_target(outputs, error, said):
    found, notes = r.targets("slurm", outputs, outputs_error=error)
    assert "slurmctld" not in _names(found)
    [note] = [n for n in notes if n.check == "reach.slurmctld"]
    assert said in note.detail and "not tested" in note.detail


def test_a_secret_kubeconfig_printed_without_show_secrets_is_a_note():
    found, notes = r.targets("kubernetes", EKS_OUTPUTS | {"kubeconfig": "[secret]"})
    assert "eks_api" not in _names(found)
    [note] = [n for n in notes if n.check == "reach.eks_api"]
    assert "--show-secrets" in note.detail


def test_a_kubeconfig_without_an_https_server_gives_no_endpoint():
    assert r.eks_endpoint(EKS_OUTPUTS["kubeconfig"]) == (ENDPOINT.removeprefix("https://").lower(), 443)
    assert r.eks_endpoint(json.dumps({"clusters": [{"cluster": {"server": "http://x:80"}}]})) is None
    assert r.eks_endpoint("not json") is None
    assert r.eks_endpoint(json.dumps({"clusters": [{"cluster": {"server": "https://h.example:6443"}}]})) == (
        "h.example", 6443)


@pytest.mark.parametrize("output, code, reason", [
    ("", 0, None),
    (CONNECTION_REFUSED, 1, "reach-refused"),
    (NAME_UNKNOWN, 1, "reach-dns"),
    (NO_ROUTE, 1, "reach-no-route"),
    ("", 124, "reach-timeout"),
    ("bash: line 1: /dev/tcp/h/1: Permission denied\n", 1, "reach-error"),
])
def test_each_probe_output_gets_its_reason_code(output, code, reason):
    [target] = [t for t in r.targets("slurm", SLURM_OUTPUTS)[0] if t.name == "slurmctld"]
    got = r.unreachable([target], {target.key: {"output": output, "exit_code": code}})
    assert [u.code for u in got] == ([reason] if reason else [])
    if reason == "reach-error":
        assert got[0].detail.endswith("Permission denied")


def test_a_probe_without_a_result_is_a_difference():
    found, _ = r.targets("slurm", SLURM_OUTPUTS)
    assert {u.code for u in r.unreachable(found, {})} == {"reach-not-read"}


def test_an_unreachable_service_is_a_doctor_difference_even_on_an_unpinned_os():
    found, _ = r.targets("kubernetes", EKS_OUTPUTS)
    node = _node(UBUNTU, **GOOD_U) | {"reach_eks_api": {"output": "", "exit_code": 124},
                                      "reach_fsx_lustre": {"output": "", "exit_code": 0}}
    [diff] = [x for x in d.findings(node, load_bom(), "kubernetes", found) if x.check.startswith("reach.")]
    assert diff.check == "reach.eks_api" and diff.found.startswith("reach-timeout") and "A1" in diff.source
    odd = node | {"os_release": {"output": "ID=debian\n", "exit_code": 0}}
    assert [x.check for x in d.findings(odd, load_bom(), "kubernetes", found)] == ["os", "reach.eks_api"]


def test_each_target_becomes_one_probe_command():
    found, _ = r.targets("slurm", SLURM_OUTPUTS)
    cmds = {c["key"]: c["cmd"] for c in d.doctor_commands("slurm", found)}
    assert cmds["reach_slurmctld"] == "timeout 5 bash -c '</dev/tcp/10.64.128.10/6817'"
    assert cmds["reach_fsx_lustre"] == f"timeout 5 bash -c '</dev/tcp/{FSX}/988'"
    assert not [k for k in (c["key"] for c in d.doctor_commands("slurm")) if k.startswith("reach_")]


def test_the_probes_really_run_on_a_host_through_the_doctor_playbook(tmp_path):
    """doctor.yml over its local connection against 127.0.0.1: the listening port passes, the closed one
    is reach-refused, the one whose backlog is full (SYNs dropped) is reach-timeout."""
    listening = socket.create_server(("127.0.0.1", 0))
    dropping = socket.socket()
    dropping.bind(("127.0.0.1", 0))
    dropping.listen(0)
    held = []
    for _ in range(3):  # fill the accept queue: the kernel then drops further SYNs
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(dropping.getsockname())
        held.append(c)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # bound then released: nothing listens there
    reach = [r.Target("slurmctld", "a listener", "127.0.0.1", listening.getsockname()[1], "test"),
             r.Target("fsx_lustre", "a closed port", "127.0.0.1", closed_port, "test"),
             r.Target("eks_api", "a port dropping SYNs", "127.0.0.1", dropping.getsockname()[1], "test")]
    commands = [c for c in d.doctor_commands("slurm", reach) if c["key"].startswith("reach_") or c["key"] == "kernel"]
    exe = Path(sys.executable).with_name("ansible-playbook")
    try:
        res = subprocess.run(
            [str(exe), "-i", "localhost,", "-c", "local", str(REPO / "playbooks" / "doctor.yml"),
             "-e", json.dumps({"ansible_python_interpreter": sys.executable, "gpufleet_become": False,
                               "gpufleet_bundle_dir": str(tmp_path / "out"),
                               "gpufleet_remote_dir": str(tmp_path / "node"), "gpufleet_doctor_commands": commands})],
            capture_output=True, text=True, timeout=300,
            env={"ANSIBLE_LOCALHOST_WARNING": "0", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    finally:
        for s in (listening, dropping, *held):
            s.close()
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    collected = json.loads((tmp_path / "out" / "localhost" / d.DOCTOR_FILE).read_text())
    got = {u.target.name: u.code for u in r.unreachable(reach, collected)}
    assert got == {"fsx_lustre": "reach-refused", "eks_api": "reach-timeout"}, collected
    diffs = d.reach_differences(collected, reach)
    assert {x.check for x in diffs} == {"reach.fsx_lustre", "reach.eks_api"}
