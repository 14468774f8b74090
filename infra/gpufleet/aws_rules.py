"""AWS service rules the Pulumi mocks cannot see, as sourced facts and `gpufleet validate` findings.

Why: the offline preview's mocks echo inputs back; no provider `Check`, no EC2/FSx/EKS API rule
runs. Each rule here is one the real APIs (or the Terraform provider under pulumi-aws) enforce,
with its source, so `gpufleet validate` and `preview --offline` refuse a stack the real `pulumi up`
would fail on. The policy pack (`gpufleet.policies.rules`) applies the same constants to the
captured registrations. Codes, in the style of AWS ParallelCluster's validators:

| code | rule | source |
|---|---|---|
| AWS_CAPACITY_BLOCK_TOO_SMALL | at most 64 instances per Capacity Block | CAPACITY_BLOCK_SOURCE |
| AWS_NAME_TOO_LONG | S3 bucket_prefix <= 37, IAM role name (autonamed: +8) <= 64 | NAME_SOURCES |
| AWS_POD_IP_BUDGET (WARNING) | maxPods over the VPC CNI's pod IPs on card 0: kubelet gets the budget | POD_IP_SOURCE |
| AWS_FSX_TIERING_S3_LINK | Intelligent-Tiering FSx takes no S3 data repository link | FSX_TIERING_SOURCE |
| AWS_EKS_ENDPOINT_PRIVATE (WARNING) | a private-only endpoint answers only inside the VPC: `pulumi up` runs there | EKS_ENDPOINT_SOURCE |
| AWS_EKS_ENDPOINT_OPEN (WARNING) | endpointPublicAccessCidrs 0.0.0.0/0: the API server is open to the internet | EKS_ENDPOINT_SOURCE |
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.catalog import InstanceType, InterfaceType
from gpufleet.findings import Finding, error, warning
from gpufleet.spec import CapacityType, ClusterSpec

# --- security-group rule descriptions ------------------------------------------------------
SG_DESCRIPTION_SOURCE = (
    "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_IpRange.html (Description: a-z, A-Z, 0-9, "
    "spaces, and ._-:/()#,@[]+=&;{}!$*); hashicorp/terraform-provider-aws internal/service/ec2/validate.go "
    "validSecurityGroupRuleDescription")
SG_DESCRIPTION = re.compile(r"^[A-Za-z0-9 ._\-:/()#,@\[\]+=&;{}!$*]*$")
SG_DESCRIPTION_MAX = 255

# --- EKS security-group paths ---------------------------------------------------------------
# The API server calls admission webhooks on the pod IP and target port; Kueue's webhook server
# listens on 9443 (gpufleet.pool.kubernetes.chart_values). The EKS guidance for self-managed nodes
# is to admit the control plane on 443, 10250 and every webhook port:
# https://docs.aws.amazon.com/eks/latest/userguide/sec-group-reqs.html
WEBHOOK_PORTS = (9443,)

# --- Capacity Blocks ------------------------------------------------------------------------
CAPACITY_BLOCK_SOURCE = ("https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html "
                         "(\"Each Capacity Block can have up to 64 instances\")")
CAPACITY_BLOCK_MAX_INSTANCES = 64



def reservation_for(index: int, slots: int, ids: tuple[str, ...]) -> str | None:
    """The reservation slot `index` targets: contiguous equal shares over the named ids, stable as
    batches grow (gpufleet.cloud.compute launches by it; `validate --cloud` checks each share fits)."""
    if not ids:
        return None
    return ids[min(index * len(ids) // max(slots, 1), len(ids) - 1)]


def reservation_shares(slots: int, ids: tuple[str, ...]) -> dict[str, int]:
    """How many slots each reservation receives."""
    shares = {i: 0 for i in ids}
    for index in range(slots):
        rid = reservation_for(index, slots, ids)
        if rid is not None:
            shares[rid] += 1
    return shares


# --- names ----------------------------------------------------------------------------------
NAME_SOURCES = (
    "pulumi-aws s3.Bucket bucket_prefix (\"Must be lowercase and less than or equal to 37 characters\"); "
    "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html (role name 64); "
    "Pulumi autonaming appends '-' and 7 random characters")
S3_BUCKET_PREFIX_MAX = 37
IAM_ROLE_NAME_MAX = 64
AUTONAME_SUFFIX = 8  # "-" + 7 random characters
# The IAM roles the program autonames, as suffixes of the cluster name (gpufleet.cloud.*); the
# longest decides the limit on cluster names.
AUTONAMED_ROLES = ("-identity-node", "-eks-cluster", "-eks-system-nodes", "-slurm-role", "-storage-clients-role")


def bucket_prefix(cluster: str) -> str:
    """The data bucket's name prefix (gpufleet.cloud.storage), kept within S3's 37."""
    prefix = f"gpufleet-{cluster}-"
    return prefix if len(prefix) <= S3_BUCKET_PREFIX_MAX else prefix[:S3_BUCKET_PREFIX_MAX - 1].rstrip("-") + "-"


# --- VPC CNI pod IPs ------------------------------------------------------------------------
POD_IP_SOURCE = (
    "awslabs/amazon-eks-ami nodeadm/internal/kubelet/instance-info.jsonl defaultMaxENIs and eni_max_pods.go "
    "(maxPods = ENIs x (IPs - 1) + 2); aws/amazon-vpc-cni-k8s pkg/vpc/vpc_ip_resource_limit.go (p5.48xlarge "
    "ENILimit 2) and pkg/ipamd/ipamd.go (from v1.19 an efa-only ENI on card 0 is unmanaged); the CNI "
    "manages network card 0 only without ENABLE_MULTI_NIC")
# ENIs on network card 0 (the only card the VPC CNI uses), per instance type.
CARD0_MAX_ENIS = {"p4d.24xlarge": 15, "p4de.24xlarge": 15, "p5.48xlarge": 2, "p5e.48xlarge": 2,
                  "p5en.48xlarge": 4}
HOST_NETWORK_PODS = 2  # nodeadm's "+2": aws-node and kube-proxy run on the host network


@dataclass(frozen=True)
class PodIpBudget:
    usable_enis: int  # card-0 ENIs the CNI may attach (the efa-only on card 0 takes one)
    pod_ips: int
    max_pods: int  # what kubelet may admit: pod IPs plus the host-network pods


def pod_ip_budget(instance: InstanceType) -> PodIpBudget | None:
    """The VPC CNI's pod IPs on one node (secondary-IP mode), or None for a type we have no data for."""
    enis = CARD0_MAX_ENIS.get(instance.name)
    if enis is None:
        return None
    efa_only_on_card0 = sum(1 for s in instance.interfaces
                            if s.network_card_index == 0 and s.interface_type is InterfaceType.EFA_ONLY)
    usable = enis - efa_only_on_card0
    ips = usable * (instance.ipv4_per_interface - 1)
    return PodIpBudget(usable_enis=usable, pod_ips=ips, max_pods=ips + HOST_NETWORK_PODS)


def kubelet_max_pods(spec: ClusterSpec) -> int | None:
    """The maxPods kubelet gets on a GPU node of an EKS pool (None: nodeadm's own): the stack's
    podNetworking.maxPods, capped with the VPC CNI at the pod IPs it can hand out, so kubelet never
    admits a pod that would wait for an address."""
    pods = spec.network.pod_networking
    if spec.pool.type != "kubernetes" or pods.mode == "none":
        return None
    budget = pod_ip_budget(spec.cluster.instance)
    if pods.mode == "vpc-cni" and budget is not None:
        return min(pods.max_pods, budget.max_pods)
    return pods.max_pods


# --- FSx ------------------------------------------------------------------------------------
FSX_TIERING_SOURCE = ("https://docs.aws.amazon.com/fsx/latest/LustreGuide/fsx-data-repositories.html "
                      "(\"Intelligent-Tiering file systems don't support linking to Amazon S3 data repositories\")")
FSX_BACKUP_SOURCE = ("https://docs.aws.amazon.com/fsx/latest/LustreGuide/fsx-data-repositories.html (\"File system "
                     "backups aren't supported on file systems that are linked an Amazon S3 data repository\"); "
                     "https://docs.aws.amazon.com/fsx/latest/LustreGuide/using-backups-fsx.html")


# --- EKS endpoint access ---------------------------------------------------------------------
EKS_ENDPOINT_SOURCE = ("https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html (with public "
                       "access disabled the endpoint \"is only accessible from within the VPC or a connected network\")")
EKS_ENDPOINT_FIELD = "gpufleet:pool.endpointPublicAccessCidrs"


# --- findings -------------------------------------------------------------------------------

def aws_findings(spec: ClusterSpec, instances: int) -> list[Finding]:
    """ERROR findings for the AWS rules a stack breaks; `instances`: GPU slots, spares included."""
    return [*_capacity_block(spec, instances), *_names(spec), *_pod_ips(spec), *_fsx(spec), *_eks_endpoint(spec)]


def _capacity_block(spec: ClusterSpec, instances: int) -> list[Finding]:
    cap = spec.cluster.capacity
    if cap.type is not CapacityType.CAPACITY_BLOCK:
        return []
    room = CAPACITY_BLOCK_MAX_INSTANCES * len(cap.capacity_block_ids)
    if instances <= room:
        return []
    need = -(-instances // CAPACITY_BLOCK_MAX_INSTANCES)
    return [error("AWS_CAPACITY_BLOCK_TOO_SMALL", "gpufleet:cluster.capacity.capacityBlockIds",
                  f"{instances} instances (nodes and spares) into {len(cap.capacity_block_ids)} Capacity Block(s) "
                  f"of at most {CAPACITY_BLOCK_MAX_INSTANCES} instances each; name at least {need} "
                  f"({CAPACITY_BLOCK_SOURCE})")]


def _names(spec: ClusterSpec) -> list[Finding]:
    name = spec.cluster.name
    longest = max(AUTONAMED_ROLES, key=len)
    length = len(name) + len(longest) + AUTONAME_SUFFIX
    if length <= IAM_ROLE_NAME_MAX:
        return []
    most = IAM_ROLE_NAME_MAX - len(longest) - AUTONAME_SUFFIX
    return [error("AWS_NAME_TOO_LONG", "gpufleet:cluster.name",
                  f"cluster name {name!r} ({len(name)} characters) makes the autonamed IAM role "
                  f"{name}{longest}-xxxxxxx {length} characters, over IAM's {IAM_ROLE_NAME_MAX}; "
                  f"use at most {most} characters ({NAME_SOURCES})")]


def _pod_ips(spec: ClusterSpec) -> list[Finding]:
    pods = spec.network.pod_networking
    budget = pod_ip_budget(spec.cluster.instance)
    if spec.pool.type != "kubernetes" or pods.mode != "vpc-cni" or budget is None:
        return []
    if pods.max_pods <= budget.max_pods:
        return []
    return [warning("AWS_POD_IP_BUDGET", "gpufleet:network.podNetworking.maxPods",
                    f"maxPods {pods.max_pods} but the VPC CNI has {budget.pod_ips} pod IPs on a "
                    f"{spec.cluster.instance_type} ({budget.usable_enis} usable ENI(s) on network card 0 after the "
                    f"efa-only interface, {spec.cluster.instance.ipv4_per_interface - 1} secondary IPs each): kubelet "
                    f"gets maxPods {budget.max_pods} so no pod waits for an address ({POD_IP_SOURCE})")]


def _fsx(spec: ClusterSpec) -> list[Finding]:
    s = spec.storage
    out: list[Finding] = []
    # An EFA-enabled file system: the lustre_client role configures LNet over EFA as AWS documents
    # (gpufleet.configure.extravars.lustre_efa_extravars; every catalog type has EFA), so no finding.
    if s.storage_class != "INTELLIGENT_TIERING" or not (s.import_path or s.export_path):
        return out
    return out + [error("AWS_FSX_TIERING_S3_LINK", "gpufleet:storage.storageClass",
                  f"storageClass INTELLIGENT_TIERING with importPath/exportPath: {FSX_TIERING_SOURCE}; "
                  "use SSD with the paths, or drop them")]


def _eks_endpoint(spec: ClusterSpec) -> list[Finding]:
    """The same `pulumi up` installs the Helm releases and Kubernetes objects through the endpoint,
    and the rollout talks to it: say where they must run (a simulated stack reaches no EKS)."""
    if spec.pool.type != "kubernetes" or spec.simulated:
        return []
    cidrs = spec.pool.endpoint_public_access_cidrs
    if not cidrs:
        return [warning("AWS_EKS_ENDPOINT_PRIVATE", EKS_ENDPOINT_FIELD,
                        "the EKS endpoint is private only: `pulumi up` (it installs the Helm releases and "
                        "Kubernetes objects) and `gpufleet rollout` must run inside the VPC, on a runner in the "
                        "management subnet reached over SSM or a VPN (the CI written by `gpufleet init` runs the "
                        "rollout on the self-hosted runner the repository variable GPUFLEET_RUNNER_<STACK> or "
                        "GPUFLEET_RUNNER names), or name the operator's or CI's egress CIDR in "
                        f"endpointPublicAccessCidrs ({EKS_ENDPOINT_SOURCE})")]
    if "0.0.0.0/0" in cidrs:
        return [warning("AWS_EKS_ENDPOINT_OPEN", EKS_ENDPOINT_FIELD,
                        "endpointPublicAccessCidrs has 0.0.0.0/0: the Kubernetes API server answers the whole "
                        "internet (IAM still authenticates); name the operator's and CI's egress CIDRs instead "
                        f"({EKS_ENDPOINT_SOURCE})")]
    return []
