"""The whole cluster from one spec and its plan: what `infra/__main__.py` runs.

Kept apart from `__main__.py` so the offline preview, the tests and the simulator run the
same wiring under mocks. An ERROR finding stops here: nothing is created from a bad plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.cloud import tags as t
from infra.cloud.compute import Compute
from infra.cloud.eks import Eks
from infra.cloud.identity import Identity
from infra.cloud.network import Network
from infra.cloud.staging import DEPLOYED_OUTPUT, IMAGES_OUTPUT, own_stack_name, recorded_state, resolve_staging
from infra.cloud.storage import Storage
from infra.cloud.userdata import EksCoordinates, eks_user_data, shell_user_data
from infra.errors import ConfigError
from infra.findings import has_errors
from infra.plan.model import ClusterPlan, NodeSlot
from infra.spec import ClusterSpec

DEFAULT_AMI_PARAMETERS = {
    "al2023": "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/x86_64/nvidia/recommended/image_id",
    "ubuntu-22.04": "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id",
    "ubuntu-24.04": "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id",
}


def ami_parameter(spec: ClusterSpec) -> str | None:
    """The SSM parameter holding the AMI id, when the stack does not pin `image.amiId`."""
    if spec.image.ami_id:
        return None
    return spec.image.ami_ssm_parameter or DEFAULT_AMI_PARAMETERS[spec.image.os].format(
        k8s=spec.pool.kubernetes_version)


def resolve_ami(spec: ClusterSpec) -> pulumi.Input[str]:
    parameter = ami_parameter(spec)
    if parameter is None:
        return spec.image.ami_id  # type: ignore[return-value]
    return aws.ssm.get_parameter_output(name=parameter).value


@dataclass
class Cluster:
    network: Network
    storage: Storage
    identity: Identity
    eks: Eks | None
    compute: Compute
    deployed_batches: int
    batch_images: pulumi.Output[dict[str, str]]

    def outputs(self) -> dict[str, object]:
        out: dict[str, object] = {
            "nodes": self.compute.inventory(),
            DEPLOYED_OUTPUT: self.deployed_batches,
            IMAGES_OUTPUT: self.batch_images,
            "fsxDnsName": self.storage.file_system.dns_name,
            "fsxMountName": self.storage.file_system.mount_name,
            "bucket": self.storage.bucket.bucket,
            "vpcId": self.network.vpc.id,
            "placementGroup": self.compute.placement_group.name,
        }
        if self.eks is not None:
            out["clusterName"] = self.eks.name
            out["kubeconfig"] = self.eks.kubeconfig
        return out


def build_cluster(spec: ClusterSpec, plan: ClusterPlan) -> Cluster:
    if has_errors(plan.findings):
        first = next(f for f in plan.findings if f.level.value == "ERROR")
        raise ConfigError(first.message, field=first.field, expected="a plan without ERROR findings (gpufleet validate)")
    stack, name = pulumi.get_stack(), spec.cluster.name
    tags = t.base_tags(stack, name)
    provider = aws.Provider("aws", region=spec.cluster.region,
                            default_tags=aws.ProviderDefaultTagsArgs(tags=tags))
    opts = pulumi.ResourceOptions(providers=[provider])
    kubernetes = spec.pool.type == "kubernetes"
    network = Network(f"{name}-net", plan, spec.network.vpc_cidr, tags, eks=kubernetes, opts=opts)
    fsx_groups = [network.lustre_sg.id] + ([network.efa_sg.id] if plan.storage.efa_enabled else [])
    storage = Storage(f"{name}-storage", plan.storage, spec.storage, network.compute_subnet.id, fsx_groups, tags,
                      opts=opts)
    identity = Identity(f"{name}-identity", stack, spec.cluster.region, storage.bucket.arn,
                        [link.prefix for link in storage.links], kubernetes, tags, opts=opts)
    eks = None
    if kubernetes:
        assert network.control_plane_subnet is not None
        eks = Eks(f"{name}-eks", name, spec.cluster.region, spec.pool.kubernetes_version,
                  [network.management_subnet.id, network.control_plane_subnet.id], identity.role.arn, tags,
                  opts=opts)
    recorded = recorded_state(own_stack_name())
    staging = resolve_staging(spec.rollout.target_batch, recorded.batches, len(plan.batches),
                              spec.rollout.allow_shrink)
    ami = resolve_ami(spec)
    # Existing batches keep the image they were deployed with; only new batches get the current one.
    images = {str(b.number): (recorded.images.get(str(b.number)) or ami) if staging.existing(b.number) else ami
              for b in plan.batches if staging.has_instances(b.number)}
    compute = Compute(f"{name}-compute", spec, plan, staging, network.compute_subnet.id,
                      [network.efa_sg.id, network.node_sg.id], identity.instance_profile.arn, ami,
                      lambda batch: images[str(batch)], _user_data(stack, eks), tags, opts=opts)
    return Cluster(network=network, storage=storage, identity=identity, eks=eks, compute=compute,
                   deployed_batches=staging.active, batch_images=pulumi.Output.from_input(images))


def _user_data(stack: str, eks: Eks | None):
    if eks is None:
        return lambda slot: shell_user_data(slot, stack)
    coords = pulumi.Output.all(eks.name, eks.endpoint, eks.certificate_authority, eks.service_cidr).apply(
        lambda a: EksCoordinates(name=a[0], api_server_endpoint=a[1], certificate_authority=a[2], cidr=a[3]))

    def render(slot: NodeSlot) -> pulumi.Output[str]:
        return coords.apply(lambda c: eks_user_data(slot, stack, c))
    return render
