"""GPU nodes in staged batches: placement group, launch template, one instance per slot.

The launch template's interface layout comes from the catalog (primary ENA on card 0,
EFA-only on the others), each interface with both the EFA and the node security group; the
subnet keeps them private. Instances are named by their plan slot, so raising the batch target
only adds names; `staging.resolve_staging` decides which slots exist, which are protected and
which ignore image changes. Capacity reservations and blocks are targeted, never bought.

Only an on-demand fleet gets a cluster placement group of its own: a reservation's placement is
fixed when it is made, so a new group around it can only cost capacity ("insufficient capacity
errors may occur ... even if the capacity reservation has remaining capacity", ParallelCluster's
PlacementGroupCapacityReservationValidator; https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html),
and Capacity Blocks are already placed together in an UltraCluster
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityBlock.html). IMDS answers one
hop only: pods (user jobs included) must not borrow the node role
(https://aws.github.io/aws-eks-best-practices/security/docs/iam/, "Restrict access to the instance profile").
"""

from __future__ import annotations

from typing import Callable, Sequence

import pulumi
import pulumi_aws as aws

from gpufleet.aws_rules import reservation_for
from gpufleet.catalog import InstanceType
from gpufleet import tagging as t
from gpufleet.cloud.staging import StagedSlot
from gpufleet.plan.model import ClusterPlan
from gpufleet.spec import CapacityType, ClusterSpec

ROOT_DEVICE = {"al2023": "/dev/xvda", "ubuntu-22.04": "/dev/sda1", "ubuntu-24.04": "/dev/sda1"}
ROOT_VOLUME_GIB = 512
METADATA_HOP_LIMIT = 1  # host-network agents (aws-node, kube-proxy, CSI node, enroot) need no more


def capacity_ids(spec: ClusterSpec) -> tuple[str, ...]:
    cap = spec.cluster.capacity
    return cap.capacity_block_ids if cap.type is CapacityType.CAPACITY_BLOCK else cap.reservation_ids


def network_interfaces(instance: InstanceType, subnet_id: pulumi.Input[str],
                       security_groups: list[pulumi.Input[str]]) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
    """One entry per catalog interface. `associate_public_ip_address` only on a single-interface
    layout: EC2 rejects the parameter on a launch with several network interfaces ("The
    associatePublicIPAddress parameter cannot be specified when launching with multiple network
    interfaces"; Terraform's AWS provider stopped sending it for that reason:
    hashicorp/terraform-provider-aws#6777, fixed by #10157). The subnet's
    `mapPublicIpOnLaunch: false` keeps these nodes private; the policy pack checks both."""
    single = len(instance.interfaces) == 1
    return [aws.ec2.LaunchTemplateNetworkInterfaceArgs(
        network_card_index=slot.network_card_index, device_index=slot.device_index,
        interface_type=slot.interface_type.value, subnet_id=subnet_id, security_groups=security_groups,
        associate_public_ip_address=False if single else None, delete_on_termination=True,
        description=f"card {slot.network_card_index} device {slot.device_index} {slot.interface_type.value}")
        for slot in instance.interfaces]


class Compute(pulumi.ComponentResource):
    """Placement group, the launch template for the stack's instance type, and the staged slots' instances."""

    def __init__(self, name: str, spec: ClusterSpec, plan: ClusterPlan, slots: Sequence[StagedSlot],
                 subnet_id: pulumi.Input[str], security_groups: list[pulumi.Input[str]],
                 instance_profile_arn: pulumi.Input[str], ami: pulumi.Input[str],
                 slot_ami: Callable[[StagedSlot], pulumi.Input[str]],
                 user_data: Callable[[StagedSlot], pulumi.Input[str]], tags: dict[str, str],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:compute:Compute", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        instance = spec.cluster.instance
        cap = spec.cluster.capacity
        ids = capacity_ids(spec)
        self.placement_group = None
        if cap.type is CapacityType.ON_DEMAND:
            self.placement_group = aws.ec2.PlacementGroup(
                f"{name}-pg", name=f"{name}-pg", strategy="cluster", tags=t.with_role(tags, "placement-group"),
                opts=child)
        group = self.placement_group.name if self.placement_group is not None else None
        block = cap.type is CapacityType.CAPACITY_BLOCK
        self.launch_template = aws.ec2.LaunchTemplate(
            f"{name}-{instance.name.replace('.', '-')}", name=f"{name}-{instance.name.replace('.', '-')}",
            instance_type=instance.name, image_id=ami, ebs_optimized="true",
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=instance_profile_arn),
            network_interfaces=network_interfaces(instance, subnet_id, security_groups),
            placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=group,
                                                          availability_zone=plan.availability_zone),
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=METADATA_HOP_LIMIT,
                instance_metadata_tags="disabled"),
            block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=ROOT_DEVICE[spec.image.os],
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    encrypted="true", volume_type="gp3", volume_size=ROOT_VOLUME_GIB, delete_on_termination="true"))],
            instance_market_options=(aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
                                     if block else None),
            capacity_reservation_specification=(
                aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                    capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                        capacity_reservation_id=ids[0])) if ids else None),
            tag_specifications=[aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=r, tags=t.with_role(tags, "gpu-node"))
                                for r in ("instance", "volume", "network-interface")],
            update_default_version=True, tags=t.with_role(tags, "launch-template"), opts=child)
        self.instances: dict[str, aws.ec2.Instance] = {}
        self.slots = list(slots)
        self.generations = dict(spec.rollout.slot_generations)  # slot -> its instance's replacement generation
        for slot in self.slots:
            reservation = reservation_for(slot.index, len(plan.nodes), ids)
            self.instances[slot.name] = aws.ec2.Instance(
                # the group on the instance too: the provider sends the instance's own Placement with its AZ
                slot.name, ami=slot_ami(slot), instance_type=instance.name, availability_zone=plan.availability_zone,
                placement_group=group,
                launch_template=aws.ec2.InstanceLaunchTemplateArgs(
                    id=self.launch_template.id, version=self.launch_template.latest_version.apply(str)),
                user_data=user_data(slot), user_data_replace_on_change=False,
                instance_market_options=(aws.ec2.InstanceInstanceMarketOptionsArgs(market_type="capacity-block")
                                         if block else None),
                capacity_reservation_specification=(
                    aws.ec2.InstanceCapacityReservationSpecificationArgs(
                        capacity_reservation_target=aws.ec2.InstanceCapacityReservationSpecificationCapacityReservationTargetArgs(
                            capacity_reservation_id=reservation)) if reservation else None),
                tags=t.node_tags(tags, slot, spec.rollout.slot_generations.get(slot.name, 0)),
                opts=pulumi.ResourceOptions(parent=self, protect=slot.protected,
                                            ignore_changes=slot.frozen_properties,
                                            delete_before_replace=slot.reimage))
        self.register_outputs({"placementGroup": group,
                               "launchTemplateId": self.launch_template.id, "instances": len(self.instances)})

    def inventory(self) -> pulumi.Output[dict[str, list[dict]]]:
        """Per batch: slot, instance id, private IP, batch, block, replacement generation (the rollout's node list)."""
        generations = self.generations
        rows = [pulumi.Output.all(self.instances[s.name].id, self.instances[s.name].private_ip).apply(
            lambda a, s=s: {"slot": s.name, "instanceId": a[0], "privateIp": a[1], "batch": s.batch, "block": s.block,
                            "generation": generations.get(s.name, 0)})
            for s in self.slots]

        def group(items: list[dict]) -> dict[str, list[dict]]:
            out: dict[str, list[dict]] = {}
            for row in items:
                out.setdefault(str(row["batch"]), []).append(row)
            return out
        return pulumi.Output.all(*rows).apply(group)
