"""`gpufleet pool readmit SLOT --reason WHY`: a quarantined node goes back through its gates.

Why not "resolve the alert, untaint the node": an alert that stops firing says the symptom went
away, not that the node is good (an Xid is a last value, a throttle comes and goes). Readmission
takes the node's current instance through the same stages as a replacement (configure, preflight,
per-node gates with one remediation, multi-node baselines with admitted partners: the day-two
`gate_nodes`) and admits it only on a passing record; a failure is a new quarantine and counts
toward the slot's blacklist. The failure count survives (`register_pending` keeps it).
"""

from __future__ import annotations

from typing import Any, Callable

from gpufleet.daytwo.context import DayTwo
from gpufleet.daytwo.gating import gate_nodes, launch_kind
from gpufleet.daytwo.lifecycle import partners
from gpufleet.errors import PoolError, UsageError
from gpufleet.gates.admission import AdmissionRecord
from gpufleet.pool.protocol import NodeState, PendingNode, PoolNode, record_digest


def readmit(d: DayTwo, slot: str, why: str) -> tuple[PoolNode, AdmissionRecord | None, str]:
    """Gate SLOT's instance again; admit or quarantine it. Returns the node, its record (None on
    failure) and a one-line outcome."""
    why = " ".join(why.split())
    if not why:
        raise UsageError("a readmission needs a reason", field="--reason", expected="why, in a few words")
    node = d.pool.state().get(slot)
    if node is None:
        raise PoolError("not in the pool", node=slot)
    if node.state is NodeState.BLACKLISTED:
        raise PoolError(f"slot is blacklisted ({node.reason}); `gpufleet pool clear {slot} --reason ...` if the slot "
                        "is trusted again, or `gpufleet pool replace`", node=slot)
    if node.state is NodeState.ADMITTED:
        raise UsageError(f"{slot} is admitted; readmit takes a quarantined or pending node", field="SLOT",
                         expected="a quarantined slot (gpufleet pool -s STACK lists them)")
    if node.busy:
        raise PoolError("slot is running work; drain it before gating it again", node=slot)
    inst = d.instance(slot)
    if inst is None:
        raise PoolError("no instance stands in this slot; `gpufleet pool replace` provisions one", node=slot)
    d.pool.register_pending([PendingNode(slot=slot, block=node.block if node.block is not None else inst.block,
                                         partition=node.partition, instance_id=inst.instance_id,
                                         address=inst.private_ip)])
    verdicts = gate_nodes(d.adapters, d.settings, [inst], partners(d, {slot}),
                          d.state_dir / "daytwo" / "bundles" / slot / f"readmit-{inst.instance_id}", d.stack,
                          kind=launch_kind(d.pool.kind), message_bytes=d.spec.gates.baseline_message_bytes)
    d.advance(verdicts.seconds)
    if slot in verdicts.admit:
        record = verdicts.admit[slot]
        node = d.pool.admit(slot, record)
        d.write_record(record.model_dump(mode="json"))
        d.journal.append({"type": "pool", "slot": slot, "action": "readmit", "who": d.who, "why": why,
                          "state": node.state.value, "record_digest": record_digest(record)})
        return node, record, f"admitted again on {inst.instance_id} (busbw {record.busbw.intra_node_gbs} GB/s)"
    code, reason, _ = verdicts.failed[slot]
    node = d.pool.quarantine(slot, code, reason)
    d.journal.append({"type": "pool", "slot": slot, "action": "readmit", "who": d.who, "why": why,
                      "state": node.state.value, "reason_code": code})
    return node, None, f"{node.state.value}: {code}: {reason}"


def clear_then_readmit(stack: str, slot: str, why: str, *, warn: Callable[[str], None] = lambda _m: None,
                       project: Any = None) -> tuple[PoolNode, AdmissionRecord | None, str, bool]:
    """`gpufleet pool clear`: forget SLOT's failures, then take it through the re-admission gate;
    a clear never puts a node back to work by itself. A slot with no instance stays pending (there is
    nothing to gate; `gpufleet pool replace` provisions one). Returns the node, its record (None when
    it did not pass or was not gated), a one-line outcome and whether the gate ran."""
    from gpufleet.daytwo import lifecycle
    from gpufleet.daytwo.context import open_day_two
    from gpufleet.ops import audit

    with open_day_two(stack, "pool clear", pool_only=True, warn=warn, project=project) as d:
        node = lifecycle.clear(d, slot, why)
        audit.day_two(d, "pool clear", why, slot, state=node.state.value)
        kind = d.pool.kind
    if node.state is not NodeState.PENDING or (node.instance_id is None and kind == "sim"):
        return node, None, f"{node.state.value}, failures {node.failures}", False
    with open_day_two(stack, "pool clear", warn=warn, project=project) as d:
        if d.instance(slot) is None:
            return node, None, f"{node.state.value}, failures {node.failures} (no instance to gate)", False
        node, record, text = readmit(d, slot, f"pool clear: {why}")
    return node, record, f"cleared, then the re-admission gate: {text}", True
