"""The alert budget on small partitions: it rounds down (never over-draws) and counts blacklisted nodes as out;
a hardware-fatal alert may always take one node of a partition, however small, and no more than the share above it.

The other budget tests use 20 or 40 nodes at 10%, where floor, round and ceil agree; these sizes do not.
The rounding tests use GpuNvlinkErrors, a quarantining alert that is not hardware-fatal (a link can be retrained).
"""

from __future__ import annotations

import math

import pytest

from gpufleet.ops.webhook import HARDWARE_FATAL_ALERTS, Notification, budget, decide
from gpufleet.pool.protocol import NodeState, PoolNode, PoolState
from tests.ops.alertmanager import alert, notification

NOT_FATAL = "GpuNvlinkErrors"


def _pool(n: int, blacklisted: int = 0, quarantined: int = 0, partition: str = "p") -> PoolState:
    def state(i: int) -> NodeState:
        if i < blacklisted:
            return NodeState.BLACKLISTED
        if i < blacklisted + quarantined:
            return NodeState.QUARANTINED
        return NodeState.ADMITTED
    return PoolState({f"n{i:02d}": PoolNode(f"n{i:02d}", state(i), partition=partition) for i in range(n)})


@pytest.mark.parametrize(("nodes", "share", "expected"), [
    (3, 0.1, 0), (7, 0.1, 0), (9, 0.1, 0), (11, 0.1, 1), (9, 0.25, 2), (7, 0.5, 3), (3, 0.5, 1)])
def test_a_small_partition_is_never_over_drawn(nodes: int, share: float, expected: int) -> None:
    assert budget(_pool(nodes), share) == {"p": expected}
    d = decide(Notification.model_validate(notification(*(alert(f"n{i:02d}", NOT_FATAL) for i in range(nodes)))),
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
    d = decide(Notification.model_validate(notification(*(alert(s, NOT_FATAL) for s in healthy))), state, share)
    assert [q.slot for q in d.quarantine] == healthy[:expected]


def _note(*alerts: dict) -> Notification:
    return Notification.model_validate(notification(*alerts))


@pytest.mark.parametrize("name", sorted(HARDWARE_FATAL_ALERTS))
def test_a_five_node_debug_partition_quarantines_a_node_with_a_fatal_alert(name: str) -> None:
    state = PoolState({**_pool(5, partition="debug").nodes,
                       **{f"t{i:02d}": PoolNode(f"t{i:02d}", NodeState.ADMITTED, partition="train") for i in range(80)}})
    assert budget(state, 0.1) == {"debug": 0, "train": 8}  # the share alone would protect nothing in debug
    assert budget(state, 0.1, fatal=True) == {"debug": 1, "train": 8}
    d = decide(_note(alert("n03", name), alert("n04", name)), state, 0.1)
    assert [q.slot for q in d.quarantine] == ["n03"]  # one node; the second is a storm's business: paged
    assert [(p.slot, "hardware-fatal" in p.why) for p in d.page] == [("n04", True)]
    assert decide(_note(alert("n03", NOT_FATAL)), state, 0.1).quarantine == []  # not fatal: only paged there


def test_an_xid_label_naming_a_fatal_code_counts_as_hardware_fatal() -> None:
    state = _pool(5, partition="debug")
    for xid, taken in (("79", ["n00"]), ("95", ["n00"]), ("74", ["n00"]), ("48", ["n00"]), ("13", [])):
        d = decide(_note(alert("n00", "GpuXidNeedsReset", xid=xid)), state, 0.1)
        assert [q.slot for q in d.quarantine] == taken, xid


def test_the_floor_is_one_node_a_partition_with_one_out_already_pages() -> None:
    d = decide(_note(alert("n04", "GpuXidFatal")), _pool(5, quarantined=1, partition="debug"), 0.1)
    assert not d.quarantine and d.page[0].slot == "n04"


def test_a_fatal_storm_over_forty_percent_of_train_quarantines_at_most_the_share() -> None:
    state = _pool(80, partition="train")
    storm = [alert(f"n{i:02d}", "GpuXidFatal" if i % 2 else "GpuEccUncorrectable") for i in range(32)]
    d = decide(_note(*storm[:20]), state, 0.1)
    assert len(d.quarantine) == 8 and len(d.page) == 12
    after = PoolState({s: PoolNode(s, NodeState.QUARANTINED if s in {q.slot for q in d.quarantine} else n.state,
                                   partition="train") for s, n in state.nodes.items()})
    second = decide(_note(*storm[20:]), after, 0.1)  # the same storm, a later notification
    assert second.quarantine == [] and len(second.page) == 12
