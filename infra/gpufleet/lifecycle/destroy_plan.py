"""What a destroy does, in order, and where an interrupted one stands: pure, no I/O.

Why a fixed order: jobs must leave before their nodes go (drain, then wait or cancel), the GPU
nodes are the money and go first, batch by batch (the last batch first, the canary last, so a
destroy stopped half way leaves a smaller cluster of the earliest, longest-proven nodes), the
file system's data is saved before the file system is deleted, and the rest of the stack (network,
controller, identity) goes last because the nodes and the storage sit in it. Finally the rollout
journal is archived, so `pool` and `rollout` see no cluster and a later rollout starts fresh.

Why the steps are journaled as planned: a resumed destroy follows the plan the person confirmed,
not a new one computed from a half-destroyed world; every step is idempotent, so the step that was
running when the process died is simply run again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from gpufleet.changeset import ChangeSet, ChangeSetBuilder
from gpufleet.errors import UsageError

POLICIES = ("wait", "cancel")  # what happens to running jobs: waited for up to a deadline, or cancelled
SAVES = ("backup", "export", "skip")  # a file system's data before deletion
STEP_KINDS = ("drain", "jobs", "terminate", "storage", "stack", "forget")


@dataclass(frozen=True)
class NodeRef:
    """One GPU node instance the stack has: its slot, batch and instance id."""

    slot: str
    batch: int
    instance_id: str


@dataclass(frozen=True)
class FileSystem:
    """An FSx for Lustre file system of the stack, as its state records it."""

    fs_id: str  # fs-0123...
    name: str  # the resource's logical name (the change set shows it)
    deployment_type: str  # PERSISTENT_1 | PERSISTENT_2 | SCRATCH_1 | SCRATCH_2
    repositories: tuple[str, ...] = ()  # data repository associations (S3 paths) linked to it
    urn: str = ""


@dataclass(frozen=True)
class StackResource:
    urn: str
    type: str
    protected: bool = False

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


@dataclass(frozen=True)
class World:
    """What exists of the stack now, read by the adapters before anything is changed."""

    simulated: bool
    nodes: tuple[NodeRef, ...] = ()
    pool_slots: tuple[str, ...] = ()  # slots in the pool that can take work (to drain)
    file_systems: tuple[FileSystem, ...] = ()
    resources: tuple[StackResource, ...] = ()  # everything else in the stack's state
    journal: bool = False  # a rollout journal exists (archived by the last step)
    world_files: tuple[str, ...] = ()  # a simulated stack's world: sim/, pool.json, the local Slurm

    @property
    def empty(self) -> bool:
        return not (self.nodes or self.pool_slots or self.file_systems or self.resources or self.journal
                    or self.world_files)


@dataclass(frozen=True)
class Step:
    id: str  # unique in a plan: "drain", "jobs", "terminate-b0003", "storage-fs-0123", "stack", "forget"
    kind: str  # one of STEP_KINDS
    targets: tuple[str, ...] = ()  # slots, a file system id, URNs
    batch: int | None = None
    action: str = ""  # jobs: wait|cancel; storage: backup|export|skip

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "targets": list(self.targets), "batch": self.batch,
                "action": self.action}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Step":
        return cls(id=str(doc["id"]), kind=str(doc["kind"]), targets=tuple(doc.get("targets") or ()),
                   batch=doc.get("batch"), action=str(doc.get("action") or ""))


def save_action(fs: FileSystem, skip_backup: bool) -> str:
    """How a file system's data is kept before it is deleted. FSx takes backups only of persistent
    file systems that are not linked to a data repository (CreateBackup's documented limits), so a
    linked one is exported to its S3 repository instead (an EXPORT_TO_REPOSITORY task)."""
    if skip_backup:
        return "skip"
    if fs.repositories:
        return "export"
    if fs.deployment_type.upper().startswith("PERSISTENT"):
        return "backup"
    raise UsageError(f"file system {fs.name} ({fs.fs_id}) is {fs.deployment_type} with no S3 data repository: FSx "
                     "can neither back it up (backups need a persistent file system) nor export it; its data is "
                     "lost when it is deleted. Nothing was changed", field="--skip-backup",
                     expected="--skip-backup to delete it without saving its data (copy what you need first)")


def plan_steps(world: World, *, policy: str = "wait", skip_backup: bool = False) -> list[Step]:
    """The destroy's steps in order (see the module docstring); empty when nothing exists.
    Raises UsageError before anything is changed when a file system's data cannot be kept."""
    if policy not in POLICIES:
        raise UsageError(f"job policy {policy!r}", field="--cancel-jobs", expected=" or ".join(POLICIES))
    if world.empty:
        return []
    steps: list[Step] = []
    if world.pool_slots:
        slots = tuple(sorted(world.pool_slots))
        steps.append(Step("drain", "drain", slots))
        steps.append(Step("jobs", "jobs", slots, action=policy))
    by_batch: dict[int, list[str]] = {}
    for n in world.nodes:
        by_batch.setdefault(n.batch, []).append(n.slot)
    for batch in sorted(by_batch, reverse=True):
        steps.append(Step(f"terminate-b{batch:04d}", "terminate", tuple(sorted(by_batch[batch])), batch=batch))
    for fs in sorted(world.file_systems, key=lambda f: f.fs_id):
        steps.append(Step(f"storage-{fs.fs_id}", "storage", (fs.fs_id,), action=save_action(fs, skip_backup)))
    if world.resources or world.file_systems or world.world_files:
        targets = tuple(r.urn for r in world.resources) + tuple(f.urn for f in world.file_systems if f.urn)
        steps.append(Step("stack", "stack", targets or tuple(world.world_files)))
    steps.append(Step("forget", "forget"))
    return steps


# --- the journal's fold -----------------------------------------------------------------------

@dataclass
class DestroyState:
    """What the destroy journal says: the confirmed plan, the steps done, the last failure."""

    steps: list[Step] = field(default_factory=list)
    done: dict[str, dict[str, Any]] = field(default_factory=dict)  # step id -> what it did
    failed: dict[str, str] = field(default_factory=dict)  # step id -> why (cleared when it is done)
    running: str | None = None  # a step started and neither done nor failed: redone on resume
    finished: bool = False
    last_seq: int = 0
    events: int = 0

    @property
    def planned(self) -> bool:
        return bool(self.steps)

    @property
    def unfinished(self) -> bool:
        return self.planned and not self.finished

    def remaining(self) -> list[Step]:
        return [s for s in self.steps if s.id not in self.done]


class DestroyJournalError(ValueError):
    """An event that does not follow from the state (a bug, or a hand-edited journal)."""


def apply(state: DestroyState, event: Mapping[str, Any]) -> None:
    """Fold one event into the state, refusing one that does not follow (before it is written)."""
    to = event.get("to")
    ids = {s.id for s in state.steps}
    if to == "planned":
        if state.unfinished:
            raise DestroyJournalError("a destroy is already planned and unfinished")
        state.steps = [Step.from_json(s) for s in event.get("steps") or []]
        state.done, state.failed, state.running, state.finished = {}, {}, None, False
    elif to in ("step-started", "step-done", "step-failed"):
        step = event.get("step")
        if step not in ids:
            raise DestroyJournalError(f"step {step!r} is not in the planned destroy ({', '.join(sorted(ids))})")
        if to == "step-started":
            state.running = step
        elif to == "step-done":
            state.done[step] = dict(event.get("result") or {})
            state.failed.pop(step, None)
            state.running = None
        else:
            state.failed[step] = str(event.get("reason") or "")
            state.running = None
    elif to == "finished":
        left = [s.id for s in state.remaining()]
        if left:
            raise DestroyJournalError(f"finished with steps left: {', '.join(left)}")
        state.finished = True
    else:
        raise DestroyJournalError(f"unknown destroy event {to!r}")
    state.last_seq = int(event.get("seq", state.last_seq + 1))
    state.events += 1


def fold(events: Iterable[Mapping[str, Any]]) -> DestroyState:
    state = DestroyState()
    for e in events:
        apply(state, e)
    return state


# --- the change set ---------------------------------------------------------------------------

def change_set(stack: str, world: World, steps: Sequence[Step], *, usd_per_instance_hour: float | None,
               price_note: str = "", deadline_s: float | None = None) -> ChangeSet:
    """What the person confirms: nodes drained, instances terminated by slot (with what each costs
    per hour), storage saved then deleted, the stack's other resources deleted."""
    b = ChangeSetBuilder("destroy", stack, simulated=world.simulated, price_note=price_note)
    nodes = {n.slot: n for n in world.nodes}
    fss = {f.fs_id: f for f in world.file_systems}
    resources = {r.urn: r for r in world.resources}
    for step in steps:
        if step.kind == "drain":
            for slot in step.targets:
                b.add("drain", "pool-node", slot)
        elif step.kind == "jobs":
            if step.action == "cancel":
                b.note("running jobs on the drained nodes are cancelled (--cancel-jobs)")
            else:
                wait = f" up to {deadline_s:g} s" if deadline_s is not None else ""
                b.note(f"running jobs on the drained nodes are waited for{wait}; then the destroy stops "
                       "(rerun to wait again, or --cancel-jobs)")
        elif step.kind == "terminate":
            for slot in step.targets:
                n = nodes.get(slot)
                b.add("release", "pool-node", slot, f"batch {step.batch}")
                b.add("terminate", "instance", slot, f"batch {step.batch}, {n.instance_id}" if n else f"batch {step.batch}",
                      usd_per_hour=usd_per_instance_hour)
        elif step.kind == "storage":
            fs = fss.get(step.targets[0])
            label = f"{fs.name} ({fs.fs_id})" if fs else step.targets[0]
            if step.action == "backup":
                b.add("backup", "storage", label, "a final FSx backup, kept after the file system is deleted")
            elif step.action == "export":
                b.add("backup", "storage", label, "exported to its S3 data repository "
                      f"({', '.join(fs.repositories) if fs else '?'}): S3-linked file systems take no backups")
            else:
                b.note(f"{label}: deleted WITHOUT a backup (--skip-backup)")
            b.add("delete", "storage", label, fs.deployment_type if fs else "")
        elif step.kind == "stack":
            if world.simulated:
                for name in world.world_files:
                    b.add("delete", "simulated-world", name)
            for urn in step.targets:
                r = resources.get(urn)
                if r is not None:
                    b.add("delete", "stack-resource", r.name, r.type + (" (protected: unprotected first)"
                                                                       if r.protected else ""))
        elif step.kind == "forget" and world.journal:
            b.add("delete", "journal", "rollout journal", "archived: `pool` and `rollout` then see no cluster")
    return b.build()
