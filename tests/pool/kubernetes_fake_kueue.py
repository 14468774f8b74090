"""The fake API server with what the patrol's holds add: Kueue's WorkloadPriorityClasses and
Workloads (kueue.x-k8s.io/v1beta2), and a hook that plays Kueue and the Job controller for a hold Job.

Why a subclass: the Job routes are `kubernetes_fake_jobs`'; these serve only `pool.kubernetes.patrol_hold`.
What Kueue v0.19.2 does with a Job in a managed namespace, as played here: it makes a Workload
labelled `kueue.x-k8s.io/job-uid` with the Job's priority class (`spec.priorityClassRef`); admitting
it sets `spec.suspend` false and the Job controller starts the pod on the node it is pinned to; a
Job Kueue does not admit stays suspended, with no pod; evicting it for a higher-priority workload
(`preempt`) sets the Workload's Evicted and Preempted conditions, suspends the Job again and the pod
goes. Deleting the Job with a propagation policy removes its pods and its Workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from gpufleet.pool.kubernetes.patrol_job import HOLD_LABEL, JOB_UID_LABEL
from gpufleet.pool.kubernetes.queues import PRIORITY_LABEL

from .kubernetes_fake_api import _status
from .kubernetes_fake_jobs import FakeJobsKube, query_says_delete_pods

KUEUE = ["apis", "kueue.x-k8s.io", "v1beta2"]


@dataclass
class FakeKueueKube(FakeJobsKube):
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    workloads: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    admits: Callable[[dict[str, Any]], bool] = lambda job: True  # whether Kueue admits this hold Job

    def add_class(self, name: str, value: int) -> None:
        self.classes[name] = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                              "metadata": {"name": name}, "value": value}

    def kueue(self, kube: "FakeKueueKube", job: dict[str, Any]) -> None:
        """The `on_job` hook: the Workload, then admission (or not)."""
        meta = job["metadata"]
        ns, name = meta["namespace"], meta["name"]
        klass = meta["labels"][PRIORITY_LABEL]
        self.workloads[(ns, f"job-{name}")] = {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"job-{name}", "namespace": ns, "labels": {JOB_UID_LABEL: meta["uid"]}},
            "spec": {"queueName": meta["labels"]["kueue.x-k8s.io/queue-name"],
                     "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": klass},
                     "priority": self.classes[klass]["value"], "podSets": [{"name": "main", "count": 1,
                                                                          "template": job["spec"]["template"]}]},
            "status": {"conditions": []}}
        if not self.admits(job):
            return
        wl = self.workloads[(ns, f"job-{name}")]
        wl["status"]["conditions"].append({"type": "Admitted", "status": "True"})
        job["spec"]["suspend"] = False
        node = job["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"]
        self.pods[(ns, f"{name}-pod")] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-pod", "namespace": ns, "labels": dict(job["spec"]["template"]["metadata"]["labels"]),
                         "creationTimestamp": "2026-12-02T03:00:00Z"},
            "spec": {"nodeName": node, "containers": job["spec"]["template"]["spec"]["containers"]},
            "status": {"phase": "Running"}}

    def preempt(self, namespace: str, job: str) -> None:
        """Kueue evicts the hold for a higher-priority workload."""
        wl = self.workloads[(namespace, f"job-{job}")]
        wl["status"]["conditions"] += [{"type": "Evicted", "status": "True", "reason": "Preempted"},
                                       {"type": "Preempted", "status": "True", "reason": "InClusterQueue"}]
        self.jobs[(namespace, job)]["spec"]["suspend"] = True
        self.pods.pop((namespace, f"{job}-pod"), None)

    def holds(self) -> list[dict[str, Any]]:
        return [j for j in self.jobs.values() if HOLD_LABEL in (j["metadata"].get("labels") or {})]

    def _route(self, method, path, query, headers, body):
        parts = path.strip("/").split("/")
        if parts[:3] == KUEUE:
            if len(parts) == 5 and parts[3] == "workloadpriorityclasses" and method == "GET":
                klass = self.classes.get(parts[4])
                return (200, klass, {}) if klass else (404, _status(404, "workloadpriorityclass not found"), {})
            if len(parts) == 6 and parts[3] == "namespaces" and parts[5] == "workloads" and method == "GET":
                return self._list([w for (ns, _), w in self.workloads.items() if ns == parts[4]], query)
            return 404, _status(404, f"no route {method} {path}"), {}
        answer = super()._route(method, path, query, headers, body)
        if method == "DELETE" and parts[:4] == ["apis", "batch", "v1", "namespaces"] and len(parts) == 7 \
                and answer[0] == 200 and query_says_delete_pods(query):
            ns, name = parts[4], parts[6]
            for key in [k for k, p in self.pods.items() if (p["metadata"].get("labels") or {}).get(HOLD_LABEL) == name]:
                del self.pods[key]
            self.workloads.pop((ns, f"job-{name}"), None)
        return answer
