"""Ending the running work on a pool's slots, for `destroy --cancel-jobs`, per pool kind.

Why only here: the Pool port itself never ends work (a Slurm drain waits for its jobs by design,
the upgrade evicts only through Kubernetes' disruption budgets); destroying the cluster is the one
operation where the person asked for the jobs to go.
"""

from __future__ import annotations

from typing import Sequence

from gpufleet.lifecycle.destroy_run import JobEnder
from gpufleet.pool.protocol import Evicting, Pool
from gpufleet.pool.slurm.conf import hostlist


class SlurmJobs:
    """`scancel --nodelist=HOSTLIST`: one call for every job running on the slots."""

    def __init__(self, cli) -> None:  # gpufleet.pool.slurm.cli.SlurmCli
        self.cli = cli

    def cancel(self, slots: Sequence[str]) -> None:
        if slots:
            self.cli.run(["scancel", f"--nodelist={hostlist(sorted(slots))}"], node=slots[0] if len(slots) == 1 else None)


class KubernetesJobs:
    """Evicts the GPU pods on the slots (the eviction API; a refused eviction is retried until the deadline)."""

    def __init__(self, pool: Evicting, deadline_s: float) -> None:
        self.pool = pool
        self.deadline_s = deadline_s

    def cancel(self, slots: Sequence[str]) -> None:
        self.pool.cordon(slots)
        self.pool.evict(slots, self.deadline_s)


def job_ender(pool: Pool | None, deadline_s: float) -> JobEnder | None:
    """The pool's way of ending work, or None when it has none."""
    if pool is None:
        return None
    from gpufleet.pool.sim import SimPool

    if isinstance(pool, SimPool):
        from gpufleet.lifecycle.sim_world import SimJobs

        return SimJobs(pool)
    if isinstance(pool, Evicting):
        return KubernetesJobs(pool, deadline_s)
    cli = getattr(pool, "cli", None)
    if pool.kind == "slurm" and cli is not None:
        return SlurmJobs(cli)
    return None
