"""Which Pool adapter a stack gets: one decision, shared by `gpufleet pool` and the rollout.

- `pool.type: sim` -> the simulator's file pool under the stack's state dir.
- `pool.type: slurm` on a simulated stack (`local-slurm`) -> the real local Slurm that
  `gpufleet pool up` started under the stack's state dir (its own SLURM_CONF).
- `pool.type: slurm` on a real stack -> the Slurm adapter with the system's SLURM_CONF (run where
  the Slurm client is configured: the controller, a login node, a CI runner with access).
- `pool.type: kubernetes` -> the Kubernetes adapter (imported only then: it needs the
  `kubernetes` client and a kubeconfig).
"""

from __future__ import annotations

from pathlib import Path

from infra.errors import PoolError
from infra.plan.model import ClusterPlan
from infra.pool.protocol import Launcher, Pool
from infra.project import Project
from infra.spec import ClusterSpec

SLURM_DIR = "slurm"


def local_slurm_root(project: Project, stack: str) -> Path:
    return project.state_dir(stack) / SLURM_DIR


def pool_for(spec: ClusterSpec, project: Project, stack: str, *, launcher: Launcher | None = None,
             plan: ClusterPlan | None = None) -> Pool:
    """The stack's pool. `launcher` replaces the adapter's own (the simulator's fabric model)."""
    if spec.pool.type == "sim":
        from infra.plan import build_plan
        from infra.pool.sim import SimPool

        plan = plan or build_plan(spec)
        return SimPool(project.state_dir(stack) / "pool.json", launcher,
                       failures_before_blacklist=spec.rollout.failures_before_blacklist,
                       slots=[n.name for n in plan.nodes], partitions=[p.name for p in plan.partitions])
    if spec.pool.type == "slurm":
        from infra.pool.slurm.adapter import SlurmPool

        if spec.simulated:
            from infra.pool.slurm.local import LocalSlurm, slurm_version

            local = LocalSlurm(local_slurm_root(project, stack))
            if not local.running():
                raise PoolError(f"the local Slurm of stack {stack!r} is not running; start it with "
                                f"`gpufleet pool up -s {stack}`")
            return SlurmPool(local.cli(), version=slurm_version(), set_node_addresses=False,
                             failures_before_blacklist=spec.rollout.failures_before_blacklist, launcher=launcher)
        from infra.pool.slurm.cli import SlurmCli

        return SlurmPool(SlurmCli(), version=target_slurm_version(spec, project),
                         failures_before_blacklist=spec.rollout.failures_before_blacklist, launcher=launcher)
    if spec.pool.type == "kubernetes":
        try:
            from infra.pool.kubernetes import adapter as kubernetes_adapter
            make = kubernetes_adapter.pool_for
        except (ImportError, AttributeError) as exc:
            raise PoolError(f"the Kubernetes pool adapter is not available in this installation ({exc})") from None
        return make(spec, project, stack, launcher=launcher, plan=plan)
    raise PoolError(f"no pool adapter for pool.type {spec.pool.type!r}")


def target_slurm_version(spec: ClusterSpec, project: Project | None = None) -> str:
    """The Slurm the nodes run: `pool.slurmVersion`, else the BOM's pin for the stack's OS."""
    if spec.pool.slurm_version:
        return spec.pool.slurm_version
    from infra.bom import load_bom, resolve_bom_path

    return load_bom(resolve_bom_path(spec, project)).for_os(spec.image.os).slurm
