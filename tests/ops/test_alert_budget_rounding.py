"""The alert budget on small partitions: it rounds down (never over-draws) and counts blacklisted nodes as out.

The other budget tests use 20 or 40 nodes at 10%, where floor, round and ceil agree; these sizes do not.
"""

from __future__ import annotations

import math

import pytest

from gpufleet.ops.webhook import Notification, budget, decide
from gpufleet.pool.protocol import NodeState, PoolNode, PoolState
from tests.ops.alertmanager import alert, notification


def _pool(n: int, blacklisted: int = 0, quarantined: int = 0) -> PoolState:
    def state(i: int) -> NodeState:
        if i < blacklisted:
            return NodeState.BLACKLISTED
        if i < blacklisted + quarantined:
            return NodeState.QUARANTINED
        return NodeState.ADMITTED
    return PoolState({f"n{i:02d}": PoolNode(f"n{i:02d}", state(i), partition="p") for i in range(n)})


@pytest.mark.parametrize(("nodes", "share", "expected"), [
    (3, 0.1, 0), (7, 0.1, 0), (9, 0.1, 0), (11, 0.1, 1), (9, 0.25, 2), (7, 0.5, 3), (3, 0.5, 1)])
def test_a_small_partition_is_never_over_drawn(nodes: int, share: float, expected: int) -> None:
    assert budget(_pool(nodes), share) == {"p": expected}
    d = decide(Notification.model_validate(notification(*(alert(f"n{i:02d}") for i in range(nodes)))),
               _pool(nodes), share)
    assert len(d.quarantine) == expected <= math.floor(share * nodes)
    assert len(d.page) == nodes - expected


@pytest.mark.parametrize(("nodes", "blacklisted", "quarantined", "expected"), [
    (11, 1, 0, 0), (20, 1, 0, 1), (20, 2, 0, 0), (20, 1, 1, 0), (9, 1, 0, 1)])
def test_blacklisted_nodes_count_as_already_out(nodes: int, blacklisted: int, quarantined: int, expected: int) -> None:
    share = 0.25 if nodes == 9 else 0.1
    state = _pool(nodes, blacklisted, quarantined)
    assert budget(state, share) == {"p": expected}
    healthy = [f"n{i:02d}" for i in range(blacklisted + quarantined, nodes)]
    d = decide(Notification.model_validate(notification(*(alert(s) for s in healthy))), state, share)
    assert [q.slot for q in d.quarantine] == healthy[:expected]
