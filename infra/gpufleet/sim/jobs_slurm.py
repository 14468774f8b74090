"""The job stream as real Slurm jobs on a simulated stack's local Slurm (`local-slurm`), so `gpufleet
cost` reads real `sacct` accounting there.

Why short real jobs and not the stream's modelled hours: slurmdbd records what ran. The stream
(`gpufleet.sim.jobs.stream`) says which jobs are running on the admitted units right now (one job
over a partition's units, one job per unit, or prefill/decode pools, with their teams); each one
becomes one `sbatch` of its shape (partition, team account, whole units through
`pool.slurm.conf.unit_request_args`) whose `srun` holds every node it got for
`gpufleet:simulator.slurmJobSeconds`. Placement, QOS limits and accounting are Slurm's own.

Teams: a stack's tenants are Slurm accounts already (`pool access apply`); without tenants the
stream's default teams get an account each (and the submitting user an association), as a
site's teams would have, so the per-team report has real accounts to read.

`plan_submissions` and `argv` are pure; `start` runs them through the pool's `SlurmCli`.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from gpufleet.errors import PoolError
from gpufleet.plan.model import ClusterPlan
from gpufleet.pool.slurm.conf import TopologyKind, unit_request_args
from gpufleet.sim.jobs import Unit, stream


@dataclass(frozen=True)
class Submission:
    name: str
    partition: str
    account: str
    units: int  # whole units of the partition (the stream's job shape, fitted to Slurm's placement)


def fit_units(plan: ClusterPlan, partition: str, units: int) -> int:
    """The units one job can ask for: at most the partition's quota, and past one block whole blocks
    only (a unit never straddles two blocks, `unit_request_args`)."""
    part = next(p for p in plan.partitions if p.name == partition)
    if part.quota_units is not None:
        units = min(units, part.quota_units)
    per_block = plan.topology.units_per_block
    if units > per_block:
        units = units // per_block * per_block
    return max(1, units)


def plan_submissions(plan: ClusterPlan, admitted: Iterable[str], now: float, *, seed: int,
                     tenants: Sequence[tuple[str, Sequence[str]]] = ()) -> list[Submission]:
    """The jobs the stream runs right now on the units whose every node is admitted (pure)."""
    admitted = set(admitted)
    units = [Unit(str(u.id), u.partition or "-", tuple(plan.slot(i).name for i in u.nodes), len(u.gpus))
             for u in plan.units if u.partition]
    spans = {s: [(now - 1.0, float("inf"))] for s in admitted}
    running = [j for j in stream(units, spans, now, seed=seed, tenants=tenants) if j.end is None]
    unit_gpus = plan.topology.unit_gpus
    return [Submission(j.name, j.partition, j.team, fit_units(plan, j.partition, max(1, j.gpus // unit_gpus)))
            for j in running]


def argv(s: Submission, unit_args: Sequence[str], seconds: int) -> list[str]:
    """`sbatch` for one job: its units' request, its team's account, a wall limit, and one `srun`
    task per node that holds the allocation for `seconds`."""
    return ["sbatch", "--parsable", "-o", "/dev/null", f"--job-name={s.name}", f"--account={s.account}",
            *unit_args, f"--time={max(1, (seconds + 59) // 60 + 1)}",
            "--wrap", f"srun --ntasks-per-node=1 /bin/sh -c 'hostname >/dev/null; sleep {seconds}'"]


def account_commands(existing: set[tuple[str, str]], teams: Iterable[str], user: str,
                     cluster: str) -> list[list[str]]:
    """sacctmgr commands giving each team an account with `user` in it (none when present)."""
    cmds: list[list[str]] = []
    have_accounts = {a for a, _ in existing}
    for team in sorted(set(teams)):
        if team not in have_accounts:
            cmds.append(["sacctmgr", "-i", "add", "account", team, f"Cluster={cluster}",
                         f"Description=gpufleet simulated team {team}"])
        if (team, user) not in existing:
            cmds.append(["sacctmgr", "-i", "add", "user", user, f"Account={team}", f"Cluster={cluster}"])
    return cmds


def associations(cli: Any) -> set[tuple[str, str]]:
    """(account, user) pairs slurmdbd holds (user '' for the account's own row)."""
    out = cli.run(["sacctmgr", "-n", "-P", "show", "assoc", "format=account,user"])
    return {(a.strip(), u.strip()) for a, _, u in (ln.partition("|") for ln in out.splitlines()) if a.strip()}


def start(cli: Any, plan: ClusterPlan, admitted: Iterable[str], now: float, *, seed: int, seconds: int,
          kind: TopologyKind, cluster: str, tenants: Sequence[tuple[str, Sequence[str]]] = ()) -> list[str]:
    """Submit the stream's running jobs; their Slurm job ids. A refused submission is a PoolError
    naming the job and Slurm's words."""
    subs = plan_submissions(plan, admitted, now, seed=seed, tenants=tenants)
    if not subs:
        return []
    if not tenants:  # the default teams are no Slurm accounts yet
        user = getpass.getuser()
        for cmd in account_commands(associations(cli), (s.account for s in subs), user, cluster):
            cli.run(cmd)
    ids = []
    for s in subs:
        try:
            out = cli.run(argv(s, unit_request_args(plan, s.partition, s.units, kind), seconds))
        except PoolError as exc:
            raise PoolError(f"sbatch of the simulated job {s.name} ({s.units} unit(s) of {s.partition}, account "
                            f"{s.account}) was refused: {exc}") from None
        ids.append(out.strip().split(";")[0])
    return ids


def after_rollout(spec: Any, plan: ClusterPlan, project: Any, stack: str, now: float) -> str | None:
    """What a rollout of a simulated stack on its local Slurm ends with: the stream's running jobs
    submitted on the admitted units (`gpufleet:simulator.slurmJobSeconds` > 0). The line to print,
    or None when the stack runs no stream there."""
    seconds = spec.simulator.slurm_job_seconds if spec.simulator is not None else 0
    if not (spec.simulated and spec.pool.type == "slurm" and seconds > 0):
        return None
    from gpufleet.pool.factory import local_slurm_root
    from gpufleet.pool.protocol import NodeState
    from gpufleet.pool.slurm.adapter import SlurmPool
    from gpufleet.pool.slurm.conf import topology_kind
    from gpufleet.pool.slurm.local import LocalSlurm, slurm_version

    local = LocalSlurm(local_slurm_root(project, stack))
    cli = local.cli(timeout_s=60)
    pool = SlurmPool(local.cli(), version=slurm_version(), set_node_addresses=False)
    admitted = [n.slot for n in pool.state().by_state(NodeState.ADMITTED)]
    ids = start(cli, plan, admitted, now, seed=spec.simulator.seed, seconds=seconds,
                kind=topology_kind(slurm_version()), cluster=spec.cluster.name,
                tenants=[(t.name, t.partitions) for t in spec.ops.tenants])
    return (f"simulated job stream: {len(ids)} Slurm job(s) on {len(admitted)} admitted node(s), {seconds} s each "
            f"(squeue, then sacct and `gpufleet cost -s {stack}`)")
