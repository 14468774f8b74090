"""RBAC for the teams of `gpufleet:ops.tenants`: a Role and RoleBinding in each of the team's queue
namespaces (`queues.TeamQueue`, `<partition>-<team>`), for the group `gpufleet:<team>`.

Why only there and only these verbs: a team acts on the Jobs of its own queue and nobody else's
(the namespace holds exactly one LocalQueue, the team's), submits only the kinds Kueue manages
(Job, MPIJob: a bare Pod or a Deployment would run outside any quota, so neither may be created),
reads its pods, logs, events and its queue's Workloads, and changes no queue, namespace or policy.
The submission policy (`submission_policy`) then holds each Job to the namespace's LocalQueue.
"""

from __future__ import annotations

from typing import Any, Sequence

from gpufleet.pool.kubernetes.chart_values import KUEUE_FRAMEWORKS
from gpufleet.pool.kubernetes.manifests import MANAGED_BY
from gpufleet.pool.kubernetes.queues import TeamQueue
from gpufleet.pool.kubernetes.submission_policy import FRAMEWORK_RESOURCES

RBAC = "rbac.authorization.k8s.io"
JOB_VERBS = ["create", "delete", "get", "list", "watch", "update", "patch"]
READ_VERBS = ["get", "list", "watch"]


def team_group(team: str) -> str:
    """The Kubernetes group of a team's members (an EKS access entry or aws-auth mapping names it)."""
    return f"gpufleet:{team}"


def role_name(team: str) -> str:
    return f"gpufleet-team-{team}"


def team_role(team: str, namespace: str, frameworks: Sequence[str] = KUEUE_FRAMEWORKS) -> dict[str, Any]:
    jobs = [{"apiGroups": [group], "resources": [res], "verbs": list(JOB_VERBS)}
            for group, _, res in (FRAMEWORK_RESOURCES[f] for f in frameworks)]
    rules = [*jobs,
             {"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": list(READ_VERBS)},
             {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues", "workloads"], "verbs": list(READ_VERBS)}]
    return {"apiVersion": f"{RBAC}/v1", "kind": "Role",
            "metadata": {"name": role_name(team), "namespace": namespace, "labels": dict(MANAGED_BY)},
            "rules": rules}


def team_binding(team: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding",
            "metadata": {"name": role_name(team), "namespace": namespace, "labels": dict(MANAGED_BY)},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": role_name(team)},
            "subjects": [{"apiGroup": RBAC, "kind": "Group", "name": team_group(team)}]}


def team_access(queues: Sequence[TeamQueue]) -> list[dict[str, Any]]:
    """Role and binding per team queue (the operators' queues get none: cluster admins use them)."""
    out: list[dict[str, Any]] = []
    for q in queues:
        if q.team is not None:
            out += [team_role(q.team, q.namespace), team_binding(q.team, q.namespace)]
    return out
