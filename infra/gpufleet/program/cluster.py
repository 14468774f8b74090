"""The whole cluster from one spec and its plan: what `infra/__main__.py` runs.

Kept apart from `__main__.py` so the offline preview, the tests and the simulator run the
same wiring under mocks (`capture.capture_program` calls `run_program(mocked=True)`). Any
ERROR finding, BOM rules included, stops here: nothing is created from a bad plan; and a
simulated stack stops here unless it runs under mocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from gpufleet import tagging as t
from gpufleet.aws_rules import kubelet_max_pods
from gpufleet.cloud.compute import Compute
from gpufleet.cloud.eks import Eks
from gpufleet.cloud.identity import Identity
from gpufleet.cloud.network import Network
from gpufleet.cloud.recorded import own_stack_name, recorded_deployment
from gpufleet.cloud.slurm_controller import SlurmController
from gpufleet.cloud.staging import (DEPLOYED_OUTPUT, SLOTS_OUTPUT, StagedSlot, Staging, encode_deployment, layout_settings,
                                 resolve_staging)
from gpufleet.cloud.storage import Storage
from gpufleet.cloud.storage_clients import StorageClients
from gpufleet.cloud.userdata import EksCoordinates, eks_user_data, shell_user_data
from gpufleet.errors import ConfigError
from gpufleet.findings import Level
from gpufleet.plan import plan_stack
from gpufleet.plan.model import ClusterPlan
from gpufleet.spec import ClusterSpec, load_from_pulumi_config

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
    plan: ClusterPlan
    network: Network
    storage: Storage
    identity: Identity
    eks: Eks | None
    slurm: SlurmController | None
    storage_clients: StorageClients
    compute: Compute
    staging: Staging
    deployment: pulumi.Output[dict]

    def outputs(self) -> dict[str, object]:
        out: dict[str, object] = {
            "nodes": self.compute.inventory(),
            DEPLOYED_OUTPUT: self.staging.active,
            SLOTS_OUTPUT: self.deployment,
            "fsxDnsName": self.storage.file_system.dns_name,
            "fsxMountName": self.storage.file_system.mount_name,
            "bucket": self.storage.bucket.bucket,
            "vpcId": self.network.vpc.id,
            "placementGroup": self.compute.placement_group.name if self.compute.placement_group else None,
            "storageClients": self.storage_clients.inventory(),
        }
        if self.eks is not None:
            out["clusterName"] = self.eks.name
            out["kubeconfig"] = self.eks.kubeconfig
        if self.slurm is not None:
            out.update(self.slurm.outputs())
        return out


def refuse_simulated(spec: ClusterSpec, stack: str) -> None:
    """A simulated stack (it has `gpufleet:simulator`) must never reach a cloud."""
    raise ConfigError(
        f"stack {stack} is simulated (it sets gpufleet:simulator): `pulumi up` would create real AWS resources "
        "(an FSx file system, a NAT gateway, endpoints) for a fleet that exists only in the simulator",
        field="gpufleet:simulator",
        expected=f"`gpufleet rollout -s {stack}` (the simulated rollout) or `gpufleet preview --offline -s {stack}`; "
                 "remove gpufleet:simulator to make a real stack")


def refuse_errors(plan: ClusterPlan) -> None:
    """Every ERROR finding (BOM rules included) stops the program: nothing is created from a bad plan."""
    errors = [f for f in plan.findings if f.level is Level.ERROR]
    if errors:
        raise ConfigError(f"{len(errors)} ERROR finding(s): " + "; ".join(f"{f.code} {f.field}: {f.message}"
                                                                           for f in errors),
                          field=", ".join(sorted({f.field for f in errors})),
                          expected="a plan without ERROR findings (`gpufleet validate -s STACK` lists them)")


def build_cluster(spec: ClusterSpec, plan: ClusterPlan, *, mocked: bool = False) -> Cluster:
    """The whole cluster. `mocked`: the caller runs it under Pulumi mocks (the offline preview and the
    simulator, through `capture.capture_program`); only then may a simulated stack run."""
    stack, name = pulumi.get_stack(), spec.cluster.name
    if spec.simulated and not mocked:
        refuse_simulated(spec, stack)
    refuse_errors(plan)
    resized = spec.rollout.layout is not None
    if resized:  # grown or shrunk by whole blocks: exactly the rollout's slots, in its batches
        from gpufleet.plan.resize import decode_layout

        plan = decode_layout(spec.rollout.layout or "", plan)
    recorded = recorded_deployment(own_stack_name(), name, plan.nodes)
    layout = layout_settings(spec)
    staging = resolve_staging(plan.nodes, len(plan.batches), spec.rollout.target_batch, recorded,
                              spec.rollout.allow_shrink, layout, released_by_rollout=resized,
                              ).with_images(spec.image.slot_amis, plan.nodes)
    tags = t.base_tags(stack, name)
    provider = aws.Provider("aws", region=spec.cluster.region,
                            default_tags=aws.ProviderDefaultTagsArgs(tags=tags))
    opts = pulumi.ResourceOptions(providers=[provider])
    kubernetes, slurm_pool = spec.pool.type == "kubernetes", spec.pool.type == "slurm"
    network = Network(f"{name}-net", plan, spec.network.vpc_cidr, tags, eks=kubernetes, slurm=slurm_pool,
                      os_name=spec.image.os, opts=opts)
    fsx_groups = [network.lustre_sg.id] + ([network.efa_sg.id] if plan.storage.efa_enabled else [])
    storage = Storage(f"{name}-storage", plan.storage, spec.storage, network.compute_subnet.id, fsx_groups, tags,
                      opts=opts)
    identity = Identity(f"{name}-identity", stack, spec.cluster.region, storage.bucket.arn,
                        storage.prefixes, kubernetes, tags, opts=opts)
    eks = None
    if kubernetes:
        assert network.control_plane_subnet is not None
        assert network.control_plane_sg is not None
        eks = Eks(f"{name}-eks", name, spec.cluster.region, spec.pool.kubernetes_version,
                  [network.management_subnet.id, network.control_plane_subnet.id], identity.role.arn, tags,
                  control_plane_security_group=network.control_plane_sg.id,
                  system_subnet_id=network.management_subnet.id, pod_networking=spec.network.pod_networking,
                  gpu_node_security_group=network.node_sg.id,
                  public_access_cidrs=tuple(spec.pool.endpoint_public_access_cidrs), opts=opts)
        from gpufleet.pool.kubernetes.objects import pool_objects  # pulumi_kubernetes only for EKS pools
        pool_objects(f"{name}-pool", spec, plan, storage, eks.provider, opts=opts)  # after the system nodes (provider)
    slurm = None
    if slurm_pool:
        slurm = SlurmController(f"{name}-slurm", stack, spec, plan, network, tags, opts=opts)
    # the storage base check's clients exist at any batch target: it runs before any GPU node is bought
    clients = StorageClients(f"{name}-storage-clients", spec, plan, network, tags, opts=opts)
    ami = resolve_ami(spec)
    # Existing slots keep the image they were deployed with, new slots get the current one; a slot
    # named in image.slotAmis boots its override (a reimage upgrade moves groups this way).
    compute = Compute(f"{name}-compute", spec, plan, staging.slots, network.compute_subnet.id,
                      [network.efa_sg.id, network.node_sg.id], identity.instance_profile.arn, ami,
                      lambda slot: slot.ami or ami, _user_data(stack, eks, kubelet_max_pods(spec)), tags, opts=opts)
    deployment = pulumi.Output.from_input(ami).apply(
        lambda current: encode_deployment(staging.deployment(name, layout, current)))
    return Cluster(plan=plan, network=network, storage=storage, identity=identity, eks=eks, slurm=slurm,
                   storage_clients=clients, compute=compute, staging=staging, deployment=deployment)


def run_program(*, mocked: bool = False) -> Cluster:
    """What `infra/__main__.py` runs: the stack's config, its plan with BOM findings, the cluster, exports.

    The BOM is the project's (`image.bom` relative to the project root; Pulumi runs programs
    from there). `mocked` as in `build_cluster`.
    """
    spec = load_from_pulumi_config()
    cluster = build_cluster(spec, plan_stack(spec), mocked=mocked)
    for key, value in cluster.outputs().items():
        pulumi.export(key, value)
    return cluster


def _user_data(stack: str, eks: Eks | None, max_pods: int | None = None):
    if eks is None:
        return lambda slot: shell_user_data(slot, stack)
    coords = pulumi.Output.all(eks.name, eks.endpoint, eks.certificate_authority, eks.service_cidr).apply(
        lambda a: EksCoordinates(name=a[0], api_server_endpoint=a[1], certificate_authority=a[2], cidr=a[3]))

    def render(slot: StagedSlot) -> pulumi.Output[str]:
        return coords.apply(lambda c: eks_user_data(slot, stack, c, max_pods))
    return render
