"""How gpufleet reaches a real stack's hosts: the stack's `gpufleet:configure` connection, and its
Slurm controller as that connection addresses it (its instance id for SSM, its private IP for SSH).

Shared by the rollout's executor (gpufleet.rollout.wiring) and the Slurm pool's client
(gpufleet.pool.factory), from the stack's Pulumi outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from gpufleet.configure.inventory import Connection, Node, SshConnection, SsmConnection
from gpufleet.errors import ConfigError
from gpufleet.project import Project
from gpufleet.spec import ClusterSpec

CONTROLLER_SLOT = "slurm-controller"  # the controller's inventory host (not a GPU node, no slot of the plan)


def connection_for(spec: ClusterSpec, outputs: Mapping[str, Any], project: Project) -> Connection:
    """SSM with the configured bucket (else the stack's own `bucket` output), or SSH as configured."""
    cfg = spec.configure
    if cfg.connection == "ssm":
        bucket = cfg.ssm_bucket or outputs.get("bucket")
        if not bucket:
            raise ConfigError("the aws_ssm connection moves files through an S3 bucket, and this stack names none "
                              "and has no `bucket` output", field="gpufleet:configure.ssmBucket",
                              expected="an S3 bucket your AWS credentials may read and write, or connection: ssh")
        return SsmConnection(bucket=str(bucket), region=spec.cluster.region)
    key = cfg.ssh_private_key_file
    return SshConnection(user=cfg.ssh_user or ("ec2-user" if spec.image.os == "al2023" else "ubuntu"),
                         private_key_file=project.path(Path(key).expanduser()) if key else None,
                         proxy_jump=cfg.ssh_proxy_jump)


def slurm_controller(spec: ClusterSpec, outputs: Mapping[str, Any], project: Project) -> tuple[Connection, Node]:
    """How gpufleet reaches a Slurm pool's controller: the stack's configure connection, and the
    controller as that connection addresses it (its instance id for SSM, its private IP for SSH)."""
    connection = connection_for(spec, outputs, project)
    ip, instance_id = (stack_output(outputs, name) for name in ("slurmControllerIp", "slurmControllerInstanceId"))
    return connection, controller_host(connection, ip, instance_id)


def controller_host(connection: Connection, ip: str, instance_id: str) -> Node:
    """The Slurm controller as an inventory host of group `slurm_controller` (site.yml's controller play)."""
    address = instance_id if isinstance(connection, SsmConnection) else ip
    return Node(slot=CONTROLLER_SLOT, address=address, instance_id=instance_id, groups=("slurm_controller",),
                gpu=False)


def stack_output(outputs: Mapping[str, Any], name: str) -> str:
    value = outputs.get(name)
    if not value:
        raise ConfigError(f"the stack has no `{name}` output, which a Slurm pool's controller needs",
                          field="gpufleet:pool.type",
                          expected="a stack whose Pulumi program created the Slurm controller (its first batch's "
                                   "`pulumi up` exports it)")
    return str(value)
