"""The Kubernetes adapter's wire behaviour against the fake API server: the exact patches it sends,
that repeating a call sends nothing, and that 409, 429 and 5xx answers are retried as they must be."""

from __future__ import annotations

import copy
import random

import kubernetes_validate
import pytest

from gpufleet.catalog import get as instance_type
from gpufleet.errors import PoolError
from gpufleet.gates.launch import launch_spec
from gpufleet.pool.kubernetes.adapter import TIMEOUT_EXIT, KubernetesPool, MpiJobLauncher
from gpufleet.pool.kubernetes.api import KubeApi
from gpufleet.pool.kubernetes.retry import RetryPolicy
from gpufleet.pool.protocol import (BLOCK_LABEL, GATE_TAINT, PARTITION_LABEL, QUARANTINE_TAINT, NodeState, PendingNode,
                                 record_digest, record_summary)

from . import contract
from .kubernetes_fake_api import FakeApiServer, FakeTime, merge_patch, parse_selector

NODE = "ip-10-64-0-10.us-east-2.compute.internal"
SLOT = PendingNode(slot="prod-b0000-n00000", block=0, partition="train", instance_id="i-0aaaaaaaaaaaaaaaa")
GATE = {"key": GATE_TAINT, "value": "pending", "effect": "NoSchedule"}
FOREIGN = {"key": "example.com/maintenance", "value": "window", "effect": "NoSchedule"}


@pytest.fixture
def server():
    with FakeApiServer() as s:
        s.kube.add_node(NODE, SLOT.slot, instance_id=SLOT.instance_id)
        yield s


@pytest.fixture
def clock() -> FakeTime:
    return FakeTime()


def make_pool(server: FakeApiServer, clock: FakeTime, deadline_s: float = 30.0) -> KubernetesPool:
    policy = RetryPolicy(deadline_s=deadline_s, base_s=0.2, cap_s=10.0, sleep=clock.sleep, clock=clock.clock,
                         rng=random.Random(3))
    return KubernetesPool(KubeApi(server.api_client(), policy), partitions=["train", "debug"],
                          failures_before_blacklist=2)


def rv(server: FakeApiServer) -> str:
    return server.kube.nodes[NODE]["metadata"]["resourceVersion"]


def good_record():
    return contract.record(SLOT).model_copy(update={"instance_id": SLOT.instance_id})


def test_register_then_admit_send_exactly_these_patches(server, clock):
    pool = make_pool(server, clock)
    before = rv(server)
    pool.register_pending([SLOT])
    assert server.kube.node_patches() == [{"metadata": {"resourceVersion": before, "annotations": {
        "gpufleet.io/state": "pending", "gpufleet.io/failures": "0", "gpufleet.io/partition": "train",
        "gpufleet.io/block": "0", "gpufleet.io/instance-id": SLOT.instance_id}}}]  # the kubelet set the gate taint
    rec = good_record()
    before = rv(server)
    pool.admit(SLOT.slot, rec)
    assert server.kube.node_patches()[1] == {
        "metadata": {"resourceVersion": before,
                     "annotations": {"gpufleet.io/state": "admitted", "gpufleet.io/admission-digest": record_digest(rec),
                                     "gpufleet.io/admission-summary": record_summary(rec)},
                     "labels": {PARTITION_LABEL: "train", BLOCK_LABEL: "0"}},
        "spec": {"taints": []}}
    node = server.kube.nodes[NODE]
    assert node["spec"]["taints"] == [] and node["metadata"]["labels"][BLOCK_LABEL] == "0"


def test_repeating_a_call_sends_nothing(server, clock):
    pool = make_pool(server, clock)
    pool.register_pending([SLOT])
    pool.admit(SLOT.slot, good_record())
    pool.quarantine(SLOT.slot, "xid-79", "GPU 3 fell off the bus")
    patches = len(server.kube.node_patches())
    pool.quarantine(SLOT.slot, "xid-79", "GPU 3 fell off the bus")
    pool.quarantine(SLOT.slot, "xid-79", "GPU 3 fell off the bus")
    assert len(server.kube.node_patches()) == patches
    assert server.kube.count("PATCH") == patches


def test_quarantine_replaces_the_taint_list_keeping_other_owners_taints_and_cordons(server, clock):
    server.kube.nodes[NODE]["spec"]["taints"].append(dict(FOREIGN))
    pool = make_pool(server, clock)
    pool.register_pending([SLOT])
    pool.admit(SLOT.slot, good_record())
    before = rv(server)
    q = pool.quarantine(SLOT.slot, "xid-79", 'GPU 3 fell off the bus "Xid 79"')
    assert q.state is NodeState.QUARANTINED and q.failures == 1
    assert server.kube.node_patches()[-1] == {
        "metadata": {"resourceVersion": before,
                     "annotations": {"gpufleet.io/state": "quarantined", "gpufleet.io/failures": "1",
                                     "gpufleet.io/admission-digest": None, "gpufleet.io/admission-summary": None,
                                     "gpufleet.io/reason-code": "xid-79",
                                     "gpufleet.io/quarantine-reason": "GPU 3 fell off the bus 'Xid 79'"},
                     "labels": {PARTITION_LABEL: None, BLOCK_LABEL: None}},
        "spec": {"taints": [FOREIGN, {"key": QUARANTINE_TAINT, "value": "xid-79", "effect": "NoExecute"}],
                 "unschedulable": True}}


def test_a_real_conflict_is_read_again_and_decided_again(server, clock):
    """Another writer adds a taint between our read and our patch: the stale resourceVersion gets a
    409, the adapter reads again and its second patch keeps the other writer's taint."""
    pool = make_pool(server, clock)
    pool.register_pending([SLOT])
    done = []

    def meddle(kube, method, path):
        if method == "PATCH" and path.startswith("/api/v1/nodes/") and not done:
            done.append(True)
            node = kube.nodes[NODE]
            kube.nodes[NODE] = merge_patch(node, {"metadata": {"resourceVersion": kube._bump()},
                                                  "spec": {"taints": node["spec"]["taints"] + [dict(FOREIGN)]}})
    server.kube.on_request = meddle
    pool.admit(SLOT.slot, good_record())
    first, second = server.kube.node_patches()[-2:]
    assert first["metadata"]["resourceVersion"] != second["metadata"]["resourceVersion"]
    assert first["spec"]["taints"] == [] and second["spec"]["taints"] == [FOREIGN]
    assert [s for m, p, s in server.kube.requests if m == "PATCH"][-2:] == [409, 200]
    assert server.kube.nodes[NODE]["spec"]["taints"] == [FOREIGN]
    assert clock.sleeps == []  # a conflict is not a reason to wait


def test_an_injected_409_retries_the_same_decision(server, clock):
    pool = make_pool(server, clock)
    pool.register_pending([SLOT])
    server.kube.fail(409, method="PATCH", path="/api/v1/nodes/", times=2)
    pool.admit(SLOT.slot, good_record())
    first, second, third = server.kube.node_patches()[-3:]
    assert first == second == third  # nothing changed in between: the same patch, same resourceVersion
    assert pool.state().get(SLOT.slot).state is NodeState.ADMITTED


def test_429_waits_as_the_server_asks_then_succeeds(server, clock):
    pool = make_pool(server, clock)
    server.kube.fail(429, method="PATCH", times=2, retry_after=3)
    pool.register_pending([SLOT])
    assert clock.sleeps == [3.0, 3.0]
    assert [s for m, _, s in server.kube.requests if m == "PATCH"] == [429, 429, 200]


def test_5xx_backs_off_with_jitter_under_the_exponential_bound(server, clock):
    pool = make_pool(server, clock)
    server.kube.fail(500, method="GET", path="/api/v1/nodes", times=1)
    server.kube.fail(503, method="GET", path="/api/v1/nodes", times=1)
    server.kube.fail(502, method="GET", path="/api/v1/nodes", times=1)
    pool.register_pending([SLOT])
    assert len(clock.sleeps) == 3
    for attempt, slept in enumerate(clock.sleeps):
        assert 0 <= slept <= 0.2 * 2 ** attempt
    assert len(set(clock.sleeps)) == 3  # jittered, not in step
    assert pool.state().get(SLOT.slot).state is NodeState.PENDING


def test_a_server_that_stays_down_gives_up_at_the_deadline_and_changes_nothing(server, clock):
    pool = make_pool(server, clock, deadline_s=20.0)
    pool.register_pending([SLOT])
    before = copy.deepcopy(server.kube.nodes[NODE])
    server.kube.fail(503, method="PATCH", times=10_000)
    with pytest.raises(PoolError) as err:
        pool.admit(SLOT.slot, good_record())
    assert SLOT.slot in str(err.value) and "503" in str(err.value)
    assert clock.now <= 20.0 and len(clock.sleeps) >= 5
    assert server.kube.nodes[NODE] == before


def test_a_refusal_is_not_retried(server, clock):
    pool = make_pool(server, clock)
    pool.register_pending([SLOT])
    server.kube.fail(403, method="PATCH")
    with pytest.raises(PoolError, match="403"):
        pool.admit(SLOT.slot, good_record())
    assert clock.sleeps == [] and server.kube.count("PATCH") == 2  # register's and the refused one


def test_the_replacement_instance_is_the_node_registered(server, clock):
    """A replacement joins as a new Node with the same slot label while the old one lingers."""
    server.kube.add_node("ip-10-64-0-99.us-east-2.compute.internal", SLOT.slot, instance_id="i-0bbbbbbbbbbbbbbbb",
                         created="2026-11-30T01:00:00Z")
    pool = make_pool(server, clock)
    pool.register_pending([PendingNode(slot=SLOT.slot, block=0, partition="train", instance_id=SLOT.instance_id)])
    assert server.kube.patches[-1][0] == f"/api/v1/nodes/{NODE}"
    assert pool.state().get(SLOT.slot).instance_id == SLOT.instance_id


def test_a_node_without_the_slot_label_is_not_the_slot(server, clock):
    server.kube.add_node("ip-10-64-0-50.us-east-2.compute.internal", None)
    pool = make_pool(server, clock)
    with pytest.raises(PoolError, match="no Kubernetes Node carries the label gpufleet.io/slot=prod-b9-n9"):
        pool.register_pending([PendingNode(slot="prod-b9-n9", block=9, partition="train")])
    assert server.kube.count("PATCH") == 0


def test_state_pages_through_many_nodes(clock):
    with FakeApiServer() as server:
        for i in range(1203):
            server.kube.add_node(f"ip-10-64-{i // 250}-{i % 250}.ec2.internal", f"s-{i:05d}")
        pool = make_pool(server, clock)
        pool.register_pending([PendingNode(slot=f"s-{i:05d}", block=i // 5, partition="train") for i in range(1203)])
        assert len(pool.state().by_state(NodeState.PENDING)) == 1203
        lists = [p for m, p, _ in server.kube.requests if m == "GET" and p == "/api/v1/nodes"]
        assert len(lists) == 13 + 3  # register: 13 selectors of 100 slots each; state: 3 pages of 500


def test_selector_parser_matches_the_api_servers_syntax():
    labels = {"gpufleet.io/slot": "a", "tier": "gpu"}
    assert all(t(labels) for t in parse_selector("gpufleet.io/slot in (a,b),tier=gpu,!missing"))
    assert not all(t(labels) for t in parse_selector("gpufleet.io/slot notin (a)"))
    assert not all(t(labels) for t in parse_selector("tier!=gpu"))


# --- the launcher ---------------------------------------------------------------------------------

def operator(exit_code: int, log: str, finish: bool = True):
    """Plays the MPI operator: the job's launcher pod ran and the job finished."""
    def on_mpijob(kube, job):
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        pod = f"{name}-launcher"
        kube.pods[(ns, pod)] = {"metadata": {"name": pod, "namespace": ns, "creationTimestamp": "2026-11-30T00:00:00Z",
                                             "labels": {"training.kubeflow.org/job-name": name,
                                                        "training.kubeflow.org/job-role": "launcher"}},
                                "status": {"containerStatuses": [{"state": {"terminated": {"exitCode": exit_code}}}]}}
        kube.logs[(ns, pod)] = log
        if finish:
            job["status"] = {"conditions": [{"type": "Created", "status": "True"},
                                            {"type": "Succeeded" if exit_code == 0 else "Failed", "status": "True"}]}
    return on_mpijob


def two_nodes(server: FakeApiServer) -> list[str]:
    server.kube.add_node("ip-10-64-0-11.us-east-2.compute.internal", "prod-b0000-n00001")
    return [SLOT.slot, "prod-b0000-n00001"]


def test_launcher_runs_the_mpijob_on_the_slots_nodes_reads_the_log_and_deletes_it(server, clock):
    slots = two_nodes(server)
    server.kube.on_mpijob = operator(0, "#  size  count ... busbw\n 4294967296 ... 389.12\n")
    pool = make_pool(server, clock)
    launcher = MpiJobLauncher(pool.api, pool.node_names, sleep=clock.sleep, clock=clock.clock)
    spec = launch_spec("kubernetes", slots, instance_type("p5.48xlarge"), {"aws_ofi_nccl": "1.16.0"})
    created = []
    server.kube.on_request = lambda kube, m, p: created.append(copy.deepcopy(kube.mpijobs)) if m == "DELETE" else None
    (result,) = launcher.run([spec], timeout_s=600)
    assert result.exit_code == 0 and "389.12" in result.output and result.nodes == tuple(slots)
    job = created[0][("gpufleet-system", spec.name)]
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    (expr,) = worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]
    assert expr == {"key": "kubernetes.io/hostname", "operator": "In",
                    "values": [NODE, "ip-10-64-0-11.us-east-2.compute.internal"]}
    assert {"key": GATE_TAINT, "operator": "Exists", "effect": "NoSchedule"} in worker["tolerations"]
    for role in ("Launcher", "Worker"):  # the pod templates are valid Kubernetes objects
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role.lower()},
                                      "template": job["spec"]["mpiReplicaSpecs"][role]["template"]}, "1.33", strict=True)
    assert server.kube.mpijobs == {}


def test_launcher_reports_a_failed_run_and_a_run_past_its_deadline(server, clock):
    slots = two_nodes(server)
    pool = make_pool(server, clock)
    launcher = MpiJobLauncher(pool.api, pool.node_names, poll_s=5, sleep=clock.sleep, clock=clock.clock)
    k8s = instance_type("p5.48xlarge")
    server.kube.on_mpijob = operator(3, "NCCL WARN NET/OFI ... failed\n")
    (failed,) = launcher.run([launch_spec("kubernetes", slots, k8s, {})], timeout_s=60)
    assert failed.exit_code == 3 and "NET/OFI" in failed.output
    server.kube.on_mpijob = operator(0, "still running\n", finish=False)
    (late,) = launcher.run([launch_spec("kubernetes", slots, k8s, {})], timeout_s=60)
    assert late.exit_code == TIMEOUT_EXIT and clock.now >= 60
    assert server.kube.mpijobs == {}  # deleted either way


def test_the_benchmark_runs_at_a_small_size():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "bench" / "bench_pool_kubernetes.py"), "20"], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert "admit x20:" in out and "40 API calls" in out and "answered 500" in out


def test_hand_edited_annotations_are_a_pool_error_naming_the_node(server, clock):
    pool = make_pool(server, clock)
    pool.register_pending([SLOT])
    server.kube.nodes[NODE]["metadata"]["annotations"]["gpufleet.io/failures"] = "two"
    with pytest.raises(PoolError, match=f"{SLOT.slot}.*unreadable gpufleet annotations"):
        pool.state()


def test_pool_for_reads_the_kubeconfig_context_named_after_the_cluster(tmp_path, monkeypatch, server):
    import json as _json

    from gpufleet.pool.kubernetes.adapter import pool_for
    from gpufleet.spec import load_stack

    spec = load_stack("prod")
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "other",
                  "clusters": [{"name": "c", "cluster": {"server": server.url}},
                               {"name": "x", "cluster": {"server": "http://127.0.0.1:9"}}],
                  "users": [{"name": "u", "user": {"token": "t"}}],
                  "contexts": [{"name": spec.cluster.name, "context": {"cluster": "c", "user": "u"}},
                               {"name": "other", "context": {"cluster": "x", "user": "u"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(_json.dumps(kubeconfig))
    monkeypatch.setenv("KUBECONFIG", str(path))
    pool = pool_for(spec, None, "prod")
    assert pool.partitions == {p.name for p in spec.partitions}
    assert pool.failures_before_blacklist == spec.rollout.failures_before_blacklist
    pool.register_pending([SLOT])  # reaches the fake server: the cluster's context, not the current one
    assert pool.state().get(SLOT.slot).state is NodeState.PENDING
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(PoolError, match="no usable kubeconfig"):
        pool_for(spec, None, "prod")


def test_register_adds_the_gate_taint_a_node_joined_without(clock):
    with FakeApiServer() as server:
        server.kube.add_node(NODE, SLOT.slot, instance_id=SLOT.instance_id, taints=[FOREIGN])
        before = server.kube.nodes[NODE]["metadata"]["resourceVersion"]
        make_pool(server, clock).register_pending([SLOT])
        (patch,) = server.kube.node_patches()
        assert patch["metadata"]["resourceVersion"] == before
        assert patch["spec"] == {"taints": [FOREIGN, GATE]}


def test_blacklist_then_clear_send_these_patches(server, clock):
    pool = make_pool(server, clock)
    pool.register_pending([SLOT])
    before = rv(server)
    b = pool.blacklist(SLOT.slot, "rack power fault")
    assert b.state is NodeState.BLACKLISTED
    assert server.kube.node_patches()[-1] == {
        "metadata": {"resourceVersion": before,
                     "annotations": {"gpufleet.io/state": "blacklisted", "gpufleet.io/reason-code": "blacklisted",
                                     "gpufleet.io/quarantine-reason": "rack power fault"}},
        "spec": {"taints": [{"key": QUARANTINE_TAINT, "value": "blacklisted", "effect": "NoExecute"}],
                 "unschedulable": True}}
    before = rv(server)
    c = pool.clear(SLOT.slot)
    assert c.state is NodeState.PENDING and c.failures == 0
    assert server.kube.node_patches()[-1] == {
        "metadata": {"resourceVersion": before,
                     "annotations": {"gpufleet.io/state": "pending", "gpufleet.io/reason-code": None,
                                     "gpufleet.io/quarantine-reason": None}},
        "spec": {"taints": [GATE], "unschedulable": False}}


def test_release_keeps_the_failures_in_the_ledger_and_gates_the_node(server, clock):
    pool = make_pool(server, clock)
    pool.register_pending([SLOT])
    pool.quarantine(SLOT.slot, "efa-missing", "EFA device 2 missing")
    pool.release(SLOT.slot)
    ledger = server.kube.configmaps[("gpufleet-system", "gpufleet-slot-ledger")]
    assert ledger["data"] == {SLOT.slot: '{"failures": 1}'}
    node = server.kube.nodes[NODE]
    assert not any(k.startswith("gpufleet.io/") for k in node["metadata"]["annotations"])
    assert node["spec"]["taints"] == [GATE] and node["spec"]["unschedulable"] is False
    pool.register_pending([SLOT])
    assert pool.state().get(SLOT.slot).failures == 1
    assert server.kube.configmaps[("gpufleet-system", "gpufleet-slot-ledger")]["data"] == {}


def test_a_node_is_busy_while_a_pod_holds_its_gpus(server, clock):
    pool = make_pool(server, clock)
    pool.register_pending([SLOT])
    pool.admit(SLOT.slot, good_record())

    def pod(name: str, phase: str, gpus: int) -> dict:
        res = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {"requests": {"cpu": "10m"}}
        return {"metadata": {"name": name, "namespace": "train"},
                "spec": {"nodeName": NODE, "containers": [{"name": "c", "resources": res}]}, "status": {"phase": phase}}
    server.kube.pods[("kube-system", "nvidia-device-plugin-x")] = pod("nvidia-device-plugin-x", "Running", 0)
    server.kube.pods[("train", "done")] = pod("done", "Succeeded", 8)
    assert pool.state().get(SLOT.slot).busy is False  # a DaemonSet pod and a finished job hold nothing
    server.kube.pods[("train", "trainer-0")] = pod("trainer-0", "Running", 8)
    assert pool.state().get(SLOT.slot).busy is True


def test_a_replacement_inherits_the_slot_from_a_predecessor_still_registered(server, clock):
    pool = make_pool(server, clock)
    pool.register_pending([SLOT])
    pool.quarantine(SLOT.slot, "xid-79", "GPU 3 fell off the bus")
    new_name, new_instance = "ip-10-64-0-99.us-east-2.compute.internal", "i-0bbbbbbbbbbbbbbbb"
    server.kube.add_node(new_name, SLOT.slot, instance_id=new_instance, created="2026-11-30T01:00:00Z")
    pool.register_pending([PendingNode(slot=SLOT.slot, block=0, partition="train", instance_id=new_instance)])
    now = pool.state().get(SLOT.slot)
    assert now.state is NodeState.PENDING and now.failures == 1 and now.instance_id == new_instance
    old = server.kube.nodes[NODE]
    assert not any(k.startswith("gpufleet.io/") for k in old["metadata"]["annotations"])
    assert old["spec"]["taints"] == [GATE]
    b = pool.quarantine(SLOT.slot, "xid-48", "double-bit ECC")  # the second failure of the slot blacklists it
    assert b.state is NodeState.BLACKLISTED and b.failures == 2
