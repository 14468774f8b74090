"""Isolation properties (Hypothesis, bounded) and launch specs."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings, strategies as st

from infra import catalog
from infra.gates import launch
from infra.gates.isolation import isolate

FLOOR = 330.0


class Fabric:
    """A modelled network: a pair/ring passes unless it holds a bad node or an adjacent faulty link,
    or (ring_bad) a node that only slows rings of 3 or more."""

    def __init__(self, bad=(), links=(), ring_bad=()):
        self.bad, self.ring_bad = set(bad), set(ring_bad)
        self.links = {tuple(sorted(p)) for p in links}
        self.runs = 0

    def __call__(self, groups):
        out = []
        for g in groups:
            self.runs += 1
            adj = [tuple(sorted((g[i], g[(i + 1) % len(g)]))) for i in range(len(g))] if len(g) > 2 else [tuple(sorted(g))]
            ok = not (set(g) & self.bad) and not any(a in self.links for a in adj)
            if len(g) >= 3 and set(g) & self.ring_bad:
                ok = False
            out.append(400.0 if ok else 120.0)
        return out


@st.composite
def cohorts(draw):
    big = draw(st.integers(0, 19)) == 0  # a few large cohorts, most small
    n = draw(st.integers(200, 1250) if big else st.integers(2, 60))
    nodes = [f"n{i:04d}" for i in range(n)]
    admitted = [f"a{i}" for i in range(draw(st.integers(0, 4)))]
    max_bad = max(0, min(8, n // 4))
    bad = draw(st.sets(st.sampled_from(nodes), max_size=max_bad)) if max_bad else set()
    healthy = [x for x in nodes if x not in bad]
    links: set[tuple[str, str]] = set()
    used: set[str] = set()
    for _ in range(draw(st.integers(0, 4))):  # sparse link faults: at most one per node
        free = [x for x in healthy if x not in used]
        if len(free) < 2:
            break
        a, b = draw(st.sampled_from(free)), draw(st.sampled_from(free))
        if a != b:
            links.add(tuple(sorted((a, b))))
            used |= {a, b}
    return nodes, admitted, bad, links


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cohorts())
def test_isolation_properties(cohort):
    nodes, admitted, bad, links = cohort
    fabric = Fabric(bad, links)
    r = isolate(nodes, admitted, fabric, FLOOR)
    q = set(r.quarantined)
    # no healthy node is ever quarantined
    assert q <= bad
    # every bad node is quarantined, or unresolved only when no good partner could exist
    assert bad <= q | set(r.unresolved)
    if admitted:  # known-good partners exist from the start: node faults are found exactly
        assert q == bad and r.unresolved == ()
    # reported link faults are true link faults between healthy nodes, never used to quarantine
    assert set(r.link_faults) <= links
    assert not (set(x for p in r.link_faults for x in p) & q)
    # every observed pair failure between two healthy nodes is reported as that pair
    for rnd in r.rounds:
        for g in rnd:
            if len(g) == 2 and tuple(sorted(g)) in links and not (set(g) & set(r.unresolved)):
                assert tuple(sorted(g)) in r.link_faults
    # good + quarantined + unresolved partition the batch
    assert set(r.good) | q | set(r.unresolved) == set(nodes)
    assert not (set(r.good) & (q | set(r.unresolved)))
    # rounds: a small constant plus O(log n) per fault; groups of a round are disjoint
    faults = len(bad) + len(links)
    bound = 5 + faults * (2 * math.ceil(math.log2(len(nodes) + 1)) + 2)
    assert len(r.rounds) <= bound, (len(r.rounds), bound)
    for rnd in r.rounds:
        flat = [x for g in rnd for x in g]
        assert len(flat) == len(set(flat))
    assert r.runs == fabric.runs


def test_node_fault_isolated_in_three_pair_rounds_and_one_ring():
    nodes = [f"n{i}" for i in range(1250)]
    bad = {"n7", "n500", "n1249"}
    r = isolate(nodes, ["a0", "a1"], Fabric(bad), FLOOR)
    assert set(r.quarantined) == bad and set(r.quarantined.values()) == {"efa-pair-fail"}
    assert len(r.rounds) == 4
    assert r.runs == 625 + 3 + 3 + 3 + 1  # round 1, bad nodes' partners, their 2nd good partner, the ring
    assert len(r.good) == 1247


def test_pure_link_fault_reported_as_pair_not_quarantined():
    nodes = [f"n{i}" for i in range(10)]
    r = isolate(nodes, [], Fabric(links=[("n2", "n3")]), FLOOR)
    assert r.quarantined == {} and r.link_faults == (("n2", "n3"),)
    assert r.escalations == (("n2", "n3"),)
    assert len(r.good) == 10


def test_single_pair_failure_never_quarantines_without_good_partners():
    r = isolate(["x", "y"], [], Fabric(bad={"x"}), FLOOR)
    assert r.quarantined == {} and set(r.unresolved) == {"x", "y"}


def test_ring_only_fault_found_by_bisection():
    nodes = [f"n{i:02d}" for i in range(24)]
    r = isolate(nodes, ["a0", "a1"], Fabric(ring_bad={"n13"}), FLOOR)
    assert r.quarantined == {"n13": "ring-underperform"}
    assert len(r.rounds) <= 1 + 1 + math.ceil(math.log2(24)) + 2


def test_ring_interaction_escalated_without_blame():
    # a link fault the pairs never exercised, adjacent in the batch ring
    nodes = [f"n{i}" for i in range(4)]
    r = isolate(nodes, [], Fabric(links=[("n1", "n2")]), FLOOR)
    assert r.quarantined == {}
    assert r.ring_faults  # escalated as a group
    assert set(r.good) == set(nodes)


def test_launch_specs_per_launcher():
    sku = catalog.get("p5.48xlarge")
    versions = {"aws_ofi_nccl": "1.11.0-aws", "libfabric": "1.22.0amzn1.0"}
    slurm = launch.launch_spec("slurm", ["n1", "n2"], sku, versions)
    assert slurm.argv[slurm.argv.index("srun") + 1:][:4] == ("--job-name=gate-n1-n2", "--nodelist=n1,n2", "--nodes=2",
                                                            "--ntasks-per-node=8")
    assert "NCCL_ALGO=Ring" in slurm.argv and "NCCL_DEBUG=INFO" in slurm.argv
    assert "FI_PROVIDER" not in slurm.env and "FI_EFA_USE_DEVICE_RDMA" not in slurm.env
    old = launch.launch_spec("ssh", ["n1", "n2"], sku, {"aws_ofi_nccl": "1.5.0", "libfabric": "1.16.1"})
    assert old.env["FI_PROVIDER"] == "efa" and old.env["NCCL_PROTO"] == "simple"
    assert old.env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert old.argv[:5] == ("mpirun", "--host", "n1:8,n2:8", "-np", "16")
    k8s = launch.launch_spec("kubernetes", ["n1", "n2"], sku, versions).manifest
    worker = k8s["spec"]["mpiReplicaSpecs"]["Worker"]
    assert k8s["kind"] == "MPIJob" and worker["replicas"] == 2
    assert worker["template"]["spec"]["tolerations"][0]["key"] == "gpufleet.io/gate"
    assert worker["template"]["spec"]["containers"][0]["resources"]["limits"]["vpc.amazonaws.com/efa"] == 32
    terms = worker["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["n1", "n2"]
    assert [s.nodes for s in launch.round_specs([("a", "b"), ("c", "d")], "slurm", sku, versions)] == [("a", "b"), ("c", "d")]
