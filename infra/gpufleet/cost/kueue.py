"""Kueue Workloads as GPU usage: what each admitted workload held, from when to when, and where.

A Workload holds its quota from its `Admitted` condition turning True until it finishes
(`Finished` True) or is evicted (`Evicted` True); the condition's lastTransitionTime dates each
edge. A workload whose `Admitted` is False now (evicted and requeued) cannot be dated (that time
is the loss, not the start): it is listed as not counted, never guessed. GPUs are the admitted pod count of each pod set
(`status.admission.podSetAssignments[].count`, which partial admission may lower, else the
spec's count) times the pod template's `nvidia.com/gpu` request (the limit when no request:
extended resources take the limit as the request). The partition and team come from the
ClusterQueue that admitted it, through the pool's queue layout (`gpufleet.pool.kubernetes.queues`:
`P` is partition P's operators' queue, `P-T` team T's in P; a name cannot be split, partitions and
teams may hold dashes): a team queue's workload is that team's whatever its labels say (a label
must not move GPU hours to another team); on an operators' queue the team is the workload's
`gpufleet.io/team` label, else its namespace. A ClusterQueue the layout lacks is its own partition. Nodes come from topology-aware scheduling's assignment at the hostname level when
Kueue recorded one; otherwise the job has no node list and the idle-unit section says so.

A Workload that is pending, or was admitted and evicted before the window, contributes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Iterator, Mapping, Protocol

from gpufleet.cost.usage import JobUsage, utc
from gpufleet.pool.kubernetes.manifests import GPU, HOSTNAME_LABEL
from gpufleet.pool.kubernetes.queues import TeamQueue

Owners = Mapping[str, tuple[str, "str | None"]]  # ClusterQueue -> (partition, team or None: operators')

KUEUE_GROUP = "kueue.x-k8s.io"
WORKLOADS = "workloads"
TEAM_LABEL = "gpufleet.io/team"
_ENDS = (("Finished", "True"), ("Evicted", "True"))


class KueueError(Exception):
    """The API server did not list the Workloads: usage is unknown, not zero."""


class WorkloadSource(Protocol):
    """Every Workload in the cluster as plain JSON objects (all namespaces)."""

    def workloads(self) -> Iterator[Mapping[str, Any]]: ...


def _conditions(wl: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (wl.get("status") or {}).get("conditions") or ()}


def _gpus_per_pod(template: Mapping[str, Any]) -> int:
    spec = template.get("spec") or {}
    total = 0
    for c in list(spec.get("containers") or ()):
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(GPU, (res.get("limits") or {}).get(GPU, 0))
        total += int(str(value))
    return total


def _nodes(assignment: Mapping[str, Any]) -> list[str]:
    topo = assignment.get("topologyAssignment") or {}
    levels = list(topo.get("levels") or ())
    if HOSTNAME_LABEL not in levels:
        return []
    at = levels.index(HOSTNAME_LABEL)
    return [d["values"][at] for d in topo.get("domains") or () if len(d.get("values") or ()) > at]


def queue_owners(queues: Iterable[TeamQueue]) -> dict[str, tuple[str, str | None]]:
    """Each of the pool's ClusterQueues -> its partition and team (`queues.queue_layout`)."""
    return {q.name: (q.partition, q.team) for q in queues}


def to_usage(wl: Mapping[str, Any], owners: Owners | None = None) -> JobUsage | str | None:
    """The workload's usage; None when it was never admitted; a reason text when it held quota
    but cannot be dated (admission lost: the condition now dates the loss, not the start).
    ValueError on a malformed object."""
    meta = wl.get("metadata") or {}
    name = f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
    conds = _conditions(wl)
    admitted = conds.get("Admitted")
    if admitted is None:
        return None
    if admitted.get("status") != "True":
        return f"workload {name} lost its admission ({admitted.get('reason', 'no reason')}): its start is not recorded"
    try:
        start = utc(admitted["lastTransitionTime"])
        ends = [utc(conds[t]["lastTransitionTime"]) for t, s in _ENDS
                if t in conds and conds[t].get("status") == s and conds[t].get("lastTransitionTime")]
        end: datetime | None = min((e for e in ends if e >= start), default=None)
        admission = (wl.get("status") or {}).get("admission") or {}
        assigned = {a.get("name"): a for a in admission.get("podSetAssignments") or ()}
        gpus = 0
        nodes: list[str] = []
        for ps in (wl.get("spec") or {}).get("podSets") or ():
            a = assigned.get(ps.get("name"), {})
            gpus += int(a.get("count", ps.get("count", 1))) * _gpus_per_pod(ps.get("template") or {})
            nodes += _nodes(a)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"workload {name}: {type(exc).__name__}: {exc}") from None
    labels = meta.get("labels") or {}
    state = next((t for t in ("Finished", "Evicted") if conds.get(t, {}).get("status") == "True"), "Admitted")
    queue = admission.get("clusterQueue", "?")
    partition, team = (owners or {}).get(queue, (queue, None))
    return JobUsage(job_id=name, name=meta.get("name", "?"),
                    team=team or labels.get(TEAM_LABEL) or meta.get("namespace", "?"),
                    partition=partition, gpus=gpus, start=start,
                    end=end, state=state, nodes=tuple(dict.fromkeys(nodes)))


def usages(source: WorkloadSource, owners: Owners | None = None) -> tuple[list[JobUsage], list[str]]:
    """Admitted workloads' usage and the reasons some that held quota could not be counted."""
    jobs: list[JobUsage] = []
    skipped: list[str] = []
    for wl in source.workloads():
        u = to_usage(wl, owners)
        if isinstance(u, JobUsage):
            jobs.append(u)
        elif u is not None:
            skipped.append(u)
    return jobs, skipped


class KubernetesWorkloads:
    """The adapter: Workloads listed through the kubernetes client, paginated, as plain JSON
    (`_preload_content=False`: the client's model classes do not know Kueue's kinds)."""

    PAGE = 500

    def __init__(self, api_client: Any, version: str) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.version = version

    def workloads(self) -> Iterator[Mapping[str, Any]]:
        import json

        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.PAGE, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            try:
                resp = self.custom.list_cluster_custom_object(KUEUE_GROUP, self.version, WORKLOADS, **kwargs)
                page = json.loads(resp.data or b"{}")
            except Exception as exc:  # ApiException, urllib3 and socket errors, a body that is not JSON
                status = getattr(exc, "status", None)
                raise KueueError(f"Kueue Workloads could not be listed ({type(exc).__name__}"
                                 + (f" {status}" if status else "") + f": {getattr(exc, 'reason', None) or exc})") from None
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
