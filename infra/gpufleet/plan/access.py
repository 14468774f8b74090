"""Per-team access to the partitions on Slurm, from `gpufleet:ops.tenants`: pure documents, nothing applied.

Kubernetes access is the pool's own layout (`gpufleet.pool.kubernetes.queues`: a namespace, LocalQueue
and ClusterQueue per team and partition, `team_access` RBAC there, `submission_policy`), which
`gpufleet ops access` writes out for a Kubernetes stack.

Slurm: an account per team with its members, a QOS per (team, partition) whose GrpTRES caps the
team at the partition's quota in GPUs, per partition the AllowAccounts list (a slurm.conf
partition option), and per partition a partition QOS (`part-<partition>`, slurm.conf `QOS=`) whose
GrpTRES is the partition's quota for every account's jobs together: a team's job on debug runs
under debug's limits whatever QOS it carries, and AllowQos lets only that team's debug QOS (and
root's `normal`) in. `SlurmAccess` is the whole desired state; `access_changes` is what an
existing slurmdbd lacks of it, so applying twice changes nothing the second time. The commands are `sacctmgr -i` argv lists: the cluster first, then (once
slurmctld has registered with `AccountingStorageTRES=gres/gpu`, which creates the gres/gpu TRES
the QOS limits name) the rest. Slurm queues a job that breaks AllowAccounts unless
`EnforcePartLimits=ALL`, and lets root past it (tests/ops/test_slurm_accounting.py shows both).

Whatever `pool.preemption` says, the patrol's holds (`PATROL_QOS`, its own account, every partition's
AllowAccounts and AllowQos) are the lowest: every team QOS and root's `normal` preempt them, so the
idle-node recheck never keeps a node from a real job (`gpufleet.pool.slurm.patrol_hold`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from gpufleet.errors import ConfigError
from gpufleet.spec import Tenant


@dataclass(frozen=True)
class PartitionQuota:
    name: str
    gpus: int
    capacity_gpus: int = 0  # all the partition's units in GPUs (0: unknown, never below the quota)


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


def qos_name(team: str, partition: str) -> str:
    return f"{team}-{partition}"


PARTITION_QOS_PREFIX = "part-"
ROOT_QOS = "normal"  # slurmdbd's own QOS, root's default


def partition_qos_name(partition: str) -> str:
    return f"{PARTITION_QOS_PREFIX}{partition}"


# The patrol's idle-node recheck holds its nodes with jobs of this QOS (and account): Priority 0, in
# every other QOS's Preempt= list, so any real job that needs a held node preempts the hold (Slurm
# cancels it: the patrol submits it --no-requeue), and the patrol counts the node as yielded
PATROL_QOS = "gpufleet-patrol"
PATROL_ACCOUNT = "gpufleet-patrol"
PATROL_USERS = ("root",)  # who runs the pool's commands on the head node (scontrol update needs it)


@dataclass(frozen=True)
class Qos:
    name: str
    gpus: int | None  # GrpTRES=gres/gpu=; None: no GPU limit of its own
    description: str
    priority: int = 0  # the team's (ops.tenants[].priority); the QOS Priority= preempt/qos compares
    preempt: tuple[str, ...] = ()  # the QOS whose running jobs this one's may preempt (Preempt=)


@dataclass(frozen=True)
class Account:
    name: str
    qos: tuple[str, ...]
    default_qos: str
    description: str


@dataclass(frozen=True)
class SlurmAccess:
    """What slurmdbd must hold for a stack: the cluster, every QOS, the teams' accounts and users."""

    cluster: str
    qos: tuple[Qos, ...]
    accounts: tuple[Account, ...]
    users: tuple[tuple[str, str], ...]  # (user, account)


@dataclass(frozen=True)
class ExistingAccess:
    """What slurmdbd holds now (read with sacctmgr by the pool's adapter)."""

    clusters: frozenset[str]
    qos: dict[str, str]  # name -> GrpTRES as sacctmgr prints it ("gres/gpu=8" or "")
    accounts: dict[str, tuple[frozenset[str], str]]  # account -> (its QOS, its default QOS)
    users: frozenset[tuple[str, str]]
    # name -> (Priority, Preempt) as sacctmgr prints them; a QOS missing here has neither (0, none)
    qos_preempt: dict[str, tuple[int, frozenset[str]]] = field(default_factory=dict)


def preempt_lists(tenants: Sequence[Tenant], partition: str) -> dict[str, tuple[str, ...]]:
    """Team QOS on `partition` -> the QOS of the teams there with a lower priority (preempt/qos only
    compares a job's own QOS, so a team's debug job preempts only lower teams' debug jobs)."""
    there = [t for t in tenants if partition in t.partitions]
    return {qos_name(t.name, partition): tuple(sorted(qos_name(o.name, partition) for o in there
                                                      if o.priority < t.priority))
            for t in there}


def slurm_access(tenants: Sequence[Tenant], quotas: Sequence[PartitionQuota], cluster: str,
                 preemption: bool = False) -> SlurmAccess:
    """`preemption`: the stack's pool.preemption is not off, so team QOS carry Priority and Preempt."""
    by_name = {q.name: q for q in quotas}
    check_tenants(tenants, list(by_name))
    # Slurm preempts for nodes, never for a QOS limit: with preemption, a partition QOS capped at the
    # partition's whole capacity (nodes cap it already) would turn every wait for nodes into a wait on
    # the QOS (QOSGrpGRES), and the higher team's job would wait instead of preempting
    # The patrol's holds are preempted whatever pool.preemption says, so the same holds without it
    qos = [Qos(partition_qos_name(q.name), None if 0 < q.capacity_gpus <= q.gpus else q.gpus,
               f"partition {q.name}: every account's jobs together") for q in quotas]
    qos += [Qos(PATROL_QOS, None, "gpufleet patrol: idle-node rechecks, preempted by every other job"),
            Qos(ROOT_QOS, None, "", preempt=(PATROL_QOS,))]
    accounts = [Account(PATROL_ACCOUNT, (PATROL_QOS,), PATROL_QOS, "gpufleet patrol holds")]
    users = [(u, PATROL_ACCOUNT) for u in PATROL_USERS]
    preempts = {n: lists for p in by_name for n, lists in preempt_lists(tenants, p).items()} if preemption else {}
    for t in tenants:
        names = [qos_name(t.name, p) for p in t.partitions]
        qos += [Qos(n, by_name[p].gpus, f"team {t.name} on partition {p}",
                    priority=t.priority if preemption else 0, preempt=tuple(sorted((*preempts.get(n, ()), PATROL_QOS))))
                for p, n in zip(t.partitions, names)]
        accounts.append(Account(t.name, tuple(names), names[0], f"gpufleet team {t.name}"))
        users += [(u, t.name) for u in t.members]
    return SlurmAccess(cluster, tuple(qos), tuple(accounts), tuple(users))


def partition_allow_qos(tenants: Sequence[Tenant], partitions: Sequence[str]) -> dict[str, str]:
    """slurm.conf `AllowQos=` per partition: root's QOS and the QOS of the teams that use it."""
    check_tenants(tenants, partitions)
    return {p: ",".join([ROOT_QOS, PATROL_QOS] + sorted(qos_name(t.name, p) for t in tenants if p in t.partitions))
            for p in partitions}


def default_qos(tenants: Sequence[Tenant]) -> dict[tuple[str, str], str]:
    """(account, partition) -> the QOS a job there gets when it names none (job_submit.lua sets it)."""
    return {(t.name, p): qos_name(t.name, p) for t in tenants for p in t.partitions}


def access_changes(want: SlurmAccess, have: ExistingAccess) -> list[list[str]]:
    """The sacctmgr commands that bring `have` to `want`; none when it is there already."""
    cmds: list[list[str]] = []
    if want.cluster not in have.clusters:
        cmds.append(["sacctmgr", "-i", "add", "cluster", want.cluster])
    later: list[list[str]] = []  # Preempt= names other QOS: set once every QOS exists
    for q in want.qos:
        limit = f"GrpTRES=gres/gpu={q.gpus}"
        prio, preempt = have.qos_preempt.get(q.name, (0, frozenset()))
        if q.name == ROOT_QOS and q.name not in have.qos:
            pass  # slurmdbd's own, always there: only its Preempt= is ours
        elif q.name not in have.qos:
            cmds.append(["sacctmgr", "-i", "add", "qos", q.name, *([limit] if q.gpus is not None else []),
                         f"Description={q.description}", *([f"Priority={q.priority}"] if q.priority else [])])
            prio = q.priority
        elif q.gpus is None:
            if have.qos.get(q.name):  # -1 clears a limit
                cmds.append(["sacctmgr", "-i", "modify", "qos", "where", f"name={q.name}", "set", "GrpTRES=gres/gpu=-1"])
        elif have.qos[q.name] != limit.split("=", 1)[1]:
            cmds.append(["sacctmgr", "-i", "modify", "qos", "where", f"name={q.name}", "set", limit])
        if prio != q.priority:
            cmds.append(["sacctmgr", "-i", "modify", "qos", "where", f"name={q.name}", "set", f"Priority={q.priority}"])
        if preempt != frozenset(q.preempt):  # an empty list is refused ("empty qos list"): -= clears
            value = f"Preempt={','.join(q.preempt)}" if q.preempt else f"Preempt-={','.join(sorted(preempt))}"
            later.append(["sacctmgr", "-i", "modify", "qos", "where", f"name={q.name}", "set", value])
    cmds += later
    for a in want.accounts:
        if a.name not in have.accounts:
            cmds.append(["sacctmgr", "-i", "add", "account", a.name, f"Cluster={want.cluster}",
                         f"Description={a.description}", f"QOS={','.join(a.qos)}", f"DefaultQOS={a.default_qos}"])
        elif have.accounts[a.name] != (frozenset(a.qos), a.default_qos):
            cmds.append(["sacctmgr", "-i", "modify", "account", "where", f"name={a.name}", f"cluster={want.cluster}",
                         "set", f"QOS={','.join(a.qos)}", f"DefaultQOS={a.default_qos}"])
    for user, account in want.users:
        if (user, account) not in have.users:
            cmds.append(["sacctmgr", "-i", "add", "user", user, f"Account={account}", f"Cluster={want.cluster}"])
    return cmds


def sacctmgr_commands(tenants: Sequence[Tenant], quotas: Sequence[PartitionQuota], cluster: str,
                      preemption: bool = False) -> list[list[str]]:
    """The whole script for an empty slurmdbd: the cluster first (slurmctld registers with it), the
    partition QOS, then per team its QOS capped at the partition's GPU quota, account and users."""
    nothing = ExistingAccess(clusters=frozenset(), qos={}, accounts={}, users=frozenset())
    return access_changes(slurm_access(tenants, quotas, cluster, preemption), nothing)


def allow_accounts(tenants: Sequence[Tenant], partitions: Sequence[str]) -> dict[str, str]:
    """slurm.conf `AllowAccounts=` per partition ("root" keeps the operators' own account in; a
    partition no team names is left to root only)."""
    check_tenants(tenants, partitions)
    return {p: ",".join(["root", PATROL_ACCOUNT] + sorted(t.name for t in tenants if p in t.partitions))
            for p in partitions}
