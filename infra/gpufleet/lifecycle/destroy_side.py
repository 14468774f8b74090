"""What a destroy reads and the ports it acts through, for a simulated or a real stack.

Why one place: the command must read the whole world (and fail on an unreachable pool or backend)
before it shows the change set, and a test replaces this one function (`open_side`) to run the
command against fakes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from gpufleet.errors import PoolError
from gpufleet.lifecycle import destroyed, sim_world
from gpufleet.lifecycle.destroy_plan import World
from gpufleet.lifecycle.destroy_run import Ports
from gpufleet.lifecycle.pool_side import job_ender
from gpufleet.pool.protocol import NodeState, Pool
from gpufleet.project import Project
from gpufleet.rollout.journal import JournalStore
from gpufleet.spec import ClusterSpec


@dataclass
class Side:
    world: World
    ports: Ports


def drainable(pool: Pool | None) -> tuple[str, ...]:
    """The pool's slots that can take work now (admitted); the others take none already."""
    if pool is None:
        return ()
    return tuple(sorted(s for s, n in pool.state().nodes.items() if n.state is NodeState.ADMITTED))


def forgetter(state_dir: Path, stack: str, store: JournalStore) -> Callable[[], Mapping[str, Any]]:
    """The last step: archive the rollout journal (so a later rollout starts fresh) and mark the stack."""
    def forget() -> Mapping[str, Any]:
        archived = store.archive() if store.exists() else None
        at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        destroyed.mark(state_dir, {"at": at, "stack": stack, "rollout_journal": archived})
        return {"rollout_journal": archived, "at": at}
    return forget


def open_side(spec: ClusterSpec, project: Project, stack: str, store: JournalStore, *, jobs_deadline_s: float,
              warn: Callable[[str], None] = lambda _m: None) -> Side:
    state_dir = project.state_dir(stack)
    if spec.simulated:
        return _simulated(spec, project, stack, state_dir, store, jobs_deadline_s, warn)
    return _real(spec, project, stack, state_dir, store, jobs_deadline_s)


def _simulated(spec: ClusterSpec, project: Project, stack: str, state_dir: Path, store: JournalStore,
               deadline_s: float, warn: Callable[[str], None]) -> Side:
    from gpufleet.pool.factory import local_slurm_root, pool_for

    pool: Pool | None
    stop_slurm = None
    if spec.pool.type == "slurm":
        from gpufleet.pool.slurm.local import LocalSlurm

        local = LocalSlurm(local_slurm_root(project, stack))
        stop_slurm = local.down
        try:
            pool = pool_for(spec, project, stack) if local.running() else None
        except PoolError as exc:  # unhealthy: nothing to drain there; it is stopped with the world
            warn(f"the local Slurm of {stack} cannot be drained ({exc}); it is stopped with the simulated world")
            pool = None
    else:
        pool = pool_for(spec, project, stack) if (state_dir / sim_world.POOL_FILE).exists() else None
    world = World(simulated=True, nodes=sim_world.nodes(state_dir), pool_slots=drainable(pool),
                  journal=store.exists(), world_files=sim_world.world_files(state_dir))
    ports = Ports(pool=pool, jobs=job_ender(pool, deadline_s), terminator=sim_world.SimTerminator(state_dir),
                  storage=None, remover=sim_world.SimWorldRemover(state_dir, stop_slurm),
                  forget=forgetter(state_dir, stack, store), file_systems={})
    return Side(world, ports)


def _real(spec: ClusterSpec, project: Project, stack: str, state_dir: Path, store: JournalStore,
          deadline_s: float) -> Side:
    from pulumi.automation.errors import CommandError

    from gpufleet.cloud.pulumi_stack import output_values, select_stack
    from gpufleet.errors import GpufleetError
    from gpufleet.lifecycle import pulumi_teardown as pt
    from gpufleet.lifecycle.fsx import FsxSaver
    from gpufleet.pool.factory import pool_for

    try:
        pstack = select_stack(project, stack)
        teardown = pt.PulumiTeardown(pstack)
        export = teardown.export()
    except (CommandError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GpufleetError(f"cannot read the Pulumi state of stack {stack!r} ({first}); check the Pulumi CLI "
                            "and backend login. Nothing was changed") from None
    nodes = pt.gpu_nodes(export)
    fss = pt.file_systems(export)
    pool = pool_for(spec, project, stack, outputs=lambda: output_values(pstack)) if nodes else None
    world = World(simulated=False, nodes=tuple(n for n, _ in nodes.values()), pool_slots=drainable(pool),
                  file_systems=tuple(fss), resources=tuple(pt.other_resources(export)), journal=store.exists())

    def fsx_client() -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client("fsx", region_name=spec.cluster.region, config=Config(retries={"mode": "standard"}))

    ports = Ports(pool=pool, jobs=job_ender(pool, deadline_s), terminator=teardown,
                  storage=FsxSaver(fsx_client(), stack) if fss else None, remover=teardown,
                  forget=forgetter(state_dir, stack, store), file_systems={f.fs_id: f for f in fss})
    return Side(world, ports)
