"""How to submit whole units on a Slurm pool, for the three seed modes: pure, from the plan.

Why here: the shapes job_submit.lua accepts are the plan's (`gpufleet.pool.slurm.job_submit`), so
the options users are told to type come from the same numbers; `gpufleet pool units` prints them.
- all units: one job over a partition's units (data parallel across units, model parallel inside),
  whole blocks when it is more than one block;
- independent: one job array, each task one unit inside one block;
- prefill/decode: one heterogeneous job, one component per pool, each whole units in its partition.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.errors import PoolError
from gpufleet.plan.model import ClusterPlan
from gpufleet.pool.slurm.conf import TopologyKind, unit_request_args
from gpufleet.spec import ClusterSpec, PartitionMode


@dataclass(frozen=True)
class SubmitWay:
    mode: str  # all-units | independent | prefill-decode
    partition: str
    units: int
    sbatch: tuple[str, ...]  # sbatch options (a ':' separates heterogeneous components)
    note: str


def largest_job_units(plan: ClusterPlan, partition: str) -> int:
    """The most units one job of `partition` may take: all of them up to a block, else whole blocks."""
    p = next((p for p in plan.partitions if p.name == partition), None)
    if p is None:
        raise PoolError(f"partition {partition!r} is not in the plan")
    units = p.units if p.quota_units is None else min(p.units, p.quota_units)
    upb = plan.topology.units_per_block
    return units if units <= upb else units - units % upb


def submit_ways(spec: ClusterSpec, plan: ClusterPlan, kind: TopologyKind) -> list[SubmitWay]:
    """The three modes, each on the partition the stack gives that mode (else its first partition)."""
    parts = [p for p in plan.partitions if p.blocks]
    if not parts:
        raise PoolError("the plan has no partition with blocks: nothing to submit to")
    mode_of = {p.name: p.mode for p in spec.partitions}

    def first(*modes: PartitionMode) -> str:
        return next((p.name for p in parts if mode_of.get(p.name) in modes), parts[0].name)

    ways = []
    train = first(PartitionMode.DATA_PARALLEL)
    units = largest_job_units(plan, train)
    ways.append(SubmitWay("all-units", train, units, tuple(unit_request_args(plan, train, units, kind)),
                          f"one job over {units} unit(s) of {train}: data parallel across units, model parallel "
                          f"inside one (srun runs one task set over every node)"))
    sim = first(PartitionMode.INDEPENDENT)
    count = next(p.units for p in parts if p.name == sim)
    ways.append(SubmitWay("independent", sim, count,
                          (f"--array=0-{count - 1}", *unit_request_args(plan, sim, 1, kind)),
                          f"{count} independent one-unit jobs in {sim}: each array task is one unit inside one block"))
    prefill = first(PartitionMode.INFERENCE_PREFILL)
    decode = first(PartitionMode.INFERENCE_DECODE)
    if prefill == decode:  # no inference partitions: both pools in one partition, one unit each
        pool_units = (1, 1)
    else:
        pool_units = (largest_job_units(plan, prefill), largest_job_units(plan, decode))
    args = (*unit_request_args(plan, prefill, pool_units[0], kind), ":",
            *unit_request_args(plan, decode, pool_units[1], kind))
    ways.append(SubmitWay("prefill-decode", f"{prefill},{decode}", sum(pool_units), args,
                          f"one heterogeneous job: a prefill pool of {pool_units[0]} unit(s) in {prefill} and a "
                          f"decode pool of {pool_units[1]} in {decode} (srun --het-group=0|1 picks the pool)"))
    return ways


def team_lines(spec: ClusterSpec) -> list[str]:
    """Who submits where (`ops.tenants`): `-A <team>` per partition, and with `pool.preemption` who
    preempts whom; empty without tenants."""
    tenants = spec.ops.tenants
    if not tenants:
        return []
    lines = ["  teams: sbatch -A <team> (job_submit.lua gives the job the team's QOS for the partition; "
             "the partition's QOS caps every account's jobs there):"]
    for p in spec.partitions:
        there = [t for t in tenants if p.name in t.partitions]
        if there:
            lines.append(f"    {p.name}: " + ", ".join(f"-A {t.name}" for t in there))
    if spec.pool.preemption != "off":
        lines.append(f"  preemption ({spec.pool.preemption}): in a partition with no room, a team's unit preempts "
                     "the running jobs of its lower-priority teams there; equal priorities wait:")
        for p in spec.partitions:
            there = sorted((t for t in tenants if p.name in t.partitions), key=lambda t: -t.priority)
            if len({t.priority for t in there}) > 1:
                lines.append(f"    {p.name}: " + " > ".join(f"{t.name} ({t.priority})" for t in there))
    return lines


def render(ways: list[SubmitWay], stack: str, teams: list[str] | None = None) -> str:
    lines = [f"whole-unit submission on stack {stack} (Slurm refuses any other shape in these partitions):"]
    for w in ways:
        lines.append(f"  {w.mode}: {w.note}")
        lines.append(f"    sbatch {' '.join(w.sbatch)} job.sh")
    return "\n".join(lines + list(teams or []))
