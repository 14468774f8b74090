"""Isolation properties (Hypothesis, bounded) and launch specs."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpufleet import catalog
from gpufleet.gates import launch
from gpufleet.gates.isolation import arrange_ring, isolate, ring_avoids, ring_edges

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


PLACEMENTS = ("first-round", "ring-neighbour", "random")


@st.composite
def cohorts(draw):
    """A batch with bad nodes, ring-only bad nodes and sparse bad links (at most one per node).

    Links go on first-round pairs (found by the pairs), on ring neighbours (never paired, found
    only by the batch ring) or anywhere. Ring-only node faults are pinned to batches of >= 16
    nodes: below that the cleared half cannot lend enough companion pairs within the round bound.
    """
    big = draw(st.integers(0, 19)) == 0  # a few large cohorts, most small
    n = draw(st.integers(200, 1250) if big else st.integers(2, 60))
    nodes = [f"n{i:04d}" for i in range(n)]
    admitted = [f"a{i}" for i in range(draw(st.integers(0, 4)))]
    max_bad = max(0, min(8, n // 4))
    bad = draw(st.sets(st.sampled_from(nodes), max_size=max_bad)) if max_bad else set()
    ring_bad: set[str] = set()
    if n >= 16 and draw(st.booleans()):
        ring_bad = {draw(st.sampled_from([x for x in nodes if x not in bad]))}
    placement = draw(st.sampled_from(PLACEMENTS))
    healthy = [x for x in nodes if x not in bad | ring_bad]
    if placement == "first-round":
        candidates = [(nodes[i], nodes[i + 1]) for i in range(0, n - 1, 2)]
    elif placement == "ring-neighbour":
        candidates = [(nodes[i], nodes[i + 1]) for i in range(1, n - 1, 2)]
    else:
        candidates = [(a, b) for a, b in zip(healthy, healthy[1:])]
    candidates = [(a, b) for a, b in candidates if a in healthy and b in healthy]
    links: set[tuple[str, str]] = set()
    used: set[str] = set()
    for _ in range(draw(st.integers(0, 4))):
        if placement == "random":
            free = [x for x in healthy if x not in used]
            if len(free) < 2:
                break
            a, b = draw(st.sampled_from(free)), draw(st.sampled_from(free))
        else:
            free = [c for c in candidates if not (set(c) & used)]
            if not free:
                break
            a, b = draw(st.sampled_from(free))
        if a != b:
            links.add(tuple(sorted((a, b))))
            used |= {a, b}
    return nodes, admitted, bad, ring_bad, links


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cohorts())
def test_isolation_properties(cohort):
    nodes, admitted, bad, ring_bad, links = cohort
    fabric = Fabric(bad, links, ring_bad)
    r = isolate(nodes, admitted, fabric, FLOOR)
    q = set(r.quarantined)
    faulty = bad | ring_bad
    # no healthy node is ever quarantined
    assert q <= faulty, (q - faulty, links)
    # every bad node is quarantined, or unresolved only when no good partner could exist
    assert faulty <= q | set(r.unresolved), (faulty - q, r.ring_faults)
    if admitted:  # known-good partners exist from the start: node faults are found exactly
        assert q == faulty and r.unresolved == ()
    # reported link faults are true link faults between healthy nodes, never used to quarantine
    assert set(r.link_faults) <= links
    assert not (set(x for p in r.link_faults for x in p) & q)
    # every observed pair failure between two healthy nodes is reported as that pair
    for rnd in r.rounds:
        for g in rnd:
            if len(g) == 2 and tuple(sorted(g)) in links and not (set(g) & set(r.unresolved)):
                assert tuple(sorted(g)) in r.link_faults
    # no group after round 1 is laid over a link already known to be faulty
    known = set(r.link_faults)
    for rnd in r.rounds[1:]:
        for g in rnd:
            if len(g) >= 3:
                assert not set(ring_edges(g)) & known or len(g) == 3, g
    # good + quarantined + unresolved partition the batch
    assert set(r.good) | q | set(r.unresolved) == set(nodes)
    assert not (set(r.good) & (q | set(r.unresolved)))
    # rounds: a small constant plus ceil(log2 n) per fault; groups of a round are disjoint
    k = len(bad) + len(ring_bad) + len(links)
    bound = 3 + k * math.ceil(math.log2(len(nodes)))
    assert len(r.rounds) <= bound, (len(r.rounds), bound)
    for rnd in r.rounds:
        flat = [x for g in rnd for x in g]
        assert len(flat) == len(set(flat))
    assert r.runs == fabric.runs


@pytest.mark.parametrize("n", [16, 1250])
@pytest.mark.parametrize("admitted", [[], ["a0", "a1"]])
def test_three_bad_links_on_first_round_pairs_blame_nobody(n, admitted):
    nodes = [f"n{i:04d}" for i in range(n)]
    for starts in ((0, 2, 4), (14, 0, 4), (2, 6, 14), (n - 2, n - 4, n - 6)):  # incl. the pairs the ring closes on
        links = [(nodes[i], nodes[i + 1]) for i in starts]
        r = isolate(nodes, admitted, Fabric(links=links), FLOOR)
        assert r.quarantined == {} and set(r.link_faults) == {tuple(sorted(p)) for p in links}
        assert r.ring_faults == () and len(r.good) == n and len(r.rounds) <= 3


def test_arrange_ring_avoids_every_known_link_including_the_closing_edge():
    nodes = [f"n{i}" for i in range(8)]
    avoid = {("n6", "n7"), ("n0", "n7"), ("n1", "n2")}  # greedy runs into n6-n7 and would close on n7-n0
    ring = arrange_ring(nodes, avoid)
    assert sorted(ring) == nodes and ring_avoids(ring, avoid)
    assert not ring_avoids(arrange_ring(["a", "b", "c"], {("a", "b")}), {("a", "b")})  # a triangle cannot


@settings(max_examples=200, deadline=None)
@given(st.integers(3, 80), st.data())
def test_arrange_ring_finds_a_clean_ring_whenever_links_are_sparse(n, data):
    nodes = [f"n{i:02d}" for i in range(n)]
    shuffled = data.draw(st.permutations(nodes))
    avoid = {tuple(sorted(p)) for p in zip(shuffled[::2], shuffled[1::2])}  # a perfect matching: n >= 5 has a ring
    ring = arrange_ring(nodes, avoid)
    assert sorted(ring) == nodes
    if n >= 5:
        assert ring_avoids(ring, avoid)


def test_node_fault_isolated_in_three_rounds_pairs_then_small_rings_then_companions():
    """Round 1 pairs; round 2 each of the 6 suspects with a partner of its own beside 4-node rings
    over the other 1238 cleared nodes (309 rings, the last of 6); round 3 the 3 bad nodes (second
    count: quarantined), their 3 exonerated partners and the 6 lent partners, each with a proven pair."""
    nodes = [f"n{i}" for i in range(1250)]
    bad = {"n7", "n500", "n1249"}
    r = isolate(nodes, ["a0", "a1"], Fabric(bad), FLOOR)
    assert set(r.quarantined) == bad and set(r.quarantined.values()) == {"efa-pair-fail"}
    assert len(r.rounds) == 3
    assert [len(x) for x in r.rounds] == [625, 6 + 309, 3 + 3 + 6]
    assert r.ring_faults == () and r.unresolved == ()
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


@pytest.mark.parametrize("n, rounds", [(16, 5), (1250, 3)])
@pytest.mark.parametrize("admitted", [[], ["a0", "a1"]])
def test_ring_only_link_fault_is_narrowed_to_a_small_group_and_blames_nobody(n, rounds, admitted):
    """A bad link the pairs never exercise (n0005-n0006, ring neighbours). 16 nodes: the ring fails,
    the bisection narrows it to the smallest failing group, whose nodes each pass with companions.
    1250 nodes: the 4-node ring n0005..n0008 of round 2 fails, its nodes pass with companions in round 3."""
    nodes = [f"n{i:04d}" for i in range(n)]
    r = isolate(nodes, admitted, Fabric(links=[("n0005", "n0006")]), FLOOR)
    assert r.quarantined == {} and r.link_faults == () and len(r.good) == n
    small = [g for g in r.ring_faults if {"n0005", "n0006"} <= set(g)]
    assert len(small) == 1 and len(small[0]) < 6
    assert len(r.rounds) == rounds <= 3 + math.ceil(math.log2(n))


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
