"""The storage base check's clients: small non-GPU instances beside the file system.

Why they exist: the storage base check (fio against FSx for Lustre) must halt a shortfall before
any GPU node is bought (DESIGN.md section 6, issue 13). Nothing else is up before the first batch,
so the program creates `acceptance.storageClients` network-optimised x86 instances
(`acceptance.storageClientType`, infra/gpufleet/plan/storage_clients.py) with the network, the file
system and the controller, whatever the GPU batch target is: a `pulumi up` at
`rollout.targetBatch` 0 builds the base and these clients, and no GPU node.

- In the compute subnet, where the file system's interfaces are, with the GPU nodes' security
  group: it already holds what a Lustre client needs (to and from the Lustre ports in the compute
  subnet, which the file system's group admits) and what the executor needs (SSH from the
  management subnet, HTTPS out for SSM and the package mirrors). No EFA: they mount over TCP.
- Their own role with SSM only (the aws_ssm connection): they read no bucket and no secret, so
  they get neither the nodes' data prefixes nor the munge key.
- The plain image of the stack's OS, IMDSv2 only, an encrypted gp3 root, no public address
  (`gpufleet.cloud.plain_instance`, as the Slurm head node). `ignore_changes=["ami"]`: a newer
  image is no reason to replace a client mid-rollout. Not protected: they hold no state. There is always at least one
  (`storageClients` >= 1): no setting buys the canary before the storage verdict, and they stay
  for a re-check after a storage change.

Output (stack export `storageClients`): {name: {instanceId, privateIp}}.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from gpufleet import tagging as t
from gpufleet.cloud.identity import ASSUME_EC2, MANAGED_POLICIES
from gpufleet.cloud.network import Network
from gpufleet.cloud.plain_instance import hardened_instance_args, plain_ami
from gpufleet.plan.model import ClusterPlan
from gpufleet.spec import ClusterSpec

ROLE = "storage-client"
ROOT_VOLUME_GIB = 32  # the OS, the Lustre client and fio; fio writes to the file system, not here


def client_name(cluster: str, index: int) -> str:
    """A client's name (its Pulumi name, `Name` tag and inventory host); never a GPU slot's."""
    return f"{cluster}-storage-client-{index}"


class StorageClients(pulumi.ComponentResource):
    """The storage base check's client instances, their role and instance profile."""

    def __init__(self, name: str, spec: ClusterSpec, plan: ClusterPlan, network: Network, tags: dict[str, str],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:storage:Clients", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(f"{name}-role", assume_role_policy=json.dumps(ASSUME_EC2, sort_keys=True),
                            description="gpufleet storage base check clients (SSM only)",
                            tags=t.with_role(tags, f"{ROLE}-role"), opts=child)
        aws.iam.RolePolicyAttachment(f"{name}-ssm", role=role.name, policy_arn=MANAGED_POLICIES["ssm"], opts=child)
        profile = aws.iam.InstanceProfile(f"{name}-profile", role=role.name, tags=t.with_role(tags, f"{ROLE}-profile"),
                                          opts=child)
        ami = plain_ami(spec.image.os)
        self.instances: dict[str, aws.ec2.Instance] = {}
        for index in range(spec.acceptance.storage_clients):
            host = client_name(spec.cluster.name, index)
            self.instances[host] = aws.ec2.Instance(
                host, ami=ami, instance_type=spec.acceptance.storage_client_type,
                availability_zone=plan.availability_zone, subnet_id=network.compute_subnet.id,
                vpc_security_group_ids=[network.node_sg.id], iam_instance_profile=profile.name,
                **hardened_instance_args(ROOT_VOLUME_GIB),
                tags=t.with_role(tags, ROLE, host),
                opts=pulumi.ResourceOptions(parent=self, ignore_changes=["ami"]))
        self.register_outputs({"clients": self.inventory()})

    def inventory(self) -> pulumi.Output[dict]:
        """{name: {instanceId, privateIp}}, the `storageClients` stack export."""
        return pulumi.Output.all(**{host: pulumi.Output.all(i.id, i.private_ip)
                                    for host, i in self.instances.items()}).apply(
            lambda rows: {host: {"instanceId": iid, "privateIp": ip} for host, (iid, ip) in rows.items()})
