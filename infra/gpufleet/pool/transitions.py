"""The pool's state machine per slot, pure: every adapter asks these functions what a call means.

Why one place: the simulator, Slurm and Kubernetes must agree on pending, admitted, quarantined
and blacklisted (the contract suite checks it). An adapter reads a slot's current `PoolNode`,
asks the function here for the next one (or a `PoolError`), then writes the difference to its
backend. Validation happens before any write, so a refused call leaves nothing half-applied, and
a repeated call returns the node unchanged (the adapter then writes nothing).

`None` for `now` means the pool does not hold the slot (never registered, or released).
"""

from __future__ import annotations

from dataclasses import replace

from gpufleet.errors import PoolError
from gpufleet.gates.admission import AdmissionRecord
from gpufleet.gates.verdict import is_taint_value
from gpufleet.pool.protocol import NodeState, PendingNode, PoolNode, record_digest

BLACKLIST_CODE = "blacklisted"
REASON_LIMIT = 120  # Slurm reasons and annotations stay short; the full text is in the record


def check_code(slot: str, reason_code: str) -> None:
    if not is_taint_value(reason_code):
        raise PoolError(f"reason code {reason_code!r} is not taint-safe (1-63 of [A-Za-z0-9._-])", node=slot)


def short(text: str) -> str:
    """One line, at most REASON_LIMIT characters, no double quotes (a Slurm reason is quoted)."""
    line = " ".join(text.replace('"', "'").split())
    return line if len(line) <= REASON_LIMIT else line[:REASON_LIMIT - 3] + "..."


def register(now: PoolNode | None, node: PendingNode, carried_failures: int = 0) -> PoolNode:
    """A node (new, replaced, or taken back for re-gating) waits for its gates.

    A blacklisted slot is refused: it must be cleared before anything runs in it again.
    """
    if now is not None and now.state is NodeState.BLACKLISTED:
        raise PoolError(f"slot is blacklisted ({now.reason}); `gpufleet pool clear {node.slot}` first",
                        node=node.slot)
    failures = now.failures if now is not None else carried_failures
    return PoolNode(slot=node.slot, state=NodeState.PENDING, block=node.block, partition=node.partition,
                    instance_id=node.instance_id, failures=failures)


def admit(now: PoolNode | None, slot: str, record: AdmissionRecord) -> PoolNode:
    if now is None:
        raise PoolError("not in the pool: register it before admitting", node=slot)
    if record.slot != slot:
        raise PoolError(f"the admission record is for slot {record.slot!r}, not this one", node=slot)
    if not record.admitted:
        raise PoolError(f"the admission record's action is {record.action.value!r}, not 'admit'", node=slot)
    if now.state is NodeState.BLACKLISTED:
        raise PoolError(f"slot is blacklisted ({now.reason}); it is never admitted until cleared", node=slot)
    digest = record_digest(record)
    if now.state is NodeState.ADMITTED and now.record_digest == digest:
        return now
    return replace(now, state=NodeState.ADMITTED, record_digest=digest, reason_code=None, reason=None,
                   instance_id=record.instance_id or now.instance_id)


def quarantine(now: PoolNode | None, slot: str, reason_code: str, reason: str, failures_before_blacklist: int) -> PoolNode:
    """One failure for the slot; the `failures_before_blacklist`-th one blacklists it.

    Repeating the same quarantine counts nothing more: a new failure needs a new gating attempt.
    """
    check_code(slot, reason_code)
    if now is None:
        raise PoolError("not in the pool: nothing to quarantine", node=slot)
    text = short(reason)
    if now.state in (NodeState.QUARANTINED, NodeState.BLACKLISTED) and now.reason_code in (reason_code, BLACKLIST_CODE) \
            and (now.reason == text or now.state is NodeState.BLACKLISTED):
        return now
    failures = now.failures + 1
    state = NodeState.BLACKLISTED if failures >= failures_before_blacklist else NodeState.QUARANTINED
    return replace(now, state=state, reason_code=reason_code, reason=text, failures=failures, record_digest=None)


def blacklist(now: PoolNode | None, slot: str, reason: str) -> PoolNode:
    """An operator's blacklist: the slot is reported for replacement and never admitted until cleared."""
    if now is None:
        raise PoolError("not in the pool: nothing to blacklist", node=slot)
    text = short(reason)
    if now.state is NodeState.BLACKLISTED and now.reason == text:
        return now
    return replace(now, state=NodeState.BLACKLISTED, reason_code=BLACKLIST_CODE, reason=text, record_digest=None)


def clear(now: PoolNode | None, slot: str) -> PoolNode:
    """Forget the slot's failures; a quarantined or blacklisted node must pass its gates again."""
    if now is None:
        raise PoolError("not in the pool: nothing to clear", node=slot)
    if now.state in (NodeState.QUARANTINED, NodeState.BLACKLISTED):
        return replace(now, state=NodeState.PENDING, reason_code=None, reason=None, failures=0, record_digest=None)
    return replace(now, failures=0)


def release(now: PoolNode | None, slot: str) -> PoolNode | None:
    """The slot's instance leaves. A blacklisted slot stays listed (for replacement); any other
    leaves the pool (None). The caller keeps `now.failures` for the slot either way."""
    if now is None:
        raise PoolError("not in the pool: nothing to release", node=slot)
    if now.state is NodeState.BLACKLISTED:
        return replace(now, instance_id=None, busy=False)
    return None
