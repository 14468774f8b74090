"""Staged batches on block boundaries: a canary first, then batches of about `batchSize` nodes.

A batch boundary never cuts a block, so a block's units are gated and admitted together.
"""

from __future__ import annotations

import math

from gpufleet.findings import Finding, info, warning
from gpufleet.plan.model import Batch


def plan_batches(nodes: int, nodes_per_block: int, canary_fraction: float,
                 batch_size: int, smoke_nodes: int = 1) -> tuple[list[Batch], list[Finding]]:
    """The canary holds at least the smoke job's `smoke_nodes` (as far as the cluster has them):
    the smoke job runs on the canary, and a canary smaller than it halts every rollout there."""
    findings: list[Finding] = []
    blocks = math.ceil(nodes / nodes_per_block)
    canary_blocks = min(blocks, max(1, math.ceil(canary_fraction * nodes / nodes_per_block)))
    smoke_blocks = min(blocks, math.ceil(min(smoke_nodes, nodes) / nodes_per_block))
    if smoke_blocks > canary_blocks:
        findings.append(info("CANARY_SIZED_FOR_SMOKE", "gpufleet:rollout.canaryFraction",
                             f"canaryFraction {canary_fraction:g} gives {canary_blocks * nodes_per_block} canary "
                             f"node(s); the canary holds {smoke_blocks * nodes_per_block} so that the smoke job's "
                             f"{smoke_nodes} nodes (acceptance.smokeNodes) run on it"))
        canary_blocks = smoke_blocks
    per_batch = max(1, batch_size // nodes_per_block)
    if batch_size < nodes_per_block:
        findings.append(warning("BATCH_SMALLER_THAN_BLOCK", "gpufleet:rollout.batchSize",
                                f"batchSize {batch_size} is below one block of {nodes_per_block} nodes; "
                                f"batches hold one block each"))
    elif batch_size % nodes_per_block:
        findings.append(info("BATCH_ROUNDED_TO_BLOCKS", "gpufleet:rollout.batchSize",
                             f"batchSize {batch_size} rounded down to {per_batch * nodes_per_block} nodes "
                             f"({per_batch} blocks of {nodes_per_block})"))
    batches: list[Batch] = []
    start = 0
    size = canary_blocks
    while start < blocks:
        end = min(blocks, start + size)
        batches.append(Batch(number=len(batches) + 1, canary=not batches, blocks=tuple(range(start, end)),
                             first_node=start * nodes_per_block,
                             last_node=min(nodes, end * nodes_per_block) - 1))
        start = end
        size = per_batch
    return batches, findings


def batch_of_block(batches: list[Batch]) -> dict[int, int]:
    return {b: batch.number for batch in batches for b in batch.blocks}
