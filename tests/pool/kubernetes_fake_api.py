"""A small fake Kubernetes API server (http.server) for the pool adapter's tests.

Why not PyPI `kmock`: it ignores label selectors and merges patches naively, and the adapter's
correctness rests on both (slots are found by label; taints are a list a merge patch replaces
whole, guarded by resourceVersion). This fake implements exactly what the adapter uses, with the
API server's semantics: equality and set-based label selectors, paginated lists (limit/continue),
RFC 7386 JSON merge patches with optimistic concurrency (a stale metadata.resourceVersion gets
409), ConfigMaps, MPIJobs (an `on_mpijob` hook plays the MPI operator), pods (listed by label or
by field selector, e.g. `spec.nodeName`), their logs, and their Eviction subresource (policy/v1:
the pod is marked for deletion; an `on_eviction` hook plays the kubelet ending it). An injector
answers chosen requests with 409, 429 (with Retry-After) or 5xx; a disruption budget refusing an
eviction is an injected 429. Every request, every patch body and every POST body is recorded.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from kubernetes import client

TERM = re.compile(r"\s*(!?)([A-Za-z0-9./_-]+)\s*(?:(in|notin)\s*\(([^)]*)\)|(==|=|!=)\s*([A-Za-z0-9._-]*))?\s*")


def parse_selector(text: str) -> list[Callable[[dict[str, str]], bool]]:
    """Kubernetes label selector syntax: `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a)`."""
    terms: list[Callable[[dict[str, str]], bool]] = []
    pos = 0
    while pos < len(text):
        m = TERM.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"bad selector {text!r} at {pos}")
        neg, key, setop, values, op, value = m.groups()
        if setop:
            vals = {v.strip() for v in values.split(",") if v.strip()}
            terms.append(lambda labels, k=key, vs=vals, inside=setop == "in":
                         (labels.get(k) in vs) if inside else (labels.get(k) not in vs))
        elif op:
            terms.append(lambda labels, k=key, v=value, eq=op != "!=": (labels.get(k) == v) == eq)
        else:
            terms.append(lambda labels, k=key, absent=bool(neg): (k in labels) != absent)
        pos = m.end()
        if pos < len(text):
            if text[pos] != ",":
                raise ValueError(f"bad selector {text!r} at {pos}")
            pos += 1
    return terms


def parse_field_selector(text: str) -> list[Callable[[dict[str, Any]], bool]]:
    """Field selectors: `a.b=v`, `a.b==v`, `a.b!=v`, comma-joined (dotted paths into the object)."""
    def value(obj: dict[str, Any], path: str) -> str:
        for part in path.split("."):
            obj = obj.get(part) if isinstance(obj, dict) else None  # type: ignore[assignment]
        return "" if obj is None else str(obj)
    terms = []
    for term in filter(None, text.split(",")):
        path, op, want = re.match(r"([A-Za-z.]+)\s*(!=|==|=)\s*(.*)", term).groups()  # type: ignore[union-attr]
        terms.append(lambda obj, p=path, w=want, eq=op != "!=": (value(obj, p) == w) == eq)
    return terms


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null removes, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


@dataclass
class Injected:
    status: int
    method: str | None
    path: str | None
    retry_after: int | None
    times: int


@dataclass
class FakeKube:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    configmaps: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    mpijobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    requests: list[tuple[str, str, int]] = field(default_factory=list)
    patches: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (path, content type, body)
    posts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (path, body), whatever the answer
    on_eviction: Callable[["FakeKube", str, str], None] | None = None  # (namespace, pod) once evicted
    on_mpijob: Callable[["FakeKube", dict[str, Any]], None] | None = None
    on_request: Callable[["FakeKube", str, str], None] | None = None  # (method, path), before it is served
    injected: list[Injected] = field(default_factory=list)
    version: int = 1000
    lock: threading.RLock = field(default_factory=threading.RLock)

    # --- test helpers ---------------------------------------------------------------------------

    def add_node(self, name: str, slot: str | None, *, instance_id: str | None = None, taints=None,
                 labels: dict[str, str] | None = None, created: str = "2026-11-30T00:00:00Z") -> dict[str, Any]:
        """A Node as the kubelet registers it (nodeadm NodeConfig: slot label, gate taint)."""
        meta = {"name": name, "labels": {"kubernetes.io/hostname": name, **({"gpufleet.io/slot": slot} if slot else {}),
                                         **(labels or {})},
                "annotations": {}, "creationTimestamp": created, "resourceVersion": self._bump()}
        spec: dict[str, Any] = {"taints": list(taints) if taints is not None else
                                [{"key": "gpufleet.io/gate", "value": "pending", "effect": "NoSchedule"}]}
        if instance_id:
            spec["providerID"] = f"aws:///us-east-2a/{instance_id}"
        self.nodes[name] = {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec}
        return self.nodes[name]

    def add_pod(self, namespace: str, name: str, node: str, gpus: int, *, workload: str | None = None,
                owner: tuple[str, str] | None = None) -> dict[str, Any]:
        """A running pod on `node` asking for `gpus` GPUs, admitted by Kueue (`workload`) or owned by a controller."""
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": self._bump(),
                                "labels": {}, "annotations": {}}
        if workload is not None:
            meta["labels"]["kueue.x-k8s.io/queue-name"] = namespace
            meta["annotations"]["kueue.x-k8s.io/workload"] = workload
        if owner is not None:
            meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": owner[0], "name": owner[1],
                                        "uid": "0000", "controller": True}]
        resources = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        self.pods[(namespace, name)] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                        "spec": {"nodeName": node, "containers": [
                                            {"name": "main", "image": "train:1", "resources": resources}]},
                                        "status": {"phase": "Running"}}
        return self.pods[(namespace, name)]

    def fail(self, status: int, *, method: str | None = None, path: str | None = None, times: int = 1,
             retry_after: int | None = None) -> None:
        """Answer the next `times` matching requests (method, path prefix) with `status`."""
        self.injected.append(Injected(status, method, path, retry_after, times))

    def count(self, method: str, prefix: str = "") -> int:
        return sum(1 for m, p, _ in self.requests if m == method and p.startswith(prefix))

    def node_patches(self) -> list[dict[str, Any]]:
        return [body for path, _, body in self.patches if path.startswith("/api/v1/nodes/")]

    # --- serving ----------------------------------------------------------------------------------

    def _bump(self) -> str:
        self.version += 1
        return str(self.version)

    def _injected(self, method: str, path: str) -> Injected | None:
        for inj in self.injected:
            if inj.times > 0 and (inj.method in (None, method)) and (inj.path is None or path.startswith(inj.path)):
                inj.times -= 1
                return inj
        return None

    def handle(self, method: str, url: str, headers: dict[str, str], body: bytes) -> tuple[int, Any, dict[str, str]]:
        parsed = urlparse(url)
        path, query = parsed.path, {k: v[0] for k, v in parse_qs(parsed.query).items()}
        with self.lock:
            if self.on_request is not None:
                self.on_request(self, method, path)
            if method == "PATCH":  # every patch sent, whatever the answer
                self.patches.append((path, headers.get("Content-Type", ""), json.loads(body)))
            if method == "POST":
                self.posts.append((path, json.loads(body) if body else None))
            inj = self._injected(method, path)
            if inj is not None:
                extra = {"Retry-After": str(inj.retry_after)} if inj.retry_after is not None else {}
                status = (inj.status, _status(inj.status, "injected"), extra)
            else:
                status = self._route(method, path, query, headers, json.loads(body) if body else None)
            self.requests.append((method, path, status[0]))
            return status

    def _route(self, method, path, query, headers, body):
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "nodes"]:
            if len(parts) == 3 and method == "GET":
                return self._list(list(self.nodes.values()), query)
            name = parts[3]
            if name not in self.nodes:
                return 404, _status(404, f'nodes "{name}" not found'), {}
            if method == "GET":
                return 200, self.nodes[name], {}
            if method == "PATCH":
                return self._patch(self.nodes, name, path, headers, body)
        if parts == ["api", "v1", "pods"] and method == "GET":
            fields = parse_field_selector(query.get("fieldSelector", ""))
            return self._list([p for p in self.pods.values() if all(f(p) for f in fields)], query)
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5:
            ns, kind = parts[3], parts[4]
            if kind == "configmaps":
                if len(parts) == 5 and method == "POST":
                    key = (ns, body["metadata"]["name"])
                    if key in self.configmaps:
                        return 409, _status(409, "AlreadyExists"), {}
                    body["metadata"]["resourceVersion"] = self._bump()
                    self.configmaps[key] = body
                    return 201, body, {}
                key = (ns, parts[5])
                if key not in self.configmaps:
                    return 404, _status(404, "configmap not found"), {}
                if method == "GET":
                    return 200, self.configmaps[key], {}
                if method == "PATCH":
                    return self._patch(self.configmaps, key, path, headers, body)
            if kind == "pods":
                if len(parts) == 5 and method == "GET":
                    return self._list([p for (n, _), p in self.pods.items() if n == ns], query)
                if len(parts) == 7 and parts[6] == "log" and method == "GET":
                    return 200, self.logs.get((ns, parts[5]), ""), {"Content-Type": "text/plain"}
                if len(parts) == 7 and parts[6] == "eviction" and method == "POST":
                    return self._evict(ns, parts[5], body)
        if parts[:3] == ["apis", "kubeflow.org", "v2beta1"] and parts[5] == "mpijobs":
            ns = parts[4]
            if len(parts) == 6 and method == "POST":
                key = (ns, body["metadata"]["name"])
                if key in self.mpijobs:
                    return 409, _status(409, "AlreadyExists"), {}
                body["metadata"]["resourceVersion"] = self._bump()
                self.mpijobs[key] = body
                if self.on_mpijob:
                    self.on_mpijob(self, body)
                return 201, body, {}
            key = (ns, parts[6])
            if key not in self.mpijobs:
                return 404, _status(404, "mpijob not found"), {}
            if method == "GET":
                return 200, self.mpijobs[key], {}
            if method == "DELETE":
                return 200, self.mpijobs.pop(key), {}
        return 404, _status(404, f"no route {method} {path}"), {}

    def _evict(self, ns: str, name: str, body: dict[str, Any]):
        if body.get("kind") != "Eviction" or body.get("apiVersion") != "policy/v1" or \
                body.get("metadata", {}).get("name") != name:
            return 400, _status(400, "not a policy/v1 Eviction of this pod"), {}
        pod = self.pods.get((ns, name))
        if pod is None:
            return 404, _status(404, f'pods "{name}" not found'), {}
        pod["metadata"].setdefault("deletionTimestamp", "2026-11-30T12:00:00Z")
        pod["metadata"]["resourceVersion"] = self._bump()
        if self.on_eviction is not None:
            self.on_eviction(self, ns, name)
        return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}, {}

    def _list(self, items, query):
        selector = parse_selector(query.get("labelSelector", ""))
        matched = [i for i in sorted(items, key=lambda i: i["metadata"]["name"])
                   if all(t(i["metadata"].get("labels") or {}) for t in selector)]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(matched) or 1
        page = matched[start:start + limit]
        meta = {"resourceVersion": str(self.version)}
        if start + limit < len(matched):
            meta["continue"] = str(start + limit)
        return 200, {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": page}, {}

    def _patch(self, store, key, path, headers, body):
        ctype = headers.get("Content-Type", "")
        if ctype != "application/merge-patch+json":
            return 415, _status(415, f"unsupported patch type {ctype}"), {}
        current = store[key]
        want_rv = (body.get("metadata") or {}).get("resourceVersion")
        if want_rv is not None and want_rv != current["metadata"]["resourceVersion"]:
            return 409, _status(409, "the object has been modified; please apply your changes to the latest "
                                     "version and try again"), {}
        new = merge_patch(current, body)
        new["metadata"]["resourceVersion"] = self._bump()
        store[key] = new
        return 200, new, {}


def _status(code: int, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}


class FakeTime:
    """A clock that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


class FakeApiServer:
    """Serves a FakeKube on 127.0.0.1 (a free port) in a thread; `api_client()` talks to it."""

    def __init__(self, kube: FakeKube | None = None) -> None:
        self.kube = kube or FakeKube()
        kube_ref = self.kube

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                code, payload, extra = kube_ref.handle(self.command, self.path, dict(self.headers), body)
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", extra.pop("Content-Type", "application/json"))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, *args) -> None:  # quiet
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeApiServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def api_client(self) -> client.ApiClient:
        return api_client_for(self.url)


def api_client_for(url: str) -> client.ApiClient:
    config = client.Configuration(host=url)
    config.retries = False  # the adapter's own policy retries; no hidden urllib3 retries under it
    return client.ApiClient(config)
