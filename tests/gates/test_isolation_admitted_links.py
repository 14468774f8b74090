"""Isolation with bad links to already-admitted nodes: a companion met once is never met again.

An admitted node is known good, yet its link to one batch node can still be bad. A suspect tested
in a triangle with the admitted companion pair over that link fails for the link's sake; tested
with the same pair again it fails again, and two "different" failures blame a healthy node. The
property generator of tests/gates/test_isolation.py puts bad links between batch nodes only; this
one puts them on admitted nodes too.
"""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings, strategies as st

from gpufleet.gates.isolation import isolate

from tests.gates.test_isolation import FLOOR, Fabric

NINE = [f"n{i}" for i in range(9)]


def test_a_bad_link_to_an_admitted_node_never_quarantines_its_healthy_end():
    """9 nodes: n5, n7 bad, n3 slows rings; n4's link to the admitted a0 is bad. The batch ring fails,
    bisection tests n4 with the admitted pair (a0, a1): that fails over n4-a0, and the same pair
    again would count the same link twice and quarantine n4."""
    r = isolate(NINE, ["a0", "a1"], Fabric(bad={"n5", "n7"}, links=[("n4", "a0")], ring_bad={"n3"}), FLOOR)
    assert r.quarantined == {"n5": "efa-pair-fail", "n7": "efa-pair-fail", "n3": "ring-underperform"}
    assert "n4" in r.good


@st.composite
def cohorts_with_admitted_links(draw):
    """A batch with bad nodes, at most one ring-only bad node, and bad links from healthy batch
    nodes to admitted nodes (at most one per batch node), plus at most one between batch nodes."""
    n = draw(st.integers(3, 40))
    nodes = [f"n{i:02d}" for i in range(n)]
    admitted = [f"a{i}" for i in range(draw(st.integers(1, 4)))]
    bad = draw(st.sets(st.sampled_from(nodes), max_size=max(0, n // 4)))
    ring_bad: set[str] = set()
    if draw(st.booleans()) and len(bad) < n:
        ring_bad = {draw(st.sampled_from([x for x in nodes if x not in bad]))}
    healthy = [x for x in nodes if x not in bad | ring_bad]
    links: set[tuple[str, str]] = set()
    ends = draw(st.lists(st.sampled_from(healthy), unique=True, min_size=1, max_size=3)) if healthy else []
    for x in ends:
        links.add(tuple(sorted((x, draw(st.sampled_from(admitted))))))
    free = [x for x in healthy if x not in ends]
    if len(free) >= 2 and draw(st.booleans()):
        a, b = draw(st.lists(st.sampled_from(free), unique=True, min_size=2, max_size=2))
        links.add(tuple(sorted((a, b))))
    return nodes, admitted, bad, ring_bad, links


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cohorts_with_admitted_links())
@example((NINE, ["a0", "a1"], {"n5", "n7"}, {"n3"}, {("a0", "n4")}))
def test_no_healthy_node_is_quarantined_over_a_bad_link_to_an_admitted_node(cohort):
    nodes, admitted, bad, ring_bad, links = cohort
    fabric = Fabric(bad, links, ring_bad)
    r = isolate(nodes, admitted, fabric, FLOOR)
    q = set(r.quarantined)
    assert q <= bad | ring_bad, (q - (bad | ring_bad), links)
    assert bad <= q  # admitted partners exist from the start: every bad node is found
    assert set(r.link_faults) <= links
    assert set(r.good) | q | set(r.unresolved) == set(nodes) and not set(r.good) & (q | set(r.unresolved))
    assert r.runs == fabric.runs
