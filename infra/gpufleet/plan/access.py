"""Per-team access to the partitions, from `gpufleet:ops.tenants`: pure documents, nothing applied.

Kubernetes: each partition is a namespace with one LocalQueue of the same name (the pool's
objects, `gpufleet.pool.kubernetes.manifests`). A team gets a Role and RoleBinding (group
`gpufleet:<team>`) in each of its partitions' namespaces: it may run Jobs and JobSets and read
its pods and workloads, never create queues. A ValidatingAdmissionPolicy refuses a Job or JobSet
in a partition namespace whose `kueue.x-k8s.io/queue-name` label is not that namespace's
LocalQueue, so submission goes only through it (Kueue then holds it to the ClusterQueue's quota).

Slurm: an account per team with its members, a QOS per (team, partition) whose GrpTRES caps the
team at the partition's quota in GPUs, and per partition the AllowAccounts list (a slurm.conf
partition option). The commands are `sacctmgr -i` argv lists: the cluster first, then (once
slurmctld has registered with `AccountingStorageTRES=gres/gpu`, which creates the gres/gpu TRES
the QOS limits name) the rest. Slurm queues a job that breaks AllowAccounts unless
`EnforcePartLimits=ALL`, and lets root past it (tests/ops/test_slurm_accounting.py shows both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from gpufleet.errors import ConfigError
from gpufleet.spec import Tenant

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POLICY = "gpufleet-submit-through-local-queue"
PARTITION_NS_LABEL = "gpufleet.io/partition-namespace"


@dataclass(frozen=True)
class PartitionQuota:
    name: str
    gpus: int


def check_tenants(tenants: Sequence[Tenant], partitions: Sequence[str]) -> None:
    known = set(partitions)
    seen: set[str] = set()
    for i, t in enumerate(tenants):
        if t.name in seen:
            raise ConfigError(f"tenant {t.name!r} appears twice", field=f"gpufleet:ops.tenants[{i}].name",
                              expected="one entry per team")
        seen.add(t.name)
        for p in t.partitions:
            if p not in known:
                raise ConfigError(f"tenant {t.name!r} names partition {p!r}, which the stack does not have",
                                  field=f"gpufleet:ops.tenants[{i}].partitions",
                                  expected="one of " + ", ".join(sorted(known)))


def group(team: str) -> str:
    return f"gpufleet:{team}"


def team_role(team: str, namespace: str) -> dict[str, Any]:
    rules = [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete", "get", "list", "watch"]},
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["create", "delete", "get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues", "workloads"], "verbs": ["get", "list", "watch"]},
    ]
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": f"gpufleet-team-{team}", "namespace": namespace}, "rules": rules}


def team_binding(team: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"gpufleet-team-{team}", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"gpufleet-team-{team}"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group(team)}]}


def queue_policy() -> list[dict[str, Any]]:
    """The policy and its binding to every partition namespace (labelled by `kubernetes_objects`)."""
    expression = (f"has(object.metadata.labels) && '{QUEUE_LABEL}' in object.metadata.labels && "
                  f"object.metadata.labels['{QUEUE_LABEL}'] == namespaceObject.metadata.name")
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": POLICY},
              "spec": {"failurePolicy": "Fail",
                       "matchConstraints": {"resourceRules": [
                           {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                            "resources": ["jobs"]},
                           {"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                            "resources": ["jobsets"]}]},
                       "validations": [{"expression": expression,
                                        "message": "submit through this namespace's LocalQueue: label "
                                                   f"{QUEUE_LABEL}=<the namespace's name>"}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": POLICY},
               "spec": {"policyName": POLICY, "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": {"matchLabels": {PARTITION_NS_LABEL: "true"}}}}}
    return [policy, binding]


def kubernetes_objects(tenants: Sequence[Tenant], partitions: Sequence[str]) -> list[dict[str, Any]]:
    """Roles, bindings, the queue policy, and the partition-namespace label the binding selects."""
    check_tenants(tenants, partitions)
    labels = [{"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": p, "labels": {PARTITION_NS_LABEL: "true"}}} for p in partitions]
    out = labels + queue_policy()
    for t in tenants:
        for p in t.partitions:
            out += [team_role(t.name, p), team_binding(t.name, p)]
    return out


def qos_name(team: str, partition: str) -> str:
    return f"{team}-{partition}"


def sacctmgr_commands(tenants: Sequence[Tenant], quotas: Sequence[PartitionQuota], cluster: str) -> list[list[str]]:
    """Accounts, users, and per (team, partition) a QOS capped at the partition's GPU quota."""
    by_name = {q.name: q for q in quotas}
    check_tenants(tenants, list(by_name))
    cmds = [["sacctmgr", "-i", "add", "cluster", cluster]]
    for t in tenants:
        qos = [qos_name(t.name, p) for p in t.partitions]
        for p, name in zip(t.partitions, qos):
            cmds.append(["sacctmgr", "-i", "add", "qos", name, f"GrpTRES=gres/gpu={by_name[p].gpus}",
                         f"Description=team {t.name} on partition {p}"])
        cmds.append(["sacctmgr", "-i", "add", "account", t.name, f"Cluster={cluster}",
                     f"Description=gpufleet team {t.name}", f"QOS={','.join(qos)}", f"DefaultQOS={qos[0]}"])
        cmds += [["sacctmgr", "-i", "add", "user", u, f"Account={t.name}", f"Cluster={cluster}"] for u in t.members]
    return cmds


def allow_accounts(tenants: Sequence[Tenant], partitions: Sequence[str]) -> dict[str, str]:
    """slurm.conf `AllowAccounts=` per partition ("root" keeps the operators' own account in; a
    partition no team names is left to root only)."""
    check_tenants(tenants, partitions)
    return {p: ",".join(["root"] + sorted(t.name for t in tenants if p in t.partitions)) for p in partitions}
