"""AWS program review A4 (what remained) and B5 on EKS: the system node group's nodes carry only
the EKS-created cluster group, so the GPU nodes' group needs its own paths to CoreDNS and to the
pods there (an MPIJob launcher), and Prometheus there must reach the GPU nodes' exporters. Each
test reads the registrations the real program makes under mocks (tests/infra/test_aws_review_fixes.py's style)."""

from __future__ import annotations

import pytest

from gpufleet import aws_rules
from gpufleet import tagging as t

SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EKS = "aws:eks/cluster:Cluster"


@pytest.fixture(scope="module")
def prod(full_capture):
    return full_capture("prod")


def _sg(cap, role):
    return next(r for r in cap.of_type(SG) if r.inputs["tags"][t.ROLE] == role)


def _covers(rule, proto, port):
    key = "ipProtocol" if "ipProtocol" in rule else "protocol"
    return rule[key] in (proto, "-1") and rule["fromPort"] <= port <= rule["toPort"]


def test_a4_the_cluster_group_admits_the_gpu_nodes_on_dns_and_pod_ports(prod):
    """The rules sit on the group EKS created (vpcConfig.clusterSecurityGroupId), sourced from the GPU nodes' group."""
    eks, = prod.of_type(EKS)
    cluster_group = eks.outputs["vpcConfig"]["clusterSecurityGroupId"]
    node = _sg(prod, "node")
    rules = [r.inputs for r in prod.of_type(INGRESS_RULE) if r.inputs["securityGroupId"] == cluster_group]
    assert rules and all(r["referencedSecurityGroupId"] == node.outputs["id"] for r in rules)
    assert any(_covers(r, "udp", 53) for r in rules) and any(_covers(r, "tcp", 53) for r in rules)
    assert any(_covers(r, "tcp", 40000) for r in rules), "an MPI launcher on a system node takes call-backs"
    assert not any(r["ipProtocol"] == "-1" for r in rules), "only the paths named, not all traffic"
    assert all(aws_rules.SG_DESCRIPTION.match(r["description"]) for r in rules)


def test_a4_the_gpu_nodes_group_opens_dns_and_pod_ports_to_the_system_nodes_subnet(prod):
    node = _sg(prod, "node")
    mgmt = prod.plan.network.management.cidr
    out = [r for r in node.inputs["egress"] if mgmt in (r.get("cidrBlocks") or [])]
    assert any(_covers(r, "udp", 53) for r in out) and any(_covers(r, "tcp", 53) for r in out)
    assert any(_covers(r, "tcp", 40000) for r in out)
    into = [r for r in node.inputs["ingress"] if mgmt in (r.get("cidrBlocks") or [])]
    assert any(_covers(r, "tcp", 40000) for r in into), "the launcher reaches the workers' daemons"


def test_b5_prometheus_on_the_eks_system_nodes_reaches_the_gpu_exporters(prod):
    node = _sg(prod, "node")
    mgmt = prod.plan.network.management.cidr
    from_mgmt = [r for r in node.inputs["ingress"] if mgmt in (r.get("cidrBlocks") or [])
                 and "Prometheus" in r["description"]]
    assert {9100, 9400} <= {r["fromPort"] for r in from_mgmt}
    assert all("EKS system nodes" in r["description"] for r in from_mgmt)


def test_a4_a_slurm_stack_gets_no_eks_paths(full_capture):
    cap = full_capture("local-slurm")
    assert not any(r.inputs["tags"][t.ROLE] == "eks-system-path" for r in cap.of_type(INGRESS_RULE))
    node = _sg(cap, "node")
    assert not any(_covers(r, "udp", 53) for r in node.inputs["egress"])
    prometheus = [r["description"] for r in node.inputs["ingress"] if "Prometheus" in r["description"]]
    assert prometheus and all("controller" in d for d in prometheus)
