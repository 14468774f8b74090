"""A `kubectl cordon` by hand on an admitted Node, against the fake API server: the pool reads the
node as quarantined (code `cordoned`), so `gpufleet pool` shows it and the patrol leaves it alone;
gpufleet's other writes keep it cordoned, and only an admission (the re-admission gate's outcome)
makes it schedulable again."""

from __future__ import annotations

import random

from gpufleet.daytwo.patrol import select
from gpufleet.pool.kubernetes.adapter import KubernetesPool
from gpufleet.pool.kubernetes.api import KubeApi
from gpufleet.pool.kubernetes.nodes import CORDONED
from gpufleet.pool.kubernetes.retry import RetryPolicy
from gpufleet.pool.protocol import NodeState, PendingNode
from tests.pool import contract
from tests.pool.kubernetes_fake_api import FakeApiServer, FakeTime

NODE = "ip-10-64-0-10.us-east-2.compute.internal"
SLOT = PendingNode(slot="prod-b0000-n00000", block=0, partition="train", instance_id="i-0aaaaaaaaaaaaaaaa")


def test_a_hand_cordon_is_seen_kept_and_lifted_only_by_an_admission():
    clock = FakeTime()
    with FakeApiServer() as server:
        server.kube.add_node(NODE, SLOT.slot, instance_id=SLOT.instance_id)
        policy = RetryPolicy(deadline_s=30.0, base_s=0.2, cap_s=10.0, sleep=clock.sleep, clock=clock.clock,
                             rng=random.Random(3))
        api = KubeApi(server.api_client(), policy)
        pool = KubernetesPool(api, partitions=["train"], failures_before_blacklist=2)
        record = contract.record(SLOT).model_copy(update={"instance_id": SLOT.instance_id})
        pool.register_pending([SLOT])
        assert pool.admit(SLOT.slot, record).state is NodeState.ADMITTED

        api.cordon_node(NODE, True, SLOT.slot)  # what `kubectl cordon` sends: spec.unschedulable alone
        node = pool.state().get(SLOT.slot)
        assert node is not None and node.state is NodeState.QUARANTINED and node.reason_code == CORDONED
        assert "kubectl cordon" in (node.reason or "")
        assert SLOT.slot not in select(pool.state()).idle  # the patrol does not touch it

        pool.quarantine(SLOT.slot, "xid-79", "fell off the bus")  # an alert meanwhile: still cordoned
        assert server.kube.nodes[NODE]["spec"]["unschedulable"] is True
        assert pool.state().get(SLOT.slot).state is NodeState.QUARANTINED

        pool.admit(SLOT.slot, record)  # only the gate's admission makes it schedulable again
        assert not server.kube.nodes[NODE]["spec"].get("unschedulable")
        assert pool.state().get(SLOT.slot).state is NodeState.ADMITTED
