"""The Kubernetes pool: the `Pool` port over Node taints, labels and annotations, a launcher
that runs the gates' MPIJobs, and the `Evicting` port a drain uses (cordon, the workloads holding
GPUs, eviction through the Eviction API).

Every call reads the Node, asks `gpufleet.pool.transitions` what the call means (refusals happen
there, before any write), and sends the one merge patch `nodes.patch_for` computes, or nothing
when the Node already says it. A 409 (the Node changed since it was read) re-reads and decides
again; 429/5xx/no answer back off within a deadline (`retry.RetryPolicy`), then raise
`PoolError`. What must outlive a Node object (a replaced instance registers a new Node for the
same slot) lives in the slot ledger, a ConfigMap in `gpufleet-system`: the failure count of a
released slot, and blacklisted slots whose instance is gone.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Callable, Collection, Mapping, Sequence

from gpufleet.errors import PoolError
from gpufleet.gates.admission import AdmissionRecord
from gpufleet.gates.launch import LaunchSpec
from gpufleet.pool import transitions
from gpufleet.pool.kubernetes import nodes as kn
from gpufleet.pool.kubernetes.api import KubeApi
from gpufleet.pool.kubernetes.manifests import SYSTEM_NAMESPACE
from gpufleet.pool.kubernetes.patrol_hold import KubePatrolHolds
from gpufleet.pool.kubernetes.patrol_job import PatrolJobs, patrol_jobs
from gpufleet.pool.kubernetes.retry import Answer, Conflict
from gpufleet.pool.protocol import (Holder, LaunchResult, Launcher, NodeState, PendingNode, PoolNode, PoolState,
                                 record_summary)

LEDGER = "gpufleet-slot-ledger"
MAX_CONFLICTS = 20
TIMEOUT_EXIT = 124  # what `timeout` returns: the run did not finish in time


class KubernetesPool:
    """`partitions`: the pool's partition names (a node asking for another is refused)."""

    kind = "kubernetes"

    def __init__(self, api: KubeApi, *, partitions: Collection[str], failures_before_blacklist: int = 2,
                 namespace: str = SYSTEM_NAMESPACE, launcher: Launcher | None = None,
                 patrol: PatrolJobs | Callable[[], PatrolJobs | None] | None = None) -> None:
        self.api = api
        self.patrol = patrol
        self.partitions = frozenset(partitions)
        self.failures_before_blacklist = failures_before_blacklist
        self.namespace = namespace
        self._launcher = launcher

    # --- the port ---------------------------------------------------------------------------

    def register_pending(self, nodes: Sequence[PendingNode]) -> None:
        if not nodes:
            return
        for n in nodes:
            if n.partition is not None and n.partition not in self.partitions:
                raise PoolError(f"partition {n.partition!r} is not in this pool (it has "
                                f"{', '.join(sorted(self.partitions)) or 'none'})", node=n.slot)
        found = self._by_slot(self.api.nodes_with_slots(kn.SLOT_LABEL, [n.slot for n in nodes]))
        missing = [n.slot for n in nodes if n.slot not in found]
        if missing:
            raise PoolError(f"no Kubernetes Node carries the label {kn.SLOT_LABEL}={missing[0]} (has the instance "
                            f"joined the cluster?); {len(missing)} slot(s) missing: {', '.join(missing[:10])}",
                            node=missing[0])
        ledger = self._read_ledger()[0]
        chosen = {n.slot: _pick(found[n.slot], n.instance_id) for n in nodes}
        # a replacement that joined while its predecessor's Node still holds the slot inherits it
        before = {n.slot: _predecessor(found[n.slot], chosen[n.slot]) for n in nodes}

        def inherited(slot: str) -> PoolNode | None:
            old = before[slot]
            return (kn.decode(old) if old is not None else None) or _ledger_node(ledger, slot)
        for n in nodes:  # every refusal before the first write
            transitions.register(kn.decode(chosen[n.slot]) or inherited(n.slot), n, _ledger_failures(ledger, n.slot))
        for n in nodes:
            carried = _ledger_failures(ledger, n.slot)
            self._apply(n.slot, lambda now, n=n, carried=carried: transitions.register(
                now or inherited(n.slot), _with_instance(n, chosen[n.slot]), carried),
                node=chosen[n.slot], reread=lambda n=n: self._joined(n))
            old = before[n.slot]
            if old is not None:  # the slot is the new Node's now: the old one leaves the pool, gated
                self._apply(n.slot, lambda now: None, node=old, reread=lambda name=kn.node_name(old): self.api.read_node(name))
        self._edit_ledger({n.slot: None for n in nodes if n.slot in ledger})

    def admit(self, slot: str, record: AdmissionRecord) -> PoolNode:
        return self._apply(slot, lambda now: transitions.admit(now, slot, record), summary=record_summary(record))

    def quarantine(self, slot: str, reason_code: str, reason: str) -> PoolNode:
        return self._apply(slot, lambda now: transitions.quarantine(now, slot, reason_code, reason,
                                                                    self.failures_before_blacklist))

    def blacklist(self, slot: str, reason: str) -> PoolNode:
        if self._registered(slot) is None:
            ledger = self._read_ledger()[0]
            if slot in ledger:  # a released slot: blacklisted for its next instance
                new = transitions.blacklist(_ledger_node(ledger, slot, blacklisted=False), slot, reason)
                self._edit_ledger({slot: _ledger_entry(new)})
                return new
        return self._apply(slot, lambda now: transitions.blacklist(now, slot, reason))

    def clear(self, slot: str) -> PoolNode:
        ledger = self._read_ledger()[0]
        if self._registered(slot) is None and slot in ledger:
            self._edit_ledger({slot: _ledger_entry(PoolNode(slot=slot, state=NodeState.PENDING))})
            return PoolNode(slot=slot, state=NodeState.PENDING, failures=0)
        new = self._apply(slot, lambda now: transitions.clear(now, slot))
        if slot in ledger:
            self._edit_ledger({slot: None})
        return new

    def release(self, slot: str) -> None:
        obj = self._registered(slot)
        if obj is None:
            if slot in self._read_ledger()[0]:
                return  # released already
            raise PoolError("not in the pool: nothing to release", node=slot)
        now = kn.decode(obj)
        assert now is not None
        after = transitions.release(now, slot)
        # the ledger first: if the Node patch then fails, a retry finds the slot still registered
        self._edit_ledger({slot: _ledger_entry(after) if after is not None else {"failures": now.failures}})
        self._apply(slot, lambda current: transitions.release(current, slot), node=obj)

    def state(self) -> PoolState:
        """Every registered slot; `busy` where a pod holds the Node's GPUs (one pod list for all nodes)."""
        found = self._by_slot(self.api.list_nodes(kn.SLOT_LABEL))
        busy = {name for name in map(kn.holds_gpus, self.api.pods_holding_nodes()) if name}
        out: dict[str, PoolNode] = {}
        for slot, objs in found.items():
            registered = [(o, n) for o, n in ((o, kn.decode(o)) for o in _newest_first(objs)) if n is not None]
            if registered:
                obj, node = registered[0]
                out[slot] = replace(node, busy=kn.node_name(obj) in busy)
        ledger = self._read_ledger()[0]
        for slot in ledger:
            node = _ledger_node(ledger, slot)
            if slot not in out and node is not None:
                out[slot] = node
        return PoolState(nodes=dict(sorted(out.items())))

    def launcher(self) -> Launcher:
        return self._launcher or MpiJobLauncher(self.api, self.node_names, namespace=self.namespace)

    def patrol_holds(self) -> KubePatrolHolds | None:
        """The patrol's lowest-priority hold Jobs through Kueue (`patrol_hold`), where the pool has the
        patrol's priority class and the stack a workload image to hold nodes with, else None."""
        jobs = self.patrol() if callable(self.patrol) else self.patrol
        if jobs is None:
            return None
        holds = KubePatrolHolds(self.api, jobs, self.node_names, sleep=self.api.policy.sleep,
                                clock=self.api.policy.clock)
        return holds if holds.available() else None

    def node_names(self, slots: Sequence[str]) -> dict[str, str]:
        """slot -> Node name (what `kubernetes.io/hostname` says), for pinning pods to slots."""
        return {s: kn.node_name(obj) for s, obj in self._nodes(slots).items()}

    # --- draining (the optional `Evicting` port) ---------------------------------------------

    def cordon(self, slots: Sequence[str], on: bool = True) -> None:
        """Mark the slots' Nodes unschedulable (or schedulable again); a Node already so gets no request."""
        for slot, obj in self._nodes(slots).items():
            if bool((obj.get("spec") or {}).get("unschedulable", False)) != on:
                self.api.cordon_node(kn.node_name(obj), on, slot)

    def holders(self, slots: Sequence[str]) -> list[Holder]:
        return [h for slot, obj in self._nodes(slots).items()
                for h in kn.holders(slot, self.api.pods_on_node(kn.node_name(obj)))]

    def evict(self, slots: Sequence[str], deadline_s: float) -> list[Holder]:
        """Evict the GPU pods on the slots' Nodes, in rounds: a pod a PodDisruptionBudget protects now
        (429) is asked again in the next round, after a jittered backoff, until `deadline_s`; what is
        still refused then is returned. Pods already leaving are not asked again."""
        policy = self.api.policy
        start, attempt = policy.clock(), 0
        while True:
            refused: list[Holder] = []
            for slot, obj in self._nodes(slots).items():
                pods = [p for p in self.api.pods_on_node(kn.node_name(obj)) if not kn.leaving(p)]
                stay = [p for p in pods if kn.holds_gpus(p)
                        and not self.api.evict_pod(p["metadata"]["namespace"], p["metadata"]["name"], slot)]
                refused += kn.holders(slot, stay)
            if not refused:
                return []
            wait = policy.delay(attempt, Answer(status=429, detail="a disruption budget refuses the eviction"))
            attempt += 1
            if policy.clock() - start + wait > deadline_s:
                return refused
            policy.sleep(wait)

    def _nodes(self, slots: Sequence[str]) -> dict[str, dict[str, Any]]:
        """slot -> its Node (the newest carrying the slot); a slot with none is an error."""
        found = self._by_slot(self.api.nodes_with_slots(kn.SLOT_LABEL, slots))
        missing = [s for s in slots if s not in found]
        if missing:
            raise PoolError(f"no Kubernetes Node carries the label {kn.SLOT_LABEL}={missing[0]}", node=missing[0])
        return {s: _newest_first(found[s])[0] for s in slots}

    # --- nodes ------------------------------------------------------------------------------

    @staticmethod
    def _by_slot(objs) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for obj in objs:
            slot = kn.slot_of(obj)
            if slot is not None:
                out.setdefault(slot, []).append(obj)
        return out

    def _registered(self, slot: str) -> dict[str, Any] | None:
        """The slot's registered Node (newest if a replacement overlaps its predecessor), or None."""
        objs = _newest_first(self.api.nodes_with_slots(kn.SLOT_LABEL, [slot]))
        return next((o for o in objs if kn.decode(o) is not None), None)

    def _joined(self, node: PendingNode) -> dict[str, Any] | None:
        """The Node an instance registered for the slot, registered with gpufleet or not."""
        objs = self.api.nodes_with_slots(kn.SLOT_LABEL, [node.slot])
        return _pick(objs, node.instance_id) if objs else None

    def _apply(self, slot: str, step: Callable[[PoolNode | None], PoolNode | None], *, node: dict[str, Any] | None = None,
               summary: str | None = None, reread: Callable[[], dict[str, Any] | None] | None = None) -> Any:
        """Read (or take `node`, read just before), decide, patch; on a 409 read again and decide again."""
        reread = reread or (lambda: self._registered(slot))
        for _ in range(MAX_CONFLICTS):
            obj = node if node is not None else reread()
            node = None
            now = kn.decode(obj) if obj is not None else None
            new = step(now)
            if obj is None:  # only a registration gets here: its Node went away since it was listed
                raise PoolError(f"no Kubernetes Node carries the label {kn.SLOT_LABEL}={slot} any more", node=slot)
            patch = kn.patch_for(obj, new, summary)
            if patch is not None:
                try:
                    self.api.patch_node(kn.node_name(obj), patch, slot)
                except Conflict:
                    continue
            return new
        raise PoolError(f"the Node kept changing while gpufleet updated it ({MAX_CONFLICTS} conflicts in a row)",
                        node=slot)

    # --- the slot ledger ----------------------------------------------------------------------

    def _read_ledger(self) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
        cm = self.api.read_configmap(self.namespace, LEDGER)
        entries = {slot: json.loads(raw) for slot, raw in ((cm or {}).get("data") or {}).items()}
        return entries, cm

    def _edit_ledger(self, changes: Mapping[str, dict[str, Any] | None]) -> None:
        """Set (or with None remove) slots' entries; a no-op change sends nothing."""
        if not changes:
            return
        for _ in range(MAX_CONFLICTS):
            entries, cm = self._read_ledger()
            wanted = {slot: (json.dumps(v, sort_keys=True) if v is not None else None) for slot, v in changes.items()}
            have = (cm or {}).get("data") or {}
            diff = {k: v for k, v in wanted.items() if have.get(k) != v}
            if not diff:
                return
            try:
                if cm is None:
                    data = {k: v for k, v in diff.items() if v is not None}
                    if data:
                        self.api.create_configmap(self.namespace, {
                            "apiVersion": "v1", "kind": "ConfigMap", "data": data,
                            "metadata": {"name": LEDGER, "namespace": self.namespace,
                                         "labels": {"app.kubernetes.io/managed-by": "gpufleet"}}})
                else:
                    self.api.patch_configmap(self.namespace, LEDGER, {
                        "metadata": {"resourceVersion": cm["metadata"]["resourceVersion"]}, "data": diff})
                return
            except Conflict:
                continue
        raise PoolError(f"the slot ledger {self.namespace}/{LEDGER} kept changing ({MAX_CONFLICTS} conflicts in a row)")


def _ledger_entry(node: PoolNode) -> dict[str, Any]:
    entry: dict[str, Any] = {"failures": node.failures}
    if node.state is NodeState.BLACKLISTED:
        entry.update(blacklisted=True, reason_code=node.reason_code, reason=node.reason, block=node.block,
                     partition=node.partition)
    return entry


def _ledger_failures(ledger: Mapping[str, Mapping[str, Any]], slot: str) -> int:
    return int(ledger.get(slot, {}).get("failures", 0))


def _ledger_node(ledger: Mapping[str, Mapping[str, Any]], slot: str, blacklisted: bool = True) -> PoolNode | None:
    """A released slot as the pool lists it: only a blacklisted one is still in the pool."""
    entry = ledger.get(slot)
    if entry is None:
        return None
    if entry.get("blacklisted"):
        return PoolNode(slot=slot, state=NodeState.BLACKLISTED, block=entry.get("block"),
                        partition=entry.get("partition"), reason_code=entry.get("reason_code"),
                        reason=entry.get("reason"), failures=int(entry.get("failures", 0)))
    if not blacklisted:
        return PoolNode(slot=slot, state=NodeState.PENDING, failures=int(entry.get("failures", 0)))
    return None


def _newest_first(objs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(objs, key=lambda o: o["metadata"].get("creationTimestamp") or "", reverse=True)


def _pick(objs: Sequence[dict[str, Any]], instance_id: str | None) -> dict[str, Any]:
    """The Node of this instance when the caller knows it, else the newest one carrying the slot."""
    for obj in objs:
        if instance_id and kn.instance_from_provider_id((obj.get("spec") or {}).get("providerID")) == instance_id:
            return obj
    return _newest_first(objs)[0]


def _predecessor(objs: Sequence[dict[str, Any]], chosen: Mapping[str, Any]) -> dict[str, Any] | None:
    """Another Node that is registered for the same slot (the instance being replaced), if any."""
    return next((o for o in _newest_first(objs)
                 if kn.node_name(o) != kn.node_name(chosen) and kn.decode(o) is not None), None)


def _with_instance(node: PendingNode, obj: Mapping[str, Any]) -> PendingNode:
    if node.instance_id:
        return node
    return replace(node, instance_id=kn.instance_from_provider_id((obj.get("spec") or {}).get("providerID")))


# --- the launcher --------------------------------------------------------------------------------

class MpiJobLauncher:
    """Runs each spec's MPIJob in `namespace`, pinned to the spec's slots and tolerating the gate
    taint: create them all, wait for each to finish (or the deadline), read the launcher pod's log
    as the raw output, delete the job. Never raises for a failed run: that is the gates' call."""

    def __init__(self, api: KubeApi, node_names: Callable[[Sequence[str]], Mapping[str, str]], *,
                 namespace: str = SYSTEM_NAMESPACE, poll_s: float = 5.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.node_names = node_names
        self.namespace = namespace
        self.poll_s = poll_s
        self.sleep = sleep
        self.clock = clock

    def run(self, specs: Sequence[LaunchSpec], timeout_s: float) -> list[LaunchResult]:
        for spec in specs:
            if spec.kind != "kubernetes" or spec.manifest is None:
                raise PoolError(f"launch spec {spec.name!r} is kind {spec.kind!r}; the Kubernetes pool runs MPIJobs")
        started = datetime.now(timezone.utc)
        deadline = self.clock() + timeout_s
        jobs = [pinned(spec.manifest, self.node_names(spec.nodes), self.namespace) for spec in specs]  # type: ignore[arg-type]
        try:
            for job in jobs:
                self.api.create_mpijob(self.namespace, job)
            pending = {s.name for s in specs}
            outcome: dict[str, str] = {}
            while pending:
                for name in sorted(pending):
                    verdict = finished(self.api.get_mpijob(self.namespace, name))
                    if verdict is not None:
                        outcome[name] = verdict
                pending -= outcome.keys()
                if not pending or self.clock() >= deadline:
                    break
                self.sleep(min(self.poll_s, max(0.0, deadline - self.clock())))
            return [self._result(spec, job, outcome.get(spec.name), started) for spec, job in zip(specs, jobs)]
        finally:
            for job in jobs:
                self.api.delete_mpijob(self.namespace, job["metadata"]["name"])

    def _result(self, spec: LaunchSpec, job: dict[str, Any], outcome: str | None, started: datetime) -> LaunchResult:
        pods = self.api.list_pods(self.namespace, f"training.kubeflow.org/job-name={spec.name},"
                                                  "training.kubeflow.org/job-role=launcher")
        output, code = "", None
        if pods:
            pod = _newest_first(pods)[0]
            output = self.api.pod_log(self.namespace, pod["metadata"]["name"])
            code = _exit_code(pod)
        if outcome is None:
            code = TIMEOUT_EXIT
        elif code is None:
            code = 0 if outcome == "Succeeded" else 1
        launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        return LaunchResult(name=spec.name, nodes=spec.nodes, exit_code=code, output=output, started=started,
                            ended=datetime.now(timezone.utc), command=" ".join(map(str, launcher.get("command", []))))


def pinned(manifest: Mapping[str, Any], names: Mapping[str, str], namespace: str) -> dict[str, Any]:
    """The spec's MPIJob in `namespace` with its workers' hostname affinity naming Nodes, not slots."""
    job = json.loads(json.dumps(manifest))
    job["metadata"]["namespace"] = namespace
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    for term in worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]:
        for expr in term["matchExpressions"]:
            if expr["key"] == "kubernetes.io/hostname":
                expr["values"] = [names[v] for v in expr["values"]]
    return job


def finished(job: Mapping[str, Any]) -> str | None:
    """"Succeeded" or "Failed" once the MPI operator says so (a True condition), else None."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Succeeded", "Failed") and cond.get("status") == "True":
            return cond["type"]
    return None


def _exit_code(pod: Mapping[str, Any]) -> int | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is not None:
            return int(terminated.get("exitCode", 1))
    return None


def pool_for(spec: Any, project: Any, stack: str, *, launcher: Launcher | None = None, plan: Any = None) -> KubernetesPool:
    """The stack's Kubernetes pool through the kubeconfig in effect (KUBECONFIG or ~/.kube/config),
    the context named after the cluster when there is one (`pulumi stack output kubeconfig` names
    it so), else the current context."""
    from kubernetes import client, config

    from gpufleet.plan import build_plan

    plan = plan or build_plan(spec)
    configuration = client.Configuration()
    files = os.environ.get("KUBECONFIG") or None  # read now: the client reads it once, at import
    try:
        contexts, _ = config.list_kube_config_contexts(config_file=files)
        names = {c["name"] for c in contexts}
        config.load_kube_config(config_file=files, context=spec.cluster.name if spec.cluster.name in names else None,
                                client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        raise PoolError(f"no usable kubeconfig for stack {stack!r} ({exc}); write it with `pulumi stack output "
                        f"kubeconfig --show-secrets > ~/.kube/config` or set KUBECONFIG") from None
    configuration.retries = False  # RetryPolicy retries, with backoff and a deadline; urllib3 would retry under it
    return KubernetesPool(KubeApi(client.ApiClient(configuration)), partitions=[p.name for p in plan.partitions],
                          failures_before_blacklist=spec.rollout.failures_before_blacklist, launcher=launcher,
                          patrol=lambda: patrol_jobs(spec, plan))  # read by the patrol alone
