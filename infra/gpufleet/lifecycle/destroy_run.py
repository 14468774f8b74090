"""Walk a destroy's steps, each journaled as started and as done, over small ports.

Why ports: the same walk empties the simulator's world, a local Slurm and a real AWS stack; only
what a step does to the world differs (`sim_world`, `pool_side`, `fsx`, `pulumi_teardown`). Each
port call is idempotent (a node already drained, an instance already gone, a backup asked for with
the same client token), so the step a crash interrupted is run again whole on resume.

A step that cannot finish (jobs still running at the deadline, an AWS or Pulumi error) is
journaled as failed and raised as a `GpufleetError` naming the step (exit 1): running
`gpufleet destroy -s STACK` again resumes from it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from gpufleet.errors import GpufleetError, PoolError
from gpufleet.lifecycle.destroy_journal import DestroyJournal
from gpufleet.lifecycle.destroy_plan import FileSystem, Step
from gpufleet.pool.protocol import HasHolders, NodeState, PendingNode, Pool


class JobEnder(Protocol):
    """Ends the running work on slots (Slurm: scancel; Kubernetes: eviction; the simulator: its file)."""

    def cancel(self, slots: Sequence[str]) -> None: ...


class Terminator(Protocol):
    """Terminates the GPU node instances of slots (idempotent: a slot without one is skipped)."""

    def terminate(self, batch: int, slots: Sequence[str]) -> list[str]: ...


class StorageSaver(Protocol):
    """Saves a file system's data before it is deleted; returns what it made (backup or task id)."""

    def backup(self, fs: FileSystem) -> str: ...

    def export(self, fs: FileSystem) -> str: ...


class StackRemover(Protocol):
    """Deletes what is left of the stack (unprotecting only `targets`), or a simulated world."""

    def remove(self, targets: Sequence[str]) -> Mapping[str, Any]: ...


@dataclass
class Ports:
    pool: Pool | None  # None: no pool to drain (a simulated stack whose local Slurm is down)
    jobs: JobEnder | None
    terminator: Terminator
    storage: StorageSaver | None
    remover: StackRemover
    forget: Callable[[], Mapping[str, Any]]  # archive the rollout journal, mark the stack destroyed
    file_systems: Mapping[str, FileSystem]
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic


@dataclass(frozen=True)
class Options:
    policy: str = "wait"  # what the jobs step does now (a resumed destroy may switch to cancel)
    deadline_s: float = 3600.0  # how long the jobs step waits for (or after cancelling) running work
    poll_s: float = 5.0


class StepFailed(GpufleetError):
    """A destroy step did not finish; the journal says which, and rerunning resumes there (exit 1)."""


def run(journal: DestroyJournal, ports: Ports, opts: Options,
        on_step: Callable[[Step, str], None] = lambda _s, _w: None) -> list[str]:
    """Run the journal's remaining steps in order; returns the ids of the steps run now."""
    ran: list[str] = []
    for step in journal.state.remaining():
        journal.append({"to": "step-started", "step": step.id})
        on_step(step, "started")
        try:
            result = _do(step, ports, opts)
        except GpufleetError as exc:
            journal.append({"to": "step-failed", "step": step.id, "reason": str(exc)})
            raise StepFailed(f"destroy step {step.id} failed: {exc}; nothing after it was touched. Fix the cause "
                             f"and run `gpufleet destroy -s {journal.stack}` again: it resumes at {step.id}") from None
        journal.append({"to": "step-done", "step": step.id, "result": result})
        on_step(step, "done")
        ran.append(step.id)
    journal.append({"to": "finished"})
    return ran


def _do(step: Step, ports: Ports, opts: Options) -> dict[str, Any]:
    if step.kind == "drain":
        return {"drained": _drain(ports.pool, step.targets)}
    if step.kind == "jobs":
        return _jobs(ports, step.targets, opts)
    if step.kind == "terminate":
        released = _release(ports.pool, step.targets)
        return {"released": released, "terminated": ports.terminator.terminate(step.batch or 0, step.targets)}
    if step.kind == "storage":
        fs = ports.file_systems.get(step.targets[0])
        if step.action == "skip" or fs is None:
            return {"saved": None, "why": "--skip-backup" if step.action == "skip" else "no longer in the stack"}
        if ports.storage is None:
            raise GpufleetError(f"no FSx client to save {fs.fs_id}")
        made = ports.storage.backup(fs) if step.action == "backup" else ports.storage.export(fs)
        return {"saved": made, "how": step.action}
    if step.kind == "stack":
        return dict(ports.remover.remove(step.targets))
    if step.kind == "forget":
        return dict(ports.forget())
    raise GpufleetError(f"unknown destroy step kind {step.kind!r}")


def _drain(pool: Pool | None, slots: Sequence[str]) -> list[str]:
    """Take the nodes out of new work (the pool's pending state: Slurm DRAIN, the gate taint); running
    work goes on. A node already pending, quarantined, blacklisted or gone is left as it is."""
    if pool is None:
        return []
    state = pool.state()
    todo = [n for s in slots if (n := state.get(s)) is not None and n.state is NodeState.ADMITTED and n.block is not None]
    if todo:
        pool.register_pending([PendingNode(slot=n.slot, block=int(n.block or 0), partition=n.partition,
                                           instance_id=n.instance_id) for n in todo])
    return [n.slot for n in todo]


def _jobs(ports: Ports, slots: Sequence[str], opts: Options) -> dict[str, Any]:
    pool = ports.pool
    if pool is None:
        return {"busy": [], "cancelled": []}
    start = ports.monotonic()
    cancelled: list[str] = []
    while True:
        state = pool.state()
        busy = [s for s in slots if (n := state.get(s)) is not None and n.busy]
        if not busy:
            return {"busy": [], "cancelled": cancelled, "waited_s": round(ports.monotonic() - start, 1)}
        if opts.policy == "cancel" and not cancelled:
            if ports.jobs is None:
                raise GpufleetError(f"this pool ({pool.kind}) cannot cancel jobs; wait for them instead")
            ports.jobs.cancel(busy)
            cancelled = list(busy)
            continue
        if ports.monotonic() - start >= opts.deadline_s:
            holders = pool.holders(busy) if isinstance(pool, HasHolders) else []
            named = "; ".join(str(h) for h in holders[:5]) or ", ".join(busy[:10])
            hint = "" if opts.policy == "cancel" else " (rerun to wait again, or add --cancel-jobs to cancel them)"
            raise GpufleetError(f"{len(busy)} node(s) still run jobs after {opts.deadline_s:g} s: {named}{hint}")
        ports.sleep(opts.poll_s)


def _release(pool: Pool | None, slots: Sequence[str]) -> list[str]:
    if pool is None:
        return []
    state = pool.state()
    out = []
    for s in slots:
        n = state.get(s)
        if n is None or (n.state is NodeState.BLACKLISTED and n.instance_id is None):
            continue  # already out of the pool
        try:
            pool.release(s)
        except PoolError as exc:
            if "not in the pool" not in str(exc):
                raise
        out.append(s)
    return out
