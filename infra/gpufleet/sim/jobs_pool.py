"""The job stream as the simulated pool's running work: which admitted nodes a stream job holds at
the simulated clock's now, so day-two commands on `local` (patrol above all) yield to it as they
yield to Slurm's or Kubernetes' jobs.

Why a callable injected into the pool: the pool layer knows nothing of the simulator; the day-two
context attaches this where the stack sets `gpufleet:simulator.jobStream`. The stream is the one
`gpufleet cost` reads (`gpufleet.sim.jobs.stream`: same seed, units and tenants); each admitted
node's span starts at its admission record's `decided_at` (the virtual clock on a simulated stack).
A node out of the admitted state (draining, quarantined) is out of the stream at once: its job
ends there, as the cost report accounts it (CANCELLED), so a drain never waits for the stream.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from gpufleet.sim.jobs import Unit, holding, stream

if TYPE_CHECKING:
    from gpufleet.plan.model import ClusterPlan
    from gpufleet.spec import ClusterSpec


class StreamWork:
    """`work(admitted slots) -> slot -> job id` for `SimPool.work` (pure given the clock and records)."""

    def __init__(self, units: Sequence[Unit], *, seed: int, tenants: Iterable[tuple[str, Sequence[str]]],
                 now: Callable[[], datetime], admitted_at: Callable[[str], datetime | None]) -> None:
        self.units = list(units)
        self.seed = seed
        self.tenants = list(tenants)
        self.now = now
        self.admitted_at = admitted_at

    def __call__(self, admitted: Iterable[str]) -> dict[str, str]:
        now = self.now().timestamp()
        spans: dict[str, list[tuple[float, float]]] = {}
        for slot in admitted:
            at = self.admitted_at(slot)
            if at is not None and at.timestamp() <= now:
                spans[slot] = [(at.timestamp(), float("inf"))]
        if not spans:
            return {}
        return holding(stream(self.units, spans, now, seed=self.seed, tenants=self.tenants), now)


def for_plan(plan: "ClusterPlan", spec: "ClusterSpec", now: Callable[[], datetime],
             admitted_at: Callable[[str], datetime | None]) -> StreamWork:
    """The stack's stream: the plan's units, the simulator's seed, the ops tenants (as `cost` reads it)."""
    units = [Unit(str(u.id), u.partition or "-", tuple(plan.slot(i).name for i in u.nodes), len(u.gpus))
             for u in plan.units]
    seed = spec.simulator.seed if spec.simulator else 1
    return StreamWork(units, seed=seed, tenants=[(t.name, t.partitions) for t in spec.ops.tenants],
                      now=now, admitted_at=admitted_at)
