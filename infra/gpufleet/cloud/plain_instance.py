"""The non-GPU instances the program runs beside the fleet (the Slurm head node, the storage
base check's clients): one hardened shape, so the two cannot drift apart.

Both boot the plain image of the stack's OS family (no GPU driver needed), require IMDSv2 with a
hop limit of 1 (no container on them reaches the instance's credentials), get no public address
and an encrypted gp3 root.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws

AMI_PARAMETERS = {  # plain (non-GPU) images of the stack's OS family
    "al2023": "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64",
    "ubuntu-22.04": "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id",
    "ubuntu-24.04": "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id",
}


def plain_ami(os_name: str) -> pulumi.Output[str]:
    """The OS family's current plain image, from its public SSM parameter."""
    return aws.ssm.get_parameter_output(name=AMI_PARAMETERS[os_name]).value


def hardened_instance_args(root_gib: int) -> dict[str, Any]:
    """`aws.ec2.Instance` arguments every plain instance takes."""
    return {
        "associate_public_ip_address": False,
        "metadata_options": aws.ec2.InstanceMetadataOptionsArgs(http_endpoint="enabled", http_tokens="required",
                                                                http_put_response_hop_limit=1),
        "root_block_device": aws.ec2.InstanceRootBlockDeviceArgs(encrypted=True, volume_type="gp3",
                                                                 volume_size=root_gib),
    }
