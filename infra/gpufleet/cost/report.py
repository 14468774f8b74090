"""The cost report: GPU-hours and their price per partition, team and job; the capacity paid for
but unused (idle admitted units, quarantined nodes, jobs holding GPUs at low utilisation).

Pure: `build` takes what the adapters read (jobs, the pool's history, utilisation series, the
price) and returns the versioned `CostReport`; nothing here reads a file or the network.

Money follows the price per instance-hour: a GPU-hour costs price / GPUs per instance; an idle
unit costs its GPUs' hours; a quarantined node its instance-hours. Without a price every cost
field is None and `missing_price` says which key to set: never a made-up rate.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from gpufleet.cost import intervals as iv
from gpufleet.cost.pool_history import ADMITTED, QUARANTINED, Transitions, by_state
from gpufleet.cost.prometheus import NodeSeries, job_utilisation
from gpufleet.cost.usage import JobUsage, Window, held
from gpufleet.pool.slurm.conf import hostlist

COST_SCHEMA_VERSION = 1


class _M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PriceUsed(_M):
    instance_type: str
    basis: str
    region: str
    usd_per_instance_hour: float
    usd_per_gpu_hour: float
    source: str  # a URL, or `gpufleet:cost.pricePerInstanceHour` for the stack's own rate
    dated: str
    note: str = ""


class Group(_M):
    name: str
    jobs: int
    gpu_hours: float
    cost_usd: float | None


class JobRow(_M):
    job_id: str
    name: str
    team: str
    partition: str
    gpus: int
    start: datetime
    end: datetime | None  # None: running at the report's time
    state: str
    nodes: str  # Slurm's compressed hostlist of the slots it ran on ("" when the source does not say)
    gpu_hours: float
    cost_usd: float | None
    util_percent: float | None = None  # None: not measured


class IdleUnit(_M):
    unit: int
    partition: str | None
    slots: list[str]
    gpus: int
    idle_hours: float  # admitted with no job on any of its nodes, stretches >= the minimum only
    longest_idle_hours: float
    stretches: int
    cost_usd: float | None


class QuarantinedNode(_M):
    slot: str
    hours: float
    cost_usd: float | None


class CostReport(_M):
    schema_version: int = COST_SCHEMA_VERSION
    kind: Literal["cost"] = "cost"  # the envelope every JSON document starts with (gpufleet.envelope)
    stack: str
    generated_at: datetime
    pool: str
    window_start: datetime
    window_end: datetime
    instance_type: str
    gpus_per_node: int
    price: PriceUsed | None
    missing_price: str | None = None  # what to set when no price is known
    gpu_hours: float | None  # None: the scheduler's accounting could not be read (never reported as 0)
    cost_usd: float | None
    admitted_gpu_hours: float | None  # capacity the pool offered in the window (None: no pool history)
    by_partition: list[Group]
    by_team: list[Group]
    jobs: list[JobRow]  # by GPU-hours, largest first
    skipped: list[str]  # allocations not counted, with why
    idle_units: list[IdleUnit]
    idle_hours_total: float
    idle_cost_usd: float | None
    idle_unavailable: str | None = None  # why idle units could not be computed
    low_util_percent: float
    low_util_jobs: list[JobRow]
    utilisation: str  # where utilisation came from, or why it was not read
    quarantined: list[QuarantinedNode]
    quarantined_cost_usd: float | None
    problems: list[str]  # sources that could not be read: the report is incomplete

    @property
    def complete(self) -> bool:
        return not self.problems and self.missing_price is None


@dataclass(frozen=True)
class UnitNodes:
    """One unit of the plan: its GPUs and the slots they sit on."""

    unit: int
    partition: str | None
    slots: tuple[str, ...]
    gpus: int


def _money(hours: float, rate: float | None) -> float | None:
    return None if rate is None else round(hours * rate, 2)


def _groups(rows: Sequence[JobRow], key: str, rate: float | None) -> list[Group]:
    hours: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for r in rows:
        hours[getattr(r, key)] += r.gpu_hours
        count[getattr(r, key)] += 1
    return [Group(name=k, jobs=count[k], gpu_hours=round(h, 3), cost_usd=_money(h, rate))
            for k, h in sorted(hours.items(), key=lambda kv: (-kv[1], kv[0]))]


def busy_by_node(jobs: Sequence[JobUsage], window: Window, now: datetime) -> dict[str, list[iv.Interval]]:
    """Per slot, when any job held it (merged)."""
    spans: dict[str, list[iv.Interval]] = defaultdict(list)
    for job in jobs or ():
        span = held(job, window, now)
        if span:
            for node in job.nodes:
                spans[node].append(span)
    return {node: iv.merged(s) for node, s in spans.items()}


def idle_units(units: Sequence[UnitNodes], admitted: Mapping[str, list[iv.Interval]],
               busy: Mapping[str, list[iv.Interval]], min_idle_s: float) -> list[tuple[UnitNodes, list[iv.Interval]]]:
    """Each unit's idle stretches: every node of it admitted, no job on any of them, at least `min_idle_s` long."""
    out = []
    for u in units:
        up: list[iv.Interval] | None = None
        for slot in u.slots:
            up = list(admitted.get(slot, ())) if up is None else iv.intersect(up, admitted.get(slot, ()))
            if not up:
                break
        if not up:
            continue
        used = iv.merged(s for slot in u.slots for s in busy.get(slot, ()))
        stretches = [s for s in iv.subtract(up, used) if s[1] - s[0] >= min_idle_s]
        if stretches:
            out.append((u, stretches))
    return out


def build(*, stack: str, pool: str, window: Window, now: datetime, instance_type: str, gpus_per_node: int,
          price: PriceUsed | None, missing_price: str | None, jobs: Sequence[JobUsage] | None, skipped: Sequence[str],
          units: Sequence[UnitNodes], history: Transitions | None, history_note: str,
          utilisation: Mapping[str, NodeSeries] | None, utilisation_note: str, low_util_percent: float,
          min_idle_minutes: float, problems: Sequence[str]) -> CostReport:
    rate = price.usd_per_gpu_hour if price else None
    node_rate = price.usd_per_instance_hour if price else None
    rows: list[JobRow] = []
    counted: list[JobUsage] = []
    for job in jobs or ():
        span = held(job, window, now)
        if span is None:
            continue
        counted.append(job)
        hours = job.gpus * (span[1] - span[0]) / 3600
        util = job_utilisation(utilisation, job.nodes, span) if utilisation is not None and job.nodes else None
        rows.append(JobRow(job_id=job.job_id, name=job.name, team=job.team, partition=job.partition, gpus=job.gpus,
                           start=job.start, end=job.end, state=job.state, nodes=hostlist(job.nodes), gpu_hours=round(hours, 4),
                           cost_usd=_money(hours, rate), util_percent=None if util is None else round(util, 1)))
    rows.sort(key=lambda r: (-r.gpu_hours, r.job_id))
    total = sum(r.gpu_hours for r in rows)

    idle: list[IdleUnit] = []
    idle_note: str | None = None
    admitted_gpu_hours: float | None = None
    quarantined: list[QuarantinedNode] = []
    end_s = min(now, window.end).timestamp()
    if history is None or not history:
        idle_note = history_note or "no pool history"
    if history:
        admitted = by_state(history, ADMITTED, window.seconds, end_s)
        admitted_gpu_hours = round(sum(iv.total(s) for s in admitted.values()) * gpus_per_node / 3600, 3)
        for slot, spans in sorted(by_state(history, QUARANTINED, window.seconds, end_s).items()):
            hours = iv.total(spans) / 3600
            quarantined.append(QuarantinedNode(slot=slot, hours=round(hours, 3), cost_usd=_money(hours, node_rate)))
        nodeless = [j.job_id for j in counted if not j.nodes]
        if jobs is None:
            idle_note = "job usage unknown (the scheduler's accounting could not be read)"
        elif nodeless:
            idle_note = (f"{len(nodeless)} job(s) have no node list (e.g. {', '.join(nodeless[:3])}): "
                         "which units they kept busy is unknown")
        else:
            for u, stretches in idle_units(units, admitted, busy_by_node(counted, window, now), min_idle_minutes * 60):
                hours = iv.total(stretches) / 3600
                idle.append(IdleUnit(unit=u.unit, partition=u.partition, slots=list(u.slots), gpus=u.gpus,
                                     idle_hours=round(hours, 3),
                                     longest_idle_hours=round(max(e - s for s, e in stretches) / 3600, 3),
                                     stretches=len(stretches), cost_usd=_money(hours * u.gpus, rate)))
            idle.sort(key=lambda i: (-i.idle_hours, i.unit))
    idle_gpu_hours = sum(i.idle_hours * i.gpus for i in idle)
    low = [r for r in rows if r.util_percent is not None and r.util_percent < low_util_percent]
    q_hours = sum(q.hours for q in quarantined)
    return CostReport(
        stack=stack, pool=pool, generated_at=now.astimezone(timezone.utc), window_start=window.start,
        window_end=window.end, instance_type=instance_type, gpus_per_node=gpus_per_node, price=price,
        missing_price=missing_price, gpu_hours=None if jobs is None else round(total, 3),
        cost_usd=None if jobs is None else _money(total, rate),
        admitted_gpu_hours=admitted_gpu_hours, by_partition=_groups(rows, "partition", rate),
        by_team=_groups(rows, "team", rate), jobs=rows, skipped=list(skipped), idle_units=idle,
        idle_hours_total=round(sum(i.idle_hours for i in idle), 3), idle_cost_usd=_money(idle_gpu_hours, rate),
        idle_unavailable=idle_note, low_util_percent=low_util_percent, low_util_jobs=low,
        utilisation=utilisation_note, quarantined=quarantined, quarantined_cost_usd=_money(q_hours, node_rate),
        problems=list(problems))
