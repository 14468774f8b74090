"""Subnet sizing from the interface layout and the VPC CNI's pod IPs.

IPs per node = the catalog layout's IP-bearing interfaces (EFA-only take none) plus, on an
EKS pool with the VPC CNI, the secondary IPs the CNI holds for pods and the primary IPs of
the extra ENIs it attaches for them. Times nodes and spares, plus headroom, plus AWS's
5 reserved addresses per subnet.
"""

from __future__ import annotations

import ipaddress
import math
from fractions import Fraction

from gpufleet.catalog import InstanceType
from gpufleet.findings import Finding, error, info
from gpufleet.plan.model import NetworkPlan, SubnetBudget
from gpufleet.spec import NetworkConfig, PodNetworking

AWS_RESERVED_PER_SUBNET = 5  # network, VPC router, DNS, future use, broadcast
# Interface endpoints the network component creates (one ENI each in the management subnet)
INTERFACE_ENDPOINTS = ("ecr.api", "ecr.dkr", "ec2", "ssm", "ssmmessages", "ec2messages", "sts", "logs", "eks",
                       "eks-auth")
MANAGEMENT_FIXED = {"nat-gateway": 1, "controllers": 4}
# The ports a real cluster's slurm.conf names (gpufleet.pool.slurm.conf); the security groups
# (gpufleet.cloud.network) open exactly these, so they are defined once, here.
SLURMCTLD_PORT = 6817  # nodes -> controller
SLURMD_PORT = 6818  # controller -> nodes
SRUN_PORTS = (60001, 63000)  # slurmstepd on the nodes -> srun on the controller


def pod_ips_per_node(pods: PodNetworking, ipv4_per_interface: int, pool: str) -> int:
    """Subnet addresses the VPC CNI consumes on one node for pods (0 without it)."""
    if pool != "kubernetes" or pods.mode != "vpc-cni":
        return 0  # custom networking puts pod IPs in their own subnets
    per_eni = ipv4_per_interface - 1  # one address per ENI is its primary
    if pods.warm_ip_target is not None or pods.minimum_ip_target is not None:
        secondaries = max(pods.max_pods + (pods.warm_ip_target or 0), pods.minimum_ip_target or 0)
        enis = math.ceil(secondaries / per_eni)
    else:
        enis = math.ceil(pods.max_pods / per_eni) + pods.warm_eni_target
        secondaries = enis * per_eni
    return secondaries + (enis - 1)  # the first ENI's primary is the node's own address


def smallest_prefix(addresses: int) -> int:
    """The longest prefix (smallest subnet) holding `addresses` addresses."""
    return 32 - max(0, math.ceil(math.log2(max(addresses, 1))))


def subnet_budget(name: str, cidr: str, ips: int, headroom: float) -> SubnetBudget:
    size = ipaddress.IPv4Network(cidr).num_addresses
    # exact decimal arithmetic: 770 * 1.1 is 847.0000000000001 in floats, one address too many
    needed = math.ceil(ips * (1 + Fraction(str(headroom)))) + AWS_RESERVED_PER_SUBNET
    return SubnetBudget(name=name, cidr=cidr, size=size, reserved=AWS_RESERVED_PER_SUBNET, needed=needed,
                        smallest_prefix=smallest_prefix(needed), fits=needed <= size)


def plan_network(net: NetworkConfig, instance: InstanceType, nodes: int, spares: int, pool: str,
                 availability_zone: str) -> tuple[NetworkPlan, list[Finding]]:
    findings: list[Finding] = []
    iface_ips = instance.ips_per_node
    pod_ips = pod_ips_per_node(net.pod_networking, instance.ipv4_per_interface, pool)
    per_node = iface_ips + pod_ips
    counted = nodes + spares
    compute = subnet_budget("compute", net.compute_subnet_cidr, per_node * counted, net.ip_headroom_fraction)
    mgmt_ips = len(INTERFACE_ENDPOINTS) + sum(MANAGEMENT_FIXED.values())
    management = subnet_budget("management", net.management_subnet_cidr, mgmt_ips, net.ip_headroom_fraction)
    for budget, key in ((compute, "computeSubnetCidr"), (management, "managementSubnetCidr")):
        if not budget.fits:
            basis = (f" ({per_node} per node x {counted} nodes incl. spares" if budget.name == "compute"
                     else f" ({mgmt_ips} endpoint, NAT and controller addresses")
            findings.append(error(
                "SUBNET_TOO_SMALL", f"gpufleet:network.{key}",
                f"{budget.cidr} has {budget.size} addresses but the {budget.name} subnet needs {budget.needed}"
                f"{basis}, +{net.ip_headroom_fraction:.0%} headroom, +{AWS_RESERVED_PER_SUBNET} reserved); "
                f"the smallest prefix that fits is /{budget.smallest_prefix}"))
    findings.extend(_cidr_findings(net))
    findings.append(info("EFA_SINGLE_AZ", "gpufleet:cluster.availabilityZone",
                         f"EFA traffic does not cross availability zones: every GPU node goes to {availability_zone}"))
    plan = NetworkPlan(interface_ips_per_node=iface_ips, pod_ips_per_node=pod_ips, ips_per_node=per_node,
                       nodes_counted=counted, compute=compute, management=management,
                       availability_zone=availability_zone, efa_interfaces_per_node=instance.efa_interfaces)
    return plan, findings


def _cidr_findings(net: NetworkConfig) -> list[Finding]:
    findings: list[Finding] = []
    vpc = ipaddress.IPv4Network(net.vpc_cidr)
    compute = ipaddress.IPv4Network(net.compute_subnet_cidr)
    mgmt = ipaddress.IPv4Network(net.management_subnet_cidr)
    for subnet, key in ((compute, "computeSubnetCidr"), (mgmt, "managementSubnetCidr")):
        if not subnet.subnet_of(vpc):
            findings.append(error("SUBNET_OUTSIDE_VPC", f"gpufleet:network.{key}",
                                  f"{subnet} is not inside the VPC {vpc}"))
    if compute.overlaps(mgmt):
        findings.append(error("CIDR_OVERLAP", "gpufleet:network.managementSubnetCidr",
                              f"{mgmt} overlaps the compute subnet {compute}"))
    return findings
