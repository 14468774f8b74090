"""The fake API server (`kubernetes_fake_api.FakeKube`) with what a Job launch adds: batch/v1 Jobs,
Services, ConfigMap deletion, and a hook that plays the Job controller and the kubelets.

Why a subclass here: the base fake serves the adapter's calls; these routes serve only the smoke
job's runner. Deletes keep their query (`propagationPolicy`), because a Job deleted without one
orphans its pods on a real API server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from gpufleet.pool.kubernetes.smoke_job import INDEX_ANNOTATION, JOB_LABEL

from .kubernetes_fake_api import FakeKube, _status


@dataclass
class FakeJobsKube(FakeKube):
    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    services: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    deletes: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (path, query)
    on_job: Callable[["FakeJobsKube", dict[str, Any]], None] | None = None
    uids: int = 0

    def _route(self, method, path, query, headers, body):
        parts = path.strip("/").split("/")
        if method == "DELETE":
            self.deletes.append((path, dict(query)))
        if parts[:4] == ["apis", "batch", "v1", "namespaces"] and len(parts) >= 6 and parts[5] == "jobs":
            return self._objects(self.jobs, method, parts[4], parts[6] if len(parts) > 6 else None, body, "job")
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5 and parts[4] == "services":
            return self._objects(self.services, method, parts[3], parts[5] if len(parts) > 5 else None, body,
                                 "service")
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and parts[4] == "configmaps" \
                and method == "DELETE":
            gone = self.configmaps.pop((parts[3], parts[5]), None)
            return (200, gone, {}) if gone is not None else (404, _status(404, "configmap not found"), {})
        return super()._route(method, path, query, headers, body)

    def _objects(self, store, method, ns, name, body, kind):
        if name is None and method == "POST":
            key = (ns, body["metadata"]["name"])
            if key in store:
                return 409, _status(409, "AlreadyExists"), {}
            self.uids += 1
            body["metadata"].update(namespace=ns, resourceVersion=self._bump(), uid=f"uid-{self.uids}")
            store[key] = body
            if kind == "job" and self.on_job is not None:
                self.on_job(self, body)
            return 201, body, {}
        key = (ns, name)
        if key not in store:
            return 404, _status(404, f"{kind} not found"), {}
        if method == "GET":
            return 200, store[key], {}
        if method == "DELETE":
            gone = store.pop(key)
            if kind == "job" and query_says_delete_pods(self.deletes[-1][1]):
                for pod_key in [k for k, p in self.pods.items()
                                if (p["metadata"].get("labels") or {}).get(JOB_LABEL) == name]:
                    del self.pods[pod_key]
            return 200, gone, {}
        return 405, _status(405, f"{method} not served"), {}


def query_says_delete_pods(query: dict[str, str]) -> bool:
    return query.get("propagationPolicy") in ("Background", "Foreground")


def controller(logs: list[str], codes: list[int] | None = None, finish: bool = True,
               started: list[bool] | None = None):
    """An `on_job` hook: the Job's pods ran at once (`run_pods`)."""
    return lambda kube, job: run_pods(kube, job, logs, codes, finish, started)


def run_pods(kube: FakeJobsKube, job: dict[str, Any], logs: list[str], codes: list[int] | None = None,
             finish: bool = True, started: list[bool] | None = None) -> None:
    """Plays the Job controller and the kubelets: pod `i` (index `i`) ran on the i-th pinned Node,
    printed `logs[i]` and exited with `codes[i]`; the Job is Complete when all exited 0, else Failed
    (or, `finish` False, still running at the deadline). `started[i]` False: pod i never started."""
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    spec = job["spec"]["template"]["spec"]
    nodes = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    exit_codes = codes or [0] * len(logs)
    for i in reversed(range(job["spec"]["completions"])):  # listed out of index order on purpose
        pod = f"{name}-{i}-x{i}"
        ran = started is None or started[i]
        state = ({"terminated": {"exitCode": exit_codes[i]}} if finish else {"running": {}}) if ran else \
            {"waiting": {"reason": "ContainerCreating"}}
        kube.pods[(ns, pod)] = {
            "metadata": {"name": pod, "namespace": ns, "creationTimestamp": "2026-11-30T00:00:00Z",
                         "labels": dict(job["spec"]["template"]["metadata"]["labels"]),
                         "annotations": {INDEX_ANNOTATION: str(i)}},
            "spec": {"nodeName": nodes[i]},
            "status": {"phase": ("Succeeded" if exit_codes[i] == 0 else "Failed") if finish and ran
                       else ("Running" if ran else "Pending"),
                       "containerStatuses": [{"name": "torchrun", "state": state}]}}
        if ran:
            kube.logs[(ns, pod)] = logs[i]
    if finish:
        ok = all(c == 0 for c in exit_codes)
        job["status"] = {"conditions": [
            {"type": "SuccessCriteriaMet" if ok else "FailureTarget", "status": "True"},
            {"type": "Complete" if ok else "Failed", "status": "True",
             **({} if ok else {"reason": "BackoffLimitExceeded"})}]}
