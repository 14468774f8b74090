"""The simulated pool's accounting: `gpufleet.sim.jobs`' stream over the journals' history, as the
report's `JobUsage` (what sacct or Kueue give a real pool), and the stream's modelled GPU
utilisation as the `NodeSeries` Prometheus would give (the report says it is simulated)."""

from __future__ import annotations

from array import array
from datetime import datetime, timezone
from typing import Any, Sequence

from gpufleet.cost.pool_history import ADMITTED, Transitions, by_state
from gpufleet.cost.prometheus import NodeSeries, step_for
from gpufleet.cost.usage import JobUsage, Window
from gpufleet.sim.jobs import SimJob, Unit, stream, utilisation


def _stream(units: Sequence[Unit], history: Transitions, now: datetime, seed: int, tenants: Any) -> list[SimJob]:
    stamp = now.timestamp()
    admitted = by_state(history, ADMITTED, (float("-inf"), stamp), stamp)
    return stream(units, admitted, stamp, seed=seed, tenants=[(t.name, t.partitions) for t in tenants])


def _touches(j: SimJob, window: Window) -> bool:
    return (j.end is None or j.end > window.start.timestamp()) and j.start < window.end.timestamp()


def sim_jobs(units: Sequence[Unit], history: Transitions, window: Window, now: datetime, *, seed: int,
             tenants: Any = ()) -> list[JobUsage]:
    """The jobs that touched the window (a job running at `now` has no end)."""
    when = lambda t: datetime.fromtimestamp(t, timezone.utc)  # noqa: E731
    return [JobUsage(job_id=j.job_id, name=j.name, team=j.team, partition=j.partition, gpus=j.gpus,
                     start=when(j.start), end=None if j.end is None else when(j.end), state=j.state, nodes=j.nodes)
            for j in _stream(units, history, now, seed, tenants) if _touches(j, window)]


def sim_utilisation(units: Sequence[Unit], history: Transitions, window: Window, now: datetime, *, seed: int,
                    tenants: Any = ()) -> tuple[dict[str, NodeSeries], float]:
    """Every node's modelled utilisation series over the window and the step (as `prometheus.fetch`)."""
    span = (window.start.timestamp(), min(window.end, now).timestamp())
    step = step_for(span, max(1, sum(len(u.slots) for u in units)))
    jobs = [j for j in _stream(units, history, now, seed, tenants) if _touches(j, window)]
    series = {}
    for node, samples in utilisation(jobs, span, now.timestamp(), step, seed=seed).items():
        series[node] = NodeSeries(array("d", (t for t, _ in samples)), array("d", (v for _, v in samples)))
    return series, step
