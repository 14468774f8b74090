"""Plan invariants over random specs, and the IP budget against an independent oracle."""

from __future__ import annotations

import ipaddress
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra import catalog
from infra.plan import build_plan
from infra.spec import ClusterSpec

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def specs(draw):
    itype = draw(st.sampled_from(sorted(catalog.CATALOG)))
    target = draw(st.integers(min_value=1, max_value=12_000))
    unit = draw(st.integers(min_value=1, max_value=min(64, target)))
    pool = draw(st.sampled_from(["sim", "slurm", "kubernetes"]))
    pods: dict = {"mode": draw(st.sampled_from(["vpc-cni", "none", "vpc-cni-custom-networking"])),
                  "maxPods": draw(st.integers(min_value=1, max_value=250)),
                  "warmEniTarget": draw(st.integers(min_value=0, max_value=2))}
    if draw(st.booleans()):
        pods["warmIpTarget"] = draw(st.integers(min_value=0, max_value=30))
    if draw(st.booleans()):
        pods["minimumIpTarget"] = draw(st.integers(min_value=0, max_value=300))
    prefix = draw(st.integers(min_value=17, max_value=28))
    raw = {
        "cluster": {"name": "prop", "region": "us-east-1", "availabilityZone": "us-east-1a", "instanceType": itype,
                    "targetGpus": target, "unitGpus": unit,
                    "spareFraction": draw(st.floats(min_value=0, max_value=0.5))},
        "network": {"vpcCidr": "10.0.0.0/16", "computeSubnetCidr": f"10.0.0.0/{prefix}",
                    "managementSubnetCidr": "10.0.128.0/24",
                    "ipHeadroomFraction": draw(st.sampled_from([0.0, 0.1, 0.2, 0.5])), "podNetworking": pods},
        "rollout": {"canaryFraction": draw(st.floats(min_value=0.001, max_value=1.0)),
                    "batchSize": draw(st.integers(min_value=1, max_value=300))},
        "pool": {"type": pool},
    }
    return ClusterSpec.from_raw(raw, source="hypothesis")


@SETTINGS
@given(specs())
def test_batches_partition_the_nodes_on_block_boundaries(spec):
    plan = build_plan(spec)
    npb = plan.topology.nodes_per_block
    covered = [i for b in plan.batches for i in range(b.first_node, b.last_node + 1)]
    assert covered == list(range(plan.topology.nodes))  # every node in exactly one batch, in order
    for b in plan.batches:
        assert b.first_node % npb == 0
        assert (b.last_node + 1) % npb == 0 or b.last_node == plan.topology.nodes - 1
        assert all(plan.nodes[i].batch == b.number for i in range(b.first_node, b.last_node + 1))
    assert plan.batches[0].canary and plan.batches[0].node_count >= min(npb, plan.topology.nodes)
    assert [b.number for b in plan.batches] == list(range(1, len(plan.batches) + 1))


@SETTINGS
@given(specs())
def test_units_never_overlap_and_stay_in_their_block(spec):
    plan = build_plan(spec)
    t = plan.topology
    seen: set[tuple[int, int]] = set()
    for unit in plan.units:
        assert len(unit.gpus) == t.unit_gpus
        for node, gpu in unit.gpus:
            assert 0 <= node < t.nodes and 0 <= gpu < t.gpus_per_node
            assert (node, gpu) not in seen  # every GPU in at most one unit
            seen.add((node, gpu))
        assert {n // t.nodes_per_block for n in unit.nodes} == {unit.block}
        for node in unit.nodes:
            assert unit.id in plan.nodes[node].units
    assert max((s.blast_radius for s in plan.nodes), default=0) == t.max_blast_radius
    assert len(plan.units) * t.unit_gpus + t.idle_gpus == t.nodes * t.gpus_per_node


def oracle_node_addresses(spec: ClusterSpec) -> int:
    """Enumerate one node's interfaces and the VPC CNI's ENIs, address by address."""
    entry = spec.cluster.instance
    addresses = sum(1 for slot in entry.interfaces if slot.interface_type.value != "efa-only")
    pods = spec.network.pod_networking
    if spec.pool.type != "kubernetes" or pods.mode != "vpc-cni":
        return addresses
    capacity = entry.ipv4_per_interface - 1  # secondaries an ENI can hold
    enis = [0]  # secondaries on each ENI; the first ENI is the node's primary interface
    if pods.warm_ip_target is not None or pods.minimum_ip_target is not None:
        wanted = max(pods.max_pods + (pods.warm_ip_target or 0), pods.minimum_ip_target or 0)
        for _ in range(wanted):
            if enis[-1] == capacity:
                enis.append(0)
            enis[-1] += 1
    else:
        enis = [capacity]
        while sum(enis) < pods.max_pods:
            enis.append(capacity)
        enis += [capacity] * pods.warm_eni_target
    extra_primaries = len(enis) - 1
    return addresses + sum(enis) + extra_primaries


@SETTINGS
@given(specs())
def test_ip_budget_finding_fires_exactly_when_the_subnet_is_too_small(spec):
    plan = build_plan(spec)
    nodes = plan.topology.nodes + plan.topology.spare_nodes
    wanted = math.ceil(oracle_node_addresses(spec) * nodes * (1 + spec.network.ip_headroom_fraction)) + 5
    size = ipaddress.IPv4Network(spec.network.compute_subnet_cidr).num_addresses
    fired = [f for f in plan.findings if f.code == "SUBNET_TOO_SMALL" and f.field.endswith("computeSubnetCidr")]
    assert bool(fired) == (wanted > size)
    if fired:
        prefix = 32 - math.ceil(math.log2(wanted))
        assert f"/{prefix}" in fired[0].message
