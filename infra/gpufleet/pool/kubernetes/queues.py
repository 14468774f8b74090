"""Kueue's queues for the partitions and the teams in them: pure layout and objects, no Pulumi, no I/O.

Why a ClusterQueue (and a namespace with its one LocalQueue) per team, not fair-sharing weights:
a team's share must be a guarantee, and Kueue guarantees only nominal quota (fair-sharing weights
order admission under contention and never reserve a GPU); the teams of a partition then sit in
the partition's cohort, so a team's idle quota is lent to its neighbours and taken back by
preemption (`reclaimWithinCohort: Any`). A namespace per team is what makes RBAC mean something:
RBAC cannot tell one Job from another by label, so a team that shares a namespace can delete its
neighbours' Jobs; in its own namespace, with a Role only there, it cannot.

Layout per partition `P` (its quota is `quotaUnits`, else its allocated units):
- the operators' queue: namespace, LocalQueue and ClusterQueue `P`, holding what the teams leave;
- per team `T` naming `P` in `gpufleet:ops.tenants`: namespace, LocalQueue and ClusterQueue `P-T`
  with the team's `quotaUnits[P]` (else an even split, in whole units, of what explicit shares leave);
- a `Cohort` `gpufleet-P` over them; when the stack allows borrowing across partitions
  (`kueueCohortBorrowing`) its parent is the stack's cohort and every ClusterQueue also lists the
  other partitions' flavors at zero quota, which is how Kueue lends one partition's idle blocks to
  another; without it a ClusterQueue lists only its own partition's flavor, so no workload ever
  lands on another partition's blocks.
- every queue's namespace carries the labels the submission policy reads: the priority class to
  name (`gpufleet-P`, a WorkloadPriorityClass with the partition's priority) and, where the stack
  caps run time (interactive partitions), the largest `kueue.x-k8s.io/max-exec-time-seconds`.
- with `pool.preemption`, a team with a priority (`ops.tenants[].priority`) names its own class
  `gpufleet-P-T` (the partition's priority plus the team's), and its ClusterQueue may preempt
  lower-priority workloads of the cohort when it borrows (`borrowWithinCohort: LowerPriority`).
  Kueue never preempts a workload inside its own queue's nominal quota for another queue's higher
  priority: a team's share stays a guarantee, priority decides over what is lent. Slurm, which has
  no guaranteed shares, preempts the lower team's job outright (`gpufleet.plan.access.preempt_lists`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from gpufleet.catalog import InstanceType
from gpufleet.errors import ConfigError
from gpufleet.plan.model import ClusterPlan, PartitionAllocation
from gpufleet.pool.kubernetes.manifests import (EFA, GPU, MANAGED_BY, RESERVED_NAMESPACES, partition_flavor_name,
                                                priority_class_name)
from gpufleet.pool.kubernetes.versions import KUEUE_API_VERSION
from gpufleet.spec import ClusterSpec, PartitionMode, Tenant

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
KUEUE_MANAGED_LABEL = "gpufleet.io/kueue-managed"  # Kueue's managedJobsNamespaceSelector
PARTITION_NAMESPACE_LABEL = "gpufleet.io/partition"
TEAM_NAMESPACE_LABEL = "gpufleet.io/team"
PRIORITY_NAMESPACE_LABEL = "gpufleet.io/priority-class"  # the class a Job here must name
MAX_EXEC_NAMESPACE_LABEL = "gpufleet.io/max-exec-time-seconds"  # the largest run time a Job here may ask
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
MAX_FLAVORS = 16  # a ClusterQueue's flavors per resource group (the CRD's maxItems)


@dataclass(frozen=True)
class TeamQueue:
    """One LocalQueue and its ClusterQueue: a team's in a partition, or the partition's operators' (team None)."""

    partition: str
    team: str | None
    units: int
    unit_gpus: int
    priority: int
    max_exec_seconds: int | None
    sku: InstanceType
    team_priority: int = 0  # ops.tenants[].priority, counted only with pool.preemption
    preemption: bool = False  # pool.preemption is not off

    @property
    def name(self) -> str:
        """The namespace, its LocalQueue and the ClusterQueue share this name."""
        return self.partition if self.team is None else f"{self.partition}-{self.team}"

    @property
    def namespace(self) -> str:
        return self.name

    @property
    def gpus(self) -> int:
        return self.units * self.unit_gpus

    @property
    def own_class(self) -> bool:
        """A team with a priority under preemption has its own priority class."""
        return self.preemption and self.team is not None and self.team_priority > 0

    @property
    def priority_class(self) -> str:
        return f"{priority_class_name(self.partition)}-{self.team}" if self.own_class else priority_class_name(self.partition)

    @property
    def class_value(self) -> int:
        return self.priority + (self.team_priority if self.own_class else 0)

    def resources(self) -> list[dict[str, Any]]:
        """The quota in GPUs and the node share of CPU, memory and EFA devices that goes with them."""
        per = self.gpus / self.sku.gpus
        return [{"name": "cpu", "nominalQuota": math.ceil(per * self.sku.vcpus)},
                {"name": "memory", "nominalQuota": f"{math.ceil(per * self.sku.memory_gib)}Gi"},
                {"name": GPU, "nominalQuota": self.gpus},
                {"name": EFA, "nominalQuota": math.ceil(per * self.sku.efa_interfaces)}]


def cohort_name(partition: str) -> str:
    return f"gpufleet-{partition}"


def stack_cohort_name(spec: ClusterSpec) -> str:
    return f"{spec.cluster.name}-gpus"


def max_exec_seconds(spec: ClusterSpec, partition: str, mode: str) -> int | None:
    """The stack's run-time cap for the partition, the same minutes Slurm's MaxTime takes
    (`pool.slurmMaxMinutes`, interactive partitions defaulting to `slurmInteractiveMaxMinutes`)."""
    minutes = spec.pool.slurm_max_minutes.get(partition)
    if minutes is None and mode == PartitionMode.INTERACTIVE.value:
        minutes = spec.pool.slurm_interactive_max_minutes
    return None if minutes is None else minutes * 60


def _team_units(alloc: PartitionAllocation, total: int, teams: Sequence[tuple[int, Tenant]]) -> dict[str, int]:
    explicit = {t.name: t.quota_units[alloc.name] for _, t in teams if alloc.name in t.quota_units}
    left = total - sum(explicit.values())
    if left < 0:
        where = next(i for i, t in teams if alloc.name in t.quota_units)
        raise ConfigError(f"the teams' quotaUnits in partition {alloc.name!r} add up to {sum(explicit.values())} "
                          f"units, more than its quota of {total}",
                          field=f"gpufleet:ops.tenants[{where}].quotaUnits",
                          expected=f"shares of {alloc.name} adding up to at most {total} units")
    even = [t.name for _, t in teams if t.name not in explicit]
    share = left // len(even) if even else 0
    return {**explicit, **dict.fromkeys(even, share)}


def queue_layout(spec: ClusterSpec, plan: ClusterPlan, sku: InstanceType) -> list[TeamQueue]:
    """Every queue of the pool, per partition the operators' queue first, then its teams' in stack order."""
    tenants = list(enumerate(spec.ops.tenants))
    known = {a.name for a in plan.partitions}
    for i, t in tenants:
        stray = [p for p in t.partitions if p not in known]
        if stray:
            raise ConfigError(f"tenant {t.name!r} names partition {stray[0]!r}, which the stack does not have",
                              field=f"gpufleet:ops.tenants[{i}].partitions", expected="one of " + ", ".join(sorted(known)))
    out: list[TeamQueue] = []
    for alloc in plan.partitions:
        if alloc.name in RESERVED_NAMESPACES:
            raise ConfigError(f"partition name {alloc.name!r} is a reserved Kubernetes namespace",
                              field="gpufleet:partitions",
                              expected="a name other than " + ", ".join(sorted(RESERVED_NAMESPACES)))
        total = alloc.quota_units if alloc.quota_units is not None else alloc.units
        teams = [(i, t) for i, t in tenants if alloc.name in t.partitions]
        units = _team_units(alloc, total, teams)

        def queue(team: Tenant | None, n: int, a: PartitionAllocation = alloc) -> TeamQueue:
            return TeamQueue(partition=a.name, team=None if team is None else team.name, units=n,
                             unit_gpus=plan.topology.unit_gpus, priority=a.priority,
                             max_exec_seconds=max_exec_seconds(spec, a.name, a.mode), sku=sku,
                             team_priority=0 if team is None else team.priority,
                             preemption=spec.pool.preemption != "off")
        out.append(queue(None, total - sum(units.values())))
        out += [queue(t, units[t.name]) for _, t in teams]
    names = [q.name for q in out] + [cohort_name(a.name) for a in plan.partitions]
    clash = sorted({n for n in names if names.count(n) > 1} | {q.name for q in out if len(q.name) > 63})
    if clash:
        raise ConfigError(f"partition and team names make the Kubernetes names {clash} twice or too long",
                          field="gpufleet:ops.tenants", expected="teams whose <partition>-<team> names are unique "
                          "(at most 63 characters) and differ from every partition and gpufleet-<partition>")
    _check_class_order(spec, out)
    if spec.pool.kueue_cohort_borrowing and len(plan.partitions) > MAX_FLAVORS:
        raise ConfigError(f"{len(plan.partitions)} partitions cannot borrow from each other: a ClusterQueue lists "
                          f"at most {MAX_FLAVORS} flavors", field="gpufleet:pool.kueueCohortBorrowing",
                          expected=f"false, or at most {MAX_FLAVORS} partitions")
    return out


def _check_class_order(spec: ClusterSpec, queues: Sequence[TeamQueue]) -> None:
    """Partitions that lend each other blocks are compared by class value: a team's priority may not
    lift its class to a higher partition's, or its workloads would preempt that partition's."""
    if not spec.pool.kueue_cohort_borrowing:
        return
    for q in queues:
        above = [o.priority for o in queues if o.priority > q.priority]
        if q.own_class and above and q.class_value >= min(above):
            i = next(i for i, t in enumerate(spec.ops.tenants) if t.name == q.team)
            raise ConfigError(f"team {q.team!r} at priority {q.team_priority} lifts its class on partition "
                              f"{q.partition!r} (priority {q.priority}) to {q.class_value}, at or past a "
                              f"higher partition's {min(above)}, which borrows from it",
                              field=f"gpufleet:ops.tenants[{i}].priority",
                              expected=f"below {min(above) - q.priority}, or kueueCohortBorrowing false")


PATROL_PRIORITY_CLASS = "gpufleet-patrol"  # the patrol's idle-node recheck: below every class here


def patrol_class_value(queues: Sequence[TeamQueue]) -> int:
    """One under the lowest partition or team class: any workload Kueue weighs against a patrol's
    outranks it (withinClusterQueue / borrowWithinCohort LowerPriority preempt it first)."""
    return min((q.class_value for q in queues), default=1) - 1


def priority_classes(queues: Sequence[TeamQueue]) -> list[dict[str, Any]]:
    """Each partition's class and, under preemption, each prioritised team's, once each; last the
    patrol's, the lowest (`PATROL_PRIORITY_CLASS`)."""
    out: dict[str, dict[str, Any]] = {}
    for q in queues:
        if q.priority_class not in out:
            who = f"team {q.team} on partition {q.partition} (priority {q.priority} + the team's {q.team_priority})" \
                if q.own_class else f"partition {q.partition} (gpufleet:partitions priority)"
            out[q.priority_class] = {"apiVersion": KUEUE_API_VERSION, "kind": "WorkloadPriorityClass",
                                     "metadata": {"name": q.priority_class, "labels": dict(MANAGED_BY)},
                                     "value": q.class_value, "description": f"gpufleet {who}"}
    if queues:
        out[PATROL_PRIORITY_CLASS] = {"apiVersion": KUEUE_API_VERSION, "kind": "WorkloadPriorityClass",
                                      "metadata": {"name": PATROL_PRIORITY_CLASS, "labels": dict(MANAGED_BY)},
                                      "value": patrol_class_value(queues),
                                      "description": "gpufleet patrol: idle-node rechecks, preempted by every workload"}
    return list(out.values())


def namespace(q: TeamQueue) -> dict[str, Any]:
    labels = {**MANAGED_BY, KUEUE_MANAGED_LABEL: "true", PARTITION_NAMESPACE_LABEL: q.partition,
              PRIORITY_NAMESPACE_LABEL: q.priority_class}
    if q.team is not None:
        labels[TEAM_NAMESPACE_LABEL] = q.team
    if q.max_exec_seconds is not None:
        labels[MAX_EXEC_NAMESPACE_LABEL] = str(q.max_exec_seconds)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": q.namespace, "labels": labels}}


def cohorts(partitions: Sequence[str], parent: str | None) -> list[dict[str, Any]]:
    """A cohort per partition, under the stack's cohort when partitions may borrow from each other."""
    out = []
    if parent is not None:
        out.append({"apiVersion": KUEUE_API_VERSION, "kind": "Cohort",
                    "metadata": {"name": parent, "labels": dict(MANAGED_BY)}, "spec": {}})
    for p in partitions:
        spec = {"parentName": parent} if parent is not None else {}
        out.append({"apiVersion": KUEUE_API_VERSION, "kind": "Cohort",
                    "metadata": {"name": cohort_name(p), "labels": dict(MANAGED_BY)}, "spec": spec})
    return out


def cluster_queue(q: TeamQueue, partitions: Sequence[str], borrow_across: bool) -> dict[str, Any]:
    """The queue's own partition's flavor with its quota first; with borrowing across partitions,
    every other partition's flavor at zero quota after it (Kueue tries flavors in order)."""
    own = q.resources()
    flavors = [{"name": partition_flavor_name(q.partition, q.sku.name), "resources": own}]
    if borrow_across:
        zero = [{**r, "nominalQuota": "0Gi" if r["name"] == "memory" else 0} for r in own]
        flavors += [{"name": partition_flavor_name(p, q.sku.name), "resources": zero}
                    for p in partitions if p != q.partition]
    preemption: dict[str, Any] = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    # a higher-priority partition (or, with pool.preemption, team) may take back lent blocks from lower borrowers
    if borrow_across or q.preemption:
        preemption["borrowWithinCohort"] = {"policy": "LowerPriority"}
    spec = {"cohortName": cohort_name(q.partition),
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: q.namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": [r["name"] for r in own], "flavors": flavors}],
            "preemption": preemption}
    return {"apiVersion": KUEUE_API_VERSION, "kind": "ClusterQueue",
            "metadata": {"name": q.name, "labels": dict(MANAGED_BY)}, "spec": spec}


def local_queue(q: TeamQueue) -> dict[str, Any]:
    return {"apiVersion": KUEUE_API_VERSION, "kind": "LocalQueue",
            "metadata": {"name": q.name, "namespace": q.namespace, "labels": dict(MANAGED_BY)},
            "spec": {"clusterQueue": q.name}}


def submission_labels(q: TeamQueue) -> dict[str, str]:
    """The labels a Job submitted to this queue carries (what the submission policy requires)."""
    labels = {QUEUE_LABEL: q.name, PRIORITY_LABEL: q.priority_class}
    if q.max_exec_seconds is not None:
        labels[MAX_EXEC_LABEL] = str(q.max_exec_seconds)
    return labels


def by_partition(queues: Sequence[TeamQueue]) -> Mapping[str, list[TeamQueue]]:
    out: dict[str, list[TeamQueue]] = {}
    for q in queues:
        out.setdefault(q.partition, []).append(q)
    return out
