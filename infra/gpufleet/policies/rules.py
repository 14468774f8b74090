"""The policy rules as plain functions over engine-shaped data (camelCase props).

A resource rule takes (resource_type, props) and returns violation messages; a stack rule
takes every resource as `StackResource(type, name, props)`. `policies.pack` wraps them into
`pulumi_policy` policies for `pulumi preview --policy-pack policies`, and the offline
preview and tests call them directly on the registrations captured under mocks, so the
same code judges both.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from gpufleet import aws_rules as aws
from gpufleet import catalog
from gpufleet import tagging as t

MANDATORY, ADVISORY = "mandatory", "advisory"
INSTANCE = "aws:ec2/instance:Instance"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SUBNET = "aws:ec2/subnet:Subnet"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
BUCKET = "aws:s3/bucket:Bucket"
BUCKET_SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
BUCKET_PAB = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
EBS_VOLUME = "aws:ebs/volume:Volume"
SECRET = "aws:secretsmanager/secret:Secret"
SG_RULE_TYPES = ("aws:ec2/securityGroupRule:SecurityGroupRule", "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
                 "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
EKS_CLUSTER = "aws:eks/cluster:Cluster"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
IAM_ROLE = "aws:iam/role:Role"
KUBELET_PORT = 10250
PRIVATE_SUBNET_ROLES = ("subnet-compute", "subnet-management", "subnet-control-plane")
IAM_POLICY_TYPES = {"aws:iam/rolePolicy:RolePolicy": ("policy",), "aws:iam/policy:Policy": ("policy",),
                    "aws:iam/role:Role": ("assumeRolePolicy",)}
TAGGED_TYPES = {INSTANCE, LAUNCH_TEMPLATE, PLACEMENT_GROUP, SECURITY_GROUP, SUBNET, FSX, BUCKET,
                "aws:ec2/vpc:Vpc", "aws:ec2/natGateway:NatGateway", "aws:ec2/vpcEndpoint:VpcEndpoint",
                "aws:eks/cluster:Cluster", "aws:iam/role:Role", EBS_VOLUME, SECRET}
PERSISTENT_2_TIERS = (125, 250, 500, 1000)
EFA_CAPACITY_STEP = {125: 38_400, 250: 19_200, 500: 9_600, 1000: 4_800}
SECRET_PATTERNS = {
    "an AWS access key id": re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    "an AWS secret access key": re.compile(r"aws_secret_access_key\s*[=:]", re.I),
    "a private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "a password assignment": re.compile(r"\b(password|passwd|secret|token)\s*[=:]\s*['\"]?[^\s'\"]{8,}", re.I),
    "a munge key": re.compile(r"munge\.key.*base64|MUNGE_KEY\s*=", re.I),
}


@dataclass(frozen=True)
class StackResource:
    type: str
    name: str
    props: Mapping[str, Any]


ResourceCheck = Callable[[str, Mapping[str, Any]], list[str]]
StackCheck = Callable[[list[StackResource]], list[str]]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    level: str
    resource: ResourceCheck | None = None
    stack: StackCheck | None = None


def _gpu_type(props: Mapping[str, Any]) -> catalog.InstanceType | None:
    it = catalog.CATALOG.get(str(props.get("instanceType") or ""))
    return it if it is not None and it.gpus > 0 else None


def _truthy(v: Any) -> bool:
    return v is True or str(v).lower() == "true"


# --- placement ---------------------------------------------------------------------------

def _reserved(props: Mapping[str, Any]) -> bool:
    """Launches into a capacity reservation or a Capacity Block (whose placement AWS fixed)."""
    target = (props.get("capacityReservationSpecification") or {}).get("capacityReservationTarget") or {}
    market = (props.get("instanceMarketOptions") or {}).get("marketType")
    return bool(target.get("capacityReservationId") or target.get("capacityReservationResourceGroupArn")
                or market == "capacity-block")


def gpu_placement(resources: list[StackResource]) -> list[str]:
    """On-demand GPU launch templates point at a cluster placement group; GPU nodes share one AZ.
    Reserved capacity is placed by AWS (see `placement_with_reservation`)."""
    out: list[str] = []
    cluster_groups = {str(r.props.get("name")) for r in resources
                      if r.type == PLACEMENT_GROUP and r.props.get("strategy") == "cluster"}
    zones: set[str] = set()
    for r in resources:
        if r.type == LAUNCH_TEMPLATE and _gpu_type(r.props):
            placement = r.props.get("placement") or {}
            if not _reserved(r.props) and placement.get("groupName") not in cluster_groups:
                out.append(f"launch template {r.name} is not in a cluster placement group "
                           f"(groupName {placement.get('groupName')!r})")
            if placement.get("availabilityZone"):
                zones.add(placement["availabilityZone"])
        if r.type == INSTANCE and _gpu_type(r.props):
            if (not (r.props.get("launchTemplate") or {}).get("id") and not r.props.get("placementGroup")
                    and not _reserved(r.props)):
                out.append(f"GPU instance {r.name} has neither a launch template nor a placement group")
            if not r.props.get("availabilityZone"):
                out.append(f"GPU instance {r.name} does not pin its availability zone")
            else:
                zones.add(r.props["availabilityZone"])
    if len(zones) > 1:
        out.append(f"GPU nodes span availability zones {sorted(zones)}: EFA does not cross AZs")
    return out


# --- EFA -----------------------------------------------------------------------------------

def efa_layout(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every EFA interface (efa and efa-only) sits where the catalog says, and only there."""
    it = _gpu_type(props) if resource_type == LAUNCH_TEMPLATE else None
    if it is None:
        return []
    want = sorted((s.network_card_index, s.device_index, s.interface_type.value) for s in it.interfaces)
    have = sorted((int(n.get("networkCardIndex") or 0), int(n.get("deviceIndex") or 0),
                   str(n.get("interfaceType") or "interface")) for n in props.get("networkInterfaces") or [])
    if have == want:
        return []
    efa_want = [w for w in want if w[2] != "interface"]
    efa_have = [h for h in have if h[2] != "interface"]
    return [f"{it.name} interface layout differs from the catalog: {len(efa_have)} EFA interfaces "
            f"(want {len(efa_want)}); missing {sorted(set(want) - set(have))}, unexpected {sorted(set(have) - set(want))}"]


def efa_sg_self_only(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """The EFA security group allows all traffic to and from itself and nothing else."""
    if resource_type != SECURITY_GROUP or (props.get("tags") or {}).get(t.ROLE) != "efa":
        return []
    out = []
    for direction in ("ingress", "egress"):
        rules = props.get(direction) or []
        if not rules:
            out.append(f"EFA security group has no self-referencing {direction} rule")
        for rule in rules:
            others = [k for k in ("cidrBlocks", "ipv6CidrBlocks", "securityGroups", "prefixListIds") if rule.get(k)]
            if not _truthy(rule.get("self")) or others or str(rule.get("protocol")) != "-1":
                out.append(f"EFA security group {direction} rule must be all traffic, self only "
                           f"(self={rule.get('self')}, protocol={rule.get('protocol')}, also {others})")
    return out


# --- instance hardening --------------------------------------------------------------------

def imdsv2_required(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type == LAUNCH_TEMPLATE:
        md = props.get("metadataOptions") or {}
        out = []
        if md.get("httpTokens") != "required":
            out.append(f"launch template metadata httpTokens is {md.get('httpTokens')!r}, not 'required' (IMDSv2)")
        hops = md.get("httpPutResponseHopLimit")
        most = 1 if _gpu_type(props) else 2
        if hops is not None and int(hops) > most:
            out.append(f"IMDS hop limit {hops} exceeds {most}" + (
                " on a GPU node: every pod, user jobs included, could take the node role's credentials "
                "(EKS best practices, Restrict access to the instance profile)" if most == 1 else ""))
        return out
    if resource_type == INSTANCE and not (props.get("launchTemplate") or {}).get("id"):
        md = props.get("metadataOptions") or {}
        if md.get("httpTokens") != "required":
            return ["instance without a launch template does not require IMDSv2"]
    return []


def no_public_ip(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Cluster instances stay private. A multi-interface template cannot say so itself (see
    `public_ip_param_multi_interface`), so the private subnets must: `mapPublicIpOnLaunch`
    explicitly false on every one of them."""
    if resource_type == LAUNCH_TEMPLATE:
        return [f"interface card {n.get('networkCardIndex')} device {n.get('deviceIndex')} associates a public IP"
                for n in props.get("networkInterfaces") or [] if _truthy(n.get("associatePublicIpAddress"))]
    if resource_type == INSTANCE and _truthy(props.get("associatePublicIpAddress")):
        return ["instance associates a public IP"]
    role = (props.get("tags") or {}).get(t.ROLE)
    if resource_type == SUBNET and role in PRIVATE_SUBNET_ROLES and props.get("mapPublicIpOnLaunch") is not False:
        return [f"{role.removeprefix('subnet-')} subnet does not set mapPublicIpOnLaunch: false "
                f"(got {props.get('mapPublicIpOnLaunch')!r}); its instances rely on it to stay private"]
    return []


def public_ip_param_multi_interface(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """EC2 rejects `associatePublicIpAddress` on a launch with several network interfaces
    ("cannot be specified when launching with multiple network interfaces";
    hashicorp/terraform-provider-aws#6777): even `false` makes every launch fail."""
    interfaces = (props.get("networkInterfaces") or []) if resource_type == LAUNCH_TEMPLATE else []
    if len(interfaces) < 2:
        return []
    return [f"interface card {n.get('networkCardIndex')} device {n.get('deviceIndex')} sets associatePublicIpAddress "
            f"({n.get('associatePublicIpAddress')!r}) on a {len(interfaces)}-interface template; EC2 rejects the launch"
            for n in interfaces if n.get("associatePublicIpAddress") is not None]


_CREDENTIAL_NAME = re.compile(r"^[A-Za-z0-9+/=]{40}$")


def _user_data_text(value: Any) -> str:
    text = str(value or "")
    try:  # launch templates carry base64 user data
        decoded = base64.b64decode(text, validate=True).decode()
        return decoded if decoded.isprintable() or "\n" in decoded else text
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return text


def no_secret_in_user_data(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type not in (INSTANCE, LAUNCH_TEMPLATE):
        return []
    text = _user_data_text(props.get("userData"))
    return [f"user data contains {what}; nodes must fetch secrets with their instance role"
            for what, pattern in SECRET_PATTERNS.items() if pattern.search(text)]


# --- encryption and exposure ---------------------------------------------------------------

def storage_encrypted(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type == FSX and not str(props.get("deploymentType", "")).startswith("PERSISTENT"):
        return [f"FSx deployment type {props.get('deploymentType')!r} is not encrypted at rest with KMS"]
    if resource_type == LAUNCH_TEMPLATE:
        return [f"EBS volume {m.get('deviceName')} is not encrypted" for m in props.get("blockDeviceMappings") or []
                if m.get("ebs") and not _truthy(m["ebs"].get("encrypted"))]
    if resource_type == EBS_VOLUME and not _truthy(props.get("encrypted")):
        return ["EBS volume is not encrypted"]
    return []


def _bucket_refs(r: StackResource) -> set[str]:
    return {str(v) for v in (r.props.get("id"), r.props.get("bucket")) if v}


def buckets_encrypted(resources: list[StackResource]) -> list[str]:
    sse = {str(r.props.get("bucket")) for r in resources if r.type == BUCKET_SSE and any(
        (rule.get("applyServerSideEncryptionByDefault") or {}).get("sseAlgorithm") in ("AES256", "aws:kms", "aws:kms:dsse")
        for rule in r.props.get("rules") or [])}
    inline = lambda r: bool(r.props.get("serverSideEncryptionConfiguration"))  # noqa: E731
    return [f"bucket {r.name} has no server-side encryption configuration" for r in resources
            if r.type == BUCKET and not (_bucket_refs(r) & sse) and not inline(r)]


def buckets_private(resources: list[StackResource]) -> list[str]:
    flags = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    blocked = {str(r.props.get("bucket")) for r in resources
               if r.type == BUCKET_PAB and all(_truthy(r.props.get(f)) for f in flags)}
    return [f"bucket {r.name} has no public access block with all four settings on" for r in resources
            if r.type == BUCKET and not (_bucket_refs(r) & blocked)]


# --- tags, FSx sizing, IAM -----------------------------------------------------------------

def required_tags(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type not in TAGGED_TYPES:
        return []
    tags = props.get("tags") or {}
    gpu_node = resource_type == INSTANCE and (tags.get(t.ROLE) == "gpu-node" or _gpu_type(props) is not None)
    wanted = t.NODE_REQUIRED if gpu_node else t.REQUIRED
    missing = [k for k in wanted if not tags.get(k)]
    out = [f"missing required tags {missing}"] if missing else []
    if tags.get(t.MANAGED_BY) not in (None, t.MANAGED_BY_VALUE):
        out.append(f"tag {t.MANAGED_BY} is {tags.get(t.MANAGED_BY)!r}, not {t.MANAGED_BY_VALUE!r}")
    return out


def fsx_throughput(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type != FSX or props.get("deploymentType") != "PERSISTENT_2":
        return []
    if props.get("storageType") == "INTELLIGENT_TIERING":
        cap = int(props.get("throughputCapacity") or 0)
        return [] if cap > 0 and cap % 4000 == 0 else [f"throughputCapacity {cap} is not a multiple of 4000 MB/s"]
    tier = int(props.get("perUnitStorageThroughput") or 0)
    if tier not in PERSISTENT_2_TIERS:
        return [f"perUnitStorageThroughput {tier} is not a PERSISTENT_2 tier {PERSISTENT_2_TIERS}"]
    size = int(props.get("storageCapacity") or 0)
    step = EFA_CAPACITY_STEP[tier] if _truthy(props.get("efaEnabled")) else 2400
    if size not in (1200, 2400) and (size <= 0 or size % step):
        return [f"storageCapacity {size} GiB is not a valid size (1200, 2400 or a multiple of {step})"]
    return []


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def _statements(doc: Any) -> Iterable[Mapping[str, Any]]:
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except json.JSONDecodeError:
            return []
    return _as_list((doc or {}).get("Statement") or []) if isinstance(doc, dict) else []


def iam_no_star(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    out = []
    for key in IAM_POLICY_TYPES.get(resource_type, ()):
        for st in _statements(props.get(key)):
            if st.get("Effect") == "Allow" and "*" in _as_list(st.get("Action")) and "*" in _as_list(st.get("Resource")):
                out.append(f"{key}: statement {st.get('Sid', '')!r} allows Action * on Resource *")
    return out


# --- AWS API rules the mocks cannot see (gpufleet.aws_rules has the sources) -----------------

def _descriptions(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, str]]:
    if resource_type == SECURITY_GROUP:
        found = [("description", str(props.get("description") or ""))]
        for direction in ("ingress", "egress"):
            found += [(f"{direction}[{i}].description", str(rule.get("description") or ""))
                      for i, rule in enumerate(props.get(direction) or [])]
        return found
    if resource_type in SG_RULE_TYPES:
        return [("description", str(props.get("description") or ""))]
    return []


def sg_description_charset(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """EC2 takes only a-z A-Z 0-9 space ._-:/()#,@[]+=&;{}!$* in group and rule descriptions
    (the provider's validator rejects anything else at preview)."""
    return [f"{where} {text!r} has characters EC2 rejects ({sorted(set(c for c in text if not aws.SG_DESCRIPTION.match(c)))}); "
            f"allowed: {aws.SG_DESCRIPTION_SOURCE}"
            for where, text in _descriptions(resource_type, props)
            if not aws.SG_DESCRIPTION.match(text) or len(text) > aws.SG_DESCRIPTION_MAX]


def capacity_block_limit(resources: list[StackResource]) -> list[str]:
    """At most 64 instances launch into one Capacity Block."""
    per_block: dict[str, int] = {}
    for r in resources:
        if r.type != INSTANCE or (r.props.get("instanceMarketOptions") or {}).get("marketType") != "capacity-block":
            continue
        target = (r.props.get("capacityReservationSpecification") or {}).get("capacityReservationTarget") or {}
        block = str(target.get("capacityReservationId") or "")
        per_block[block] = per_block.get(block, 0) + 1
    return [f"{n} instances target Capacity Block {block or '(none named)'}; a block holds at most "
            f"{aws.CAPACITY_BLOCK_MAX_INSTANCES} ({aws.CAPACITY_BLOCK_SOURCE})"
            for block, n in sorted(per_block.items()) if n > aws.CAPACITY_BLOCK_MAX_INSTANCES]


def placement_with_reservation(resources: list[StackResource]) -> list[str]:
    """A placement group the stack creates never holds an existing reservation or a Capacity Block."""
    created = {str(r.props.get("name")) for r in resources if r.type == PLACEMENT_GROUP}
    out = []
    for r in resources:
        if r.type not in (LAUNCH_TEMPLATE, INSTANCE) or not _reserved(r.props):
            continue
        group = (r.props.get("placement") or {}).get("groupName") or r.props.get("placementGroup")
        if group and str(group) in created:
            out.append(f"{r.name} launches reserved capacity into placement group {group}, which this stack creates: "
                       "a reservation's placement is fixed when it is made, and launches fail for capacity outside it "
                       "(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html; ParallelCluster "
                       "PlacementGroupCapacityReservationValidator)")
    return out


def fsx_feature_combinations(resources: list[StackResource]) -> list[str]:
    """No backups on an S3-linked file system; Intelligent-Tiering: no S3 links, user-provisioned
    metadata, a read cache."""
    linked = {str(r.props.get("fileSystemId")) for r in resources if r.type == DRA}
    out = []
    for r in resources:
        if r.type != FSX:
            continue
        is_linked = str(r.props.get("id")) in linked
        backups = int(r.props.get("automaticBackupRetentionDays") or 0) > 0 or r.props.get("skipFinalBackup") is False
        if is_linked and backups:
            out.append(f"file system {r.name} has S3 data repository associations and asks for backups "
                       f"(retention {r.props.get('automaticBackupRetentionDays')}, skipFinalBackup "
                       f"{r.props.get('skipFinalBackup')}): {aws.FSX_BACKUP_SOURCE}")
        if r.props.get("storageType") == "INTELLIGENT_TIERING":
            if is_linked:
                out.append(f"Intelligent-Tiering file system {r.name} has S3 links: {aws.FSX_TIERING_SOURCE}")
            if (r.props.get("metadataConfiguration") or {}).get("mode") != "USER_PROVISIONED":
                out.append(f"Intelligent-Tiering file system {r.name} needs metadata mode USER_PROVISIONED")
            if not r.props.get("dataReadCacheConfiguration"):
                out.append(f"Intelligent-Tiering file system {r.name} needs a dataReadCacheConfiguration")
    return out


def name_lengths(resources: list[StackResource]) -> list[str]:
    """Names within their service's limit, Pulumi's autoname suffix included."""
    out = []
    for r in resources:
        if r.type == IAM_ROLE:
            explicit = r.props.get("name") if r.props.get("name") != r.name else None
            length = len(str(explicit)) if explicit else len(r.name) + aws.AUTONAME_SUFFIX
            if length > aws.IAM_ROLE_NAME_MAX:
                out.append(f"IAM role {r.name} gets a {length}-character name, over {aws.IAM_ROLE_NAME_MAX} "
                           f"({aws.NAME_SOURCES})")
        if r.type == BUCKET and len(str(r.props.get("bucketPrefix") or "")) > aws.S3_BUCKET_PREFIX_MAX:
            out.append(f"bucket {r.name} bucketPrefix {r.props['bucketPrefix']!r} is over "
                       f"{aws.S3_BUCKET_PREFIX_MAX} characters ({aws.NAME_SOURCES})")
    return out


def _covers(rule: Mapping[str, Any], port: int) -> bool:
    if str(rule.get("protocol")) == "-1":
        return True
    return str(rule.get("protocol")) in ("tcp", "6") and int(rule.get("fromPort") or 0) <= port <= int(rule.get("toPort") or 0)


def eks_security_group_paths(resources: list[StackResource]) -> list[str]:
    """Self-managed GPU nodes reach a private EKS endpoint (an extra control-plane group admits
    their group on 443), and the API server reaches kubelet and the webhooks on the nodes
    (https://docs.aws.amazon.com/eks/latest/userguide/sec-group-reqs.html)."""
    groups = {str(r.props.get("id")): r for r in resources if r.type == SECURITY_GROUP}
    node_groups: set[str] = set()
    for r in resources:
        if r.type == LAUNCH_TEMPLATE and _gpu_type(r.props):
            for n in r.props.get("networkInterfaces") or []:
                node_groups |= {str(g) for g in n.get("securityGroups") or []}
    out = []
    for r in resources:
        if r.type != EKS_CLUSTER or not node_groups:
            continue
        vpc = r.props.get("vpcConfig") or {}
        extra = [groups[g] for g in map(str, vpc.get("securityGroupIds") or []) if g in groups]
        if not _truthy(vpc.get("endpointPublicAccess")) and not any(
                _covers(rule, 443) and set(map(str, rule.get("securityGroups") or [])) & node_groups
                for g in extra for rule in g.props.get("ingress") or []):
            out.append(f"EKS cluster {r.name} has a private endpoint but no security group of its vpcConfig admits "
                       "the GPU nodes' group on 443: the EKS-created cluster group admits only itself, and "
                       "self-managed nodes are not in it")
        for port in (KUBELET_PORT, *aws.WEBHOOK_PORTS):
            if not any(_covers(rule, port) and (rule.get("cidrBlocks") or rule.get("securityGroups"))
                       for g in node_groups if g in groups for rule in groups[g].props.get("ingress") or []):
                out.append(f"no security group on the GPU nodes admits the EKS control plane on port {port} "
                           f"({'kubelet' if port == KUBELET_PORT else 'admission webhook'})")
    return out


RULES: tuple[Rule, ...] = (
    Rule("gpu-placement-one-az", "GPU instances only in a cluster placement group and one AZ", MANDATORY,
         stack=gpu_placement),
    Rule("efa-layout-matches-catalog", "Launch template EFA interfaces match the catalog", MANDATORY,
         resource=efa_layout),
    Rule("efa-sg-self-only", "The EFA security group references only itself", MANDATORY, resource=efa_sg_self_only),
    Rule("imdsv2-required", "IMDSv2 required; hop limit 1 on GPU nodes, at most 2 elsewhere", MANDATORY,
         resource=imdsv2_required),
    Rule("no-public-ip-gpu", "No public IP on cluster instances; private subnets never map public IPs", MANDATORY,
         resource=no_public_ip),
    Rule("no-public-ip-param-multi-interface", "No associatePublicIpAddress on a multi-interface launch template",
         MANDATORY, resource=public_ip_param_multi_interface),
    Rule("storage-encrypted", "FSx and EBS encrypted at rest", MANDATORY, resource=storage_encrypted),
    Rule("s3-encrypted", "S3 buckets have server-side encryption", MANDATORY, stack=buckets_encrypted),
    Rule("s3-public-access-blocked", "S3 buckets block all public access", MANDATORY, stack=buckets_private),
    Rule("no-secret-in-user-data", "No secret-looking literal in user data", MANDATORY,
         resource=no_secret_in_user_data),
    Rule("required-tags", "Stack, cluster and managed-by tags (and slot tags on nodes)", MANDATORY,
         resource=required_tags),
    Rule("fsx-throughput-tier", "FSx throughput tier and capacity are valid", MANDATORY, resource=fsx_throughput),
    Rule("iam-no-star-on-star", "No IAM statement allows * on *", MANDATORY, resource=iam_no_star),
    Rule("sg-description-charset", "Security-group descriptions use only the characters EC2 accepts", MANDATORY,
         resource=sg_description_charset),
    Rule("capacity-block-instance-limit", "At most 64 instances per Capacity Block", MANDATORY,
         stack=capacity_block_limit),
    Rule("no-placement-group-on-reservations", "No stack-created placement group around reserved capacity",
         MANDATORY, stack=placement_with_reservation),
    Rule("fsx-feature-combinations", "FSx: no backups with S3 links; Intelligent-Tiering settings", MANDATORY,
         stack=fsx_feature_combinations),
    Rule("name-length-limits", "IAM role names and bucket prefixes within their limits", MANDATORY,
         stack=name_lengths),
    Rule("eks-security-group-paths", "Nodes reach the EKS endpoint; the control plane reaches kubelet and webhooks",
         MANDATORY, stack=eks_security_group_paths),
)
