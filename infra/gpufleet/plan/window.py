"""How many post-canary batches may be in flight at once, and how many of their multi-node
(NCCL/fabric) tests may run together: the rollout's concurrency budget, computed from the plan.

Why two figures. Capacity in flight is how many batches are bought and being verified at once:
after the canary has passed its bar the rest of the plan is what the stack asked for, so by
default every remaining batch may be in flight (`max_batches_in_flight` lowers it). Concurrent
fabric tests are a physical limit: two multi-node tests that share a link measure each other, not
the nodes. Batches never share a block (a batch boundary never cuts one: gpufleet.plan.batches);
what they share is the spine above the blocks, and at-scale health checkers bound the nodes under
concurrent multi-node test for that reason: Soperator runs its NCCL checks on at most 200 nodes at
once, AzNHC's all-reduce checks break down above ~300 nodes. So the tests of batches in flight
together may hold at most FABRIC_TEST_NODES nodes: floor(200 / largest post-canary batch), at least
one. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.plan.model import ClusterPlan

# Nodes under concurrent multi-node test the fabric takes without the tests measuring each other
# (Soperator's fixed bound; AzNHC breaks above ~300 nodes): the smaller published figure.
FABRIC_TEST_NODES = 200


@dataclass(frozen=True)
class WindowBudget:
    batches_in_flight: int  # post-canary batches bought and being verified at once
    fabric_tests: int  # post-canary batches whose multi-node tests may run at the same time
    fabric_limit: int  # the physical limit fabric_tests is derived from (before any setting lowers it)
    capacity_nodes: int  # nodes of the largest `batches_in_flight` post-canary batches
    largest_batch_nodes: int
    remaining_batches: int

    @property
    def fabric_is_physical(self) -> bool:
        """True when the fabric figure is the derived limit (not lowered by a setting)."""
        return self.fabric_tests == self.fabric_limit

    def describe(self) -> str:
        return (f"{self.batches_in_flight} batch(es) in flight after the canary ({self.capacity_nodes} nodes); "
                f"{self.fabric_tests} concurrent fabric test(s): floor({FABRIC_TEST_NODES} nodes under test at "
                f"once / {self.largest_batch_nodes} nodes in the largest batch)"
                + ("" if self.fabric_is_physical else f", lowered from {self.fabric_limit} by the stack"))


def window_budget(plan: ClusterPlan, max_batches_in_flight: int | None = None,
                  max_fabric_tests: int | None = None) -> WindowBudget:
    rest = [b for b in plan.batches if not b.canary]
    largest = max((b.node_count for b in rest), default=0)
    fabric_limit = max(1, FABRIC_TEST_NODES // largest) if largest else 1
    fabric = min(fabric_limit, max_fabric_tests) if max_fabric_tests else fabric_limit
    in_flight = max(1, len(rest))
    if max_batches_in_flight:
        in_flight = min(in_flight, max_batches_in_flight)
    capacity = sum(sorted((b.node_count for b in rest), reverse=True)[:in_flight])
    return WindowBudget(batches_in_flight=in_flight, fabric_tests=max(1, fabric), fabric_limit=fabric_limit,
                        capacity_nodes=capacity, largest_batch_nodes=largest, remaining_batches=len(rest))
