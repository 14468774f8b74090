"""The simulated pool's job stream: what a scheduler would have run on the units while they were
admitted, so `gpufleet cost -s local` has accounting right after the quickstart's rollout.

Why derived, not stored: the simulated pool has no scheduler process to keep accounting; the
stream is a pure function of the stack's seed, its units and when each slot was admitted (the
journals' history), so every report over the same window reads the same jobs, and a quarantined
or replaced node's work ends when it left the pool. Jobs run on wall time from admission: the
longer a simulated stack has been up, the more GPU-hours it shows.

The seed's three modes, one per partition (seeded): `all-units` (one job over every unit of the
partition, from when its last unit was admitted), `unit-jobs` (independent jobs per unit, one after
another, seeded durations), `prefill-decode` (two long-running pools: a third of the units prefill,
the rest decode). Teams and queues come from the stack's tenants, else from the default mix.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

MODES = ("all-units", "unit-jobs", "prefill-decode")
DEFAULT_TEAMS = ("research", "inference", "platform")
DURATIONS_S = (15 * 60, 60 * 60, 4 * 3600, 12 * 3600)  # the mix of unit-job lengths
MAX_JOBS_PER_UNIT = 500

Interval = tuple[float, float]


@dataclass(frozen=True)
class Unit:
    id: str
    partition: str
    slots: tuple[str, ...]
    gpus: int


@dataclass(frozen=True)
class SimJob:
    job_id: str
    name: str
    team: str
    partition: str
    gpus: int
    start: float  # epoch seconds
    end: float | None  # None: still running at `now`
    state: str
    nodes: tuple[str, ...]
    mode: str


def unit_spans(unit: Unit, admitted: Mapping[str, Sequence[Interval]]) -> list[Interval]:
    """When every slot of the unit was admitted at once (a job needs the whole unit)."""
    spans: list[Interval] | None = None
    for slot in unit.slots:
        mine = list(admitted.get(slot, ()))
        if spans is None:
            spans = mine
            continue
        spans = [(max(a[0], b[0]), min(a[1], b[1])) for a in spans for b in mine if max(a[0], b[0]) < min(a[1], b[1])]
    return sorted(spans or [])


def teams_for(partition: str, tenants: Iterable[tuple[str, Sequence[str]]]) -> tuple[str, ...]:
    """The tenants allowed on the partition (their Slurm accounts), else the default mix."""
    allowed = tuple(sorted(name for name, parts in tenants if partition in parts))
    return allowed or DEFAULT_TEAMS


def stream(units: Sequence[Unit], admitted: Mapping[str, Sequence[Interval]], now: float, *, seed: int,
           tenants: Iterable[tuple[str, Sequence[str]]] = ()) -> list[SimJob]:
    """Every job of the stream up to `now` (pure)."""
    tenants = list(tenants)
    jobs: list[SimJob] = []
    by_part: dict[str, list[Unit]] = {}
    for u in units:
        by_part.setdefault(u.partition, []).append(u)
    for part, members in sorted(by_part.items()):
        rng = random.Random(f"{seed}:{part}")
        mode = rng.choice(MODES)
        teams = teams_for(part, tenants)
        spans = {u.id: unit_spans(u, {s: [(a, min(b, now)) for a, b in v] for s, v in admitted.items()})
                 for u in members}
        live = [u for u in members if spans[u.id]]
        if not live:
            continue
        if mode == "all-units":
            jobs += _gang(f"{part}-train", part, live, spans, teams[0], now, mode)
        elif mode == "prefill-decode":
            cut = max(1, len(live) // 3)
            jobs += _gang(f"{part}-prefill", part, live[:cut], spans, teams[0], now, mode)
            if live[cut:]:
                jobs += _gang(f"{part}-decode", part, live[cut:], spans, teams[min(1, len(teams) - 1)], now, mode)
        else:
            for u in live:
                jobs += _unit_jobs(u, spans[u.id], teams, rng, now)
    return jobs


def _gang(name: str, part: str, members: Sequence[Unit], spans: Mapping[str, list[Interval]], team: str,
          now: float, mode: str) -> list[SimJob]:
    """One job over `members`, for each span they were all admitted at once."""
    common = spans[members[0].id]
    for u in members[1:]:
        common = [(max(a[0], b[0]), min(a[1], b[1])) for a in common for b in spans[u.id] if max(a[0], b[0]) < min(a[1], b[1])]
    nodes = tuple(s for u in members for s in u.slots)
    gpus = sum(u.gpus for u in members)
    return [SimJob(f"sim-{name}-{i}", name, team, part, gpus, a, None if b >= now else b,
                   "RUNNING" if b >= now else "CANCELLED", nodes, mode) for i, (a, b) in enumerate(common)]


def _unit_jobs(u: Unit, spans: list[Interval], teams: Sequence[str], rng: random.Random, now: float) -> list[SimJob]:
    out: list[SimJob] = []
    for a, b in spans:
        t = a
        while t < b and len(out) < MAX_JOBS_PER_UNIT:
            end = t + rng.choice(DURATIONS_S)
            team = rng.choice(list(teams))
            done = end <= b
            state = "COMPLETED" if done else ("RUNNING" if b >= now else "CANCELLED")
            out.append(SimJob(f"sim-{u.id}-{len(out)}", f"{u.id}-job", team, u.partition, u.gpus, t,
                              end if done else (None if b >= now else b), state, u.slots, "unit-jobs"))
            t = end
    return out


# The stream's GPU utilisation (what DCGM_FI_DEV_GPU_UTIL would read), one level per job drawn from
# a seeded mix: most jobs keep their GPUs busy, some stall on data or wait at a barrier, a few hold
# GPUs nearly idle (the cost report's low-utilisation finding). Idle admitted nodes read 0.
UTIL_LEVELS = (95.0, 88.0, 80.0, 65.0, 40.0, 12.0)


def job_level(job: SimJob, seed: int) -> float:
    return random.Random(f"{seed}:util:{job.job_id}").choice(UTIL_LEVELS)


def utilisation(jobs: Sequence[SimJob], window: Interval, now: float, step: float, *,
                seed: int) -> dict[str, list[tuple[float, float]]]:
    """Per node, (time, utilisation %) samples every `step` seconds over each job's time inside the
    window (from the job's start: a job shorter than a step still has one sample), pure."""
    out: dict[str, list[tuple[float, float]]] = {}
    for job in jobs:
        start, end = max(job.start, window[0]), min(job.end if job.end is not None else now, window[1])
        if end < start:
            continue
        level = job_level(job, seed)
        rng = random.Random(f"{seed}:noise:{job.job_id}")
        times = [start + i * step for i in range(int((end - start) // step) + 1)]
        for node in job.nodes:
            out.setdefault(node, []).extend((t, max(0.0, min(100.0, level + rng.uniform(-3, 3)))) for t in times)
    for samples in out.values():
        samples.sort()
    return out
