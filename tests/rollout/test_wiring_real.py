"""A real stack's wiring, short of a cloud: `gpufleet:configure` picks the Executor's connection, and a
Slurm stack's controller is configured from the stack's outputs with its generated slurm.conf.

The Pulumi provisioner is a fake that only serves `outputs()`; ansible-runner is a recording backend
that answers every inventory host with an ok (or a failure for the hosts a test names), so the
inventory, the extravars and the files they name are the real ones.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpufleet.configure import executor as executor_module
from gpufleet.configure.runner import AnsibleConfigurator
from gpufleet.configure.stack_connection import connection_for
from gpufleet.errors import ConfigError, ConfigErrors, PoolError
from gpufleet.plan import plan_stack
from gpufleet.project import find_project
from gpufleet.rollout import pulumi_provisioner, wiring
from gpufleet.ports import HostStatus, Instance
from gpufleet.spec import ClusterSpec, ConfigureConfig, load_stack, raw_from_stack_yaml

REPO = Path(__file__).resolve().parents[2]
SLURM_OUTPUTS = {"bucket": "dev-data-1a2b3c4d", "fsxDnsName": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
                 "fsxMountName": "abcdefgh", "slurmControllerIp": "10.0.16.10",
                 "slurmControllerInstanceId": "i-0c0ffee0c0ffee000",
                 "slurmMungeKeySecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:/gpufleet/dev/munge-AbCdEf"}
BATCH = [Instance(slot="b1-n000", instance_id="i-0000000000000000a", batch=1, block=0, private_ip="10.0.0.10"),
         Instance(slot="b1-n001", instance_id="i-0000000000000000b", batch=1, block=0, private_ip="10.0.0.11")]


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    (root / "stacks").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    for name in ("images", "playbooks"):
        (root / name).symlink_to(REPO / name)
    for stack in ("dev", "inference"):
        shutil.copy(REPO / "stacks" / f"Pulumi.{stack}.yaml", root / "stacks")
    return find_project(root)


class FakeProvisioner:
    """Serves the stack's outputs and counts the reads (nothing else is used before provisioning)."""

    def __init__(self, outputs):
        self._outputs = outputs
        self.reads = 0

    def outputs(self):
        self.reads += 1
        return dict(self._outputs)


class RecordingBackend:
    """ansible-runner's `run`: records each call and reports every inventory host ok, or failed."""

    def __init__(self, failing=()):
        self.calls = []
        self.failing = set(failing)

    def __call__(self, **kw):
        self.calls.append(kw)
        for host in kw["inventory"]["all"]["hosts"]:
            kind = "runner_on_failed" if host in self.failing else "runner_on_ok"
            kw["event_handler"]({"event": kind, "event_data": {"host": host, "task": "Start slurmctld",
                                                               "res": {"msg": "slurmctld did not start"}}})
        return SimpleNamespace(status="failed" if self.failing else "successful", rc=2 if self.failing else 0)


def wire_real(monkeypatch, spec, project, stack, outputs, backend):
    provisioner = FakeProvisioner(outputs)
    monkeypatch.setattr(pulumi_provisioner.PulumiProvisioner, "for_stack",
                        classmethod(lambda cls, *a, **kw: provisioner))
    monkeypatch.setattr(wiring, "_pool", lambda *a, **kw: SimpleNamespace())  # the pool is not under test
    monkeypatch.setattr(executor_module, "AnsibleConfigurator",
                        functools.partial(AnsibleConfigurator, backend=backend, collections=project.root))
    w = wiring.wire(spec, plan_stack(spec, project), project, stack)
    return w, provisioner


def with_configure(spec: ClusterSpec, **fields) -> ClusterSpec:
    return spec.model_copy(update={"configure": ConfigureConfig(**fields)})


def test_slurm_stack_over_ssm_configures_the_controller_from_the_stack_outputs(monkeypatch, project):
    spec = load_stack("dev", project.stacks_dir)
    assert spec.pool.type == "slurm" and spec.configure.connection == "ssm"
    backend = RecordingBackend()
    w, provisioner = wire_real(monkeypatch, spec, project, "dev", SLURM_OUTPUTS, backend)
    assert w.threaded and provisioner.reads == 0  # a fresh stack has no outputs before its first update

    result = w.adapters.executor.configure(BATCH)

    assert set(result.hosts) == {"b1-n000", "b1-n001"}  # the controller is no node of the batch
    assert all(h.status is HostStatus.OK for h in result.hosts.values())
    (call,) = backend.calls
    inventory = call["inventory"]["all"]
    assert inventory["hosts"]["b1-n000"] == {
        "ansible_connection": "amazon.aws.aws_ssm", "ansible_host": "i-0000000000000000a",
        "ansible_aws_ssm_bucket_name": "dev-data-1a2b3c4d", "ansible_aws_ssm_region": "us-east-1",
        "gpufleet_batch": 1, "gpufleet_block": 0}
    assert inventory["hosts"]["slurm-controller"]["ansible_host"] == "i-0c0ffee0c0ffee000"
    groups = {g: set(c["hosts"]) for g, c in inventory["children"].items()}
    assert groups["slurm_controller"] == {"slurm-controller"}
    assert groups["gpu"] == groups["slurm"] == {"b1-n000", "b1-n001"}  # no GPU roles on the controller

    extravars = call["extravars"]
    assert extravars["munge_key_secret_id"] == SLURM_OUTPUTS["slurmMungeKeySecretArn"]
    assert extravars["munge_key_region"] == "us-east-1"
    assert (extravars["lustre_client_fs_dns"], extravars["lustre_client_mount_name"],
            extravars["lustre_client_mount_path"]) == (SLURM_OUTPUTS["fsxDnsName"], "abcdefgh", spec.storage.mount_path)
    conf = Path(extravars["slurm_conf_file"])
    assert conf == project.state_dir("dev") / "slurm-config" / "slurm.conf"
    text = conf.read_text()
    assert "SlurmctldHost=ip-10-0-16-10(10.0.16.10)" in text
    for name in ("slurm_gres_conf_file", "slurm_topology_conf_file"):
        assert Path(extravars[name]).is_file()

    w.adapters.executor.configure(BATCH[:1])  # a later batch: the controller again (idempotent), outputs read once
    assert "slurm-controller" in backend.calls[1]["inventory"]["all"]["hosts"]
    assert provisioner.reads == 1


def test_a_failed_controller_stops_the_rollout_instead_of_failing_the_batch(monkeypatch, project):
    spec = load_stack("dev", project.stacks_dir)
    w, _ = wire_real(monkeypatch, spec, project, "dev", SLURM_OUTPUTS, RecordingBackend(failing={"slurm-controller"}))
    with pytest.raises(PoolError, match=r"slurm-controller: configure failed at task 'Start slurmctld'"):
        w.adapters.executor.configure(BATCH)


def test_ssh_through_a_bastion_with_the_os_default_user_and_a_key_path(monkeypatch, project):
    spec = with_configure(load_stack("inference", project.stacks_dir), connection="ssh",
                          ssh_proxy_jump="ec2-user@bastion.example.com", ssh_private_key_file="keys/inference")
    assert spec.pool.type == "kubernetes" and spec.image.os == "al2023"
    backend = RecordingBackend()
    w, _ = wire_real(monkeypatch, spec, project, "inference", {"bucket": "unused"}, backend)

    w.adapters.executor.configure(BATCH)

    inventory = backend.calls[0]["inventory"]["all"]
    assert inventory["hosts"]["b1-n001"] == {
        "ansible_host": "10.0.0.11", "ansible_user": "ec2-user", "ansible_port": 22,
        "ansible_ssh_private_key_file": str(project.root / "keys" / "inference"),
        "ansible_ssh_common_args": "-o ProxyJump=ec2-user@bastion.example.com",
        "gpufleet_batch": 1, "gpufleet_block": 0}
    assert set(inventory["hosts"]) == {"b1-n000", "b1-n001"}  # no controller on a Kubernetes stack
    assert "slurm_controller" not in inventory["children"]
    assert "munge_key_secret_id" not in backend.calls[0]["extravars"]
    assert "lustre_client_fs_dns" not in backend.calls[0]["extravars"]  # no FSx outputs here: nothing to mount


def test_ssh_user_defaults_to_ubuntu_off_al2023_and_an_explicit_ssm_bucket_wins(project):
    dev = load_stack("dev", project.stacks_dir)
    ssh = connection_for(with_configure(dev, connection="ssh"), {}, project)
    assert (ssh.user, ssh.proxy_jump, ssh.private_key_file) == ("ubuntu", None, None)
    ssm = connection_for(with_configure(dev, ssm_bucket="ops-ssm-transfer"), SLURM_OUTPUTS, project)
    assert (ssm.bucket, ssm.region) == ("ops-ssm-transfer", "us-east-1")


def test_ssm_without_any_bucket_is_a_config_error_before_any_run(monkeypatch, project):
    spec = load_stack("inference", project.stacks_dir)
    backend = RecordingBackend()
    w, _ = wire_real(monkeypatch, spec, project, "inference", {}, backend)
    with pytest.raises(ConfigError) as err:
        w.adapters.executor.configure(BATCH)
    assert err.value.exit_code == 2 and err.value.field == "gpufleet:configure.ssmBucket"
    assert "S3 bucket" in str(err.value) and backend.calls == []


def test_slurm_stack_without_its_controller_outputs_is_a_config_error(monkeypatch, project):
    spec = load_stack("dev", project.stacks_dir)
    outputs = {k: v for k, v in SLURM_OUTPUTS.items() if k != "slurmControllerIp"}
    w, _ = wire_real(monkeypatch, spec, project, "dev", outputs, RecordingBackend())
    with pytest.raises(ConfigError, match="slurmControllerIp"):
        w.adapters.executor.configure(BATCH)
    assert not (project.state_dir("dev") / "slurm-config").exists()


@pytest.mark.parametrize("configure, field", [
    ({"connection": "ssm", "sshUser": "ubuntu"}, "sshUser only apply to connection ssh"),
    ({"connection": "ssh", "ssmBucket": "some-bucket"}, "ssmBucket only applies to connection ssm"),
    ({"connection": "ssh", "sshProxyJump": "bastion.example.com"}, "gpufleet:configure.sshProxyJump"),
    ({"connection": "telnet"}, "gpufleet:configure.connection"),
])
def test_configure_section_is_validated(project, configure, field):
    raw = raw_from_stack_yaml(project.stacks_dir / "Pulumi.dev.yaml")
    with pytest.raises(ConfigErrors, match=field):
        ClusterSpec.from_raw({**raw, "configure": configure}, source="stacks/Pulumi.dev.yaml")


def test_provisioner_outputs_are_plain_values_of_the_selected_stack():
    from pulumi import automation as auto

    stack = SimpleNamespace(outputs=lambda: {"bucket": auto.OutputValue("dev-data-1a2b3c4d", False),
                                             "slurmMungeKeySecretArn": auto.OutputValue("arn:x", True)})
    provisioner = pulumi_provisioner.PulumiProvisioner(stack, "gpufleet", ec2=lambda: None)
    assert provisioner.outputs() == {"bucket": "dev-data-1a2b3c4d", "slurmMungeKeySecretArn": "arn:x"}
