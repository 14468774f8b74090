"""Nodes, blocks and units: how units of work sit on nodes, and what one node failure costs.

Units are packed in GPU order, so with blocks of lcm(unit, node GPUs) GPUs no unit ever
crosses a block boundary: 10-GPU units on 8-GPU nodes give 5-node blocks of 4 units.
A node's blast radius is the number of units with a GPU on it.
"""

from __future__ import annotations

import math
from typing import Mapping

from gpufleet.findings import Finding, error, info, warning
from gpufleet.plan.model import Block, NodeSlot, Topology, Unit, UnitAlternative

SLOT_INDEX_WIDTH = 5  # fixed, so a growing cluster never renames its existing slots
BLOCK_INDEX_WIDTH = 4


def slot_name(cluster: str, block: int, index: int) -> str:
    return f"{cluster}-b{block:0{BLOCK_INDEX_WIDTH}d}-n{index:0{SLOT_INDEX_WIDTH}d}"


def block_shape(unit_gpus: int, gpus_per_node: int) -> tuple[int, int, int]:
    """(block GPUs, nodes per block, units per block)."""
    block_gpus = math.lcm(unit_gpus, gpus_per_node)
    return block_gpus, block_gpus // gpus_per_node, block_gpus // unit_gpus


def units_on_nodes(unit_gpus: int, gpus_per_node: int, nodes: int) -> list[list[tuple[int, int]]]:
    """For each unit, its (node, local GPU) pairs, packing units in GPU order."""
    units = nodes * gpus_per_node // unit_gpus
    return [[divmod(g, gpus_per_node) for g in range(u * unit_gpus, (u + 1) * unit_gpus)] for u in range(units)]


def max_blast_radius(unit_gpus: int, gpus_per_node: int, nodes: int | None = None) -> int:
    """Most units one node failure kills. One full block shows it (all full blocks are alike);
    a cluster smaller than a block is laid out as it is."""
    _, nodes_per_block, _ = block_shape(unit_gpus, gpus_per_node)
    count = nodes_per_block if nodes is None else min(nodes, nodes_per_block)
    per_node: list[set[int]] = [set() for _ in range(count)]
    for unit, gpus in enumerate(units_on_nodes(unit_gpus, gpus_per_node, count)):
        for node, _ in gpus:
            per_node[node].add(unit)
    return max((len(s) for s in per_node), default=0)


def alternative(unit_gpus: int, gpus_per_node: int, total_gpus: int) -> UnitAlternative:
    _, npb, upb = block_shape(unit_gpus, gpus_per_node)
    return UnitAlternative(unit_gpus=unit_gpus, units=total_gpus // unit_gpus, nodes_per_block=npb,
                           units_per_block=upb, max_blast_radius=max_blast_radius(unit_gpus, gpus_per_node))


def build_topology(cluster: str, target_gpus: int, unit_gpus: int, gpus_per_node: int,
                   spare_fraction: float) -> tuple[Topology, list[Finding]]:
    """The cluster's shape (counts, block geometry, blast radius) and its findings."""
    findings: list[Finding] = []
    nodes = math.ceil(target_gpus / gpus_per_node)
    spare_nodes = math.ceil(nodes * spare_fraction)
    block_gpus, npb, upb = block_shape(unit_gpus, gpus_per_node)
    gpus = nodes * gpus_per_node
    unit_count = gpus // unit_gpus
    if unit_gpus > gpus:
        findings.append(error("UNIT_LARGER_THAN_CLUSTER", "gpufleet:cluster.unitGpus",
                              f"a unit of {unit_gpus} GPUs does not fit in {nodes} node(s) of {gpus_per_node} GPUs "
                              f"({gpus} GPUs); lower unitGpus or raise targetGpus"))
    if gpus != target_gpus:
        findings.append(info("GPUS_ROUNDED_UP", "gpufleet:cluster.targetGpus",
                             f"{target_gpus} GPUs need {nodes} whole nodes = {gpus} GPUs"))
    idle = gpus - unit_count * unit_gpus
    if idle and unit_count:
        findings.append(info("IDLE_GPUS", "gpufleet:cluster.targetGpus",
                             f"{idle} GPU(s) on the last block carry no unit ({unit_count} units of {unit_gpus})"))
    blast = max_blast_radius(unit_gpus, gpus_per_node, nodes)
    shares = unit_gpus % gpus_per_node != 0
    alternatives: tuple[UnitAlternative, ...] = ()
    if shares and unit_count:
        aligned = sorted({gpus_per_node, 2 * gpus_per_node} - {unit_gpus})
        alternatives = tuple(alternative(a, gpus_per_node, gpus) for a in aligned)
        alt_text = "; ".join(f"{a.unit_gpus}-GPU units: {a.units} units, blast radius {a.max_blast_radius}"
                             for a in alternatives)
        findings.append(warning(
            "UNITS_SHARE_NODES", "gpufleet:cluster.unitGpus",
            f"{unit_gpus}-GPU units on {gpus_per_node}-GPU nodes share nodes: blocks of {npb} nodes hold {upb} units, "
            f"one node failure kills up to {blast} units, and model parallelism inside a unit crosses EFA. "
            f"Aligned alternatives: {alt_text}"))
    topology = Topology(gpus_per_node=gpus_per_node, unit_gpus=unit_gpus, block_gpus=block_gpus, nodes_per_block=npb,
                        units_per_block=upb, nodes=nodes, spare_nodes=spare_nodes, blocks=math.ceil(nodes / npb),
                        units=unit_count, usable_gpus=unit_count * unit_gpus, idle_gpus=idle,
                        max_blast_radius=blast, units_share_nodes=shares, alternatives=alternatives)
    return topology, findings


def layout(cluster: str, topo: Topology, block_batch: Mapping[int, int],
           block_partition: Mapping[int, str]) -> tuple[list[NodeSlot], list[Unit], list[Block]]:
    """Slots, units and blocks. Built once with model_construct: the values are ours, already valid."""
    npb, upb = topo.nodes_per_block, topo.units_per_block
    unit_pairs = units_on_nodes(topo.unit_gpus, topo.gpus_per_node, topo.nodes)
    node_units: list[list[int]] = [[] for _ in range(topo.nodes)]
    units: list[Unit] = []
    for u, pairs in enumerate(unit_pairs):
        unit_nodes = tuple(sorted({n for n, _ in pairs}))
        for n in unit_nodes:
            node_units[n].append(u)
        block = pairs[0][0] // npb
        units.append(Unit.model_construct(id=u, block=block, nodes=unit_nodes, gpus=tuple(pairs),
                                          partition=block_partition.get(block)))
    slots = [NodeSlot.model_construct(name=slot_name(cluster, i // npb, i), index=i, block=i // npb,
                                      batch=block_batch[i // npb], units=tuple(node_units[i]))
             for i in range(topo.nodes)]
    blocks = [Block.model_construct(id=b, nodes=tuple(range(b * npb, min((b + 1) * npb, topo.nodes))),
                                    units=tuple(range(b * upb, min((b + 1) * upb, topo.units))),
                                    partition=block_partition.get(b))
              for b in range(topo.blocks)]
    return slots, units, blocks
