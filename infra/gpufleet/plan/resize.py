"""Grow and shrink a rolled-out cluster by whole blocks (issue 23 item 1), decided purely.

Why a decision of its own: a plan built afresh for a new `targetGpus` re-slices everything (a
bigger cluster gets a bigger canary, so every existing slot would change batch). A rollout that
has already admitted nodes must keep them exactly where they are, so the layout the journal
recorded is the fixed part and only whole blocks move:

- grow: the new plan's blocks past the recorded ones are appended, their slots new batches of
  `rollout.batchSize` (rounded to blocks) numbered after the existing batches; every recorded
  slot keeps its name, index, block, batch and partition. A change that would move one (a
  partition taking another's block, another unit or instance size, a partial last block being
  filled) is refused, naming the field and the slots it would move.
- shrink: whole blocks are released, the emptiest first (fewest busy nodes, then fewest running
  jobs, then the highest block id), as long as the cluster keeps at least the new target's nodes
  and every partition keeps the units it asks for; a cut smaller than a block, or one the
  partitions' minimums forbid, is refused naming the field.
- unchanged: the recorded layout, as it is (after a shrink it has gaps; that is fine).
Any other layout change keeps the rollout's old refusal (or --restart).

Slot names (`gpufleet.plan.topology.slot_name`: block and node index, fixed widths) never
depend on the node count, so appended blocks never rename existing slots.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from gpufleet.errors import ConfigError
from gpufleet.plan.model import Batch, Block, ClusterPlan, NodeSlot, PartitionAllocation
from gpufleet.plan.topology import layout as build_layout

# slot name -> (node index, block, batch, partition): what a journal records of its layout
RecordedSlots = Mapping[str, tuple[int, int, int, "str | None"]]

LAYOUT_FIELDS = "gpufleet:cluster / gpufleet:rollout"
RESTART = "the layout the journal was started with (or whole blocks more or fewer), or --restart to archive it"


def layout_digest(slots: Iterable[NodeSlot]) -> str:
    """What a journal is only valid for: the slots, their batches and blocks."""
    text = "\n".join(f"{s.name} {s.batch} {s.block}" for s in slots)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def recorded_digest(recorded: RecordedSlots) -> str:
    """The digest `layout_digest` gives the recorded layout's slots (in node order)."""
    text = "\n".join(f"{name} {batch} {block}" for name, (_i, block, batch, _p) in
                     sorted(recorded.items(), key=lambda kv: kv[1][0]))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def record_of(plan: ClusterPlan) -> dict[str, list[Any]]:
    """The plan's layout as the journal records it (JSON: lists, not tuples)."""
    part = {b.id: b.partition for b in plan.blocks}
    return {s.name: [s.index, s.block, s.batch, part.get(s.block)] for s in plan.nodes}


def read_record(raw: Mapping[str, Sequence[Any]]) -> dict[str, tuple[int, int, int, str | None]]:
    return {str(k): (int(v[0]), int(v[1]), int(v[2]), None if v[3] is None else str(v[3])) for k, v in raw.items()}


@dataclass(frozen=True)
class Resize:
    """What `decide` found: the plan the rollout runs on now, and what changes."""

    kind: str  # "unchanged" | "grow" | "shrink"
    plan: ClusterPlan  # the effective plan: the recorded layout, plus or minus whole blocks
    added: tuple[NodeSlot, ...] = ()  # grow: the new slots (new batches)
    released: tuple[NodeSlot, ...] = ()  # shrink: the recorded slots leaving (whole blocks)
    released_blocks: tuple[int, ...] = ()
    new_batches: tuple[int, ...] = ()
    from_nodes: int = 0
    to_nodes: int = 0
    block_partition: Mapping[int, str | None] | None = None  # of every block named above
    fresh: str = ""  # digest of the fresh plan decided for

    @property
    def changed(self) -> bool:
        return self.kind != "unchanged"

    @property
    def basis(self) -> str:
        """The digest of the fresh plan this resize was decided for (see `decide`)."""
        return self.fresh

    def event(self) -> dict[str, Any]:
        """The journal's `resize` event (before any node moves): enough to resume it."""
        part = dict(self.block_partition or {})
        return {"type": "resize", "to": "started", "kind": self.kind, "layout": layout_digest(self.plan.nodes),
                "slots": record_of(self.plan), "basis": self.fresh, "from_nodes": self.from_nodes, "to_nodes": self.to_nodes,
                "added": [s.name for s in self.added], "new_batches": list(self.new_batches),
                "released": {s.name: [s.index, s.block, s.batch, part.get(s.block)] for s in self.released},
                "released_blocks": list(self.released_blocks)}


def decide(recorded: RecordedSlots, plan: ClusterPlan, batch_size: int,
           busy: Mapping[str, int] | None = None, basis: str | None = None) -> Resize:
    """The resize from the recorded layout to the new plan (see the module docstring).

    `busy`: running jobs per slot, from the pool (a shrink releases the emptiest blocks first);
    a slot absent from it runs nothing. `basis`: the digest of the fresh plan the recorded layout
    was last resized for (`Resize.basis`): the same plan again means nothing changed. Raises
    ConfigError for a change that would move a slot."""
    topo = plan.topology
    old_n = len(recorded)
    if not recorded:
        return Resize("unchanged", plan, from_nodes=topo.nodes, to_nodes=topo.nodes)
    indexes = sorted(i for i, *_ in recorded.values())
    gaps = indexes != list(range(old_n))
    fresh = layout_digest(plan.nodes)
    same = recorded_digest(recorded) == fresh
    if same and not gaps:
        return Resize("unchanged", plan, from_nodes=old_n, to_nodes=old_n)
    span = indexes[-1] + 1
    full, units, blocks = _hypothetical(plan, max(span, topo.nodes), recorded)
    _same_names(recorded, full, plan)
    block_nodes: dict[int, list[str]] = {}
    for name, (_i, block, _b, _p) in recorded.items():
        block_nodes.setdefault(block, []).append(name)
    if basis == fresh:  # the plan this layout was resized for: it stands as recorded
        return Resize("unchanged", _effective(plan, recorded, full, units, blocks), from_nodes=old_n,
                      to_nodes=old_n)
    if topo.nodes == old_n:
        raise ConfigError("the stack's layout (slots, batches, blocks) changed since this rollout started",
                          field=LAYOUT_FIELDS, expected=RESTART)
    if topo.nodes > old_n:
        r = _grow(recorded, plan, batch_size, full, units, blocks, gaps, old_n)
    else:
        r = _shrink(recorded, plan, busy or {}, full, units, blocks, block_nodes, old_n)
    return replace(r, fresh=fresh)


def standing(recorded: RecordedSlots, plan: ClusterPlan) -> ClusterPlan:
    """The cluster as the journal records it, in the plan's geometry: what a command that shows or
    serves the pool must work on (`gpufleet pool`, `pool up`) while the stack file already asks for
    another size the next rollout will grow or shrink to. Raises ConfigError when the geometry
    changed (another unit size, instance type or cluster name)."""
    if not recorded:
        return plan
    span = max(i for i, *_ in recorded.values()) + 1
    full, units, blocks = _hypothetical(plan, max(span, plan.topology.nodes), recorded)
    _same_names(recorded, full, plan)
    return _effective(plan, recorded, full, units, blocks)


LAYOUT_FIELD = "gpufleet:rollout.layout"
LAYOUT_FORMAT = 1


def encode_layout(plan: ClusterPlan) -> str:
    """The effective plan's layout as the Pulumi program takes it (`gpufleet:rollout.layout`, set by
    the rollout once a cluster was grown or shrunk): runs of consecutive blocks sharing batch and
    partition, `[first, last, batch, partition]`. Why the program needs it: its own fresh plan
    would re-slice a grown cluster's batches and keep a shrink's released blocks; with it, the
    program registers exactly the slots the rollout's journal has, in the rollout's batches."""
    import json

    batch_of = {s.block: s.batch for s in plan.nodes}
    runs: list[list[Any]] = []
    for b in sorted(plan.blocks, key=lambda b: b.id):
        if b.id not in batch_of:
            continue
        here = [b.id, b.id, batch_of[b.id], b.partition]
        if runs and runs[-1][1] + 1 == b.id and runs[-1][2:] == here[2:]:
            runs[-1][1] = b.id
        else:
            runs.append(here)
    return json.dumps({"format": LAYOUT_FORMAT, "blocks": runs}, separators=(",", ":"))


def decode_layout(text: str, plan: ClusterPlan) -> ClusterPlan:
    """The plan over exactly the layout's blocks, in the plan's geometry (`encode_layout`'s inverse).
    A malformed layout, or one the geometry cannot hold, is a ConfigError naming the field."""
    import json

    def bad(why: str) -> ConfigError:
        return ConfigError(f"{LAYOUT_FIELD} is malformed: {why}", field=LAYOUT_FIELD,
                           expected=f"the format-{LAYOUT_FORMAT} layout `gpufleet rollout` writes (never set by hand; "
                                    "remove it to make the program lay the stack out afresh)")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise bad(f"not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != LAYOUT_FORMAT or not isinstance(doc.get("blocks"), list):
        raise bad("no format-1 object with a `blocks` list")
    wanted: dict[int, tuple[int, str | None]] = {}
    for run in doc["blocks"]:
        if (not isinstance(run, list) or len(run) != 4 or not all(isinstance(v, int) and not isinstance(v, bool)
                                                                   for v in run[:3])
                or not (run[3] is None or isinstance(run[3], str)) or not 0 <= run[0] <= run[1] or run[2] < 1):
            raise bad(f"run {run!r} is not [first block, last block, batch >= 1, partition or null]")
        for b in range(run[0], run[1] + 1):
            if b in wanted:
                raise bad(f"block {b} appears twice")
            wanted[b] = (run[2], run[3])
    if not wanted:
        raise bad("no block")
    npb = plan.topology.nodes_per_block
    span = (max(wanted) + 1) * npb
    full, _units, blocks = _hypothetical(plan, max(span, plan.topology.nodes), {})
    recorded = {name: (s.index, s.block, wanted[s.block][0], wanted[s.block][1])
                for name, s in full.items() if s.block in wanted}
    missing = sorted(set(wanted) - {s.block for s in full.values()})
    if missing:
        raise bad(f"block(s) {missing[:5]} do not exist in this geometry")
    return standing(recorded, plan)


# ------------------------------------------------------------------------------ grow

def _grow(recorded: RecordedSlots, plan: ClusterPlan, batch_size: int, full: dict[str, NodeSlot],
          units: Any, blocks: dict[int, Block], gaps: bool, old_n: int) -> Resize:
    npb = plan.topology.nodes_per_block
    if gaps:
        raise ConfigError("the cluster was shrunk before (whole blocks released, their slot names retired): "
                          "growing it again would reuse those names", field="gpufleet:cluster.targetGpus",
                          expected=f"{old_n} nodes' worth of GPUs or fewer, or --restart to archive the journal")
    if old_n % npb:
        last = max(b for _i, b, _k, _p in recorded.values())
        raise ConfigError(f"the last block ({last}) holds {old_n % npb} of {npb} nodes: growing would add nodes to "
                          "an existing block (and batch), moving its units", field="gpufleet:cluster.targetGpus",
                          expected=f"the previous targetGpus, or --restart; a cluster grows by whole blocks of "
                                   f"{npb} nodes only from full blocks")
    planned_part = {b.id: b.partition for b in plan.blocks}
    moved = sorted({(b, p, planned_part.get(b)) for _n, (_i, b, _k, p) in recorded.items()
                    if planned_part.get(b) != p})
    if moved:
        b, was, now = moved[0]
        field = _partition_field(plan, was or now)
        raise ConfigError(f"the new plan moves {len(moved)} existing block(s) to another partition, e.g. block {b} "
                          f"from {was or 'no partition'} to {now or 'no partition'}: its admitted slots would move",
                          field=field, expected="partitions whose existing blocks stay theirs: new blocks go to the "
                                                "end (raise the last partition, or add a partition), or --restart")
    old_blocks = old_n // npb
    last_batch = max(k for _i, _b, k, _p in recorded.values())
    per_batch = max(1, batch_size // npb)
    new_block_ids = list(range(old_blocks, plan.topology.blocks))
    batch_of = {b: last_batch + 1 + j // per_batch for j, b in enumerate(new_block_ids)}
    merged: dict[str, tuple[int, int, int, str | None]] = dict(recorded)
    added = []
    for s in plan.nodes:
        if s.block in batch_of:
            merged[s.name] = (s.index, s.block, batch_of[s.block], planned_part.get(s.block))
            added.append(full[s.name].model_copy(update={"batch": batch_of[s.block]}))
    eff = _effective(plan, merged, full, units, blocks)
    return Resize("grow", eff, added=tuple(added), new_batches=tuple(sorted(set(batch_of.values()))),
                  from_nodes=old_n, to_nodes=len(merged), block_partition={b: planned_part.get(b) for b in batch_of})


# ------------------------------------------------------------------------------ shrink

def _shrink(recorded: RecordedSlots, plan: ClusterPlan, busy: Mapping[str, int], full: dict[str, NodeSlot],
            units: Any, blocks: dict[int, Block], block_nodes: dict[int, list[str]], old_n: int) -> Resize:
    target = plan.topology.nodes
    part_of = {b: recorded[names[0]][3] for b, names in block_nodes.items()}
    units_of = {b: len(blocks[b].units) for b in block_nodes}
    need = {p.name: p.requested_units for p in plan.partitions}
    have: dict[str | None, int] = {}
    for b, u in units_of.items():
        have[part_of[b]] = have.get(part_of[b], 0) + u

    def emptiness(b: int) -> tuple[int, int, int]:
        names = block_nodes[b]
        return (sum(1 for n in names if busy.get(n, 0) > 0), sum(busy.get(n, 0) for n in names), -b)

    left = old_n
    released: list[int] = []
    held_by: dict[str, int] = {}  # partition -> blocks its minimum kept
    for b in sorted(block_nodes, key=emptiness):
        size = len(block_nodes[b])
        if left - size < target:
            continue
        p = part_of[b]
        if p is not None and have.get(p, 0) - units_of[b] < need.get(p, 0):
            held_by[p] = held_by.get(p, 0) + 1
            continue
        released.append(b)
        left -= size
        if p is not None:
            have[p] -= units_of[b]
    if not released:
        if held_by:
            p = sorted(held_by)[0]
            raise ConfigError(f"lowering the target to {target} nodes would release blocks of partition {p}, below "
                              f"the {need[p]} units it asks for", field=_partition_field(plan, p),
                              expected="a lower partition size first, or a target the other blocks can cover")
        smallest = min(len(v) for v in block_nodes.values())
        raise ConfigError(f"lowering the target from {old_n} to {target} nodes releases less than one whole block "
                          f"({smallest} nodes): a cluster shrinks by whole blocks only",
                          field="gpufleet:cluster.targetGpus",
                          expected=f"a target at least {smallest * plan.topology.gpus_per_node} GPUs lower, "
                                   "or the previous one")
    kept_units = sum(u for b, u in units_of.items() if b not in released)
    quotas = sum(p.quota_units or 0 for p in plan.partitions)
    if quotas > kept_units:
        raise ConfigError(f"after releasing blocks {released} the cluster keeps {kept_units} units, below the "
                          f"partitions' quotas ({quotas} units)", field="gpufleet:partitions[].quotaUnits",
                          expected=f"quotas adding up to at most {kept_units} units, or a higher target")
    gone = {n for b in released for n in block_nodes[b]}
    kept = {n: v for n, v in recorded.items() if n not in gone}
    eff = _effective(plan, kept, full, units, blocks)
    slots = tuple(sorted((full[n].model_copy(update={"batch": recorded[n][2]}) for n in gone), key=lambda s: s.index))
    return Resize("shrink", eff, released=slots, released_blocks=tuple(sorted(released)), from_nodes=old_n,
                  to_nodes=len(kept), block_partition={b: part_of[b] for b in released})


# ------------------------------------------------------------------------------ the effective plan

def _hypothetical(plan: ClusterPlan, nodes: int, recorded: RecordedSlots) -> tuple[dict[str, NodeSlot], Any,
                                                                                      dict[int, Block]]:
    """Slots, units and blocks of a cluster of `nodes` nodes in the plan's geometry (slot names
    and unit ids depend only on it), each block in its recorded partition, else the plan's."""
    t = plan.topology
    topo = t.model_copy(update={"nodes": nodes, "blocks": math.ceil(nodes / t.nodes_per_block),
                                "units": nodes * t.gpus_per_node // t.unit_gpus})
    part: dict[int, str | None] = {b.id: b.partition for b in plan.blocks}
    for _n, (_i, block, _k, p) in recorded.items():
        part[block] = p
    batch = {b: 0 for b in range(topo.blocks)}
    slots, units, blocks = build_layout(plan.cluster, topo, batch, {b: p for b, p in part.items() if p is not None})
    return {s.name: s for s in slots}, units, {b.id: b for b in blocks}


def _same_names(recorded: RecordedSlots, full: Mapping[str, NodeSlot], plan: ClusterPlan) -> None:
    """Every recorded slot is where the plan's geometry puts it; else the geometry moved it."""
    moved = [n for n, (i, b, _k, _p) in recorded.items() if n not in full or (full[n].index, full[n].block) != (i, b)]
    if moved:
        raise ConfigError(f"the new plan renames or moves {len(moved)} existing slot(s), e.g. {sorted(moved)[0]} "
                          f"(blocks are now {plan.topology.nodes_per_block} nodes of {plan.instance_type})",
                          field="gpufleet:cluster.unitGpus / cluster.instanceType / cluster.name",
                          expected="the unit size, instance type and cluster name the rollout started with, "
                                   "or --restart")


def _effective(plan: ClusterPlan, slots: RecordedSlots, full: Mapping[str, NodeSlot], units: Any,
               blocks: Mapping[int, Block]) -> ClusterPlan:
    """The plan over exactly `slots` (recorded batches kept), batches numbered 1..K contiguously
    (a batch a shrink emptied stays, with no node, so batch k is still `plan.batches[k - 1]`)."""
    ordered = sorted(slots.items(), key=lambda kv: kv[1][0])
    nodes = tuple(full[n].model_copy(update={"batch": k}) for n, (_i, _b, k, _p) in ordered)
    block_ids = sorted({b for _n, (_i, b, _k, _p) in ordered})
    part = {b: None for b in block_ids} | {b: p for _n, (_i, b, _k, p) in ordered}
    kept_blocks = tuple(blocks[b].model_copy(update={"partition": part[b]}) for b in block_ids)
    kept_units = tuple(u.model_copy(update={"partition": part[u.block]}) for u in units if u.block in part)
    batches: list[Batch] = []
    last = max((s.batch for s in nodes), default=0)
    pos = 0
    for k in range(1, last + 1):
        members = [s for s in nodes if s.batch == k]
        first = pos
        pos += len(members)
        batches.append(Batch(number=k, canary=k == 1, blocks=tuple(sorted({s.block for s in members})),
                             first_node=first, last_node=pos - 1))
    allocations = []
    by_name = {p.name: p for p in plan.partitions}
    for name in [p.name for p in plan.partitions] + sorted({p for p in part.values() if p and p not in by_name}):
        mine = tuple(b for b in block_ids if part[b] == name)
        got = sum(1 for u in kept_units if u.partition == name)
        src = by_name.get(name)
        allocations.append(PartitionAllocation(
            name=name, mode=src.mode if src else "independent", requested_units=src.requested_units if src else got,
            units=got, blocks=mine, gpus=got * plan.topology.unit_gpus, priority=src.priority if src else 0,
            quota_units=src.quota_units if src else None))
    t = plan.topology
    topo = t.model_copy(update={"nodes": len(nodes), "blocks": len(block_ids), "units": len(kept_units),
                                "usable_gpus": len(kept_units) * t.unit_gpus,
                                "idle_gpus": len(nodes) * t.gpus_per_node - len(kept_units) * t.unit_gpus})
    return plan.model_copy(update={"nodes": nodes, "units": kept_units, "blocks": kept_blocks, "batches": tuple(batches),
                                   "partitions": tuple(allocations), "topology": topo})


def _partition_field(plan: ClusterPlan, name: str | None) -> str:
    for i, p in enumerate(plan.partitions):
        if p.name == name:
            return f"gpufleet:partitions[{i}].gpus"
    return "gpufleet:partitions"


def add_changes(builder: Any, resize: Resize, usd_per_hour: float | None = None,
                instances: Mapping[str, str] | None = None, launches: bool = True) -> None:
    """The resize's lines in a change set (`gpufleet.changeset.ChangeSetBuilder`): a launch per new
    slot; a drain, release and terminate per released slot; block and partition as the detail."""
    part = dict(resize.block_partition or {})

    def where(s: NodeSlot) -> str:
        p = part.get(s.block)
        return f"block {s.block}" + (f", partition {p}" if p else "") + f", batch {s.batch}"
    if resize.kind == "grow":
        for s in resize.added if launches else ():
            builder.add("launch", "instance", s.name, f"grow: {where(s)} (new batch)", usd_per_hour)
        builder.note(f"grow {resize.from_nodes} -> {resize.to_nodes} nodes: {len(resize.added)} new slot(s) in "
                     f"batch(es) {', '.join(map(str, resize.new_batches))}, through the same gates; "
                     "no existing slot moves")
        idle = sorted(b for b, p in part.items() if p is None)
        if idle:  # admitted, but no queue sends work there: say so before it is bought
            builder.note(f"block(s) {', '.join(map(str, idle))} join no partition (the partitions ask for no more "
                         "units): they are admitted but schedule no work until a partition's units or gpus are "
                         "raised (gpufleet:partitions[].units, the last partition's, so no existing block moves)")
    elif resize.kind == "shrink":
        ids = instances or {}
        for s in resize.released:
            builder.add("drain", "pool-node", s.name, f"shrink: {where(s)}; its jobs are waited for")
        for s in resize.released:
            builder.add("release", "pool-node", s.name, f"shrink: {where(s)}")
        for s in resize.released:
            builder.add("terminate", "instance", s.name,
                        f"shrink: {where(s)}" + (f", {ids[s.name]}" if s.name in ids else ""), usd_per_hour)
        builder.note(f"shrink {resize.from_nodes} -> {resize.to_nodes} nodes: whole block(s) "
                     f"{', '.join(map(str, resize.released_blocks))} released, the emptiest first")
