"""Apply a stack's Slurm access (cluster, partition and team QOS, accounts, users) to slurmdbd, idempotently.

Why read first: `sacctmgr -i add` of something that exists fails or changes nothing, and a QOS
whose limit was edited must be modified, not re-added; so the adapter reads what slurmdbd holds
(`sacctmgr -n -P show`), the pure `gpufleet.plan.access.access_changes` says what is missing, and
only that runs. A second apply runs nothing. Afterwards `scontrol reconfigure` makes slurmctld
take partition QOS it could not resolve at start.
"""

from __future__ import annotations

from gpufleet.plan.access import ExistingAccess, PartitionQuota, SlurmAccess, access_changes, slurm_access
from gpufleet.plan.model import ClusterPlan
from gpufleet.pool.slurm.cli import SlurmCli
from gpufleet.spec import ClusterSpec


def partition_quotas(plan: ClusterPlan) -> list[PartitionQuota]:
    """Each partition's GPU quota: its quota in units, else all its units."""
    t = plan.topology
    return [PartitionQuota(p.name, (p.units if p.quota_units is None else p.quota_units) * t.unit_gpus,
                           capacity_gpus=p.units * t.unit_gpus)
            for p in plan.partitions if p.blocks]


def desired_access(spec: ClusterSpec, plan: ClusterPlan) -> SlurmAccess:
    return slurm_access(spec.ops.tenants, partition_quotas(plan), spec.cluster.name,
                        preemption=spec.pool.preemption != "off")


def parse_existing(clusters: str, qos: str, assocs: str) -> ExistingAccess:
    """From `sacctmgr -n -P show cluster format=cluster`, `show qos format=name,grptres,priority,preempt`
    (the last two may be absent) and `show assoc format=account,user,qos,defaultqos` (one cluster's)."""
    names = frozenset(ln.strip() for ln in clusters.splitlines() if ln.strip())
    limits = {}
    preempt: dict[str, tuple[int, frozenset[str]]] = {}
    for ln in qos.splitlines():
        if "|" in ln:
            cols = ln.split("|")
            limits[cols[0]] = cols[1]
            if len(cols) >= 4:
                preempt[cols[0]] = (int(cols[2] or 0), frozenset(x for x in cols[3].split(",") if x))
    accounts: dict[str, tuple[frozenset[str], str]] = {}
    users = set()
    for ln in assocs.splitlines():
        parts = ln.split("|")
        if len(parts) < 4:
            continue
        account, user, q, default = parts[:4]
        if user:
            users.add((user, account))
        else:
            accounts[account] = (frozenset(x for x in q.split(",") if x), default)
    return ExistingAccess(clusters=names, qos=limits, accounts=accounts, users=frozenset(users), qos_preempt=preempt)


def read_existing(cli: SlurmCli, cluster: str) -> ExistingAccess:
    show = ["sacctmgr", "-n", "-P", "show"]
    return parse_existing(cli.run([*show, "cluster", "format=cluster"]),
                          cli.run([*show, "qos", "format=name,grptres,priority,preempt"]),
                          cli.run([*show, "assoc", f"cluster={cluster}", "format=account,user,qos,defaultqos"]))


def apply_access(cli: SlurmCli, want: SlurmAccess, *, reconfigure: bool = True) -> list[list[str]]:
    """Run what slurmdbd lacks of `want`; return the commands that ran (empty: nothing to do)."""
    changes = access_changes(want, read_existing(cli, want.cluster))
    for argv in changes:
        cli.run(argv)
    if changes and reconfigure:
        cli.run(["scontrol", "reconfigure"])
    return changes
