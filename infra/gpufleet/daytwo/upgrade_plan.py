"""Which nodes an upgrade changes, and in which groups: pure.

Why whole blocks: a block is the placement unit jobs are scheduled on (topology-aware), so taking a
whole block out costs the same units as taking part of it, and the group's baselines compare like
with like. The canary group is one block; each later group has `groupGrowth` times the blocks of
the one before, capped so that no partition ever has more than its `maxUnavailableUnits` units
out of service at once (groups run one after another, so a group's units are the only ones out).

Why a block is sometimes split: a partition whose units all sit in one block (a small debug
partition) would lose every unit while that block upgrades, and its queue would stop. Such a block
is upgraded in pieces of consecutive nodes, each within the allowance. Units may share a node (10-GPU
units on 8-GPU nodes), so the smallest possible piece, one node, can take two units out: that is the
floor of any allowance, and an explicit allowance below it is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from gpufleet.errors import ConfigError
from gpufleet.plan.model import ClusterPlan
from gpufleet.spec import UpgradeConfig

FIELD = "gpufleet:upgrade.maxUnavailableUnits"


@dataclass(frozen=True)
class Group:
    number: int
    blocks: tuple[int, ...]
    slots: tuple[str, ...]
    units: Mapping[str, int]  # partition -> units this group takes out of service

    @property
    def canary(self) -> bool:
        return self.number == 1


def units_per_node(plan: ClusterPlan) -> dict[str, int]:
    """Per partition: the most units one of its nodes belongs to (what upgrading that node alone costs)."""
    touching: dict[tuple[str, int], int] = {}
    for u in plan.units:
        if u.partition is not None:
            for i in u.nodes:
                touching[(u.partition, i)] = touching.get((u.partition, i), 0) + 1
    out: dict[str, int] = {}
    for (part, _i), n in touching.items():
        out[part] = max(out.get(part, 0), n)
    return out


def largest_block(plan: ClusterPlan) -> dict[str, int]:
    """Per partition: the most of its units that one block holds."""
    largest: dict[str, int] = {}
    for b in plan.blocks:
        per: dict[str, int] = {}
        for u in b.units:
            part = plan.units[u].partition
            if part is not None:
                per[part] = per.get(part, 0) + 1
        for part, n in per.items():
            largest[part] = max(largest.get(part, 0), n)
    return largest


def limits(plan: ClusterPlan, cfg: UpgradeConfig) -> dict[str, int]:
    """Per partition: the most units it may have out of service at once. Unless set explicitly,
    `maxUnavailableFraction` of its units, raised to its largest block (whole blocks upgrade faster and
    compare like with like) when that still leaves a unit in service, else to all but one node's worth
    of units; never below one node's units (the smallest piece)."""
    floor = units_per_node(plan)
    whole = largest_block(plan)
    allowed: dict[str, int] = {}
    for p in plan.partitions:
        need = max(1, floor.get(p.name, 0))
        if p.name in cfg.max_unavailable_units:
            given = cfg.max_unavailable_units[p.name]
            if given < need:
                raise ConfigError(f"partition {p.name}: one node belongs to {need} of its units, so upgrading it "
                                  f"takes {need} units out of service, more than the {given} allowed",
                                  field=f"{FIELD}.{p.name}", expected=f"at least {need}")
            allowed[p.name] = given
        else:
            block = whole.get(p.name, 0)
            keeps_one = block if block < p.units else p.units - need
            allowed[p.name] = max(need, math.floor(p.units * cfg.max_unavailable_fraction), keeps_one)
    return allowed


def units_out(plan: ClusterPlan, slots: set[str]) -> dict[str, int]:
    """Per partition, the units with at least one node among `slots` (such a unit cannot run a job)."""
    index = {n.name: i for i, n in enumerate(plan.nodes)}
    taken = {index[s] for s in slots if s in index}
    out: dict[str, int] = {}
    for u in plan.units:
        if u.partition is not None and taken.intersection(u.nodes):
            out[u.partition] = out.get(u.partition, 0) + 1
    return out


def _within(plan: ClusterPlan, slots: set[str], allowed: Mapping[str, int]) -> bool:
    return all(n <= allowed.get(p, 0) for p, n in units_out(plan, slots).items())


def _pieces(plan: ClusterPlan, block: int, slots: Sequence[str],
            allowed: Mapping[str, int]) -> list[tuple[int, tuple[str, ...]]]:
    """The block whole when it fits the allowance, else runs of consecutive nodes that each fit."""
    if _within(plan, set(slots), allowed):
        return [(block, tuple(slots))]
    pieces: list[tuple[int, tuple[str, ...]]] = []
    run: list[str] = []
    for slot in slots:  # in block order: neighbours share units, so a run costs the fewest
        if run and not _within(plan, {*run, slot}, allowed):
            pieces.append((block, tuple(run)))
            run = []
        run.append(slot)
    pieces.append((block, tuple(run)))
    return pieces


def plan_groups(plan: ClusterPlan, todo: set[str], cfg: UpgradeConfig) -> list[Group]:
    """Groups over the blocks holding a node in `todo`, canary first: whole blocks, or the pieces of a
    block that alone would take more of a partition's units than its allowance."""
    allowed = limits(plan, cfg)
    pieces: list[tuple[int, tuple[str, ...]]] = []
    for b in plan.blocks:
        slots = tuple(plan.slot(i).name for i in b.nodes if plan.slot(i).name in todo)
        if slots:
            pieces.extend(_pieces(plan, b.id, slots, allowed))
    covered = {s for _b, slots in pieces for s in slots}
    stray = sorted(todo - covered)  # slots outside every block (spares): a group of their own at the end
    groups: list[Group] = []
    i, size = 0, 1
    while i < len(pieces):
        chosen: list[tuple[int, tuple[str, ...]]] = [pieces[i]]
        i += 1
        while i < len(pieces) and len(chosen) < size:
            if not _within(plan, {s for _b, ss in (*chosen, pieces[i]) for s in ss}, allowed):
                break
            chosen.append(pieces[i])
            i += 1
        slots = tuple(s for _b, ss in chosen for s in ss)
        blocks = tuple(dict.fromkeys(b for b, _s in chosen))
        groups.append(Group(len(groups) + 1, blocks, slots, units_out(plan, set(slots))))
        size = max(1, math.ceil(len(chosen) * cfg.group_growth))
    if stray:
        groups.append(Group(len(groups) + 1, (), tuple(stray), units_out(plan, set(stray))))
    return groups


def sequential_groups(todo: list[str]) -> list[tuple[str, ...]]:
    """The baseline the bench compares with: node by node, one at a time."""
    return [(s,) for s in todo]
