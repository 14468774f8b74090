"""Which transport a real Slurm stack's pool gets: the stack's `gpufleet:configure` connection to the
controller named in its Pulumi outputs, read at the first command; `GPUFLEET_SLURM_CLIENT=local`
on the controller or a login node itself."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpufleet.errors import ConfigError, PoolError
from gpufleet.pool.factory import SLURM_CLIENT_ENV, pool_for
from gpufleet.pool.slurm.adapter import SlurmPool
from gpufleet.pool.slurm.transport import FirstUseTransport, LocalTransport, SshTransport, SsmTransport
from gpufleet.project import load_project
from gpufleet.spec import ConfigureConfig, load_stack

REPO = Path(__file__).resolve().parents[2]
OUTPUTS = {"bucket": "dev-data-1a2b3c4d", "slurmControllerIp": "10.0.16.10",
           "slurmControllerInstanceId": "i-0c0ffee0c0ffee000"}


@pytest.fixture
def project(tmp_path: Path):
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copytree(REPO / "stacks", root / "stacks")
    shutil.copytree(REPO / "images", root / "images")
    return load_project(root)


class Outputs:
    """The stack's outputs, counting reads: the pool must not ask Pulumi before its first command."""

    def __init__(self, values: dict) -> None:
        self.values, self.reads = values, 0

    def __call__(self) -> dict:
        self.reads += 1
        return dict(self.values)


def _pool(project, monkeypatch, outputs: Outputs, **configure) -> SlurmPool:
    monkeypatch.delenv(SLURM_CLIENT_ENV, raising=False)
    spec = load_stack("dev", project.stacks_dir)
    if configure:
        spec = spec.model_copy(update={"configure": ConfigureConfig(**configure)})
    pool = pool_for(spec, project, "dev", outputs=outputs)
    assert isinstance(pool, SlurmPool)
    return pool


def test_ssh_goes_to_the_controller_ip_through_the_bastion_with_the_key(project, monkeypatch):
    outputs = Outputs(OUTPUTS)
    pool = _pool(project, monkeypatch, outputs, connection="ssh", ssh_proxy_jump="ubuntu@bastion.example.com",
                 ssh_private_key_file="keys/dev")
    transport = pool.cli.transport
    assert isinstance(transport, FirstUseTransport) and outputs.reads == 0
    assert transport.where == "the Slurm controller of stack 'dev'"  # nothing built yet
    ssh = transport.get()
    assert isinstance(ssh, SshTransport) and outputs.reads == 1
    assert (ssh.host, ssh.user, ssh.port, ssh.proxy_jump) == ("10.0.16.10", "ubuntu", 22, "ubuntu@bastion.example.com")
    assert ssh.key_file == project.root / "keys" / "dev"
    assert ssh.known_hosts == project.state_dir("dev") / "ssh" / "known_hosts" and ssh.known_hosts.parent.is_dir()
    assert transport.get() is ssh and outputs.reads == 1  # built once
    assert transport.user == "ubuntu" and transport.where == "ssh ubuntu@10.0.16.10 via ubuntu@bastion.example.com"

    argv = ssh.argv("sinfo -h", timeout_s=10)
    assert argv[-5:] == ["-p", "22", "ubuntu@10.0.16.10", "--", "sinfo -h"]
    assert "BatchMode=yes" in argv and "IdentitiesOnly=yes" in argv and "ControlMaster=auto" in argv
    assert "ConnectTimeout=10" in argv and "ConnectTimeout=3" in ssh.argv("sinfo", timeout_s=2.5)  # bounded by the limit
    control = Path(ssh.control_path or "")
    assert control.name == "cm-%C" and control.parent.is_dir() and control.parent.stat().st_mode & 0o077 == 0
    proxy = next(a for a in argv if a.startswith("ProxyCommand="))
    assert "-W %h:%p ubuntu@bastion.example.com" in proxy and "BatchMode=yes" in proxy and "keys/dev" in proxy


def test_ssm_goes_to_the_controller_instance_with_the_stack_bucket(project, monkeypatch):
    outputs = Outputs(OUTPUTS)
    pool = _pool(project, monkeypatch, outputs)  # dev's own configure: ssm
    ssm = pool.cli.transport.get()  # type: ignore[attr-defined]
    assert isinstance(ssm, SsmTransport)
    assert (ssm.instance_id, ssm.bucket, ssm.user) == ("i-0c0ffee0c0ffee000", "dev-data-1a2b3c4d", "root")
    assert ssm.ssm.meta.region_name == "us-east-1" and ssm.s3.meta.region_name == "us-east-1"


def test_a_stack_without_controller_outputs_fails_at_the_first_command_naming_the_output(project, monkeypatch):
    pool = _pool(project, monkeypatch, Outputs({"bucket": "dev-data-1a2b3c4d"}))
    with pytest.raises(ConfigError, match="slurmControllerIp"):
        pool.state()


def test_on_the_controller_itself_the_commands_run_locally(project, monkeypatch):
    outputs = Outputs(OUTPUTS)
    spec = load_stack("dev", project.stacks_dir)
    monkeypatch.setenv(SLURM_CLIENT_ENV, "local")
    pool = pool_for(spec, project, "dev", outputs=outputs)
    assert isinstance(pool.cli.transport, LocalTransport) and outputs.reads == 0  # type: ignore[attr-defined]
    monkeypatch.setenv(SLURM_CLIENT_ENV, "ssh")
    with pytest.raises(ConfigError, match=r"GPUFLEET_SLURM_CLIENT='ssh' is not a Slurm client choice"):
        pool_for(spec, project, "dev", outputs=outputs)


def test_without_a_pulumi_cli_the_first_command_says_how_to_go_on(project, monkeypatch, tmp_path):
    """`gpufleet pool -s dev` outside the rollout reads the outputs itself, from Pulumi."""
    monkeypatch.delenv(SLURM_CLIENT_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no pulumi here
    pool = pool_for(load_stack("dev", project.stacks_dir), project, "dev")
    with pytest.raises(PoolError, match=r"cannot read the Pulumi outputs of stack 'dev'.*pulumi.*"
                                        r"GPUFLEET_SLURM_CLIENT=local"):
        pool.state()
