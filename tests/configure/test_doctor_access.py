"""gpufleet doctor reaches the node the way `gpufleet rollout` does (gpufleet.configure.doctor_node):
the stack's `gpufleet:configure` connection (SSM by instance id by default, SSH with the stack's key
and jump host), `--host` a slot, instance id or private IP of the stack's `nodes` output; the stack's
outputs (`--outputs`, as `pulumi stack output --json --show-secrets` prints them) address the probes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.configure.doctor_node import doctor_instance
from gpufleet.configure.inventory import SshConnection, SsmConnection
from gpufleet.errors import ConfigError
from tests.configure.test_doctor import GOOD_U, UBUNTU, _node
from tests.rollout.project import make_project

REPO = Path(__file__).resolve().parents[2]
NODES = {"1": [{"slot": "b1-n000", "instanceId": "i-0a1b2c3d4e5f60718", "privateIp": "10.64.0.12", "batch": 1,
                "block": 0, "generation": 0}]}
OUTPUTS = {"nodes": NODES, "bucket": "gpufleet-dev-artifacts", "slurmControllerIp": "10.64.128.10",
           "slurmControllerInstanceId": "i-0ffffffffffffffff", "fsxDnsName": "fs-0123.fsx.us-east-1.amazonaws.com"}


@pytest.mark.parametrize("host", ["b1-n000", "i-0a1b2c3d4e5f60718", "10.64.0.12"])
def test_any_name_of_a_listed_node_gives_its_instance_id_and_ip(host):
    for ssm in (True, False):
        got = doctor_instance(host, ssm, OUTPUTS)
        assert (got.instance_id, got.private_ip) == ("i-0a1b2c3d4e5f60718", "10.64.0.12")


def test_an_unlisted_node_needs_what_its_connection_connects_to():
    assert doctor_instance("i-0123456789abcdef0", True, {}).instance_id == "i-0123456789abcdef0"
    assert doctor_instance("node.internal", False, {}).private_ip == "node.internal"
    with pytest.raises(ConfigError, match="SSM connection reaches a node by its instance id"):
        doctor_instance("10.64.9.9", True, OUTPUTS)
    with pytest.raises(ConfigError, match="SSH needs its address"):
        doctor_instance("i-0123456789abcdef0", False, OUTPUTS)


def _run(tmp_path, monkeypatch, args, collected=None, outputs=OUTPUTS):
    from gpufleet.configure import doctor_command, executor

    project = make_project(tmp_path / "project")
    shutil.copy(REPO / "stacks" / "Pulumi.local-slurm.yaml", project / "stacks")
    seen: dict = {}
    monkeypatch.setattr(executor, "stack_executor", lambda spec, project, stack, connection: seen.setdefault(
        "connection", connection))

    def read(_e, instance, pool, _dest, reach):
        seen.update(instance=instance, reach={t.name: (t.host, t.port) for t in reach})
        return collected or _node(UBUNTU, **GOOD_U)
    monkeypatch.setattr(doctor_command, "read_node", read)
    extra = []
    if outputs is not None:
        (tmp_path / "outputs.json").write_text(json.dumps(outputs))
        extra = ["--outputs", str(tmp_path / "outputs.json")]
    r = CliRunner().invoke(main, ["--project", str(project), "doctor", "-s", "local-slurm", *extra, *args])
    assert "Traceback" not in r.output, r.output
    return r, seen


def test_an_ssm_stack_is_reached_by_instance_id_through_its_bucket(tmp_path, monkeypatch):
    collected = _node(UBUNTU, **GOOD_U) | {"reach_slurmctld": {"output": "", "exit_code": 124},
                                           "reach_fsx_lustre": {"output": "", "exit_code": 0}}
    r, seen = _run(tmp_path, monkeypatch, ["--host", "b1-n000"], collected)
    assert seen["connection"] == SsmConnection(bucket="gpufleet-dev-artifacts", region="us-east-1")
    assert seen["instance"].instance_id == "i-0a1b2c3d4e5f60718"
    assert seen["reach"] == {"slurmctld": ("10.64.128.10", 6817), "fsx_lustre": (OUTPUTS["fsxDnsName"], 988)}
    assert r.exit_code == 4
    assert "reach.slurmctld" in r.output and "reach-timeout" in r.output and "reach.fsx_lustre" not in r.output


def test_ssh_on_request_with_its_login(tmp_path, monkeypatch):
    _r, seen = _run(tmp_path, monkeypatch, ["--host", "10.64.0.12", "--connection", "ssh", "--user", "admin"])
    assert isinstance(seen["connection"], SshConnection) and seen["connection"].user == "admin"
    assert seen["instance"].private_ip == "10.64.0.12"


@pytest.mark.parametrize("args, said", [
    (["--host", "b1-n000", "--user", "admin"], "--user is the SSH login"),
    (["--host", "10.64.9.9"], "SSM connection reaches a node by its instance id"),
])
def test_wrong_access_is_a_usage_error(tmp_path, monkeypatch, args, said):
    r, _seen = _run(tmp_path, monkeypatch, args)
    assert r.exit_code == 2 and said in r.output


def test_outputs_that_cannot_be_read_name_the_file(tmp_path, monkeypatch):
    (tmp_path / "bad.json").write_text("[1]")
    r, _seen = _run(tmp_path, monkeypatch, ["--host", "b1-n000", "--outputs", str(tmp_path / "bad.json")],
                    outputs=None)
    assert r.exit_code == 2 and "bad.json" in r.output and "no JSON object" in r.output


def test_a_simulated_stack_without_outputs_says_what_it_did_not_check(tmp_path, monkeypatch):
    """No outputs: no probes, each target a 'not checked' line, never a silent pass."""
    r, seen = _run(tmp_path, monkeypatch, ["--host", "10.64.0.12", "--connection", "ssh"], outputs=None)
    assert seen["reach"] == {}
    assert "not checked: reach.slurmctld" in r.output and "not checked: reach.fsx_lustre" in r.output
    assert "a simulated stack has no Pulumi outputs" in r.output


def test_an_ssh_stack_uses_its_key_and_jump_host(tmp_path, monkeypatch):
    """Before: doctor used a bare SshConnection, ignoring sshPrivateKeyFile and sshProxyJump."""
    from gpufleet.configure import doctor_command, executor

    project = make_project(tmp_path / "project")
    text = (REPO / "stacks" / "Pulumi.local-slurm.yaml").read_text()
    (project / "stacks" / "Pulumi.ssh.yaml").write_text(text.replace("config:\n", (
        "config:\n  gpufleet:configure:\n    connection: ssh\n    sshUser: admin\n"
        "    sshPrivateKeyFile: keys/node.pem\n    sshProxyJump: ec2-user@bastion.example.com\n"), 1))
    seen: dict = {}
    monkeypatch.setattr(executor, "stack_executor", lambda spec, project, stack, connection: seen.setdefault(
        "connection", connection))
    monkeypatch.setattr(doctor_command, "read_node", lambda _e, instance, _p, _d, _r: _node(UBUNTU, **GOOD_U))
    r = CliRunner().invoke(main, ["--project", str(project), "doctor", "-s", "ssh", "--host", "10.64.0.12"])
    assert "Traceback" not in r.output, r.output
    c = seen["connection"]
    assert (c.user, c.proxy_jump, c.private_key_file) == ("admin", "ec2-user@bastion.example.com",
                                                          project / "keys" / "node.pem")


def test_an_ssm_node_without_readable_outputs_says_why_they_were_needed(tmp_path, monkeypatch):
    r, _seen = _run(tmp_path, monkeypatch, ["--host", "b1-n000"], outputs=None)
    assert r.exit_code == 2
    assert "outputs could not be read (a simulated stack has no Pulumi outputs)" in r.output
    assert "--outputs FILE" in r.output
