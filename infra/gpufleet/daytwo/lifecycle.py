"""The blacklist lifecycle as journaled pool operations: blacklist, clear, replace.

Why journal first, then tell the pool, then journal the result: `who` and `why` must be on record
even when the pool call fails half way; a replacement is journaled as an intent (with the instance
it means to replace) before the provider is asked, so a crash in between never launches twice
(`Provisioner.inventory` tells whether the slot already moved).
"""

from __future__ import annotations

from gpufleet.daytwo.context import DayTwo
from gpufleet.daytwo.gating import gate_nodes, launch_kind
from gpufleet.errors import PoolError, UsageError
from gpufleet.gates.admission import AdmissionRecord
from gpufleet.pool.protocol import NodeState, PendingNode, PoolNode, record_digest
from gpufleet.ports import Instance


def _check_reason(why: str) -> str:
    why = " ".join(why.split())
    if not why:
        raise UsageError("a day-two change needs a reason", field="--reason", expected="why, in a few words")
    return why


def blacklist(d: DayTwo, slot: str, why: str) -> PoolNode:
    why = _check_reason(why)
    node = d.pool.blacklist(slot, why)
    d.journal.append({"type": "pool", "slot": slot, "action": "blacklist", "who": d.who, "why": why,
                      "state": node.state.value, "reason_code": node.reason_code})
    return node


def clear(d: DayTwo, slot: str, why: str) -> PoolNode:
    why = _check_reason(why)
    node = d.pool.clear(slot)
    d.journal.append({"type": "pool", "slot": slot, "action": "clear", "who": d.who, "why": why,
                      "state": node.state.value})
    return node


def quarantine(d: DayTwo, slot: str, code: str, reason: str, source: str) -> PoolNode:
    """A day-two quarantine (the patrol's): journaled with its source; the pool counts the failure."""
    node = d.pool.quarantine(slot, code, reason)
    d.journal.append({"type": "pool", "slot": slot, "action": "quarantine", "who": d.who, "why": reason,
                      "reason_code": code, "state": node.state.value, "source": source})
    return node


def partners(d: DayTwo, exclude: set[str], want: int = 4) -> list[str]:
    """Admitted, idle slots to measure a newcomer against (known good, and no job disturbed)."""
    state = d.pool.state()
    idle = [s for s, n in sorted(state.nodes.items())
            if n.state is NodeState.ADMITTED and not n.busy and s not in exclude]
    return idle[:want]


def replace(d: DayTwo, slot: str, why: str) -> tuple[PoolNode, AdmissionRecord | None, str]:
    """Move SLOT to a new instance, gate it fully, admit or quarantine it. Resumes a journaled one.

    Returns the slot's pool node, its admission record (None when it failed) and a one-line outcome."""
    why = _check_reason(why)
    slots = {s.name: s for s in d.plan.nodes}
    if slot not in slots:
        raise UsageError(f"no slot {slot!r} in stack {d.stack}'s plan", field="SLOT",
                         expected=f"a slot name such as {d.plan.nodes[0].name}")
    op = d.journal.state.replacing.get(slot)
    if op is None:
        node = d.pool.state().get(slot)
        if node is not None and node.state is NodeState.BLACKLISTED:
            raise PoolError(f"slot is blacklisted ({node.reason}); `gpufleet pool clear {slot} --reason ...` first "
                            "if the slot itself (not its instance) is trusted again", node=slot)
        if node is not None and node.busy:
            raise PoolError("slot is running work; drain it (or wait) before replacing its instance", node=slot)
        current = d.instance(slot)
        d.journal.append({"type": "replace", "slot": slot, "to": "requested", "who": d.who, "why": why,
                          "old_instance": current.instance_id if current else None})
        op = d.journal.state.replacing[slot]
    if op.stage == "requested":
        current = d.instance(slot)
        if current is not None and current.instance_id != op.old_instance:
            inst = current  # the provider moved the slot before a crash; the journal had not heard yet
        else:
            if current is not None and d.pool.state().get(slot) is not None:
                d.pool.release(slot)
            inst = d.adapters.provisioner.replace(slots[slot], d.spec.rollout.replace_action)
        d.journal.append({"type": "replace", "slot": slot, "to": "provisioned", "instance_id": inst.instance_id,
                          "private_ip": inst.private_ip})
    if op.stage == "provisioned":
        s = slots[slot]
        inst = Instance(slot=slot, instance_id=op.instance_id or "", batch=s.batch, block=s.block,
                        private_ip=op.private_ip)
        partition = next((b.partition for b in d.plan.blocks if b.id == s.block), None)
        d.pool.register_pending([PendingNode(slot=slot, block=s.block, partition=partition,
                                             instance_id=inst.instance_id, address=inst.private_ip)])
        verdicts = gate_nodes(d.adapters, d.settings, [inst], partners(d, {slot}),
                              d.state_dir / "daytwo" / "bundles" / slot / inst.instance_id, d.stack,
                              kind=launch_kind(d.pool.kind), message_bytes=d.spec.gates.baseline_message_bytes)
        d.advance(verdicts.seconds)
        if slot in verdicts.admit:
            r = verdicts.admit[slot]
            d.journal.append({"type": "replace", "slot": slot, "to": "decided", "action": "admit",
                              "record": r.model_dump(mode="json"), "record_digest": record_digest(r)})
        else:
            code, reason, r = verdicts.failed[slot]
            d.journal.append({"type": "replace", "slot": slot, "to": "decided", "action": "quarantine",
                              "reason_code": code, "reason": reason,
                              "record": r.model_dump(mode="json") if r is not None else None})
    decision = op.decision or {}
    if decision.get("action") == "admit":
        record = AdmissionRecord.model_validate(decision["record"])
        node = d.pool.admit(slot, record)
        d.write_record(decision["record"])
        text = f"admitted on {record.instance_id} (busbw {record.busbw.intra_node_gbs} GB/s)"
    else:
        record = None
        node = d.pool.quarantine(slot, decision.get("reason_code") or "quarantined", decision.get("reason") or "")
        text = f"{node.state.value}: {decision.get('reason_code')}: {decision.get('reason')}"
    d.journal.append({"type": "replace", "slot": slot, "to": "done", "state": node.state.value})
    return node, record, text
