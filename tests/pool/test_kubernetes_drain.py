"""The Kubernetes adapter's drain port (`Evicting`) against the fake API server: cordon, the workloads
holding a Node's GPUs, eviction through the policy/v1 Eviction subresource with a disruption budget
refusing (429) and the retry after a backoff, and the uncordon that admission sends, with the exact
requests asserted (method, path, body)."""

from __future__ import annotations

import random

import pytest

from gpufleet.errors import PoolError
from gpufleet.pool.kubernetes.adapter import KubernetesPool
from gpufleet.pool.kubernetes.api import KubeApi
from gpufleet.pool.kubernetes.retry import RetryPolicy
from gpufleet.pool.protocol import Evicting, Holder, PendingNode

from . import contract
from .kubernetes_fake_api import FakeApiServer, FakeTime

NODE = "ip-10-64-0-10.us-east-2.compute.internal"
OTHER = "ip-10-64-0-11.us-east-2.compute.internal"
SLOT = PendingNode(slot="prod-b0000-n00000", block=0, partition="train", instance_id="i-0aaaaaaaaaaaaaaaa")
WORKLOAD = "job-llm-pretrain-7c2f1"
EVICTION = f"/api/v1/namespaces/train/pods/{WORKLOAD}-0/eviction"


def eviction(name: str, ns: str = "train") -> dict:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}


@pytest.fixture
def clock() -> FakeTime:
    return FakeTime()


@pytest.fixture
def server(clock):
    with FakeApiServer() as s:
        s.kube.add_node(NODE, SLOT.slot, instance_id=SLOT.instance_id)
        s.kube.add_node(OTHER, "prod-b0000-n00001")
        s.kube.add_pod("train", f"{WORKLOAD}-0", NODE, 8, workload=WORKLOAD)
        s.kube.add_pod("kube-system", "nvidia-device-plugin-x1", NODE, 0, owner=("DaemonSet", "nvidia-device-plugin"))
        s.kube.add_pod("train", "other-job-0", OTHER, 8, owner=("Job", "other-job"))
        yield s


@pytest.fixture
def pool(server, clock) -> KubernetesPool:
    policy = RetryPolicy(deadline_s=30.0, base_s=0.5, cap_s=8.0, sleep=clock.sleep, clock=clock.clock,
                         rng=random.Random(5))
    p = KubernetesPool(KubeApi(server.api_client(), policy), partitions=["train"], failures_before_blacklist=2)
    p.register_pending([SLOT])
    p.admit(SLOT.slot, contract.record(SLOT).model_copy(update={"instance_id": SLOT.instance_id}))
    server.kube.requests.clear()
    server.kube.patches.clear()
    return p


def sent(server) -> list[tuple[str, str]]:
    """The requests that change something, in order (reads left out)."""
    return [(m, p) for m, p, _ in server.kube.requests if m != "GET"]


def test_the_kubernetes_pool_is_an_evicting_pool(pool):
    assert isinstance(pool, Evicting)


def test_cordon_sends_one_unschedulable_patch_and_nothing_when_repeated(pool, server):
    pool.cordon([SLOT.slot])
    pool.cordon([SLOT.slot])
    assert server.kube.patches == [(f"/api/v1/nodes/{NODE}", "application/merge-patch+json",
                                    {"spec": {"unschedulable": True}})]
    assert server.kube.nodes[NODE]["spec"]["unschedulable"] is True
    assert "unschedulable" not in server.kube.nodes[OTHER]["spec"]


def test_holders_name_the_kueue_workload_and_ignore_pods_without_gpus(pool, server):
    assert pool.holders([SLOT.slot]) == [Holder(slot=SLOT.slot, workload=f"train/Workload/{WORKLOAD}",
                                                pods=(f"train/{WORKLOAD}-0",))]
    assert pool.holders(["prod-b0000-n00001"]) == [Holder(slot="prod-b0000-n00001", workload="train/Job/other-job",
                                                          pods=("train/other-job-0",))]
    assert str(pool.holders([SLOT.slot])[0]) == f"train/Workload/{WORKLOAD} on {SLOT.slot}"
    assert ("GET", "/api/v1/pods") in [(m, p) for m, p, _ in server.kube.requests]  # by field selector, one node


def test_cordon_evict_after_a_budget_refusal_then_uncordon_on_admit(pool, server, clock):
    pool.cordon([SLOT.slot])
    server.kube.fail(429, method="POST", path=EVICTION, times=1)  # the PodDisruptionBudget says not now
    server.kube.on_eviction = lambda kube, ns, name: kube.pods.pop((ns, name))  # the kubelet ends it
    assert pool.evict([SLOT.slot], deadline_s=120) == []
    assert server.kube.posts == [(EVICTION, eviction(f"{WORKLOAD}-0"))] * 2
    assert len(clock.sleeps) == 1 and 0 < clock.sleeps[0] <= 0.5  # one jittered backoff before asking again
    assert pool.holders([SLOT.slot]) == [] and ("train", "other-job-0") in server.kube.pods
    assert pool.state().nodes[SLOT.slot].busy is False
    pool.admit(SLOT.slot, contract.record(SLOT).model_copy(update={"instance_id": SLOT.instance_id}))
    assert sent(server) == [("PATCH", f"/api/v1/nodes/{NODE}"), ("POST", EVICTION), ("POST", EVICTION),
                            ("PATCH", f"/api/v1/nodes/{NODE}")]
    assert server.kube.patches[-1][2]["spec"] == {"unschedulable": False}  # admission uncordons
    assert "unschedulable" not in server.kube.patches[0][2].get("metadata", {})


def test_a_budget_that_keeps_refusing_is_reported_at_the_deadline(pool, server, clock):
    server.kube.fail(429, method="POST", path=EVICTION, times=10_000)
    refused = pool.evict([SLOT.slot], deadline_s=60)
    assert refused == [Holder(slot=SLOT.slot, workload=f"train/Workload/{WORKLOAD}", pods=(f"train/{WORKLOAD}-0",))]
    attempts = server.kube.count("POST", EVICTION)
    assert attempts == len(clock.sleeps) + 1 >= 4  # backed off between rounds, never past the deadline
    assert clock.now <= 60 and all(s <= 8.0 for s in clock.sleeps)


def test_a_pod_already_leaving_is_not_asked_again_and_a_vanished_one_counts_as_evicted(pool, server):
    assert pool.evict([SLOT.slot], deadline_s=30) == []  # marked for deletion, still on the node
    assert pool.holders([SLOT.slot])  # it holds its GPUs until it is gone
    assert pool.evict([SLOT.slot], deadline_s=30) == []
    assert server.kube.count("POST", EVICTION) == 1
    server.kube.add_pod("train", f"{WORKLOAD}-1", NODE, 8, workload=WORKLOAD)
    server.kube.fail(404, method="POST", path=f"/api/v1/namespaces/train/pods/{WORKLOAD}-1/eviction")
    assert pool.evict([SLOT.slot], deadline_s=30) == []


def test_a_server_error_on_eviction_is_retried_by_the_policy(pool, server):
    server.kube.fail(503, method="POST", path=EVICTION, times=2)
    assert pool.evict([SLOT.slot], deadline_s=30) == []
    assert [s for m, p, s in server.kube.requests if p == EVICTION] == [503, 503, 201]


def test_a_slot_without_a_node_is_an_error_naming_it(pool):
    with pytest.raises(PoolError, match="prod-b0009-n00099"):
        pool.cordon(["prod-b0009-n00099"])
    with pytest.raises(PoolError, match="prod-b0009-n00099"):
        pool.evict([SLOT.slot, "prod-b0009-n00099"], deadline_s=10)


def test_a_pod_works_for_its_kueue_workload_else_its_controller_else_itself():
    from gpufleet.pool.kubernetes.nodes import workload_of

    meta = {"name": "p-0", "namespace": "sim",
            "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": False},
                                {"kind": "Job", "name": "sweep-17", "controller": True}]}
    assert workload_of({"metadata": meta}) == "sim/Job/sweep-17"
    assert workload_of({"metadata": {**meta, "labels": {"kueue.x-k8s.io/workload": "job-sweep-17-ab12c"}}}) == \
        "sim/Workload/job-sweep-17-ab12c"
    assert workload_of({"metadata": {"name": "p-0", "namespace": "sim"}}) == "sim/Pod/p-0"
