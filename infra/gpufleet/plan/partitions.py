"""Partitions on whole blocks, so a node failure never touches two partitions.

Requests are in units (GPUs are converted up to whole units). When the requests rounded up
to whole blocks fit, each partition gets that; when only the exact unit counts fit, blocks
are apportioned by largest remainder and the rounding is reported; when even the units do
not fit, it is an ERROR.
"""

from __future__ import annotations

import math
from typing import Sequence

from gpufleet.findings import Finding, error, info, warning
from gpufleet.plan.model import PartitionAllocation
from gpufleet.spec import Partition, PartitionMode


def requested_units(p: Partition, unit_gpus: int) -> int:
    return p.units if p.units is not None else math.ceil(p.gpus / unit_gpus)


def allocate(partitions: Sequence[Partition], units: int, blocks: int, units_per_block: int,
             unit_gpus: int) -> tuple[list[PartitionAllocation], list[Finding]]:
    findings: list[Finding] = []
    if not partitions:
        return [], [info("NO_PARTITIONS", "gpufleet:partitions", "no partitions: the whole pool is one queue")]
    requests = [requested_units(p, unit_gpus) for p in partitions]
    for i, p in enumerate(partitions):
        if p.gpus is not None and p.gpus % unit_gpus:
            findings.append(warning("PARTITION_GPUS_NOT_UNITS", f"gpufleet:partitions[{i}].gpus",
                                    f"{p.gpus} GPUs is not a whole number of {unit_gpus}-GPU units; "
                                    f"rounded up to {requests[i]} units"))
    total = sum(requests)
    if total > units:
        findings.append(error("PARTITIONS_EXCEED_CLUSTER", "gpufleet:partitions",
                              f"partitions ask for {total} units ({total * unit_gpus} GPUs) but the cluster has "
                              f"{units} units ({units * unit_gpus} GPUs)"))
        return [], findings

    whole = [math.ceil(r / units_per_block) for r in requests]
    if sum(whole) <= blocks:
        block_counts = whole
    else:
        block_counts = _largest_remainder([r / units_per_block for r in requests], blocks)
    allocations: list[PartitionAllocation] = []
    next_block = 0
    units_left = units
    for i, (p, req, count) in enumerate(zip(partitions, requests, block_counts)):
        block_ids = tuple(range(next_block, next_block + count))
        next_block += count
        got = min(count * units_per_block, units_left)
        units_left -= got
        if got != req:
            findings.append(warning("PARTITION_ROUNDED_TO_BLOCKS", f"gpufleet:partitions[{i}]",
                                    f"{p.name}: {req} units requested, {got} units on {count} whole block(s) "
                                    f"of {units_per_block} units"))
        if count == 0:
            findings.append(error("PARTITION_EMPTY", f"gpufleet:partitions[{i}]",
                                  f"{p.name}: {req} unit(s) do not fill any whole block of {units_per_block} units"))
        quota = p.quota_units
        if quota is not None and quota > got:
            findings.append(warning("QUOTA_EXCEEDS_SHARE", f"gpufleet:partitions[{i}].quotaUnits",
                                    f"{p.name}: quota {quota} units exceeds its {got} units; the excess can only "
                                    "be borrowed from other partitions"))
        if p.mode is PartitionMode.DATA_PARALLEL and got:
            findings.append(info("DATA_PARALLEL_JOB", f"gpufleet:partitions[{i}]",
                                 f"{p.name}: one job over {got} units; a node failure stops the job, "
                                 "restart from checkpoint on the remaining blocks"))
        allocations.append(PartitionAllocation(name=p.name, mode=p.mode.value, requested_units=req, units=got,
                                               blocks=block_ids, gpus=got * unit_gpus, priority=p.priority,
                                               quota_units=quota))
    quota_total = sum(p.quota_units or 0 for p in partitions)
    if quota_total > units:
        findings.append(error("QUOTAS_EXCEED_CLUSTER", "gpufleet:partitions",
                              f"quotas add up to {quota_total} units, more than the cluster's {units}"))
    if next_block < blocks:
        findings.append(info("UNASSIGNED_BLOCKS", "gpufleet:partitions",
                             f"{blocks - next_block} block(s) belong to no partition"))
    return allocations, findings


def _largest_remainder(shares: Sequence[float], total: int) -> list[int]:
    """Integers summing to at most `total`, each within 1 of its share (Hamilton's method)."""
    floors = [math.floor(s) for s in shares]
    left = total - sum(floors)
    order = sorted(range(len(shares)), key=lambda i: (-(shares[i] - floors[i]), i))
    for i in order[:max(left, 0)]:
        if shares[i] > floors[i]:
            floors[i] += 1
    return floors
