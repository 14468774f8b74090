"""Ansible inventories from the provisioner's node inventory, one connection kind per call.

Hosts are named by their slot (stable across replacements, no '/', which breaks runner's
fact cache). SSH carries keep-alives so a node that goes dark mid-play fails in seconds
instead of hanging the batch; SSM reaches nodes with no inbound port through the
amazon.aws.aws_ssm connection; chroot serves tests and image stages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Union

from gpufleet.errors import ConfigError

_ALIAS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Node:
    """One node of the provisioner's inventory; `groups` add to `gpu` (e.g. `slurm`). A host that is no
    GPU node (the Slurm controller) has `gpu=False`: only its own groups' plays reach it."""

    slot: str
    address: str
    instance_id: str | None = None
    groups: tuple[str, ...] = ()
    hostvars: Mapping[str, Any] = field(default_factory=dict)
    gpu: bool = True

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> "Node":
        known = {"slot", "address", "instance_id", "groups"}
        return cls(slot=str(raw["slot"]), address=str(raw["address"]), instance_id=raw.get("instance_id"),
                   groups=tuple(raw.get("groups", ())),
                   hostvars={k: v for k, v in raw.items() if k not in known and k.startswith("ansible_")})


@dataclass(frozen=True)
class SshConnection:
    user: str = "root"
    private_key_file: Path | None = None
    port: int = 22
    connect_timeout_s: int = 10
    server_alive_interval_s: int = 2
    server_alive_count_max: int = 2
    proxy_jump: str | None = None  # user@bastion: the nodes have private addresses only

    def ssh_args(self, known_hosts: Path) -> str:
        """For ANSIBLE_SSH_ARGS: keep-alives + a per-run known_hosts (fresh nodes, new keys)."""
        return " ".join([
            "-o ControlMaster=auto", "-o ControlPersist=60s",
            f"-o ConnectTimeout={self.connect_timeout_s}",
            f"-o ServerAliveInterval={self.server_alive_interval_s}",
            f"-o ServerAliveCountMax={self.server_alive_count_max}",
            "-o StrictHostKeyChecking=accept-new", f"-o UserKnownHostsFile={known_hosts}",
            "-o BatchMode=yes",
        ])

    def hostvars(self, node: Node) -> dict[str, Any]:
        out: dict[str, Any] = {"ansible_host": node.address, "ansible_user": self.user, "ansible_port": self.port}
        if self.private_key_file:
            out["ansible_ssh_private_key_file"] = str(self.private_key_file)
        if self.proxy_jump:
            out["ansible_ssh_common_args"] = f"-o ProxyJump={self.proxy_jump}"
        return out


@dataclass(frozen=True)
class SsmConnection:
    """amazon.aws.aws_ssm: needs the instance id and an S3 bucket for file transfer."""

    bucket: str
    region: str

    def hostvars(self, node: Node) -> dict[str, Any]:
        if not node.instance_id:
            raise ConfigError(f"node {node.slot} has no instance_id; the aws_ssm connection needs one")
        return {"ansible_connection": "amazon.aws.aws_ssm", "ansible_host": node.instance_id,
                "ansible_aws_ssm_bucket_name": self.bucket, "ansible_aws_ssm_region": self.region}


@dataclass(frozen=True)
class ChrootConnection:
    """community.general.chroot: `address` is the root directory."""

    python: str = "/usr/bin/python3"

    def hostvars(self, node: Node) -> dict[str, Any]:
        return {"ansible_connection": "community.general.chroot", "ansible_host": node.address,
                "ansible_python_interpreter": self.python}


Connection = Union[SshConnection, SsmConnection, ChrootConnection]


def build_inventory(nodes: Iterable[Node], connection: Connection) -> dict[str, Any]:
    """YAML-style inventory dict: every GPU node in `gpu`, plus each node's own groups."""
    hosts: dict[str, dict[str, Any]] = {}
    groups: dict[str, list[str]] = {"gpu": []}
    for node in nodes:
        if not _ALIAS.match(node.slot):
            raise ConfigError(f"slot {node.slot!r} cannot name an Ansible host", expected="letters, digits, . _ -")
        if node.slot in hosts:
            raise ConfigError(f"slot {node.slot!r} appears twice in the node inventory")
        hosts[node.slot] = {**connection.hostvars(node), **node.hostvars}
        if node.gpu:
            groups["gpu"].append(node.slot)
        for g in node.groups:
            groups.setdefault(g, []).append(node.slot)
    children = {g: {"hosts": {h: None for h in members}} for g, members in groups.items()}
    return {"all": {"hosts": hosts, "children": children}}
