"""The VPC around one GPU cluster: private subnets, egress, endpoints, security groups.

GPU nodes get no public IPs; they reach AWS APIs through VPC endpoints and the rest through
one NAT gateway. The EFA security group allows all traffic to and from itself only (the
EFA requirement); the node group opens only what the node needs. Both go on every interface.
On an EKS pool a control-plane group goes on the API server's ENIs: the EKS-created cluster group
admits only itself, and self-managed nodes are not in it, so without this group no node (and no
operator in the VPC) reaches the private endpoint. The control plane calls webhooks on the pod IP
(secondary IPs of the node's primary ENI), so the node group admits the webhook ports from it.
The EKS system node group (managed, no launch template) carries only the EKS-created cluster group,
which admits only itself: the GPU nodes reach CoreDNS and the pods there (the MPI launcher) through
SYSTEM_NODE_PATHS, egress to the management subnet here and ingress on that group (`cloud.eks`),
and Prometheus there scrapes the GPU nodes' exporters from the management subnet.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from gpufleet import tagging as t
from gpufleet.aws_rules import WEBHOOK_PORTS
from gpufleet.plan.model import ClusterPlan
from gpufleet.plan.network import INTERFACE_ENDPOINTS
from gpufleet.plan.network import SLURMCTLD_PORT, SLURMD_PORT, SRUN_PORTS  # the ports slurm.conf names

LUSTRE_PORTS = ((988, 988), (1018, 1023))
# API server -> node: kubelet 10250, webhook pods on 443 and the webhook ports (aws_rules.WEBHOOK_PORTS)
CONTROL_PLANE_PORTS = (443, 10250, *WEBHOOK_PORTS)
API_SERVER_PORT = 443
# Prometheus on the Slurm controller scrapes these on every GPU node (roles monitoring_server/monitoring_exporters)
EXPORTER_PORTS = ((9100, "node_exporter"), (9400, "dcgm-exporter"))
# Zone ids EKS refuses control-plane subnets in (UnsupportedAvailabilityZoneException):
# https://docs.aws.amazon.com/eks/latest/userguide/network-reqs.html
EKS_UNSUPPORTED_ZONE_IDS = ["use1-az3", "usw1-az2", "cac1-az3"]
SMALL_SUBNET_PREFIX = 28  # public (NAT) and the second control-plane subnet need few addresses
# GPU nodes and their pods -> the EKS system node group in the management subnet (pods there take
# management-subnet IPs from the VPC CNI): CoreDNS over UDP and TCP, and the ephemeral ports an
# MPIJob launcher scheduled there listens on for the workers' daemons (Open MPI's TCP out-of-band
# channel binds port 0: Linux's ip_local_port_range, 32768-60999 by default). The same paths are
# opened as egress on the node group and as ingress on the EKS cluster group.
DNS_PORT = 53
POD_PORTS = (32768, 65535)
SYSTEM_NODE_PATHS = (("udp", DNS_PORT, DNS_PORT, "DNS to CoreDNS on the EKS system nodes"),
                     ("tcp", DNS_PORT, DNS_PORT, "DNS over TCP to CoreDNS on the EKS system nodes"),
                     ("tcp", *POD_PORTS, "ephemeral ports of pods on the EKS system nodes (MPI launcher)"))


@dataclass(frozen=True)
class ExtraSubnets:
    public: str
    control_plane: str


def extra_subnets(vpc_cidr: str, taken: list[str]) -> ExtraSubnets:
    """Two /28s the stack does not name: the NAT's public subnet and EKS's second-AZ subnet.

    EKS needs control-plane subnets in two AZs; the GPU nodes stay in the plan's one AZ.
    The first free blocks from the top of the VPC keep clear of the planned subnets.
    """
    vpc = ipaddress.IPv4Network(vpc_cidr)
    used = [ipaddress.IPv4Network(c) for c in taken]
    free = []
    for cand in reversed(list(vpc.subnets(new_prefix=SMALL_SUBNET_PREFIX))):
        if not any(cand.overlaps(u) for u in used):
            free.append(str(cand))
            used.append(cand)
        if len(free) == 2:
            return ExtraSubnets(public=free[0], control_plane=free[1])
    raise ValueError(f"no two free /{SMALL_SUBNET_PREFIX} blocks left in {vpc_cidr}")


def package_mirror_egress(os_name: str) -> list[aws.ec2.SecurityGroupEgressArgs]:
    """Plain HTTP out through the NAT, for Ubuntu only: its EC2 archive mirrors
    (`<region>.ec2.archive.ubuntu.com`) serve apt over port 80 (apt checks the signed Release
    files, not the transport). Amazon Linux's repositories are HTTPS, so its groups stay 443-only."""
    if not os_name.startswith("ubuntu"):
        return []
    return [aws.ec2.SecurityGroupEgressArgs(protocol="tcp", from_port=80, to_port=80, cidr_blocks=["0.0.0.0/0"],
                                            description="HTTP to Ubuntu package mirrors through NAT")]


class Network(pulumi.ComponentResource):
    """VPC, subnets, NAT egress, endpoints and the node, EFA and Lustre security groups."""

    def __init__(self, name: str, plan: ClusterPlan, vpc_cidr: str, tags: dict[str, str], eks: bool,
                 slurm: bool = False, os_name: str = "al2023", opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:network:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.az = plan.availability_zone
        compute_cidr, mgmt_cidr = plan.network.compute.cidr, plan.network.management.cidr
        extra = extra_subnets(vpc_cidr, [compute_cidr, mgmt_cidr])
        self.vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=vpc_cidr, enable_dns_support=True,
                               enable_dns_hostnames=True, tags=t.with_role(tags, "vpc", f"{name}-vpc"), opts=child)
        self.compute_subnet = self._subnet(name, "compute", compute_cidr, self.az, tags, child)
        self.management_subnet = self._subnet(name, "management", mgmt_cidr, self.az, tags, child)
        self.public_subnet = self._subnet(name, "public", extra.public, self.az, tags, child)
        self.control_plane_subnet = None
        if eks:
            # a standard zone EKS supports, not a Local or Wavelength Zone the account opted into
            other_az = aws.get_availability_zones_output(
                state="available", exclude_zone_ids=EKS_UNSUPPORTED_ZONE_IDS,
                filters=[aws.GetAvailabilityZonesFilterArgs(name="opt-in-status",
                                                            values=["opt-in-not-required"])]).names.apply(
                lambda names: next(n for n in names if n != self.az))
            self.control_plane_subnet = self._subnet(name, "control-plane", extra.control_plane, other_az, tags,
                                                     child)
        self._egress(name, tags, child)
        self.efa_sg = aws.ec2.SecurityGroup(
            f"{name}-efa", vpc_id=self.vpc.id, description="EFA: all traffic to and from itself only",
            ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="-1", from_port=0, to_port=0, self=True,
                                                      description="EFA peers")],
            egress=[aws.ec2.SecurityGroupEgressArgs(protocol="-1", from_port=0, to_port=0, self=True,
                                                    description="EFA peers")],
            tags=t.with_role(tags, "efa", f"{name}-efa"), opts=child)
        self.lustre_sg = aws.ec2.SecurityGroup(
            f"{name}-lustre", vpc_id=self.vpc.id, description="FSx for Lustre servers",
            ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=lo, to_port=hi,
                                                      cidr_blocks=[compute_cidr], self=True,
                                                      description="Lustre from GPU nodes and peers")
                     for lo, hi in LUSTRE_PORTS],
            egress=[aws.ec2.SecurityGroupEgressArgs(protocol="tcp", from_port=lo, to_port=hi,
                                                    cidr_blocks=[compute_cidr], self=True,
                                                    description="Lustre to GPU nodes and peers")
                    for lo, hi in LUSTRE_PORTS],
            tags=t.with_role(tags, "lustre", f"{name}-lustre"), opts=child)
        self.node_sg = aws.ec2.SecurityGroup(
            f"{name}-node", vpc_id=self.vpc.id, description="GPU nodes: endpoints, NAT, control plane, Lustre",
            ingress=self._node_ingress(mgmt_cidr, extra.control_plane if eks else None, compute_cidr, slurm),
            egress=[aws.ec2.SecurityGroupEgressArgs(protocol="tcp", from_port=443, to_port=443,
                                                    cidr_blocks=["0.0.0.0/0"],
                                                    description="HTTPS to VPC endpoints and through NAT"),
                    *package_mirror_egress(os_name),
                    *[aws.ec2.SecurityGroupEgressArgs(protocol="tcp", from_port=lo, to_port=hi,
                                                      cidr_blocks=[compute_cidr], description="Lustre clients")
                      for lo, hi in LUSTRE_PORTS],
                    *([aws.ec2.SecurityGroupEgressArgs(protocol="tcp", from_port=lo, to_port=hi,
                                                       cidr_blocks=[mgmt_cidr], description=what)
                       for lo, hi, what in ((SLURMCTLD_PORT, SLURMCTLD_PORT, "slurmctld on the controller"),
                                            (*SRUN_PORTS, "srun on the controller"))] if slurm else []),
                    *([aws.ec2.SecurityGroupEgressArgs(protocol=proto, from_port=lo, to_port=hi,
                                                       cidr_blocks=[mgmt_cidr], description=what)
                       for proto, lo, hi, what in SYSTEM_NODE_PATHS] if eks else [])],
            tags=t.with_role(tags, "node", f"{name}-node"), opts=child)
        self.control_plane_sg = None
        if eks:
            self.control_plane_sg = aws.ec2.SecurityGroup(
                f"{name}-control-plane", vpc_id=self.vpc.id,
                description="EKS API server ENIs: HTTPS from GPU nodes and the management subnet",
                ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=API_SERVER_PORT,
                                                          to_port=API_SERVER_PORT, security_groups=[self.node_sg.id],
                                                          description="kubelet and pods on GPU nodes to the API server"),
                         aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=API_SERVER_PORT,
                                                          to_port=API_SERVER_PORT, cidr_blocks=[mgmt_cidr],
                                                          description="operators and runners in the management subnet")],
                egress=[aws.ec2.SecurityGroupEgressArgs(protocol="tcp", from_port=p, to_port=p,
                                                        cidr_blocks=[compute_cidr, mgmt_cidr],
                                                        description=f"API server to node port {p}")
                        for p in CONTROL_PLANE_PORTS],
                tags=t.with_role(tags, "eks-control-plane", f"{name}-control-plane"), opts=child)
        self.endpoint_sg = aws.ec2.SecurityGroup(
            f"{name}-endpoints", vpc_id=self.vpc.id, description="Interface endpoints: HTTPS from the cluster",
            ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=443, to_port=443,
                                                      cidr_blocks=[compute_cidr, mgmt_cidr],
                                                      description="HTTPS from nodes and management")],
            tags=t.with_role(tags, "endpoints", f"{name}-endpoints"), opts=child)
        self._endpoints(name, plan.region, tags, child)
        self.register_outputs({"vpcId": self.vpc.id, "computeSubnetId": self.compute_subnet.id,
                               "efaSecurityGroupId": self.efa_sg.id, "nodeSecurityGroupId": self.node_sg.id})

    @staticmethod
    def _node_ingress(mgmt_cidr: str, control_plane_cidr: str | None, compute_cidr: str,
                      slurm: bool) -> list[aws.ec2.SecurityGroupIngressArgs]:
        rules = [aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=22, to_port=22, cidr_blocks=[mgmt_cidr],
                                                  description="management (SSH) from the management subnet only")]
        rules += [aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=lo, to_port=hi, cidr_blocks=[compute_cidr],
                                                   description="Lustre servers in the compute subnet")
                  for lo, hi in LUSTRE_PORTS]
        if control_plane_cidr is not None:  # EKS control-plane ENIs sit in these two subnets
            rules += [aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=p, to_port=p,
                                                       cidr_blocks=[mgmt_cidr, control_plane_cidr],
                                                       description=f"EKS control plane to node port {p}")
                      for p in CONTROL_PLANE_PORTS]
        if slurm:  # the controller sits in the management subnet; node-to-node goes through the EFA group
            rules.append(aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=SLURMD_PORT, to_port=SLURMD_PORT,
                                                          cidr_blocks=[mgmt_cidr],
                                                          description="slurmctld to slurmd"))
        # Prometheus runs on the Slurm controller or on the EKS system nodes, both in the management subnet
        where = "the controller" if slurm else "the EKS system nodes" if control_plane_cidr is not None else None
        if where is not None:
            rules += [aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=port, to_port=port,
                                                       cidr_blocks=[mgmt_cidr],
                                                       description=f"Prometheus on {where} to {what}")
                      for port, what in EXPORTER_PORTS]
        if control_plane_cidr is not None:  # an MPI launcher on a system node reaches the workers' daemons' ports
            rules.append(aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=POD_PORTS[0], to_port=POD_PORTS[1],
                                                          cidr_blocks=[mgmt_cidr],
                                                          description="MPI launcher on the EKS system nodes to ephemeral ports"))
        return rules

    def _subnet(self, name: str, role: str, cidr: str, az, tags: dict[str, str],
                child: pulumi.ResourceOptions) -> aws.ec2.Subnet:
        return aws.ec2.Subnet(f"{name}-{role}", vpc_id=self.vpc.id, cidr_block=cidr, availability_zone=az,
                              map_public_ip_on_launch=False, tags=t.with_role(tags, f"subnet-{role}", f"{name}-{role}"),
                              opts=child)

    def _egress(self, name: str, tags: dict[str, str], child: pulumi.ResourceOptions) -> None:
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=self.vpc.id, tags=t.with_role(tags, "igw"), opts=child)
        eip = aws.ec2.Eip(f"{name}-nat-eip", domain="vpc", tags=t.with_role(tags, "nat"), opts=child)
        self.nat = aws.ec2.NatGateway(f"{name}-nat", allocation_id=eip.id, subnet_id=self.public_subnet.id,
                                      tags=t.with_role(tags, "nat", f"{name}-nat"),
                                      opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]))
        public_rt = aws.ec2.RouteTable(f"{name}-public-rt", vpc_id=self.vpc.id,
                                       routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
                                       tags=t.with_role(tags, "route-table-public"), opts=child)
        aws.ec2.RouteTableAssociation(f"{name}-public-rta", subnet_id=self.public_subnet.id,
                                      route_table_id=public_rt.id, opts=child)
        self.private_rt = aws.ec2.RouteTable(
            f"{name}-private-rt", vpc_id=self.vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=self.nat.id)],
            tags=t.with_role(tags, "route-table-private"), opts=child)
        private = [self.compute_subnet, self.management_subnet]
        if self.control_plane_subnet is not None:
            private.append(self.control_plane_subnet)
        for subnet, role in zip(private, ("compute", "management", "control-plane")):
            aws.ec2.RouteTableAssociation(f"{name}-{role}-rta", subnet_id=subnet.id,
                                          route_table_id=self.private_rt.id, opts=child)

    def _endpoints(self, name: str, region: str, tags: dict[str, str], child: pulumi.ResourceOptions) -> None:
        aws.ec2.VpcEndpoint(f"{name}-s3", vpc_id=self.vpc.id, service_name=f"com.amazonaws.{region}.s3",
                            vpc_endpoint_type="Gateway", route_table_ids=[self.private_rt.id],
                            tags=t.with_role(tags, "endpoint", f"{name}-s3"), opts=child)
        for svc in INTERFACE_ENDPOINTS:
            aws.ec2.VpcEndpoint(f"{name}-{svc.replace('.', '-')}", vpc_id=self.vpc.id,
                                service_name=f"com.amazonaws.{region}.{svc}", vpc_endpoint_type="Interface",
                                private_dns_enabled=True, subnet_ids=[self.management_subnet.id],
                                security_group_ids=[self.endpoint_sg.id],
                                tags=t.with_role(tags, "endpoint", f"{name}-{svc}"), opts=child)
