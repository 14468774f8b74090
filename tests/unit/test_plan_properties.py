"""Plan invariants over random specs, and the IP budget against an independent oracle."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpufleet import catalog
from gpufleet.plan import build_plan
from gpufleet.spec import ClusterSpec

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


def _takes_subnet_address(interface_type: str) -> bool:
    """EC2's interface types: an EFA-only device has no IP; `interface` and `efa` have one."""
    return interface_type in ("interface", "efa")


def oracle_node_addresses(spec: ClusterSpec) -> int:
    """One node's compute-subnet addresses, enumerated: its interfaces' primaries, then the VPC
    CNI's ipamd run pod by pod up to maxPods, attaching ENIs and assigning secondaries one at a
    time under WARM_IP_TARGET/MINIMUM_IP_TARGET or WARM_ENI_TARGET, as the CNI documents them."""
    entry = spec.cluster.instance
    held = [("iface", i, "primary") for i, slot in enumerate(entry.interfaces)
            if _takes_subnet_address(slot.interface_type.value)]
    pods = spec.network.pod_networking
    if spec.pool.type != "kubernetes" or pods.mode != "vpc-cni":
        return len(held)  # no CNI, or custom networking: pod IPs live in other subnets
    slots_per_eni = entry.ipv4_per_interface  # the ENI's primary included
    enis: list[dict] = [{"secondaries": 0, "pods": 0}]  # ENI 0 is the node's primary interface
    warm_ip_mode = pods.warm_ip_target is not None or pods.minimum_ip_target is not None

    def attach(fill: bool) -> None:
        enis.append({"secondaries": slots_per_eni - 1 if fill else 0, "pods": 0})
        held.append(("eni", len(enis) - 1, "primary"))

    def add_secondary() -> None:
        if enis[-1]["secondaries"] == slots_per_eni - 1:
            attach(fill=False)
        enis[-1]["secondaries"] += 1

    def reconcile(used: int) -> None:
        if warm_ip_mode:
            want = max(used + (pods.warm_ip_target or 0), pods.minimum_ip_target or 0)
            while sum(e["secondaries"] for e in enis) < want:
                add_secondary()
        else:  # whole ENIs: keep warmEniTarget ENIs with no pod on them
            if enis[0]["secondaries"] == 0:
                enis[0]["secondaries"] = slots_per_eni - 1
            while sum(1 for e in enis if e["pods"] == 0) < pods.warm_eni_target:
                attach(fill=True)

    reconcile(0)
    for used in range(1, pods.max_pods + 1):
        free = next((e for e in enis if e["pods"] < e["secondaries"]), None)
        if free is None:  # no free address: ipamd attaches (or grows) before the pod can start
            if warm_ip_mode:
                add_secondary()
            else:
                attach(fill=True)
            free = enis[-1]
        free["pods"] += 1
        reconcile(used)
    held += [("eni", i, f"secondary-{k}") for i, e in enumerate(enis) for k in range(e["secondaries"])]
    assert len(held) == len(set(held))
    return len(held)


def oracle_subnet_fits(spec: ClusterSpec, plan) -> tuple[bool, int]:
    """Exact arithmetic: every node and spare, the headroom as the decimal the user wrote, and
    the 5 addresses AWS reserves in each subnet."""
    nodes = plan.topology.nodes + plan.topology.spare_nodes
    headroom = Fraction(str(spec.network.ip_headroom_fraction))
    wanted = math.ceil(oracle_node_addresses(spec) * nodes * (1 + headroom)) + 5
    prefix = int(spec.network.compute_subnet_cidr.split("/")[1])
    return wanted <= 2 ** (32 - prefix), wanted


@pytest.mark.slow  # 400 examples, ~10 s
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs(), st.sampled_from([-1, 0, 0, 1, None]))
def test_ip_budget_finding_fires_exactly_when_the_subnet_is_too_small(spec, near):
    if near is not None:  # most examples sit on the boundary: the prefix that just fits, and its neighbours
        _, wanted = oracle_subnet_fits(spec, build_plan(spec))
        prefix = min(28, max(17, 32 - math.ceil(math.log2(wanted)) + near))
        spec = spec.model_copy(update={"network": spec.network.model_copy(
            update={"compute_subnet_cidr": f"10.0.0.0/{prefix}"})})
    plan = build_plan(spec)
    fits, wanted = oracle_subnet_fits(spec, plan)
    event("fits" if fits else "too small")
    fired = [f for f in plan.findings if f.code == "SUBNET_TOO_SMALL" and f.field.endswith("computeSubnetCidr")]
    assert bool(fired) == (not fits), (wanted, spec.network.compute_subnet_cidr)
    assert plan.network.compute.needed == wanted
    if fired:
        prefix = 32 - math.ceil(math.log2(wanted))
        assert f"/{prefix}" in fired[0].message


@pytest.mark.parametrize(("max_pods", "warm_eni", "warm_ip", "minimum_ip", "pod_ips"), [
    (49, 1, None, None, 49 * 2 + 1),  # one ENI full of pods, one warm ENI (its primary + 49)
    (50, 1, None, None, 49 * 3 + 2),  # the 50th pod opens a second ENI, a third stays warm
    (110, 0, None, None, 49 * 3 + 2),
    (110, 1, 5, None, 115 + 2),  # 115 secondaries on three ENIs
    (10, 1, 0, 100, 100 + 2),  # the minimum wins
])
def test_oracle_on_hand_computed_nodes(max_pods, warm_eni, warm_ip, minimum_ip, pod_ips):
    """The oracle itself, on nodes worked out by hand (p5.48xlarge: 50 addresses per ENI)."""
    pods = {"mode": "vpc-cni", "maxPods": max_pods, "warmEniTarget": warm_eni}
    if warm_ip is not None:
        pods["warmIpTarget"] = warm_ip
    if minimum_ip is not None:
        pods["minimumIpTarget"] = minimum_ip
    spec = ClusterSpec.from_raw({
        "cluster": {"name": "hand", "region": "us-east-1", "availabilityZone": "us-east-1a",
                    "instanceType": "p5.48xlarge", "targetGpus": 64, "unitGpus": 8},
        "network": {"podNetworking": pods}, "pool": {"type": "kubernetes"}}, source="hand")
    interface_ips = catalog.get("p5.48xlarge").ips_per_node
    assert oracle_node_addresses(spec) == interface_ips + pod_ips


def test_headroom_is_computed_in_exact_decimals():
    """770 addresses + 10 % is 847, not the 848 float rounding gives (found by the oracle above)."""
    from gpufleet.plan.network import subnet_budget

    assert subnet_budget("compute", "10.0.0.0/22", 770, 0.1).needed == 847 + 5
