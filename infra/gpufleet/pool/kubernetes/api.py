"""The few API server calls the pool makes, through the official client, each retried by policy.

Thin on purpose: bodies are plain JSON (`_preload_content=False`; the client's model
deserialisation costs more than the HTTP call on 1,250 Nodes), patches are JSON merge patches
(`application/merge-patch+json`: a Node's taints have no strategic merge key, the list is
replaced whole), and every failure is classified for `RetryPolicy`.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Sequence

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.pool.kubernetes.retry import Answer, RetryPolicy
from gpufleet.pool.kubernetes.versions import KUEUE_API_VERSION

MERGE_PATCH = "application/merge-patch+json"
MPIJOB = ("kubeflow.org", "v2beta1", "mpijobs")
KUEUE = tuple(KUEUE_API_VERSION.split("/"))  # group, version
PAGE = 500
SELECTOR_CHUNK = 100  # slots per `in (...)` selector: keeps the query string short


def classify(exc: Exception) -> Answer | None:
    if isinstance(exc, ApiException):
        retry_after = (exc.headers or {}).get("Retry-After") if exc.headers else None
        try:
            after = float(retry_after) if retry_after is not None else None
        except ValueError:
            after = None
        return Answer(status=exc.status or 0, detail=(exc.reason or "").strip() or str(exc.status), retry_after_s=after)
    if isinstance(exc, (urllib3.exceptions.HTTPError, OSError)):
        return Answer(status=0, detail=type(exc).__name__ + (f": {exc}" if str(exc) else ""))
    return None


def _json(response: Any) -> Any:
    return json.loads(response.data or b"null")


class KubeApi:
    """Nodes, ConfigMaps, MPIJobs, Jobs and Services, pods (list, log, evict), Kueue priority classes and
    Workloads (read, list); `calls` counts requests sent (retries included)."""

    def __init__(self, api_client: client.ApiClient, policy: RetryPolicy | None = None) -> None:
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.policy = policy or RetryPolicy()
        self.calls = 0

    def _call(self, fn, what: str, node: str | None = None) -> Any:
        def counted():
            self.calls += 1
            return fn()
        return self.policy.call(counted, classify, what, node)

    # --- nodes ------------------------------------------------------------------------------

    def list_nodes(self, selector: str) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            kwargs = {"label_selector": selector, "limit": PAGE, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            page = _json(self._call(lambda: self.core.list_node(**kwargs), f"list nodes ({selector})"))
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def nodes_with_slots(self, label: str, slots: Sequence[str]) -> list[dict[str, Any]]:
        wanted = sorted(set(slots))
        out: list[dict[str, Any]] = []
        for i in range(0, len(wanted), SELECTOR_CHUNK):
            out += self.list_nodes(f"{label} in ({','.join(wanted[i:i + SELECTOR_CHUNK])})")
        return out

    def read_node(self, name: str) -> dict[str, Any] | None:
        return self._read(lambda: self.core.read_node(name, _preload_content=False), f"read node {name}")

    def patch_node(self, name: str, patch: dict[str, Any], slot: str) -> dict[str, Any]:
        return _json(self._call(lambda: self.core.patch_node(name, patch, _content_type=MERGE_PATCH,
                                                             _preload_content=False), f"patch node {name}", slot))

    def cordon_node(self, name: str, on: bool, slot: str) -> dict[str, Any]:
        """`spec.unschedulable` alone: a scalar the merge patch sets without touching anything else,
        so it needs no resourceVersion guard (as `kubectl cordon`)."""
        return self.patch_node(name, {"spec": {"unschedulable": on}}, slot)

    def pods_on_node(self, name: str) -> list[dict[str, Any]]:
        """The pods on one Node that have not finished, all namespaces (a field selector: one small list)."""
        selector = f"spec.nodeName={name},status.phase!=Succeeded,status.phase!=Failed"
        return _json(self._call(lambda: self.core.list_pod_for_all_namespaces(field_selector=selector,
                                                                              _preload_content=False),
                                f"list the pods on {name}")).get("items") or []

    def evict_pod(self, namespace: str, name: str, slot: str) -> bool:
        """Ask the pod to leave through the Eviction subresource (policy/v1), which honours
        PodDisruptionBudgets. False: refused for now (429, a budget would be broken), for the caller
        to ask again later; True: evicted, or already gone (404). 5xx and no answer retry by policy."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}

        def evict() -> bool:
            try:
                self.core.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False)
            except ApiException as exc:
                if exc.status == 429:
                    return False
                if exc.status == 404:
                    return True
                raise
            return True
        return self._call(evict, f"evict pod {namespace}/{name}", slot)

    def pods_holding_nodes(self) -> Iterator[dict[str, Any]]:
        """Every pod that is not finished (pending ones may already hold a node's devices), all namespaces."""
        token: str | None = None
        while True:
            kwargs = {"field_selector": "status.phase!=Succeeded,status.phase!=Failed", "limit": PAGE,
                      "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            page = _json(self._call(lambda: self.core.list_pod_for_all_namespaces(**kwargs), "list running pods"))
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    # --- the slot ledger ---------------------------------------------------------------------

    def read_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(lambda: self.core.read_namespaced_config_map(name, namespace, _preload_content=False),
                          f"read configmap {namespace}/{name}")

    def create_configmap(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """409 (someone created it meanwhile) raises `Conflict`: read it and merge again."""
        return _json(self._call(lambda: self.core.create_namespaced_config_map(namespace, body, _preload_content=False),
                                f"create configmap {namespace}/{body['metadata']['name']}"))

    def patch_configmap(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return _json(self._call(lambda: self.core.patch_namespaced_config_map(
            name, namespace, patch, _content_type=MERGE_PATCH, _preload_content=False),
            f"patch configmap {namespace}/{name}"))

    # --- MPIJobs and their pods ----------------------------------------------------------------

    def create_mpijob(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        group, version, plural = MPIJOB
        return _json(self._call(lambda: self.custom.create_namespaced_custom_object(
            group, version, namespace, plural, body, _preload_content=False), f"create MPIJob {body['metadata']['name']}"))

    def get_mpijob(self, namespace: str, name: str) -> dict[str, Any]:
        group, version, plural = MPIJOB
        return _json(self._call(lambda: self.custom.get_namespaced_custom_object(
            group, version, namespace, plural, name, _preload_content=False), f"get MPIJob {name}"))

    def delete_mpijob(self, namespace: str, name: str) -> None:
        group, version, plural = MPIJOB

        def delete():
            try:
                self.custom.delete_namespaced_custom_object(group, version, namespace, plural, name,
                                                            propagation_policy="Background", _preload_content=False)
            except ApiException as exc:
                if exc.status != 404:  # already gone: deleting is idempotent
                    raise
        self._call(delete, f"delete MPIJob {name}")

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return _json(self._call(lambda: self.core.list_namespaced_pod(namespace, label_selector=selector,
                                                                      _preload_content=False),
                                f"list pods ({selector})")).get("items") or []

    def pod_log(self, namespace: str, name: str) -> str:
        response = self._call(lambda: self.core.read_namespaced_pod_log(name, namespace, _preload_content=False),
                              f"read the log of pod {name}")
        return (response.data or b"").decode("utf-8", errors="replace")

    def pod_log_if_any(self, namespace: str, name: str) -> str | None:
        """The pod's log, or None when it has none to give: gone (404), or its container never
        started (400, "waiting to start"). Other failures raise as for any call."""
        def read() -> str | None:
            try:
                response = self.core.read_namespaced_pod_log(name, namespace, _preload_content=False)
            except ApiException as exc:
                if exc.status in (400, 404):
                    return None
                raise
            return (response.data or b"").decode("utf-8", errors="replace")
        return self._call(read, f"read the log of pod {name}")

    # --- a launch's Job, Service and ConfigMap (the training smoke job) -------------------------

    def create_job(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """The created Job as the API server answers it (with its uid); 409 raises `Conflict`."""
        return _json(self._call(lambda: self.batch.create_namespaced_job(namespace, body, _preload_content=False),
                                f"create Job {namespace}/{body['metadata']['name']}"))

    def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(lambda: self.batch.read_namespaced_job(name, namespace, _preload_content=False),
                          f"read Job {namespace}/{name}")

    def delete_job(self, namespace: str, name: str) -> None:
        """Background propagation: the garbage collector deletes its pods too (the API's default for
        a batch/v1 Job orphans them, still holding their GPUs)."""
        self._delete(lambda: self.batch.delete_namespaced_job(name, namespace, propagation_policy="Background",
                                                              _preload_content=False), f"delete Job {namespace}/{name}")

    def create_service(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return _json(self._call(lambda: self.core.create_namespaced_service(namespace, body, _preload_content=False),
                                f"create Service {namespace}/{body['metadata']['name']}"))

    def delete_service(self, namespace: str, name: str) -> None:
        self._delete(lambda: self.core.delete_namespaced_service(name, namespace, _preload_content=False),
                     f"delete Service {namespace}/{name}")

    def delete_configmap(self, namespace: str, name: str) -> None:
        self._delete(lambda: self.core.delete_namespaced_config_map(name, namespace, _preload_content=False),
                     f"delete configmap {namespace}/{name}")

    # --- Kueue (the patrol's holds) -------------------------------------------------------------

    def read_workload_priority_class(self, name: str) -> dict[str, Any] | None:
        group, version = KUEUE
        return self._read(lambda: self.custom.get_cluster_custom_object(group, version, "workloadpriorityclasses", name,
                                                                        _preload_content=False),
                          f"read WorkloadPriorityClass {name}")

    def list_workloads(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        group, version = KUEUE
        return _json(self._call(lambda: self.custom.list_namespaced_custom_object(
            group, version, namespace, "workloads", label_selector=selector, _preload_content=False),
            f"list Workloads in {namespace} ({selector})")).get("items") or []

    def _read(self, fn, what: str) -> dict[str, Any] | None:
        """One object as JSON, or None when the API server has none (404)."""
        def read():
            try:
                return _json(fn())
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise
        return self._call(read, what)

    def _delete(self, fn, what: str) -> None:
        def delete():
            try:
                fn().data  # read to the end: the connection goes back to the pool, not closed with a reset
            except ApiException as exc:
                if exc.status != 404:  # already gone: deleting is idempotent
                    raise
        self._call(delete, what)
