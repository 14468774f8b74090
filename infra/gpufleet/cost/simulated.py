"""The simulated pool's accounting: `gpufleet.sim.jobs`' stream over the journals' history, as the
report's `JobUsage` (what sacct or Kueue give a real pool)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Sequence

from gpufleet.cost.pool_history import ADMITTED, Transitions, by_state
from gpufleet.cost.usage import JobUsage, Window
from gpufleet.sim.jobs import Unit, stream


def sim_jobs(units: Sequence[Unit], history: Transitions, window: Window, now: datetime, *, seed: int,
             tenants: Any = ()) -> list[JobUsage]:
    """The jobs that touched the window (a job running at `now` has no end)."""
    stamp = now.timestamp()
    admitted = by_state(history, ADMITTED, (float("-inf"), stamp), stamp)
    when = lambda t: datetime.fromtimestamp(t, timezone.utc)  # noqa: E731
    return [JobUsage(job_id=j.job_id, name=j.name, team=j.team, partition=j.partition, gpus=j.gpus,
                     start=when(j.start), end=None if j.end is None else when(j.end), state=j.state, nodes=j.nodes)
            for j in stream(units, admitted, stamp, seed=seed, tenants=[(t.name, t.partitions) for t in tenants])
            if (j.end is None or j.end > window.start.timestamp()) and j.start < window.end.timestamp()]
