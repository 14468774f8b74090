"""What `gpufleet rollout` is about to do, as a change set (gpufleet.changeset), from the plan and
what the journal already decided: pure, so the table shown before anything is bought is tested
against the launches that then happen.

What it lists: the storage the stack's base creates before batch 1 (while no storage check has
begun), an instance launched for each slot of the batches still to run (up to `--until-batch`)
that has none yet, the instances already there that are configured and gated again, and the slots
the pool admits once their gates pass. Replacements are not known in advance: the note says how
many the spare budget still allows.
"""

from __future__ import annotations

from gpufleet.changeset import ChangeSet, ChangeSetBuilder
from gpufleet.plan.model import ClusterPlan
from gpufleet.rollout.state import NodeStage, RolloutState

_TO_LAUNCH = (NodeStage.PLANNED, NodeStage.PROVISIONING, NodeStage.REPLACED)


def rollout_changes(plan: ClusterPlan, state: RolloutState, stack: str, *, until_batch: int | None = None,
                    simulated: bool = False, usd_per_hour: float | None = None, price_note: str = "",
                    storage_clients: tuple[int, str] | None = None, replace_action: str = "stop-and-report",
                    command: str = "rollout") -> ChangeSet:
    """The change set of a rollout (a fresh one when `state` is empty, else the rest of the journal's).

    `storage_clients`: (count, instance type) of the storage check's non-GPU clients the base
    creates with the file system, when the stack has them."""
    b = ChangeSetBuilder(command, stack, simulated=simulated, price_note=price_note)
    if state.halted:
        b.note(f"the journal is halted ({state.halt_reason}): nothing runs until the cause is fixed "
               "(--retry-stage STAGE) or the rollout restarts")
        return b.build()
    last = until_batch or len(plan.batches)
    if "storage" not in state.acceptance:
        s = plan.storage
        size = f"{s.capacity_gib} GiB" if s.capacity_gib is not None else "elastic"
        b.add("create", "storage", "fsx-lustre", f"{size} {s.storage_class}, {s.aggregate_throughput_mbs} MB/s, "
                                                f"before batch 1 (if the stack's base has not created it)")
        if storage_clients is not None and storage_clients[0] > 0:
            count, kind = storage_clients
            for i in range(count):
                b.add("create", "storage-client", f"storage-client-{i:02d}")
            b.note(f"the storage check's {count} client(s) are {kind} (not GPU instances; not in the cost per hour)")
    partition = {blk.id: blk.partition for blk in plan.blocks}
    for batch in plan.batches[:last]:
        todo = []
        for slot in plan.batch_nodes(batch.number):
            n = state.nodes.get(slot.name)
            if n is not None and n.stage.terminal:
                continue
            todo.append(slot)
            if n is None or n.stage in _TO_LAUNCH:
                detail = "replacement (a spare)" if n is not None and n.stage is NodeStage.REPLACED else ""
                b.add("launch", "instance", slot.name, detail, usd_per_hour=usd_per_hour)
            else:
                b.add("configure", "instance", slot.name, f"{n.instance_id or 'its instance'}: {n.stage.value}")
            b.add("admit", "pool-node", slot.name)
        if todo:
            blocks = sorted({s.block for s in todo})
            parts = sorted({partition.get(blk) or "-" for blk in blocks})
            b.note(f"batch {batch.number}{' (canary)' if batch.canary else ''}: {len(todo)} node(s) in block(s) "
                   f"{blocks[0]}-{blocks[-1]}, admitted to partition {', '.join(parts)} once their gates pass")
    left = max(plan.topology.spare_nodes - state.spares_used, 0)
    if any(c.kind == "instance" for c in b.changes):
        gone = 'terminated' if replace_action == 'terminate' else 'stopped and reported'
        b.note(f"a node that fails its gates is replaced from the spare budget: up to {left} more instance(s) "
               f"of {plan.instance_type} (of {plan.topology.spare_nodes}); the quarantined instance is {gone} "
               f"(rollout.replaceAction {replace_action})" if left else
               f"no spare budget left (spares {plan.topology.spare_nodes}): a node that fails its gates "
               "is not replaced")
    if last < len(plan.batches):
        b.note(f"stops after batch {last} of {len(plan.batches)} (--until-batch): `--resume` continues")
    return b.build()
