"""The patrol's recheck as the lowest-priority Kueue workload on a Kubernetes pool (issue 22 item 6).

- The hold Job (`pool.kubernetes.patrol_job`): a valid batch/v1 Job in the partition's operators'
  queue at the WorkloadPriorityClass `gpufleet-patrol`, pinned to its Node, one pod of the node's
  whole GPUs, with a deadline; the pool's own admission policies, as the Pulumi program registers
  them for prod with teams (their exact CEL, tests/pool/admission_cel.py), admit it and the Workload
  Kueue makes of it, and still refuse every other non-unit shape, the class in a team's namespace,
  and a pod priority class of that name.
- `run_patrol` over the real `KubernetesPool` and `KubeApi` against the fake API server playing
  Kueue (tests/pool/kubernetes_fake_kueue.py), on the rolled-out simulated crash40 project for the
  bundles and records: held rounds admitted by Kueue are judged and recorded as every patrol is
  (journal, last.json, a failing node quarantined through the Node's taint); a hold Kueue evicts
  for a real job, or never admits, is yielded (no verdict, no quarantine, named in the report);
  403 and a lasting 503 raise PoolError; the budget is the plan's.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
from pathlib import Path

import kubernetes_validate
import pytest

from gpufleet.daytwo.collect import collector_for
from gpufleet.daytwo.context import open_day_two
from gpufleet.daytwo.patrol import concurrency_budget
from gpufleet.daytwo.patrol_report import build
from gpufleet.daytwo.patrol_run import run_patrol
from gpufleet.daytwo.upgrade_plan import limits
from gpufleet.errors import PoolError
from gpufleet.pool.kubernetes import patrol_job as pj
from gpufleet.pool.kubernetes import queues as q
from gpufleet.pool.kubernetes.adapter import KubernetesPool
from gpufleet.pool.kubernetes.api import KubeApi
from gpufleet.pool.kubernetes.manifests import GPU
from gpufleet.pool.kubernetes.retry import RetryPolicy
from gpufleet.pool.kubernetes.submission_policy import POLICY
from gpufleet.pool.protocol import NodeState, PendingNode, QUARANTINE_TAINT
from gpufleet.project import load_project
from tests.daytwo.fleet import STACK, admitted, daytwo_events, gpufleet, pool_doc, state_dir

from .admission_cel import admit
from .kubernetes_fake_api import FakeApiServer, FakeTime
from .kubernetes_fake_kueue import FakeKueueKube
from .test_kueue_queues import IMAGE, captured, live_namespace, named, objects, workload_of


def with_image(spec):
    return spec.model_copy(update={"acceptance": spec.acceptance.model_copy(update={"workload_image": IMAGE})})


def kueue_workload(job):
    """The Workload Kueue makes of the Job, with the priority class it names (`spec.priorityClassRef`)."""
    wl = workload_of(job)
    klass = job["metadata"]["labels"].get(q.PRIORITY_LABEL)
    if klass:
        wl["spec"]["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": klass}
        wl["spec"]["priority"] = 0
    return wl


# --- the Job and the admission policies ---------------------------------------------------------------

@pytest.fixture(scope="module")
def prod():
    cap = captured("prod")
    objs = objects(cap)
    pols = {r.inputs["metadata"]["name"]: r.inputs
            for r in cap.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")}
    jobs = pj.patrol_jobs(with_image(cap.spec), cap.plan)
    assert jobs is not None
    return cap, named(objs, "Namespace"), pols, jobs, named(objs, "WorkloadPriorityClass")


def test_the_hold_job_is_valid_pinned_whole_node_lowest_priority_with_a_deadline(prod):
    cap, namespaces, _pols, jobs, classes = prod
    sku = cap.spec.cluster.instance
    for part in (p.name for p in cap.plan.partitions):
        job = pj.hold_job(jobs, "slot-1", part, "ip-10-0-0-1.ec2.internal", pj.hold_name("slot-1", "r1"))
        kubernetes_validate.validate(job, cap.spec.pool.kubernetes_version, strict=True)
        meta, spec = job["metadata"], job["spec"]
        assert meta["namespace"] == part and meta["namespace"] in namespaces  # the operators' queue
        assert meta["labels"][q.QUEUE_LABEL] == part and meta["labels"][q.PRIORITY_LABEL] == q.PATROL_PRIORITY_CLASS
        assert q.PATROL_PRIORITY_CLASS in classes and classes[q.PATROL_PRIORITY_CLASS]["value"] < min(
            c["value"] for n, c in classes.items() if n != q.PATROL_PRIORITY_CLASS)
        pod = spec["template"]["spec"]
        assert pod["nodeSelector"] == {"kubernetes.io/hostname": "ip-10-0-0-1.ec2.internal"} and pod["tolerations"] == []
        (c,) = pod["containers"]
        assert c["resources"]["requests"][GPU] == c["resources"]["limits"][GPU] == sku.gpus
        assert c["image"] == IMAGE and spec["suspend"] is True and spec["parallelism"] == spec["completions"] == 1
        assert spec["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
        cap_s = q.max_exec_seconds(cap.spec, part, next(p.mode for p in cap.plan.partitions if p.name == part))
        assert spec["activeDeadlineSeconds"] == int(meta["labels"][q.MAX_EXEC_LABEL]) == min(pj.HOLD_S, cap_s or pj.HOLD_S)
    assert pj.hold_name("a", "r1") != pj.hold_name("a", "r2") != pj.hold_name("b", "r2")


def test_both_policies_admit_the_hold_job_and_its_workload(prod):
    cap, namespaces, pols, jobs, _ = prod
    for part in (p.name for p in cap.plan.partitions):
        job = pj.hold_job(jobs, "slot-1", part, "node-1", "gpufleet-patrol-0123456789")
        assert admit(pols[POLICY], job, live_namespace(namespaces[part])) == [], part
        assert admit(pols["gpufleet-whole-units"], kueue_workload(job)) == [], part


def test_the_patrols_class_is_refused_in_a_teams_namespace(prod):
    cap, namespaces, pols, jobs, _ = prod
    team_ns = [n for n, o in namespaces.items() if q.TEAM_NAMESPACE_LABEL in (o["metadata"].get("labels") or {})]
    assert team_ns
    for ns in team_ns:
        job = pj.hold_job(jobs, "slot-1", namespaces[ns]["metadata"]["labels"][q.PARTITION_NAMESPACE_LABEL], "n",
                          "gpufleet-patrol-0123456789")
        job["metadata"]["namespace"] = job["metadata"]["labels"][q.QUEUE_LABEL] = ns
        msgs = admit(pols[POLICY], job, live_namespace(namespaces[ns]))
        assert msgs and "priority" in msgs[0], (ns, msgs)


def test_other_non_unit_shapes_are_still_refused_at_the_patrols_class_or_without_it(prod):
    cap, _namespaces, pols, jobs, _ = prod
    unit = pols["gpufleet-whole-units"]
    t = cap.plan.topology
    assert t.unit_gpus % t.gpus_per_node != 0  # prod: a node is not a whole number of units
    base = pj.hold_job(jobs, "slot-1", "train", "node-1", "gpufleet-patrol-0123456789")

    def shaped(gpus=None, pods=1, klass=q.PATROL_PRIORITY_CLASS, kind="WorkloadPriorityClass"):
        job = copy.deepcopy(base)
        res = job["spec"]["template"]["spec"]["containers"][0]["resources"]
        for k in ("requests", "limits"):
            res[k][GPU] = gpus if gpus is not None else t.gpus_per_node
        job["spec"]["parallelism"] = job["spec"]["completions"] = pods
        job["metadata"]["labels"][q.PRIORITY_LABEL] = klass
        wl = kueue_workload(job)
        wl["spec"]["priorityClassRef"]["kind"] = kind
        if kind == "PriorityClass":
            wl["spec"]["priorityClassRef"]["group"] = "scheduling.k8s.io"
        return wl
    assert admit(unit, shaped()) == []
    for wl in (shaped(pods=2),  # two whole nodes at the patrol's class: not a hold, not whole units
               shaped(gpus=t.gpus_per_node // 2),  # half a node
               shaped(klass="gpufleet-train"),  # a node's GPUs at a real class: still whole units only
               shaped(kind="PriorityClass")):  # a pod priority class of the same name is not the patrol's
        assert admit(unit, wl), wl["spec"]
    gpus_init = shaped()
    gpus_init["spec"]["podSets"][0]["template"]["spec"]["initContainers"] = [
        {"name": "i", "image": IMAGE, "resources": {"limits": {GPU: 1}}}]
    assert admit(unit, gpus_init)  # GPUs hidden in an init container: refused, hold or not


def test_no_workload_image_no_holds():
    cap = captured("prod")
    spec = cap.spec.model_copy(update={"acceptance": cap.spec.acceptance.model_copy(update={"workload_image": None})})
    assert pj.patrol_jobs(spec, cap.plan) is None


# --- run_patrol through KubeApi against the fake API server playing Kueue ------------------------------

@pytest.fixture
def clock() -> FakeTime:
    return FakeTime()


@pytest.fixture
def server():
    kube = FakeKueueKube()
    kube.on_job = kube.kueue
    with FakeApiServer(kube) as s:
        yield s


class Patrol:
    """The fleet's day-two context with its pool swapped for a KubernetesPool over the fake API
    server: `slots` registered and admitted there (their Nodes `node-<i>`), the rest unknown to it."""

    def __init__(self, fleet: Path, server: FakeApiServer, clock: FakeTime, slots: list[str], *,
                 patrol_class: bool = True) -> None:
        self.fleet, self.server, self.kube, self.clock, self.slots = fleet, server, server.kube, clock, slots
        if patrol_class:
            self.kube.add_class(q.PATROL_PRIORITY_CLASS, -1)
        self.doc = pool_doc(fleet)["nodes"]
        self.node = {s: f"node-{i}" for i, s in enumerate(slots)}
        for s in slots:
            self.kube.add_node(self.node[s], s)

    def pool(self, d) -> KubernetesPool:
        policy = RetryPolicy(deadline_s=20.0, sleep=self.clock.sleep, clock=self.clock.clock, rng=random.Random(4))
        pool = KubernetesPool(KubeApi(self.server.api_client(), policy), partitions=[p.name for p in d.plan.partitions],
                              patrol=pj.patrol_jobs(with_image(d.spec), d.plan))
        pending = [PendingNode(slot=s, block=self.doc[s]["block"], partition=self.doc[s]["partition"]) for s in self.slots]
        pool.register_pending(pending)
        for s in self.slots:
            pool.admit(s, d.record(s))
        return pool

    def run(self, collector_of=lambda inner: inner):
        with open_day_two(STACK, "patrol", project=load_project(self.fleet)) as d:
            self.pool_ = self.pool(d)
            kd = dataclasses.replace(d, adapters=dataclasses.replace(d.adapters, pool=self.pool_))
            self.budget = concurrency_budget(d.plan, limits(d.plan, d.spec.upgrade))
            return run_patrol(kd, collector_of(collector_for(d)))


def one_partition(fleet: Path, n: int) -> list[str]:
    doc = pool_doc(fleet)["nodes"]
    slots = admitted(fleet)
    part = doc[slots[0]]["partition"]
    return [s for s in slots if doc[s]["partition"] == part][:n]


def test_held_rounds_admitted_by_kueue_are_judged_and_recorded_as_every_patrol(fleet, server, clock):
    slots = one_partition(fleet, 3)
    bad = slots[1]
    assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", bad, "--kind", "xid-48").exit_code == 0
    p = Patrol(fleet, server, clock, slots)
    seen: list[list[str]] = []

    def watching(inner):
        class Collect:
            def collect(self, instances, since, dest):
                seen.append(sorted(j["metadata"]["annotations"][pj.SLOT_ANNOTATION] for j in p.kube.holds()
                                   if j["spec"]["suspend"] is False))
                return inner.collect(instances, since, dest)
        return Collect()
    out = p.run(watching)
    assert out.held and out.rounds == len(seen) >= 1
    assert sorted(s for r in seen for s in r) == sorted(slots)  # every node held by a running patrol Job
    part = pool_doc(fleet)["nodes"][slots[0]]["partition"]
    assert all(len(r) <= p.budget[part] for r in seen) and out.budget == p.budget  # the plan's budget
    created = [b for path, b in p.kube.posts if path.endswith("/jobs")]
    assert len(created) == len(slots) and all(b["metadata"]["labels"][q.PRIORITY_LABEL] == q.PATROL_PRIORITY_CLASS
                                              and b["metadata"]["namespace"] == part for b in created)
    assert p.kube.holds() == [] and not [k for k in p.kube.pods if k[1].startswith("gpufleet-patrol-")]  # released
    assert {r.slot for r in out.checked} == set(slots) and out.yielded == [] and out.preempted == []
    assert list(out.quarantined) == [bad] and out.quarantined[bad]["reason_code"] == "xid-48"
    node = p.kube.nodes[p.node[bad]]
    assert any(t["key"] == QUARANTINE_TAINT for t in node["spec"]["taints"])  # through the Kubernetes pool
    assert p.pool_.state().get(bad).state is NodeState.QUARANTINED
    last = json.loads((state_dir(fleet) / "patrol" / "last.json").read_text())
    assert set(slots) <= set(last)
    (event,) = [e for e in daytwo_events(fleet) if e["type"] == "patrol"]
    assert event["held"] is True and sorted(event["checked"]) == sorted(slots) and list(event["failed"]) == [bad]
    report, _ = build(out)
    assert report.outcomes == {s: ("failed" if s == bad else "passed") for s in slots}


def test_a_hold_kueue_evicts_for_a_real_job_is_yielded_not_judged(fleet, server, clock):
    slots = one_partition(fleet, 2)
    victim = slots[0]
    assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", victim, "--kind", "xid-48").exit_code == 0
    p = Patrol(fleet, server, clock, slots)

    def preempting(inner):
        class Collect:
            def collect(self, instances, since, dest):
                if victim in {i.slot for i in instances}:
                    (job,) = [j for j in p.kube.holds() if j["metadata"]["annotations"][pj.SLOT_ANNOTATION] == victim]
                    p.kube.preempt(job["metadata"]["namespace"], job["metadata"]["name"])  # a real job arrives
                return inner.collect(instances, since, dest)
        return Collect()
    out = p.run(preempting)
    assert out.held and out.preempted == [victim] and victim in out.yielded
    assert victim not in {r.slot for r in out.checked} and out.quarantined == {} and victim not in out.unreachable
    assert p.pool_.state().get(victim).state is NodeState.ADMITTED
    assert p.kube.holds() == []
    last = json.loads((state_dir(fleet) / "patrol" / "last.json").read_text())
    assert victim not in last  # rechecked by the next patrol
    report, _ = build(out)
    assert report.outcomes[victim] == "yielded" and report.preempted == [victim] and report.counts["yielded"] == 1


def test_a_hold_kueue_never_admits_is_deleted_and_its_node_yielded(fleet, server, clock):
    slots = one_partition(fleet, 2)
    taken = slots[1]
    p = Patrol(fleet, server, clock, slots)
    p.kube.admits = lambda job: job["metadata"]["annotations"][pj.SLOT_ANNOTATION] != taken
    out = p.run()
    assert taken in out.yielded and taken not in out.preempted and taken not in {r.slot for r in out.checked}
    assert slots[0] in {r.slot for r in out.checked}
    assert p.kube.holds() == [] and clock.now >= 60.0  # waited start_s for Kueue, then gave up on it


def test_no_patrol_class_no_holds(fleet, server, clock):
    slots = one_partition(fleet, 2)
    p = Patrol(fleet, server, clock, slots, patrol_class=False)
    out = p.run()
    assert not out.held and {r.slot for r in out.checked} == set(slots)
    assert not [path for path, _ in p.kube.posts if path.endswith("/jobs")]


@pytest.mark.parametrize("status,times", [(403, 1), (503, 1000)])
def test_the_api_refusing_or_unavailable_is_a_pool_error(fleet, server, clock, status, times):
    slots = one_partition(fleet, 2)
    p = Patrol(fleet, server, clock, slots)
    p.kube.fail(status, method="POST", path="/apis/batch/v1/namespaces/", times=times)
    with pytest.raises(PoolError, match=str(status)):
        p.run()
    assert p.kube.holds() == []


def test_pool_for_gives_the_patrol_its_holds_where_the_class_and_an_image_exist(tmp_path, monkeypatch, server):
    from gpufleet.pool.kubernetes.adapter import pool_for
    from gpufleet.pool.kubernetes.patrol_hold import KubePatrolHolds
    from gpufleet.spec import load_stack

    spec = load_stack("prod")
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                  "clusters": [{"name": "c", "cluster": {"server": server.url}}],
                  "users": [{"name": "u", "user": {"token": "t"}}],
                  "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    (tmp_path / "kubeconfig").write_text(json.dumps(kubeconfig))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    assert pool_for(with_image(spec), None, "prod").patrol_holds() is None  # the class is not there yet
    server.kube.add_class(q.PATROL_PRIORITY_CLASS, -1)
    holds = pool_for(with_image(spec), None, "prod").patrol_holds()
    assert isinstance(holds, KubePatrolHolds)
    assert set(holds.jobs.queues) == {p.name for p in spec.partitions} and holds.jobs.image == IMAGE
    assert holds.jobs.gpus == spec.cluster.instance.gpus
    no_image = spec.model_copy(update={"acceptance": spec.acceptance.model_copy(update={"workload_image": None})})
    assert pool_for(no_image, None, "prod").patrol_holds() is None
