"""The EKS control plane for a `kubernetes` pool (Slurm and sim pools get none).

Access entries (API authentication mode) admit the node role as EC2_LINUX, so no aws-auth
ConfigMap is edited. The kubeconfig is a secret output; the `pulumi_kubernetes.Provider`
built from it is what the pool components use.

The endpoint is private unless the stack names `pool.endpointPublicAccessCidrs`: the API server's
ENIs carry the network's control-plane group, which admits the GPU nodes and the management subnet,
so `pulumi up` (it installs the Helm releases and objects) and the rollout run from there (a runner
reached over SSM or a VPN), or from an egress address the public endpoint is restricted to
(`gpufleet validate` says which, AWS_EKS_ENDPOINT_PRIVATE). A small managed, untainted system node group runs what must be up before
any GPU node is admitted (CoreDNS, Kueue, the operators, Prometheus): every GPU node registers
behind the gate taint, and the gates need cluster DNS. The VPC CNI is a managed add-on configured
from the stack's podNetworking (its warm targets), so those settings reach aws-node.
The system nodes carry only the EKS-created cluster group (it admits itself; its egress is open),
so that group admits the GPU nodes' group on `network.SYSTEM_NODE_PATHS` (CoreDNS, the launcher):
https://docs.aws.amazon.com/eks/latest/userguide/sec-group-reqs.html
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from gpufleet import tagging as t
from gpufleet.cloud.identity import ASSUME_EC2
from gpufleet.cloud.network import SYSTEM_NODE_PATHS
from gpufleet.spec import PodNetworking

ASSUME_EKS = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": {"Service": "eks.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
LOG_TYPES = ["api", "audit", "authenticator"]
SYSTEM_INSTANCE_TYPE = "m7i.xlarge"
SYSTEM_NODES = 2  # two, so one can be replaced without CoreDNS going away
SYSTEM_NODE_POLICIES = ("arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
                        "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
                        "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly")


def vpc_cni_configuration(pods: PodNetworking) -> str:
    """The vpc-cni add-on's configuration values: the stack's warm targets as aws-node's env."""
    env = {"WARM_ENI_TARGET": str(pods.warm_eni_target)}
    if pods.warm_ip_target is not None:
        env["WARM_IP_TARGET"] = str(pods.warm_ip_target)
    if pods.minimum_ip_target is not None:
        env["MINIMUM_IP_TARGET"] = str(pods.minimum_ip_target)
    return json.dumps({"env": env}, sort_keys=True)


def kubeconfig(name: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig that authenticates with `aws eks get-token` (no long-lived credentials)."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "users": [{"name": name, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", name, "--region", region]}}}],
    }, sort_keys=True)


class Eks(pulumi.ComponentResource):
    """Control plane, cluster role, the nodes' access entry, system node group, vpc-cni, kubeconfig, k8s provider."""

    def __init__(self, name: str, cluster_name: str, region: str, version: str,
                 subnet_ids: list[pulumi.Input[str]], node_role_arn: pulumi.Input[str], tags: dict[str, str],
                 control_plane_security_group: pulumi.Input[str] | None = None,
                 system_subnet_id: pulumi.Input[str] | None = None, pod_networking: PodNetworking | None = None,
                 gpu_node_security_group: pulumi.Input[str] | None = None,
                 public_access_cidrs: tuple[str, ...] = (),
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:eks:Eks", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(f"{name}-cluster", assume_role_policy=json.dumps(ASSUME_EKS, sort_keys=True),
                            tags=t.with_role(tags, "eks-cluster-role"), opts=child)
        attach = aws.iam.RolePolicyAttachment(f"{name}-cluster-policy", role=role.name,
                                              policy_arn="arn:aws:iam::aws:policy/AmazonEKSClusterPolicy",
                                              opts=child)
        self.cluster = aws.eks.Cluster(
            f"{name}-cluster", name=cluster_name, version=version, role_arn=role.arn,
            access_config=aws.eks.ClusterAccessConfigArgs(authentication_mode="API",
                                                          bootstrap_cluster_creator_admin_permissions=True),
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=subnet_ids, endpoint_private_access=True, endpoint_public_access=bool(public_access_cidrs),
                # EKS defaults the list to 0.0.0.0/0: only ever sent with the stack's CIDRs
                public_access_cidrs=list(public_access_cidrs) or None,
                security_group_ids=[control_plane_security_group] if control_plane_security_group else None),
            enabled_cluster_log_types=LOG_TYPES, tags=t.with_role(tags, "eks", cluster_name),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[attach]))
        self.access_entry = aws.eks.AccessEntry(f"{name}-nodes", cluster_name=self.cluster.name,
                                                principal_arn=node_role_arn, type="EC2_LINUX",
                                                tags=t.with_role(tags, "eks-access"), opts=child)
        self.system_nodes = None
        if system_subnet_id is not None:
            self.system_nodes = self._system_node_group(name, system_subnet_id, tags)
        self.system_paths: list[aws.vpc.SecurityGroupIngressRule] = []
        if gpu_node_security_group is not None:
            self.system_paths = self._system_paths(name, gpu_node_security_group, tags)
        if pod_networking is not None and pod_networking.mode != "none":
            aws.eks.Addon(f"{name}-vpc-cni", cluster_name=self.cluster.name, addon_name="vpc-cni",
                          configuration_values=vpc_cni_configuration(pod_networking),
                          resolve_conflicts_on_create="OVERWRITE", resolve_conflicts_on_update="OVERWRITE",
                          tags=t.with_role(tags, "eks-addon"), opts=child)
        self.name = self.cluster.name
        self.endpoint = self.cluster.endpoint
        self.certificate_authority = self.cluster.certificate_authority.apply(lambda ca: ca["data"] if isinstance(ca, dict) else ca.data)
        self.service_cidr = self.cluster.kubernetes_network_config.apply(
            lambda c: (c.get("service_ipv4_cidr") or c.get("serviceIpv4Cidr")) if isinstance(c, dict) else c.service_ipv4_cidr)
        self.kubeconfig = pulumi.Output.secret(pulumi.Output.all(self.cluster.name, self.endpoint,
                                                                 self.certificate_authority).apply(
            lambda a: kubeconfig(a[0], a[1], a[2], region)))
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, enable_server_side_apply=True,
                                     opts=pulumi.ResourceOptions(
                                         parent=self,
                                         # every Kubernetes object waits for nodes that can run it: the
                                         # Helm releases await their Deployments (no skipAwait)
                                         depends_on=[self.access_entry, *([self.system_nodes] if self.system_nodes else [])]))
        self.register_outputs({"clusterName": self.cluster.name, "endpoint": self.endpoint,
                               "kubeconfig": self.kubeconfig})

    def _system_paths(self, name: str, gpu_group: pulumi.Input[str],
                      tags: dict[str, str]) -> list[aws.vpc.SecurityGroupIngressRule]:
        """The cluster group (on the system nodes) admits the GPU nodes' group on SYSTEM_NODE_PATHS.

        Separate rule resources: EKS owns that group and its other rules; the GPU group's inline
        rules open the matching egress to the management subnet."""
        cluster_group = self.cluster.vpc_config.apply(lambda v: v.cluster_security_group_id)
        return [aws.vpc.SecurityGroupIngressRule(
            f"{name}-system-{proto}-{lo}", security_group_id=cluster_group, referenced_security_group_id=gpu_group,
            ip_protocol=proto, from_port=lo, to_port=hi, description=f"GPU nodes: {what}",
            tags=t.with_role(tags, "eks-system-path"), opts=pulumi.ResourceOptions(parent=self))
            for proto, lo, hi, what in SYSTEM_NODE_PATHS]

    def _system_node_group(self, name: str, subnet_id: pulumi.Input[str], tags: dict[str, str]) -> aws.eks.NodeGroup:
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(f"{name}-system-nodes", assume_role_policy=json.dumps(ASSUME_EC2, sort_keys=True),
                            description="gpufleet EKS system node group", tags=t.with_role(tags, "eks-system-role"),
                            opts=child)
        attached = [aws.iam.RolePolicyAttachment(f"{name}-system-nodes-{arn.rsplit('/', 1)[-1]}", role=role.name,
                                                 policy_arn=arn, opts=child) for arn in SYSTEM_NODE_POLICIES]
        return aws.eks.NodeGroup(
            f"{name}-system", cluster_name=self.cluster.name, node_role_arn=role.arn, subnet_ids=[subnet_id],
            instance_types=[SYSTEM_INSTANCE_TYPE], ami_type="AL2023_x86_64_STANDARD", capacity_type="ON_DEMAND",
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(desired_size=SYSTEM_NODES, min_size=SYSTEM_NODES,
                                                              max_size=SYSTEM_NODES),
            labels={"gpufleet.io/role": "system"}, tags=t.with_role(tags, "eks-system-nodes"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=attached))
