"""The IAM actions gpufleet needs, derived from its code: what the deployer policy is checked against.

Two sources:
- `boto3_actions(root)`: every boto3 operation the `infra/` package names, found in its syntax tree
  (`client.describe_instances(...)`, a bound method handed on as `ec2.describe_instance_types`,
  `get_paginator("list_objects_v2")`, `get_waiter("instance_running")`), turned into IAM actions with
  botocore's own service models (the API name and the signing name), so acronyms such as
  `GetAWSDefaultServiceQuota` come out right. S3 is the one service whose IAM actions are not its
  API names (ListObjectsV2 is s3:ListBucket): `S3_ACTIONS` maps those.
- `PULUMI_TYPE_ACTIONS`: what Pulumi's AWS provider calls to create, read (refresh), update, tag and
  delete each resource type the program registers, and `PULUMI_INVOKE_ACTIONS` for its data-source
  invokes. Written from the AWS Service Authorization Reference (actions, resource types, condition
  keys per service), the FSx and EKS documentation of their service-linked roles (FSx creates its
  network interfaces itself: AmazonFSxServiceRolePolicy), and what terraform-provider-aws v6's
  resources (bridged by pulumi-aws 7) call to create, read, update and delete; not replayed call by
  call against AWS. A call the map misses shows up as AccessDenied naming the action: add it here
  and the test asks the policy for it. A type the program starts to create that is missing here
  fails the test, so the map cannot silently fall behind.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# S3's IAM actions differ from its API operation names (Service Authorization Reference, Amazon S3).
S3_ACTIONS: dict[str, tuple[str, ...]] = {
    "ListObjectsV2": ("s3:ListBucket",),
    "ListObjects": ("s3:ListBucket",),
    "HeadBucket": ("s3:ListBucket",),
    "GetObject": ("s3:GetObject",),
    "HeadObject": ("s3:GetObject",),
    # the audit log's S3 copy sets ObjectLockMode/ObjectLockRetainUntilDate, which also needs PutObjectRetention
    "PutObject": ("s3:PutObject", "s3:PutObjectRetention"),
    "GetObjectLockConfiguration": ("s3:GetBucketObjectLockConfiguration",),
    "CopyObject": ("s3:GetObject", "s3:PutObject"),  # read the source, write the copy
    "DeleteObject": ("s3:DeleteObject",),
    "DeleteObjects": ("s3:DeleteObject",),
}
# Operations every principal may call: no IAM permission exists for them.
NO_PERMISSION = {"sts:GetCallerIdentity"}

_TAG_EC2 = ("ec2:CreateTags", "ec2:DeleteTags", "ec2:DescribeTags")
_VPC_READ = ("ec2:DescribeVpcs", "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups", "ec2:DescribeNetworkInterfaces")
_IAM_ROLE_READ = ("iam:GetRole", "iam:ListRolePolicies", "iam:ListAttachedRolePolicies",
                  "iam:ListInstanceProfilesForRole")

PULUMI_TYPE_ACTIONS: dict[str, tuple[str, ...]] = {
    "aws:ec2/vpc:Vpc": ("ec2:CreateVpc", "ec2:DeleteVpc", "ec2:DescribeVpcs", "ec2:DescribeVpcAttribute",
                        "ec2:ModifyVpcAttribute", "ec2:DescribeRouteTables", "ec2:DescribeNetworkAcls",
                        "ec2:DescribeSecurityGroups", *_TAG_EC2),
    "aws:ec2/subnet:Subnet": ("ec2:CreateSubnet", "ec2:DeleteSubnet", "ec2:DescribeSubnets",
                              "ec2:ModifySubnetAttribute", "ec2:DescribeNetworkInterfaces", *_TAG_EC2),
    "aws:ec2/internetGateway:InternetGateway": ("ec2:CreateInternetGateway", "ec2:DeleteInternetGateway",
                                                "ec2:AttachInternetGateway", "ec2:DetachInternetGateway",
                                                "ec2:DescribeInternetGateways", *_TAG_EC2),
    "aws:ec2/eip:Eip": ("ec2:AllocateAddress", "ec2:ReleaseAddress", "ec2:DescribeAddresses",
                        "ec2:DescribeAddressesAttribute", "ec2:DisassociateAddress", *_TAG_EC2),
    "aws:ec2/natGateway:NatGateway": ("ec2:CreateNatGateway", "ec2:DeleteNatGateway", "ec2:DescribeNatGateways",
                                      *_TAG_EC2),
    "aws:ec2/routeTable:RouteTable": ("ec2:CreateRouteTable", "ec2:DeleteRouteTable", "ec2:DescribeRouteTables",
                                      "ec2:CreateRoute", "ec2:DeleteRoute", "ec2:ReplaceRoute", *_TAG_EC2),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": ("ec2:AssociateRouteTable", "ec2:DisassociateRouteTable",
                                                            "ec2:ReplaceRouteTableAssociation",
                                                            "ec2:DescribeRouteTables"),
    "aws:ec2/securityGroup:SecurityGroup": ("ec2:CreateSecurityGroup", "ec2:DeleteSecurityGroup",
                                            "ec2:DescribeSecurityGroups", "ec2:DescribeSecurityGroupRules",
                                            "ec2:AuthorizeSecurityGroupIngress", "ec2:AuthorizeSecurityGroupEgress",
                                            "ec2:RevokeSecurityGroupIngress", "ec2:RevokeSecurityGroupEgress",
                                            "ec2:UpdateSecurityGroupRuleDescriptionsIngress",
                                            "ec2:UpdateSecurityGroupRuleDescriptionsEgress",
                                            "ec2:DescribeNetworkInterfaces", *_TAG_EC2),
    # a rule of its own (the EKS-owned cluster group's paths from the GPU nodes): terraform-provider-aws's
    # aws_vpc_security_group_ingress_rule authorizes with TagSpecifications, reads, modifies and revokes by rule id
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": (
        "ec2:AuthorizeSecurityGroupIngress", "ec2:DescribeSecurityGroupRules", "ec2:ModifySecurityGroupRules",
        "ec2:RevokeSecurityGroupIngress", *_TAG_EC2),
    "aws:ec2/vpcEndpoint:VpcEndpoint": ("ec2:CreateVpcEndpoint", "ec2:DeleteVpcEndpoints", "ec2:ModifyVpcEndpoint",
                                        "ec2:DescribeVpcEndpoints", "ec2:DescribeVpcEndpointServices",
                                        "ec2:DescribePrefixLists", *_TAG_EC2),
    "aws:ec2/placementGroup:PlacementGroup": ("ec2:CreatePlacementGroup", "ec2:DeletePlacementGroup",
                                              "ec2:DescribePlacementGroups", *_TAG_EC2),
    "aws:ec2/launchTemplate:LaunchTemplate": ("ec2:CreateLaunchTemplate", "ec2:CreateLaunchTemplateVersion",
                                              "ec2:ModifyLaunchTemplate", "ec2:DeleteLaunchTemplate",
                                              "ec2:DescribeLaunchTemplates", "ec2:DescribeLaunchTemplateVersions",
                                              "iam:PassRole", *_TAG_EC2),
    "aws:ec2/instance:Instance": ("ec2:RunInstances", "ec2:TerminateInstances", "ec2:StopInstances",
                                  "ec2:StartInstances", "ec2:DescribeInstances", "ec2:DescribeInstanceAttribute",
                                  "ec2:ModifyInstanceAttribute", "ec2:DescribeInstanceTypes",
                                  "ec2:DescribeInstanceCreditSpecifications", "ec2:ModifyInstanceMetadataOptions",
                                  "ec2:DescribeVolumes", "ec2:DescribeNetworkInterfaces", "ec2:DescribeImages",
                                  "ec2:DescribeLaunchTemplateVersions", "iam:PassRole", *_TAG_EC2),
    "aws:ebs/volume:Volume": ("ec2:CreateVolume", "ec2:DeleteVolume", "ec2:DescribeVolumes", "ec2:ModifyVolume",
                              "ec2:DescribeVolumesModifications", *_TAG_EC2),
    "aws:ec2/volumeAttachment:VolumeAttachment": ("ec2:AttachVolume", "ec2:DetachVolume", "ec2:DescribeVolumes",
                                                  "ec2:DescribeInstances"),
    "aws:iam/role:Role": ("iam:CreateRole", "iam:DeleteRole", "iam:UpdateRole", "iam:UpdateAssumeRolePolicy",
                          "iam:TagRole", "iam:UntagRole", "iam:ListRoleTags", *_IAM_ROLE_READ),
    "aws:iam/rolePolicy:RolePolicy": ("iam:PutRolePolicy", "iam:GetRolePolicy", "iam:DeleteRolePolicy"),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": ("iam:AttachRolePolicy", "iam:DetachRolePolicy",
                                                          "iam:ListAttachedRolePolicies"),
    "aws:iam/instanceProfile:InstanceProfile": ("iam:CreateInstanceProfile", "iam:DeleteInstanceProfile",
                                                "iam:GetInstanceProfile", "iam:AddRoleToInstanceProfile",
                                                "iam:RemoveRoleFromInstanceProfile", "iam:TagInstanceProfile",
                                                "iam:UntagInstanceProfile", "iam:PassRole"),
    "aws:s3/bucket:Bucket": ("s3:CreateBucket", "s3:DeleteBucket", "s3:ListBucket", "s3:GetBucketTagging",
                             "s3:PutBucketTagging", "s3:GetBucketAcl", "s3:GetBucketCORS", "s3:GetBucketWebsite",
                             "s3:GetBucketVersioning", "s3:GetAccelerateConfiguration", "s3:GetBucketRequestPayment",
                             "s3:GetBucketLogging", "s3:GetLifecycleConfiguration", "s3:GetReplicationConfiguration",
                             "s3:GetEncryptionConfiguration", "s3:GetBucketObjectLockConfiguration",
                             "s3:GetBucketPolicy", "s3:GetBucketOwnershipControls"),
    "aws:s3/bucketVersioning:BucketVersioning": ("s3:PutBucketVersioning", "s3:GetBucketVersioning"),
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": (
        "s3:PutEncryptionConfiguration", "s3:GetEncryptionConfiguration"),
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": ("s3:PutBucketPublicAccessBlock",
                                                               "s3:GetBucketPublicAccessBlock"),
    "aws:fsx/lustreFileSystem:LustreFileSystem": ("fsx:CreateFileSystem", "fsx:DeleteFileSystem",
                                                  "fsx:UpdateFileSystem", "fsx:DescribeFileSystems", "fsx:TagResource",
                                                  "fsx:UntagResource", "fsx:ListTagsForResource",
                                                  "iam:CreateServiceLinkedRole", *_VPC_READ),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": (
        "fsx:CreateDataRepositoryAssociation", "fsx:DeleteDataRepositoryAssociation",
        "fsx:UpdateDataRepositoryAssociation", "fsx:DescribeDataRepositoryAssociations", "fsx:TagResource",
        "fsx:ListTagsForResource", "iam:CreateServiceLinkedRole", "iam:AttachRolePolicy", "iam:PutRolePolicy",
        "s3:ListBucket", "s3:GetBucketPolicy", "s3:PutBucketNotification", "s3:GetBucketNotification"),
    "aws:secretsmanager/secret:Secret": ("secretsmanager:CreateSecret", "secretsmanager:DeleteSecret",
                                         "secretsmanager:DescribeSecret", "secretsmanager:GetResourcePolicy",
                                         "secretsmanager:UpdateSecret", "secretsmanager:TagResource",
                                         "secretsmanager:UntagResource"),
    "aws:eks/cluster:Cluster": ("eks:CreateCluster", "eks:DeleteCluster", "eks:DescribeCluster",
                                "eks:UpdateClusterConfig", "eks:UpdateClusterVersion", "eks:TagResource",
                                "eks:UntagResource", "eks:ListTagsForResource", "iam:PassRole",
                                "iam:CreateServiceLinkedRole", *_VPC_READ),
    "aws:eks/accessEntry:AccessEntry": ("eks:CreateAccessEntry", "eks:DeleteAccessEntry", "eks:DescribeAccessEntry",
                                        "eks:UpdateAccessEntry", "eks:TagResource", "eks:ListTagsForResource"),
    # the non-GPU system node group (CoreDNS, Helm releases): EKS creates its Auto Scaling group through
    # its service-linked role AWSServiceRoleForAmazonEKSNodegroup; the caller passes the node role
    "aws:eks/nodeGroup:NodeGroup": ("eks:CreateNodegroup", "eks:DeleteNodegroup", "eks:DescribeNodegroup",
                                    "eks:UpdateNodegroupConfig", "eks:UpdateNodegroupVersion", "eks:TagResource",
                                    "eks:UntagResource", "eks:ListTagsForResource", "iam:PassRole", "iam:GetRole",
                                    "iam:CreateServiceLinkedRole", "ec2:DescribeLaunchTemplateVersions",
                                    *_VPC_READ),
    # managed add-ons (the VPC CNI with its settings): DescribeAddonVersions picks the default version
    "aws:eks/addon:Addon": ("eks:CreateAddon", "eks:DeleteAddon", "eks:DescribeAddon", "eks:UpdateAddon",
                            "eks:DescribeAddonVersions", "eks:DescribeAddonConfiguration", "eks:TagResource",
                            "eks:UntagResource", "eks:ListTagsForResource", "iam:PassRole"),
}

PULUMI_INVOKE_ACTIONS: dict[str, tuple[str, ...]] = {
    "aws:ssm/getParameter:getParameter": ("ssm:GetParameter",),  # the public EKS/Ubuntu AMI parameters
    "aws:index/getAvailabilityZones:getAvailabilityZones": ("ec2:DescribeAvailabilityZones",),
}

# Types that make no AWS call of their own: Pulumi's providers and stack references, gpufleet's
# component resources, and Kubernetes objects (they talk to the cluster's API server, which the
# deployer reaches through the EKS access it gets as the cluster's creator).
NO_AWS_CALLS_PREFIXES = ("pulumi:", "gpufleet:", "kubernetes:")


def pulumi_actions(resource_type: str) -> tuple[str, ...]:
    """The IAM actions for one registered type; KeyError names a type the map lacks."""
    if resource_type.startswith(NO_AWS_CALLS_PREFIXES):
        return ()
    return PULUMI_TYPE_ACTIONS[resource_type]


@dataclass(frozen=True)
class CodeCall:
    """One boto3 operation named in the code, with where it is named."""

    file: str
    line: int
    service: str  # boto3's name, e.g. "service-quotas"
    operation: str  # the API name, e.g. "GetServiceQuota"

    @property
    def actions(self) -> tuple[str, ...]:
        if self.service == "s3":
            if self.operation not in S3_ACTIONS:
                raise KeyError(f"{self.file}:{self.line}: S3 {self.operation} has no IAM action in S3_ACTIONS")
            return S3_ACTIONS[self.operation]
        action = f"{_signing_name(self.service)}:{self.operation}"
        return () if action in NO_PERMISSION else (action,)


@lru_cache(maxsize=None)
def _service_model(service: str):
    import botocore.session

    return botocore.session.get_session().get_service_model(service)


@lru_cache(maxsize=None)
def _available_services() -> frozenset[str]:
    import botocore.session

    return frozenset(botocore.session.get_session().get_available_services())


@lru_cache(maxsize=None)
def _operations(service: str) -> dict[str, str]:
    """snake_case method name -> API operation name, as boto3 generates its client methods."""
    from botocore import xform_name

    return {xform_name(op): op for op in _service_model(service).operation_names}


def _signing_name(service: str) -> str:
    meta = _service_model(service).metadata
    return meta.get("signingName") or meta["endpointPrefix"]


@lru_cache(maxsize=None)
def _waiter_operations(service: str) -> dict[str, str]:
    import botocore.session

    session = botocore.session.get_session()
    try:
        model = session.get_waiter_model(service)
    except Exception:  # noqa: BLE001 - a service without waiters
        return {}
    from botocore import xform_name

    return {xform_name(name): model.get_waiter(name).operation for name in model.waiter_names}


def boto3_calls(root: Path) -> list[CodeCall]:
    """Every boto3 operation named in the `.py` files under `root` that use boto3 or botocore.

    A file's services are the string literals in it that name a botocore service (what it passes to
    `boto3.client(...)`, `session.client(...)` or a client factory); an attribute or a string literal
    that is the snake_case name of one of their operations counts, called or not, since the code
    hands bound methods and operation names on. A name that several of the file's services share
    counts for each.
    """
    found: list[CodeCall] = []
    services = _available_services()
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if "boto3" not in source and "botocore" not in source:
            continue
        tree = ast.parse(source, filename=str(path))
        used = sorted({n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                       and n.value in services})
        rel = str(path.relative_to(root.parent))
        for node in ast.walk(tree):
            for service in used:
                op = _operation_of(node, service)
                if op is not None:
                    found.append(CodeCall(rel, node.lineno, service, op))
    return found


def _operation_of(node: ast.AST, service: str) -> str | None:
    ops = _operations(service)
    if isinstance(node, ast.Attribute) and node.attr in ops:
        return ops[node.attr]
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ops:
        return ops[node.value]  # get_paginator("list_objects_v2"), getattr(ec2, "describe_instances")
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get_waiter"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return _waiter_operations(service).get(node.args[0].value)
    return None
