"""The EKS control plane for a `kubernetes` pool (Slurm and sim pools get none).

Access entries (API authentication mode) admit the node role as EC2_LINUX, so no aws-auth
ConfigMap is edited. The kubeconfig is a secret output; the `pulumi_kubernetes.Provider`
built from it is what the pool components use.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from gpufleet import tagging as t

ASSUME_EKS = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": {"Service": "eks.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
LOG_TYPES = ["api", "audit", "authenticator"]


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
    """Control plane, cluster role, the nodes' access entry, kubeconfig and a k8s provider."""

    def __init__(self, name: str, cluster_name: str, region: str, version: str,
                 subnet_ids: list[pulumi.Input[str]], node_role_arn: pulumi.Input[str], tags: dict[str, str],
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
            vpc_config=aws.eks.ClusterVpcConfigArgs(subnet_ids=subnet_ids, endpoint_private_access=True,
                                                    endpoint_public_access=False),
            enabled_cluster_log_types=LOG_TYPES, tags=t.with_role(tags, "eks", cluster_name),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[attach]))
        self.access_entry = aws.eks.AccessEntry(f"{name}-nodes", cluster_name=self.cluster.name,
                                                principal_arn=node_role_arn, type="EC2_LINUX",
                                                tags=t.with_role(tags, "eks-access"), opts=child)
        self.name = self.cluster.name
        self.endpoint = self.cluster.endpoint
        self.certificate_authority = self.cluster.certificate_authority.apply(lambda ca: ca["data"] if isinstance(ca, dict) else ca.data)
        self.service_cidr = self.cluster.kubernetes_network_config.apply(
            lambda c: (c.get("service_ipv4_cidr") or c.get("serviceIpv4Cidr")) if isinstance(c, dict) else c.service_ipv4_cidr)
        self.kubeconfig = pulumi.Output.secret(pulumi.Output.all(self.cluster.name, self.endpoint,
                                                                 self.certificate_authority).apply(
            lambda a: kubeconfig(a[0], a[1], a[2], region)))
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, enable_server_side_apply=True,
                                     opts=pulumi.ResourceOptions(parent=self, depends_on=[self.access_entry]))
        self.register_outputs({"clusterName": self.cluster.name, "endpoint": self.endpoint,
                               "kubeconfig": self.kubeconfig})
