"""Climb the remediation ladder (`gpufleet.daytwo.remediation`) for one quarantined node.

Each step is journaled before the next; each but the last ends with the re-admission gate: the
node's preflight and per-node gates with no remediation of their own (the ladder is the
remediation) and the multi-node baselines with admitted partners, admitted only on a fresh passing
record for its current BOM and instance. A step the executor reports failed or unanswered, or that
ran past `step_timeout_s`, counts as failed and the ladder moves down. `replace` is the lifecycle's
replacement (a new instance into the slot, gated fully). `quarantine` ends the ladder: the node stays
out for service, the failed steps journaled as its evidence. An open circuit breaker
(`gpufleet.daytwo.breaker`) stops the ladder before its next step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufleet.daytwo import lifecycle
from gpufleet.daytwo.context import DayTwo
from gpufleet.daytwo.gating import gate_nodes, launch_kind
from gpufleet.daytwo.remediation import QUARANTINE, REPLACE, ladder_for
from gpufleet.errors import GpufleetError, PoolError, UsageError
from gpufleet.pool.protocol import NodeState, PendingNode, record_digest
from gpufleet.ports import HostStatus

SOURCE = "remediation"


@dataclass
class LadderOutcome:
    slot: str
    code: str
    steps: list[dict[str, Any]] = field(default_factory=list)  # {"step", "result", "detail"} in order
    cured_by: str | None = None
    state: str = NodeState.QUARANTINED.value
    stopped: str | None = None  # why the ladder stopped before its end (the breaker)


def run_ladder(d: DayTwo, slot: str, why: str, *, step_timeout_s: float = 1800.0) -> LadderOutcome:
    """Try the ladder for SLOT's reason code, step by step, until a step's gate admits it."""
    why = " ".join(why.split())
    if not why:
        raise UsageError("a remediation needs a reason", field="--reason", expected="why, in a few words")
    node = d.pool.state().get(slot)
    if node is None:
        raise PoolError("not in the pool", node=slot)
    if node.state is not NodeState.QUARANTINED:
        raise UsageError(f"{slot} is {node.state.value}; the ladder takes a quarantined node", field="SLOT",
                         expected="a quarantined slot (gpufleet pool -s STACK lists them)")
    if node.busy:
        raise PoolError("slot is running work; drain it before remediating it", node=slot)
    code = node.reason_code or "quarantined"
    steps = ladder_for(code, d.spec.ops.remediation)
    out = LadderOutcome(slot, code)
    d.journal.append({"type": "remediation", "slot": slot, "to": "started", "code": code, "steps": list(steps),
                      "who": d.who, "why": why, "reason": node.reason})
    for step in steps:
        if d.journal.state.breaker.open:
            out.stopped = "the circuit breaker is open: automatic remediation stops (gpufleet ops breaker status)"
            d.journal.append({"type": "remediation", "slot": slot, "to": "stopped", "state": out.state,
                              "reason": out.stopped})
            return out
        if step == QUARANTINE:
            detail = f"{code}: every step before failed; out for service"
            _step(d, out, step, "for-service", detail)
            break
        result, detail = _replace(d, slot, why) if step == REPLACE else _reset_or_reboot(d, slot, step, step_timeout_s)
        _step(d, out, step, result, detail)
        if result == "cured":
            out.cured_by = step
            break
    out.state = d.pool.state().nodes[slot].state.value
    d.journal.append({"type": "remediation", "slot": slot, "to": "finished", "state": out.state,
                      "reason": f"cured by {out.cured_by}" if out.cured_by else "out for service"})
    return out


def _step(d: DayTwo, out: LadderOutcome, step: str, result: str, detail: str) -> None:
    d.journal.append({"type": "remediation", "slot": out.slot, "to": "step", "step": step, "result": result,
                      "detail": detail})
    out.steps.append({"step": step, "result": result, "detail": detail})


def _reset_or_reboot(d: DayTwo, slot: str, step: str, timeout_s: float) -> tuple[str, str]:
    """The step on the node's instance, then the re-admission gate (the instance stays the same)."""
    inst = d.instance(slot)
    if inst is None:
        return "failed", "no instance stands in the slot"
    outcome = d.adapters.executor.remediate(inst, step)  # type: ignore[arg-type]
    d.advance(outcome.duration_s)
    if outcome.status is not HostStatus.OK:
        return "failed", f"{step} {outcome.status.value}: {outcome.message or ''}".strip()
    if outcome.duration_s > timeout_s:
        return "failed", f"{step} timed out ({outcome.duration_s:.0f} s > {timeout_s:.0f} s)"
    node = d.pool.state().nodes[slot]
    verdicts = gate_nodes(d.adapters, d.settings, [inst], lifecycle.partners(d, {slot}),
                          d.state_dir / "daytwo" / "bundles" / slot / f"ladder-{step}-{inst.instance_id}", d.stack,
                          kind=launch_kind(d.pool.kind), message_bytes=d.spec.gates.baseline_message_bytes,
                          configure=False, remediate=False)
    d.advance(verdicts.seconds)
    if slot not in verdicts.admit:
        failed_code, reason, _ = verdicts.failed[slot]
        return "failed", f"the re-admission gate failed after {step}: {failed_code}: {reason}"
    record = verdicts.admit[slot]
    d.pool.register_pending([PendingNode(slot=slot, block=node.block if node.block is not None else inst.block,
                                         partition=node.partition, instance_id=inst.instance_id,
                                         address=inst.private_ip)])
    admitted = d.pool.admit(slot, record)
    d.write_record(record.model_dump(mode="json"))
    d.journal.append({"type": "pool", "slot": slot, "action": "readmit", "who": d.who, "source": SOURCE,
                      "why": f"remediation ladder: {step} then the re-admission gate", "state": admitted.state.value,
                      "record_digest": record_digest(record)})
    return "cured", f"admitted again after {step} (busbw {record.busbw.intra_node_gbs} GB/s)"


def _replace(d: DayTwo, slot: str, why: str) -> tuple[str, str]:
    """A new instance into the slot (the lifecycle's replacement, gated fully, admitted only on a pass)."""
    try:
        _node, record, text = lifecycle.replace(d, slot, f"remediation ladder: {why}")
    except (PoolError, GpufleetError) as exc:  # refused, or no instance to be had (spares, capacity)
        return "failed", f"replace failed: {exc}"
    return ("cured" if record is not None else "failed"), text
