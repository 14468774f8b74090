"""Which nodes an upgrade changes, and in which groups: pure.

Why whole blocks: a block is the placement unit jobs are scheduled on (topology-aware), so taking a
whole block out costs the same units as taking part of it, and the group's baselines compare like
with like. The canary group is one block; each later group has `groupGrowth` times the blocks of
the one before, capped so that no partition ever has more than its `maxUnavailableUnits` units
out of service at once (groups run one after another, so a group's units are the only ones out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from infra.errors import ConfigError
from infra.plan.model import ClusterPlan
from infra.spec import UpgradeConfig


@dataclass(frozen=True)
class Group:
    number: int
    blocks: tuple[int, ...]
    slots: tuple[str, ...]
    units: Mapping[str, int]  # partition -> units this group takes out of service

    @property
    def canary(self) -> bool:
        return self.number == 1


def limits(plan: ClusterPlan, cfg: UpgradeConfig) -> dict[str, int]:
    """Per partition: the most units it may have out of service at once. Unless set explicitly, the
    fraction of its units, but never less than its largest block (a block is the smallest group)."""
    largest: dict[str, int] = {}
    for b in plan.blocks:
        per: dict[str, int] = {}
        for u in b.units:
            part = plan.units[u].partition
            if part is not None:
                per[part] = per.get(part, 0) + 1
        for part, n in per.items():
            largest[part] = max(largest.get(part, 0), n)
    return {p.name: cfg.max_unavailable_units.get(
        p.name, max(1, math.floor(p.units * cfg.max_unavailable_fraction), largest.get(p.name, 0)))
        for p in plan.partitions}


def units_out(plan: ClusterPlan, slots: set[str]) -> dict[str, int]:
    """Per partition, the units with at least one node among `slots` (such a unit cannot run a job)."""
    index = {n.name: i for i, n in enumerate(plan.nodes)}
    taken = {index[s] for s in slots if s in index}
    out: dict[str, int] = {}
    for u in plan.units:
        if u.partition is not None and taken.intersection(u.nodes):
            out[u.partition] = out.get(u.partition, 0) + 1
    return out


def plan_groups(plan: ClusterPlan, todo: set[str], cfg: UpgradeConfig) -> list[Group]:
    """Groups of whole blocks over the blocks holding a node in `todo`, canary first."""
    allowed = limits(plan, cfg)
    blocks = []
    for b in plan.blocks:
        slots = tuple(plan.nodes[i].name for i in b.nodes if plan.nodes[i].name in todo)
        if slots:
            blocks.append((b.id, slots))
    covered = {s for _b, slots in blocks for s in slots}
    stray = sorted(todo - covered)  # slots outside every block (spares): a group of their own at the end
    for bid, slots in blocks:
        out = units_out(plan, set(slots))
        over = {p: n for p, n in out.items() if n > allowed.get(p, 0)}
        if over:
            p, n = next(iter(over.items()))
            raise ConfigError(f"block {bid} alone takes {n} units of partition {p} out of service, more than the "
                              f"{allowed.get(p, 0)} allowed", field="gpufleet:upgrade.maxUnavailableUnits",
                              expected=f"at least {n} for partition {p} (whole blocks are upgraded together)")
    groups: list[Group] = []
    i, size = 0, 1
    while i < len(blocks):
        chosen: list[tuple[int, tuple[str, ...]]] = [blocks[i]]
        i += 1
        while i < len(blocks) and len(chosen) < size:
            trial = {s for _b, ss in (*chosen, blocks[i]) for s in ss}
            if any(n > allowed.get(p, 0) for p, n in units_out(plan, trial).items()):
                break
            chosen.append(blocks[i])
            i += 1
        slots = tuple(s for _b, ss in chosen for s in ss)
        groups.append(Group(len(groups) + 1, tuple(b for b, _s in chosen), slots, units_out(plan, set(slots))))
        size = max(1, math.ceil(len(chosen) * cfg.group_growth))
    if stray:
        groups.append(Group(len(groups) + 1, (), tuple(stray), units_out(plan, set(stray))))
    return groups


def sequential_groups(todo: list[str]) -> list[tuple[str, ...]]:
    """The baseline the bench compares with: node by node, one at a time."""
    return [(s,) for s in todo]
