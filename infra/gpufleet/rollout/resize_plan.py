"""The resize a rollout run is about to make: the journal's recorded layout against the stack's
plan now (gpufleet.plan.resize decides), with the pool's running jobs for a shrink's choice.

Why here and not in the orchestrator: the simulated cloud, the pool and the change set are all
built for the plan the run works on, so the effective plan (recorded slots plus or minus whole
blocks) must be known before any of them is wired.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Collection, Mapping

from gpufleet.changeset import ChangeSet, ChangeSetBuilder
from gpufleet.errors import ConfigError, GpufleetError
from gpufleet.plan.model import ClusterPlan
from gpufleet.plan.resize import RecordedSlots, Resize, add_changes, decide, recorded_digest, standing
from gpufleet.project import Project
from gpufleet.rollout.state import RolloutState
from gpufleet.spec import ClusterSpec

_SLOT = re.compile(r"-b(\d+)-n(\d+)$")


def recorded_layout(state: RolloutState, plan: ClusterPlan) -> RecordedSlots | None:
    """The layout the journal records; for a journal started before it was recorded, the one its
    nodes show (slot name -> block and index, the node's batch), only when that gives exactly the
    layout digest the journal started with (a journal whose nodes are not all known yet: None)."""
    if state.layout_slots is not None:
        return state.layout_slots
    if not state.nodes or state.layout is None:
        return None
    part = {b.id: b.partition for b in plan.blocks}
    out: dict[str, tuple[int, int, int, str | None]] = {}
    for name, n in state.nodes.items():
        m = _SLOT.search(name)
        if m is None:
            return None
        block, index = int(m.group(1)), int(m.group(2))
        out[name] = (index, block, n.batch, part.get(block))
    return out if recorded_digest(out) == state.layout else None


def resolve(spec: ClusterSpec, plan: ClusterPlan, state: RolloutState, project: Project | None = None,
            stack: str = "", busy: Mapping[str, int] | None = None) -> Resize:
    """The resize from what the journal recorded to `plan` (unchanged for a fresh or unreadable
    journal: the orchestrator's layout check then has the last word). A shrink asks the stack's
    pool which released candidates run jobs, unless `busy` is given."""
    if not state.started:
        return Resize("unchanged", plan, from_nodes=plan.topology.nodes, to_nodes=plan.topology.nodes)
    recorded = recorded_layout(state, plan)
    if recorded is None:
        return Resize("unchanged", plan)
    r = decide(recorded, plan, spec.rollout.batch_size, busy or {}, basis=state.layout_basis)
    # a Pulumi stack takes the resized layout through gpufleet:rollout.layout (PulumiProvisioner.take_layout)
    if r.kind == "shrink" and busy is None and project is not None:
        jobs = _pool_jobs(spec, project, stack, list(recorded))
        if jobs:
            r = decide(recorded, plan, spec.rollout.batch_size, jobs, basis=state.layout_basis)
    return r


def _pool_jobs(spec: ClusterSpec, project: Project, stack: str, slots: list[str]) -> dict[str, int]:
    """Running jobs per slot from the stack's pool; none when the pool cannot be read (then the
    highest blocks go first, and the drain still waits for whatever runs there)."""
    from gpufleet.pool.factory import pool_for
    from gpufleet.rollout.resize_run import busy_jobs

    try:
        return busy_jobs(pool_for(spec, project, stack), slots)
    except GpufleetError:
        return {}


def standing_plan(plan: ClusterPlan, state: RolloutState) -> ClusterPlan:
    """The cluster the journal stands at (`gpufleet.plan.resize.standing`), for commands that show
    or serve the pool while the stack file may already ask for another size; the plan itself for a
    fresh journal, or when the geometry changed (the rollout then refuses, naming the field)."""
    recorded = recorded_layout(state, plan) if state.started else None
    if not recorded:
        return plan
    try:
        return standing(recorded, plan)
    except ConfigError:
        return plan


def sync_local_slurm(spec: ClusterSpec, project: Project, stack: str, plan: ClusterPlan,
                     releasing: Collection[str] = ()) -> str | None:
    """A simulated stack's local Slurm made to hold the plan's nodes, as a real stack's controller
    gets them from the program: a grow's nodes join (drained until gated) before the run wires its
    pool; a finished shrink's nodes leave slurm.conf. Nothing while a shrink still releases nodes
    (they must stay to be drained), or for any other stack; a line saying what changed, or None."""
    if not (spec.simulated and spec.pool.type == "slurm"):
        return None
    from gpufleet.pool.factory import local_slurm_root
    from gpufleet.pool.slurm.local import LocalSlurm

    local = LocalSlurm(local_slurm_root(project, stack))
    if not local.running():
        return None  # the pool says so, with the command that starts it
    had = set(local.health())
    wanted = {n.name for n in plan.nodes}
    if not (wanted - had) and (not (had - wanted) or releasing):
        return None
    added, removed = local.reshape(spec, plan)
    parts = ([f"{len(added)} node(s) joined, drained until gated"] if added else []) + (
        [f"{len(removed)} released node(s) removed"] if removed else [])
    return f"local Slurm of {stack}: {'; '.join(parts)} (slurm.conf regenerated, every other node's state kept)"


def with_resize(changes: ChangeSet, resize: Resize, usd_per_hour: float | None = None,
                instances: Mapping[str, str] | None = None) -> ChangeSet:
    """The rollout's change set with the resize's lines: a grow's launches are already there (the
    effective plan's new batches), so only its note is added; a shrink adds its drains, releases
    and terminations by slot."""
    if not resize.changed:
        return changes
    b = ChangeSetBuilder(changes.command, changes.stack, simulated=changes.simulated)
    add_changes(b, resize, usd_per_hour, instances, launches=False)
    extra = b.build()
    return replace(changes, changes=changes.changes + extra.changes, notes=extra.notes + changes.notes)
