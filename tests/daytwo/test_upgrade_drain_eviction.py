"""The upgrade's drain on a Kubernetes pool, through the real adapter and the fake API server: the
group's nodes are gated and cordoned, running work is left alone for `evictAfterS`, then evicted
(disruption budgets honoured), the nodes are uncordoned for the gates once empty; and a drain a
budget holds past `drainTimeoutS` halts the group with the workloads that hold it named."""

from __future__ import annotations

import random
from types import SimpleNamespace

from gpufleet.daytwo.state import GroupState
from gpufleet.daytwo.upgrade_run import Upgrader
from gpufleet.pool.kubernetes.adapter import KubernetesPool
from gpufleet.pool.kubernetes.api import KubeApi
from gpufleet.pool.kubernetes.retry import RetryPolicy
from gpufleet.pool.protocol import NodeState, PendingNode
from gpufleet.spec import UpgradeConfig
from tests.pool import contract
from tests.pool.kubernetes_fake_api import FakeApiServer, FakeTime

NODES = {f"prod-b0000-n0000{i}": (f"ip-10-64-0-1{i}.us-east-2.compute.internal", f"i-0aaaaaaaaaaaaaa{i:02d}")
         for i in range(2)}
BUSY = "prod-b0000-n00001"
WORKLOAD = "job-llm-pretrain-7c2f1"
EVICTION = f"/api/v1/namespaces/train/pods/{WORKLOAD}-0/eviction"
CONFIG = UpgradeConfig.model_validate({"drainTimeoutS": 600, "evictAfterS": 120})
POLL_S = 30.0


def pending(slot: str) -> PendingNode:
    return PendingNode(slot=slot, block=0, partition="train", instance_id=NODES[slot][1])


def record(slot: str):
    return contract.record(pending(slot)).model_copy(update={"instance_id": NODES[slot][1]})


def fleet(server: FakeApiServer, clock: FakeTime) -> tuple[Upgrader, list[dict]]:
    """Two admitted nodes of one block, a Kueue workload's pod holding the GPUs of one, and an Upgrader
    over a day-two context holding only what the drain reads (plan, upgrade config, pool, journal)."""
    for slot, (name, instance) in NODES.items():
        server.kube.add_node(name, slot, instance_id=instance)
    server.kube.add_pod("train", f"{WORKLOAD}-0", NODES[BUSY][0], 8, workload=WORKLOAD)
    policy = RetryPolicy(deadline_s=30.0, base_s=1.0, cap_s=20.0, sleep=clock.sleep, clock=clock.clock,
                         rng=random.Random(11))
    pool = KubernetesPool(KubeApi(server.api_client(), policy), partitions=["train"])
    pool.register_pending([pending(s) for s in NODES])
    for slot in NODES:
        pool.admit(slot, record(slot))
    events: list[dict] = []
    d = SimpleNamespace(plan=SimpleNamespace(nodes=[SimpleNamespace(name=s, block=0) for s in NODES],
                                             blocks=[SimpleNamespace(id=0, partition="train")]),
                        spec=SimpleNamespace(upgrade=CONFIG), pool=pool, adapters=SimpleNamespace(pool=pool),
                        journal=SimpleNamespace(state=SimpleNamespace(upgrade=SimpleNamespace()), append=events.append))
    server.kube.requests.clear()
    server.kube.patches.clear()
    return Upgrader(d, sleep=clock.sleep, monotonic=clock.clock, poll_s=POLL_S), events  # type: ignore[arg-type]


def cordon_patches(server: FakeApiServer) -> list[tuple[str, bool]]:
    return [(path.rsplit("/", 1)[1], body["spec"]["unschedulable"]) for path, _, body in server.kube.patches
            if body.get("spec", {}).keys() == {"unschedulable"}]


def test_work_is_evicted_after_the_grace_period_and_the_nodes_are_uncordoned_when_empty():
    clock = FakeTime()
    with FakeApiServer() as server:
        up, _events = fleet(server, clock)
        evicted_at: list[float] = []

        def kubelet(kube, ns, name):  # the pod ends one poll after its eviction
            evicted_at.append(clock.now)
            kube.on_request = lambda k, m, p: k.pods.pop((ns, name), None) if clock.now > evicted_at[0] else None
        server.kube.on_eviction = kubelet
        server.kube.fail(429, method="POST", path=EVICTION, times=1)  # the budget refuses the first ask
        assert up._drain(list(NODES)) == []
        names = [NODES[s][0] for s in NODES]
        assert cordon_patches(server) == [(n, True) for n in names] + [(n, False) for n in names]
        assert server.kube.posts == [(EVICTION, {"apiVersion": "policy/v1", "kind": "Eviction",
                                                 "metadata": {"name": f"{WORKLOAD}-0", "namespace": "train"}})] * 2
        assert CONFIG.evict_after_s <= evicted_at[0] < CONFIG.evict_after_s + POLL_S + 30  # not before the grace
        nodes = up.d.pool.state().nodes
        assert all(n.state is NodeState.PENDING for n in nodes.values())  # gated: only the gates' pods go there
        assert not any(server.kube.nodes[n]["spec"].get("unschedulable") for n in names)


def test_no_eviction_before_the_grace_period_when_the_work_ends_by_itself():
    clock = FakeTime()
    with FakeApiServer() as server:
        up, _events = fleet(server, clock)
        server.kube.on_request = lambda k, m, p: k.pods.pop(("train", f"{WORKLOAD}-0"), None) \
            if clock.now >= 60 else None
        assert up._drain(list(NODES)) == []
        assert server.kube.posts == [] and clock.now < CONFIG.evict_after_s


def test_a_drain_held_past_its_deadline_halts_the_group_naming_the_workloads():
    clock = FakeTime()
    with FakeApiServer() as server:
        up, events = fleet(server, clock)
        server.kube.fail(429, method="POST", path=EVICTION, times=10_000)  # a budget that never allows it
        group = GroupState(number=1, blocks=[0], slots=list(NODES), stage="started",
                           previous={s: {"bom_digest": record(s).bom_digest, "record": record(s).model_dump(mode="json")}
                                     for s in NODES})
        # the previous BOMs are read before the drain (1bb435d; tested in test_upgrade_rollback_failures);
        # this fake context keeps none, and this test holds the drain itself
        up.previous_boms = lambda groups: {}  # type: ignore[method-assign]
        up._group(group)
        assert CONFIG.drain_timeout_s <= clock.now < CONFIG.drain_timeout_s + POLL_S + 30
        halted = events[-1]
        assert halted["to"] == "halted" and events[-2]["to"] == "group-halted"
        assert f"running work holds train/Workload/{WORKLOAD} on {BUSY};" in halted["reason"]
        assert "within 600 s" in halted["reason"]
        assert server.kube.count("POST", EVICTION) >= 2  # asked again with backoff until the deadline
        nodes = up.d.pool.state().nodes
        assert all(n.state is NodeState.ADMITTED for n in nodes.values())  # returned unchanged
        assert not any(server.kube.nodes[NODES[s][0]]["spec"].get("unschedulable") for s in NODES)


def test_evict_after_defaults_to_half_the_drain_deadline():
    assert UpgradeConfig.model_validate({"drainTimeoutS": 900}).eviction_after_s == 450
    assert UpgradeConfig().eviction_after_s == UpgradeConfig().drain_timeout_s / 2
