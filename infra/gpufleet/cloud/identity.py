"""The GPU nodes' IAM identity: a role and instance profile with least privilege.

Managed policies cover SSM (the aws_ssm Ansible connection), the EKS worker and ECR pulls;
one inline policy grants the data bucket's prefixes and read of this stack's own secrets
under `/gpufleet/<stack>/` in Secrets Manager and Parameter Store. Nothing is `*` on `*`.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from gpufleet import tagging as t

MANAGED_POLICIES = {
    "ssm": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
    "ecr": "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
}
EKS_POLICIES = {
    "eks-worker": "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "eks-cni": "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
}
ASSUME_EC2 = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}


def secrets_prefix(stack: str) -> str:
    return f"/gpufleet/{stack}/"


def node_policy_document(stack: str, region: str, bucket_arn: str, prefixes: list[str]) -> str:
    """The inline policy: bucket prefixes read/write, own secrets read-only. Account is `*`-free by ARN scope."""
    objects = [f"{bucket_arn}/{p.strip('/')}/*" if p.strip("/") else f"{bucket_arn}/*" for p in prefixes]
    listed = [p.strip("/") + "/*" if p.strip("/") else "*" for p in prefixes]
    prefix = secrets_prefix(stack)
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Sid": "BucketList", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [bucket_arn],
         "Condition": {"StringLike": {"s3:prefix": listed}}},
        {"Sid": "BucketObjects", "Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"],
         "Resource": objects},
        {"Sid": "OwnSecrets", "Effect": "Allow",
         "Action": ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
         "Resource": [f"arn:aws:secretsmanager:{region}:*:secret:{prefix}*"]},
        {"Sid": "OwnParameters", "Effect": "Allow",
         "Action": ["ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath"],
         "Resource": [f"arn:aws:ssm:{region}:*:parameter{prefix.rstrip('/')}/*"]},
    ]}, sort_keys=True)


class Identity(pulumi.ComponentResource):
    """Node role, its policies and the instance profile the launch template uses."""

    def __init__(self, name: str, stack: str, region: str, bucket_arn: pulumi.Input[str], prefixes: list[str],
                 eks: bool, tags: dict[str, str], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:identity:Identity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.role = aws.iam.Role(f"{name}-node", assume_role_policy=json.dumps(ASSUME_EC2, sort_keys=True),
                                 description="gpufleet GPU nodes", tags=t.with_role(tags, "node-role"), opts=child)
        policies = {**MANAGED_POLICIES, **(EKS_POLICIES if eks else {})}
        for key, arn in policies.items():
            aws.iam.RolePolicyAttachment(f"{name}-{key}", role=self.role.name, policy_arn=arn, opts=child)
        aws.iam.RolePolicy(f"{name}-data", role=self.role.id,
                           policy=pulumi.Output.from_input(bucket_arn).apply(
                               lambda arn: node_policy_document(stack, region, arn, prefixes)),
                           opts=child)
        self.instance_profile = aws.iam.InstanceProfile(f"{name}-node", role=self.role.name,
                                                        tags=t.with_role(tags, "node-profile"), opts=child)
        self.register_outputs({"roleArn": self.role.arn, "instanceProfileArn": self.instance_profile.arn})
