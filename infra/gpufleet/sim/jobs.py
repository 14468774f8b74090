"""The simulated pool's job stream: what a scheduler would have run on the units while they were
admitted, so `gpufleet cost -s local` has accounting right after the quickstart's rollout.

Why derived, not stored: the simulated pool has no scheduler process to keep accounting; the
stream is a pure function of the stack's seed, its units and when each slot was admitted (the
journals' history), so every report over the same window reads the same jobs, and a quarantined
or replaced node's work ends when it left the pool. Jobs run on wall time from admission: the
longer a simulated stack has been up, the more GPU-hours it shows.

The seed's three modes, one per partition (seeded): `all-units` (training runs over every unit of
the partition, from when its last unit was admitted), `unit-jobs` (independent jobs per unit,
seeded durations), `prefill-decode` (two serving pools: a third of the units prefill, the rest
decode). Teams and queues come from the stack's tenants, else from the default mix.

Idle gaps: the first job starts at admission (the queue was waiting for the capacity), then each
job is followed by a seeded gap before the next one starts on the same nodes. The gap mixes below
are this module's modelling choice, not taken from a published trace: a unit-job queue refills a
freed unit in minutes to a few hours, a training gang waits hours for its next run (evaluation, a
new config), a serving pool is redeployed in minutes. So a patrol finds idle nodes between jobs.
Expected busy share = mean run / (mean run + mean gap): 15,525 / 20,225 s = 77% (unit jobs),
22.5 / 24.4 h = 92% (training), 88 / 88.3 h = 99.7% (serving); tests/ops/test_sim_jobs.py
measures them on a long stream.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

MODES = ("all-units", "unit-jobs", "prefill-decode")
DEFAULT_TEAMS = ("research", "inference", "platform")
DURATIONS_S = (15 * 60, 60 * 60, 4 * 3600, 12 * 3600)  # the mix of unit-job lengths
GAPS_S = (5 * 60, 15 * 60, 30 * 60, 60 * 60, 2 * 3600, 4 * 3600)  # a freed unit until its next job
TRAIN_RUNS_S = (6 * 3600, 12 * 3600, 24 * 3600, 48 * 3600)  # one training run over the partition
TRAIN_GAPS_S = (30 * 60, 60 * 60, 2 * 3600, 4 * 3600)  # until the next run is launched
SERVE_RUNS_S = (24 * 3600, 3 * 24 * 3600, 7 * 24 * 3600)  # one deployment of a serving pool
SERVE_GAPS_S = (5 * 60, 15 * 60, 30 * 60)  # a redeploy
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
            jobs += _gang(f"{part}-train", part, live, spans, teams[0], now, mode, seed)
        elif mode == "prefill-decode":
            cut = max(1, len(live) // 3)
            jobs += _gang(f"{part}-prefill", part, live[:cut], spans, teams[0], now, mode, seed)
            if live[cut:]:
                jobs += _gang(f"{part}-decode", part, live[cut:], spans, teams[min(1, len(teams) - 1)], now, mode,
                              seed)
        else:
            for u in live:
                jobs += _unit_jobs(u, spans[u.id], teams, rng, now)
    return jobs


def _gang(name: str, part: str, members: Sequence[Unit], spans: Mapping[str, list[Interval]], team: str,
          now: float, mode: str, seed: int) -> list[SimJob]:
    """Runs over all of `members`, within each span they were all admitted at once, with gaps."""
    common = spans[members[0].id]
    for u in members[1:]:
        common = [(max(a[0], b[0]), min(a[1], b[1])) for a in common for b in spans[u.id] if max(a[0], b[0]) < min(a[1], b[1])]
    nodes = tuple(s for u in members for s in u.slots)
    gpus = sum(u.gpus for u in members)
    runs, gaps = (TRAIN_RUNS_S, TRAIN_GAPS_S) if mode == "all-units" else (SERVE_RUNS_S, SERVE_GAPS_S)
    rng = random.Random(f"{seed}:{name}")
    out: list[SimJob] = []
    for a, b in common:
        for start, end, state in _back_to_back(a, b, now, rng, runs, gaps, MAX_JOBS_PER_UNIT - len(out)):
            out.append(SimJob(f"sim-{name}-{len(out)}", name, team, part, gpus, start, end, state, nodes, mode))
    return out


def _back_to_back(a: float, b: float, now: float, rng: random.Random, runs: Sequence[int], gaps: Sequence[int],
                  limit: int) -> list[tuple[float, float | None, str]]:
    """(start, end, state) of the jobs within the admitted span [a, b): the first at `a`, each next one
    a seeded gap after the last; a job the span cuts short is RUNNING at `now`, else CANCELLED."""
    out: list[tuple[float, float | None, str]] = []
    t = a
    while t < b and len(out) < limit:
        end = t + rng.choice(runs)
        if end <= b:
            out.append((t, end, "COMPLETED"))
        else:
            out.append((t, None, "RUNNING") if b >= now else (t, b, "CANCELLED"))
        t = end + rng.choice(gaps)
    return out


def _unit_jobs(u: Unit, spans: list[Interval], teams: Sequence[str], rng: random.Random, now: float) -> list[SimJob]:
    out: list[SimJob] = []
    for a, b in spans:
        for start, end, state in _back_to_back(a, b, now, rng, DURATIONS_S, GAPS_S, MAX_JOBS_PER_UNIT - len(out)):
            out.append(SimJob(f"sim-{u.id}-{len(out)}", f"{u.id}-job", rng.choice(list(teams)), u.partition,
                              u.gpus, start, end, state, u.slots, "unit-jobs"))
    return out


def holding(jobs: Sequence[SimJob], now: float) -> dict[str, str]:
    """slot -> the name of the stream's job holding it at `now` (running, started by then)."""
    return {node: j.job_id for j in jobs if j.end is None and j.start <= now for node in j.nodes}


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
