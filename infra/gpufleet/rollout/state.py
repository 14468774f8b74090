"""The rollout's state: a fold over journal events, and the transitions it allows.

Why a fold and nothing else: the journal is the only source of truth (DESIGN.md section 6). A
resumed rollout rebuilds exactly this state from the events and continues from it, so nothing
decided is redone and nothing is lost. Pure: no I/O, no clock.

An event is a JSON object with a `type`; the journal adds `seq`, `at`, `stack` and `version`.
One event may move many nodes at once (a stage over a batch is one action, so one fsync):

    {"type": "rollout", "to": "started" | "finished" | "halted", "reason": ..., "batches": [1, 2, ...]}
    {"type": "batch", "batch": k, "to": "running" | "passed" | "halted", "reason": ...}
    {"type": "resize", "to": "started", "kind": "grow" | "shrink", "layout": ..., "slots": {...}, "basis": ...,
     "new_batches": [...], "released": {slot: [index, block, batch, partition]}}  (gpufleet.plan.resize)
    {"type": "resize", "to": "finished"}  (a shrink's last released slot is terminated)
    {"type": "release", "step": "drained" | "released" | "terminated", "nodes": {slot: {...}}}
    {"type": "nodes", "batch": k, "to": <NodeStage>, "nodes": {slot: {field: value}}, "stage": ..., "duration_s": ...}
    {"type": "decided", "batch": k, "nodes": {slot: {"action": ..., "record_digest": ..., "reason_code": ...}}}
    {"type": "gated", "batch": k, "nodes": {slot: {"result": "pass" | "quarantine" | "remediate", "record": ...}}}
    {"type": "retest", "batch": k, "nodes": {slot: {"outcome": {...}, "action": "reset-gpu"}}, "duration_s": ...}
    {"type": "network", "batch": k, "link_faults": [[a, b]], "scales": {...}, "nodes": {slot: {"result": "admit" | ...}}}
    {"type": "stage", "batch": k, "stage": ..., "duration_s": ...}  (time spent with no node moving)
    {"type": "acceptance", "stage": "storage" | "network" | "smoke", "to": "started", "nodes": [...],
     "pairs": [[a, b]], "bundle": <folder relative to the state dir>}
    {"type": "acceptance", "stage": ..., "to": "passed" | "failed", "outcome": <StageOutcome JSON>,
     "duration_s": ..., "timing": "modelled" | "measured", "imported": <legacy outcome file>?}
    {"type": "acceptance", "stage": ..., "to": "retry"}  (the operator reruns a failed stage)
    {"type": "acceptance", "stage": ..., "to": "recheck", "reason": ...}  (what the stage judged changed,
     e.g. the file system: its verdict is set aside and it runs again; a finished rollout reopens
     until it has the new verdict)
    {"type": "acceptance", "stage": ..., "to": "not-applicable", "reason": ..., "outcome": <StageOutcome JSON>}
     (nothing to test: a network check on one node has no pair; no verdict, and no halt)

Acceptance stages (stack-level, DESIGN.md section 6): a stage with a journaled verdict is never
collected again; one started and not decided (a crash inside it) runs again from the start; a
failed stage halts the rollout, and only a journaled `retry` reopens it (and lifts that halt).

An illegal transition is a bug in the orchestrator (or a journal edited by hand): it raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Mapping

from gpufleet.errors import GpufleetError
from gpufleet.gates.verdict import NodeOutcome


class IllegalTransition(GpufleetError):
    """An event asks for a move the state machine forbids (an orchestrator bug). Exit code 1."""


class NodeStage(str, Enum):
    PLANNED = "planned"
    PROVISIONING = "provisioning"  # provision (or a replacement) requested, no instance recorded yet
    PROVISIONED = "provisioned"
    CONFIGURING = "configuring"  # registered pending in the pool, configure running
    CONFIGURED = "configured"  # ready for preflight (also after a remediation, for the one retest)
    PREFLIGHT = "preflight"  # bundles collected for the current attempt; gates next
    BASELINE = "baseline"  # passed the per-node gates; multi-node baselines next
    ADMITTED = "admitted"
    QUARANTINED = "quarantined"
    REPLACED = "replaced"  # the slot's instance is being replaced (spare consumed); provisioned next

    @property
    def terminal(self) -> bool:
        return self in (NodeStage.ADMITTED, NodeStage.QUARANTINED)


S = NodeStage
NODE_TRANSITIONS: Mapping[NodeStage, frozenset[NodeStage]] = {
    S.PLANNED: frozenset({S.PROVISIONING}),
    S.PROVISIONING: frozenset({S.PROVISIONED, S.PROVISIONING}),  # a capacity shortfall is asked again
    S.PROVISIONED: frozenset({S.CONFIGURING}),
    S.CONFIGURING: frozenset({S.CONFIGURED, S.QUARANTINED}),
    S.CONFIGURED: frozenset({S.PREFLIGHT, S.QUARANTINED}),  # unreachable at preflight
    S.PREFLIGHT: frozenset({S.BASELINE, S.QUARANTINED}),
    S.BASELINE: frozenset({S.ADMITTED, S.QUARANTINED}),
    S.ADMITTED: frozenset(),
    S.QUARANTINED: frozenset({S.REPLACED}),
    S.REPLACED: frozenset({S.PROVISIONED}),
}
RETEST_FROM = frozenset({S.PREFLIGHT, S.BASELINE})


ACCEPTANCE_STAGES = ("storage", "network", "smoke")  # the order a rollout runs them in


class StageStatus(str, Enum):
    RUNNING = "running"  # started; a verdict not journaled yet
    PASSED = "passed"
    FAILED = "failed"
    RETRY = "retry"  # failed, and the operator asked for it to run again
    NOT_APPLICABLE = "not-applicable"  # nothing to test (one node: no pair); not a pass, and no halt

    @property
    def decided(self) -> bool:
        return self in (StageStatus.PASSED, StageStatus.FAILED, StageStatus.NOT_APPLICABLE)


class BatchStage(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    PASSED = "passed"
    HALTED = "halted"


BATCH_TRANSITIONS: Mapping[BatchStage, frozenset[BatchStage]] = {
    BatchStage.PENDING: frozenset({BatchStage.RUNNING}),
    BatchStage.RUNNING: frozenset({BatchStage.PASSED, BatchStage.HALTED}),
    BatchStage.PASSED: frozenset(),
    BatchStage.HALTED: frozenset(),
}


@dataclass
class Decision:
    """A verdict journaled before the pool is told (so a crash in between never re-tests)."""

    action: str  # "admit" | "quarantine"
    record_digest: str | None = None
    reason_code: str | None = None
    reason: str = ""
    record: dict[str, Any] | None = None  # the admission record (absent for configure/reachability failures)


@dataclass
class NodeState:
    slot: str
    batch: int
    stage: NodeStage = NodeStage.PLANNED
    instance_id: str | None = None
    address: str | None = None  # private IP
    attempt: int = 1  # gating attempt of the current instance (2 after the one retest)
    previous: NodeOutcome | None = None  # the REMEDIATE outcome a retest is judged against
    decision: Decision | None = None
    reason_code: str | None = None  # of the last quarantine
    reason: str = ""
    record_digest: str | None = None  # of the admission record the node was admitted with
    replacements: int = 0  # spares this slot consumed
    shortfall: str | None = None  # why the provider gave no instance (capacity)
    provision_requests: int = 0  # provision calls for this slot's current instance (capacity retries)
    bundle: str | None = None  # the current attempt's bundle, relative to the state dir
    gate_record: dict[str, Any] | None = None  # the per-node gates' record, before the multi-node baselines
    remediation: dict[str, Any] | None = None  # the record that asked for a reset/reboot not yet journaled done
    record: dict[str, Any] | None = None  # the record of the last decision (kept after it is applied)
    blacklisted: bool = False
    history: list[tuple[str, str | None, str | None]] = field(default_factory=list)  # (stage, instance, code)

    @property
    def has_instance(self) -> bool:
        return self.stage not in (S.PLANNED, S.PROVISIONING, S.REPLACED)


@dataclass
class BatchState:
    number: int
    stage: BatchStage = BatchStage.PENDING
    reason: str = ""
    durations: dict[str, float] = field(default_factory=dict)  # stage -> modelled or measured seconds
    link_faults: list[tuple[str, str]] = field(default_factory=list)
    ring_faults: list[tuple[str, ...]] = field(default_factory=list)
    scales: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "4" -> runs at that node count
    first_failures: set[str] = field(default_factory=set)  # slots whose first instance failed
    preflight_rounds: int = 0  # bundles/<batch>/<round>/ folders used so far

    def add_duration(self, stage: str, seconds: float | None) -> None:
        if seconds:
            self.durations[stage] = self.durations.get(stage, 0.0) + float(seconds)


@dataclass
class AcceptanceState:
    """One acceptance stage: its latest attempt, and the failed attempts an operator retried."""

    stage: str
    status: StageStatus = StageStatus.RUNNING
    attempt: int = 0  # started events so far (a rerun after a crash counts, as does a retry)
    nodes: list[str] = field(default_factory=list)
    pairs: list[tuple[str, str]] = field(default_factory=list)
    bundle: str | None = None  # the attempt's bundle folder, relative to the state dir
    outcome: dict[str, Any] | None = None  # gpufleet.gates.acceptance.StageOutcome as JSON
    duration_s: float | None = None
    timing: str = "measured"  # "modelled" on the simulator
    imported: str | None = None  # the pre-journal outcome file the verdict was converted from
    reason: str = ""  # why a not-applicable stage had nothing to test
    failures: list[dict[str, Any]] = field(default_factory=list)  # {attempt, reason_codes, bundle[, recheck]} set aside
    inputs: dict[str, Any] | None = None  # what the attempt judged (storage: the file system and its bars)

    @property
    def reason_codes(self) -> list[str]:
        return list((self.outcome or {}).get("reason_codes", ()))


@dataclass
class RolloutState:
    started: bool = False
    finished: bool = False
    halted: bool = False
    halt_reason: str = ""
    layout: str | None = None  # digest of the plan's slots and batches the rollout started with
    # (stack, cluster) every event carries; any other pair met in the journal is kept in `foreign`
    identity: tuple[str | None, str | None] | None = None
    foreign: list[tuple[int | None, str | None, str | None]] = field(default_factory=list)  # (seq, stack, cluster)
    started_at: str | None = None  # the `at` stamp of the journal's start event
    batches: dict[int, BatchState] = field(default_factory=dict)
    nodes: dict[str, NodeState] = field(default_factory=dict)
    acceptance: dict[str, AcceptanceState] = field(default_factory=dict)
    # slot -> the replacements its provider instance's generation tag showed on resume (a journal cut
    # by hand can know fewer, or not know the slot at all): a floor under the journal's own count
    spare_floor: dict[str, int] = field(default_factory=dict)
    # the layout the journal records (gpufleet.plan.resize.RecordedSlots as JSON) and the digest of the
    # fresh plan it was last resized for; None in journals started before they were recorded
    layout_slots: dict[str, tuple[int, int, int, str | None]] | None = None
    layout_basis: str | None = None
    resize: dict[str, Any] | None = None  # the `resize` event under way (a shrink: until its last node is gone)
    releasing: dict[str, str] = field(default_factory=dict)  # slot -> its shrink step: pending|drained|released
    released: dict[str, NodeState] = field(default_factory=dict)  # slots a shrink took out (terminated)
    resizes: list[dict[str, Any]] = field(default_factory=list)  # each resize, for the report
    last_seq: int = 0
    events: int = 0

    def replacements_of(self, slot: str) -> int:
        """Spares the slot consumed: the journal's count, or the provider's tag where that is higher."""
        n = self.nodes.get(slot)
        return max(n.replacements if n is not None else 0, self.spare_floor.get(slot, 0))

    @property
    def spares_used(self) -> int:
        """Spares consumed, what the budget is checked against: never below what the provider's
        generation tags say was bought (gpufleet.rollout.reconcile.spares)."""
        return sum(self.replacements_of(slot) for slot in {*self.nodes, *self.spare_floor})

    def batch_nodes(self, batch: int) -> list[NodeState]:
        return [n for n in self.nodes.values() if n.batch == batch]

    def node(self, slot: str, batch: int | None = None) -> NodeState:
        n = self.nodes.get(slot)
        if n is None:
            if batch is None:
                raise IllegalTransition(f"{slot}: no such node in the journal")
            n = self.nodes[slot] = NodeState(slot=slot, batch=batch)
        return n

    def batch(self, number: int) -> BatchState:
        b = self.batches.get(number)
        if b is None:
            b = self.batches[number] = BatchState(number=number)
        return b

    @property
    def unfinished(self) -> bool:
        return self.started and not self.finished and not self.halted


# ------------------------------------------------------------------------------ the fold

def fold(events: Iterable[Mapping[str, Any]]) -> RolloutState:
    state = RolloutState()
    for e in events:
        apply(state, e)
    return state


def apply(state: RolloutState, event: Mapping[str, Any]) -> RolloutState:
    """Apply one event in place (and return the state). Raises IllegalTransition."""
    kind = event.get("type")
    handler = _HANDLERS.get(kind)  # type: ignore[arg-type]
    if handler is None:
        raise IllegalTransition(f"event {event.get('seq')}: unknown event type {kind!r}")
    seq = event.get("seq")
    if isinstance(seq, int):
        if seq <= state.last_seq:
            raise IllegalTransition(f"event {seq}: sequence number not after {state.last_seq}")
        state.last_seq = seq
    _identity(state, event)
    try:
        handler(state, event)
    except IllegalTransition as exc:
        raise IllegalTransition(f"event {seq}: {exc}") from None
    state.events += 1
    return state


def _identity(state: RolloutState, e: Mapping[str, Any]) -> None:
    """Each event names its stack and cluster; the first one sets the journal's, others are kept
    apart so the orchestrator can refuse a journal copied from another stack or cluster."""
    if "cluster" not in e and "stack" not in e:
        return
    mine = (e.get("stack"), e.get("cluster"))
    if state.identity is None or (state.identity[1] is None and mine[0] == state.identity[0]):
        state.identity = mine  # the first event, or the first to name the cluster (older lines do not)
    elif mine[0] != state.identity[0] or (mine[1] is not None and mine[1] != state.identity[1]):
        state.foreign.append((e.get("seq"), *mine))


def _rollout(state: RolloutState, e: Mapping[str, Any]) -> None:
    to = e["to"]
    if to == "started":
        if state.finished or state.halted:
            raise IllegalTransition("a finished or halted rollout cannot start again")
        state.started = True
        state.layout, state.started_at = e.get("layout"), e.get("at")
        if e.get("slots") is not None:
            state.layout_slots, state.layout_basis = _slots(e["slots"]), e.get("layout")
        for number in e.get("batches", ()):
            state.batch(int(number))
    elif to == "finished":
        state.finished = True
    elif to == "halted":
        state.halted, state.halt_reason = True, e.get("reason", "")
    else:
        raise IllegalTransition(f"rollout cannot go to {to!r}")


def _batch(state: RolloutState, e: Mapping[str, Any]) -> None:
    if state.halted and e["to"] != BatchStage.HALTED.value:
        raise IllegalTransition("the rollout is halted: no batch may move")
    b = state.batch(int(e["batch"]))
    to = BatchStage(e["to"])
    if to not in BATCH_TRANSITIONS[b.stage]:
        raise IllegalTransition(f"batch {b.number}: {b.stage.value} -> {to.value} is not allowed")
    b.stage, b.reason = to, e.get("reason", "")
    b.add_duration(e.get("stage", "batch"), e.get("duration_s"))


def _nodes(state: RolloutState, e: Mapping[str, Any]) -> None:
    batch = int(e["batch"])
    to = NodeStage(e["to"])
    if state.batch(batch).stage is not BatchStage.RUNNING:
        raise IllegalTransition(f"batch {batch} is {state.batch(batch).stage.value}: its nodes cannot move")
    for slot, data in e["nodes"].items():
        data = data or {}
        n = state.node(slot, batch)
        if n.batch != batch:
            raise IllegalTransition(f"{slot}: belongs to batch {n.batch}, not {batch}")
        if to not in NODE_TRANSITIONS[n.stage]:
            raise IllegalTransition(f"{slot}: {n.stage.value} -> {to.value} is not allowed")
        _enter(state, n, to, data)
    if to is S.PREFLIGHT:
        state.batch(batch).preflight_rounds += 1
    state.batch(batch).add_duration(_track(e, e.get("stage", to.value)), e.get("duration_s"))


def _track(e: Mapping[str, Any], stage: str) -> str:
    """The duration key of a step: work on a batch's late track (retests, replacements: `"track":
    "late"`) is kept apart, so the time model never puts it on the batch's first pass."""
    return "late:" + stage if e.get("track") == "late" else stage


def _enter(state: RolloutState, n: NodeState, to: NodeStage, data: Mapping[str, Any]) -> None:
    if to is S.PROVISIONING:
        n.shortfall = data.get("shortfall")
        if n.shortfall is None:  # a request (a shortfall is the answer to one)
            n.provision_requests += 1
    elif to is S.PROVISIONED:
        iid = data.get("instance_id")
        if not iid:
            raise IllegalTransition(f"{n.slot}: provisioned without an instance id")
        n.instance_id, n.address, n.shortfall = iid, data.get("private_ip"), None
        n.attempt, n.previous, n.decision, n.gate_record, n.bundle = 1, None, None, None, None
        n.remediation = None
    elif to is S.PREFLIGHT:
        n.bundle = data.get("bundle")
    elif to is S.BASELINE:
        n.gate_record = data.get("record")
    elif to is S.ADMITTED:
        if n.decision is None or n.decision.action != "admit":
            raise IllegalTransition(f"{n.slot}: admitted without an admit decision")
        n.record_digest = n.decision.record_digest
        n.gate_record = None
    elif to is S.QUARANTINED:
        n.reason_code = data.get("reason_code") or (n.decision.reason_code if n.decision else None)
        n.reason = data.get("reason") or (n.decision.reason if n.decision else "")
        if not n.reason_code:
            raise IllegalTransition(f"{n.slot}: quarantined without a reason code")
        n.blacklisted = bool(data.get("blacklisted"))
        n.gate_record, n.remediation = None, None
        if n.replacements == 0:
            state.batch(n.batch).first_failures.add(n.slot)
    elif to is S.REPLACED:
        if n.blacklisted:
            raise IllegalTransition(f"{n.slot}: a blacklisted slot is never replaced")
        n.replacements += 1
        n.decision = None
    n.stage = to
    n.history.append((to.value, n.instance_id, n.reason_code if to is S.QUARANTINED else None))


def _decided(state: RolloutState, e: Mapping[str, Any]) -> None:
    for slot, data in e["nodes"].items():
        n = state.node(slot)
        if n.stage.terminal or not n.has_instance:
            raise IllegalTransition(f"{slot}: cannot decide a node that is {n.stage.value}")
        action = data["action"]
        if action not in ("admit", "quarantine"):
            raise IllegalTransition(f"{slot}: unknown decision {action!r}")
        if action == "admit" and n.stage is not S.BASELINE:
            raise IllegalTransition(f"{slot}: admit decided at {n.stage.value}, before the multi-node baselines")
        n.decision = Decision(action=action, record_digest=data.get("record_digest"),
                              reason_code=data.get("reason_code"), reason=data.get("reason", ""),
                              record=data.get("record"))
        if n.decision.record is not None:
            n.record = n.decision.record


def _retest(state: RolloutState, e: Mapping[str, Any]) -> None:
    batch = int(e["batch"])
    for slot, data in e["nodes"].items():
        n = state.node(slot)
        if n.stage not in RETEST_FROM:
            raise IllegalTransition(f"{slot}: retest from {n.stage.value}")
        if n.previous is not None or n.attempt > 1:
            raise IllegalTransition(f"{slot}: REMEDIATE allows one retest; this instance had it")
        n.previous = NodeOutcome.model_validate(data["outcome"])
        n.attempt += 1
        n.decision, n.remediation = None, None
        n.stage = S.CONFIGURED
        n.history.append(("retest", n.instance_id, None))
    state.batch(batch).add_duration("late:remediate", e.get("duration_s"))


def _gated(state: RolloutState, e: Mapping[str, Any]) -> None:
    """Every node's outcome of one gating step, applied together (see the orchestrator's `_gate`)."""
    batch = int(e["batch"])
    passed = {}
    for slot, data in e["nodes"].items():
        n = state.node(slot)
        if n.batch != batch:
            raise IllegalTransition(f"{slot}: belongs to batch {n.batch}, not {batch}")
        if n.decision is not None or n.remediation is not None:
            raise IllegalTransition(f"{slot}: gated twice")
        result = data["result"]
        if result == "pass":
            passed[slot] = {"record": data.get("record")}
        elif result in ("admit", "quarantine"):
            _decided(state, {"nodes": {slot: {**data, "action": result}}})
        elif result == "remediate":
            if n.stage not in RETEST_FROM:
                raise IllegalTransition(f"{slot}: remediation asked at {n.stage.value}")
            if n.previous is not None:
                raise IllegalTransition(f"{slot}: REMEDIATE allows one retest; this instance had it")
            n.remediation = data.get("record") or {}
        else:
            raise IllegalTransition(f"{slot}: unknown gate result {result!r}")
    if passed:
        _nodes(state, {"batch": batch, "to": S.BASELINE.value, "nodes": passed, "stage": e.get("stage", "gates"),
                       "track": e.get("track")})
    elif e.get("duration_s"):
        state.batch(batch).add_duration(_track(e, e.get("stage", "gates")), e.get("duration_s"))


def _network(state: RolloutState, e: Mapping[str, Any]) -> None:
    if e.get("nodes"):
        _gated(state, {"batch": e["batch"], "nodes": e["nodes"], "stage": "baseline", "track": e.get("track")})
    b = state.batch(int(e["batch"]))
    b.link_faults.extend(tuple(p) for p in e.get("link_faults", ()))
    b.ring_faults.extend(tuple(g) for g in e.get("ring_faults", ()))
    for scale, runs in (e.get("scales") or {}).items():
        b.scales.setdefault(str(scale), []).extend(runs)
    b.add_duration(_track(e, "baseline"), e.get("duration_s"))


def _stage(state: RolloutState, e: Mapping[str, Any]) -> None:
    state.batch(int(e["batch"])).add_duration(_track(e, e["stage"]), e.get("duration_s"))


def _acceptance(state: RolloutState, e: Mapping[str, Any]) -> None:
    name, to = e["stage"], e["to"]
    if name not in ACCEPTANCE_STAGES:
        raise IllegalTransition(f"unknown acceptance stage {name!r}")
    a = state.acceptance.get(name)
    if to == "started":
        if state.halted or state.finished:
            raise IllegalTransition(f"acceptance {name}: the rollout is {'halted' if state.halted else 'finished'}")
        if a is not None and a.status.decided:
            raise IllegalTransition(f"acceptance {name}: its verdict is journaled ({a.status.value}); "
                                    "only a retry runs it again")
        a = state.acceptance[name] = a or AcceptanceState(stage=name)
        a.status, a.attempt, a.outcome, a.duration_s = StageStatus.RUNNING, a.attempt + 1, None, None
        a.nodes, a.pairs = list(e.get("nodes", ())), [tuple(p) for p in e.get("pairs", ())]
        a.bundle, a.inputs = e.get("bundle"), e.get("inputs")
    elif to in (StageStatus.PASSED.value, StageStatus.FAILED.value):
        imported = e.get("imported")
        if imported:
            if a is not None and a.status.decided:
                raise IllegalTransition(f"acceptance {name}: a verdict is journaled already; nothing to import")
            a = state.acceptance[name] = a or AcceptanceState(stage=name, attempt=1)
        elif a is None or a.status is not StageStatus.RUNNING:
            raise IllegalTransition(f"acceptance {name}: a verdict without a started attempt")
        outcome = e["outcome"]
        if bool(outcome.get("passed")) != (to == StageStatus.PASSED.value):
            raise IllegalTransition(f"acceptance {name}: {to} does not match its outcome")
        a.status, a.outcome, a.imported = StageStatus(to), dict(outcome), imported
        a.duration_s, a.timing = e.get("duration_s"), e.get("timing", "measured")
        if e.get("bundle"):
            a.bundle = e["bundle"]
        if imported:
            a.nodes, a.pairs = list(e.get("nodes", ())), [tuple(p) for p in e.get("pairs", ())]
    elif to == StageStatus.NOT_APPLICABLE.value:
        if state.halted or state.finished:
            raise IllegalTransition(f"acceptance {name}: the rollout is {'halted' if state.halted else 'finished'}")
        if a is not None and a.status.decided:
            raise IllegalTransition(f"acceptance {name}: its verdict is journaled ({a.status.value})")
        outcome = e["outcome"]
        if not outcome.get("passed") or outcome.get("checks"):
            raise IllegalTransition(f"acceptance {name}: not applicable, yet its outcome holds checks or a failure")
        a = state.acceptance[name] = a or AcceptanceState(stage=name)
        a.status, a.outcome, a.reason, a.duration_s = StageStatus.NOT_APPLICABLE, dict(outcome), str(e["reason"]), None
        a.nodes, a.pairs = list(e.get("nodes", ())), []
    elif to == StageStatus.RETRY.value:
        if a is None or a.status is not StageStatus.FAILED:
            raise IllegalTransition(f"acceptance {name}: only a failed stage is retried, this one is "
                                    f"{a.status.value if a else 'not run'}")
        a.failures.append({"attempt": a.attempt, "reason_codes": a.reason_codes, "bundle": a.bundle})
        a.status, a.outcome = StageStatus.RETRY, None
        state.halted, state.halt_reason = False, ""  # a failed stage is the only halt it can have caused
    elif to == "recheck":
        if a is None or not a.status.decided:
            raise IllegalTransition(f"acceptance {name}: only a decided stage is rechecked, this one is "
                                    f"{a.status.value if a else 'not run'}")
        if state.halted and a.status is not StageStatus.FAILED:
            raise IllegalTransition(f"acceptance {name}: the rollout is halted by something else")
        a.failures.append({"attempt": a.attempt, "reason_codes": a.reason_codes, "bundle": a.bundle,
                           "recheck": str(e["reason"])})
        a.status, a.outcome = StageStatus.RETRY, None
        state.halted, state.halt_reason, state.finished = False, "", False
    else:
        raise IllegalTransition(f"acceptance {name} cannot go to {to!r}")


def _reconciled(state: RolloutState, e: Mapping[str, Any]) -> None:
    """The journal checked against the provider on resume (gpufleet.rollout.reconcile): an adopted
    slot restarts its gates on the provider's instance, a spare counted (its generation tag's count
    where that is higher); the spares the provider's tags show raise the floor under the journal's
    count; the rest is on record only."""
    for slot, d in ((e.get("spares") or {}).get("slots") or {}).items():
        state.spare_floor[slot] = max(state.spare_floor.get(slot, 0), int(d.get("provider") or 0))
    for slot, d in e["nodes"].items():
        if d.get("action") != "adopt":
            continue
        n = state.node(slot)
        if not d.get("provider_instance"):
            raise IllegalTransition(f"{slot}: adopted without the provider's instance")
        n.replacements = max(n.replacements + 1, int(d.get("provider_generation") or 0))
        n.instance_id, n.address, n.shortfall = d["provider_instance"], d.get("private_ip"), None
        n.attempt, n.previous, n.decision, n.gate_record, n.bundle, n.remediation = 1, None, None, None, None, None
        n.stage = S.PROVISIONED
        n.history.append((S.PROVISIONED.value, n.instance_id, None))


def _slots(raw: Mapping[str, Any]) -> dict[str, tuple[int, int, int, str | None]]:
    return {str(k): (int(v[0]), int(v[1]), int(v[2]), None if v[3] is None else str(v[3])) for k, v in raw.items()}


def _resize(state: RolloutState, e: Mapping[str, Any]) -> None:
    """Grow or shrink by whole blocks (gpufleet.plan.resize): the journal's layout becomes the new
    one; a grow's new batches are pending (a finished rollout reopens for them); a shrink's
    released slots leave the rollout's nodes at once and are worked off by `release` events."""
    to = e["to"]
    if to == "started":
        if state.halted:
            raise IllegalTransition("a halted rollout cannot be resized")
        if state.resize is not None:
            raise IllegalTransition("a resize is already under way")
        state.layout, state.layout_basis = e["layout"], e.get("basis")
        state.layout_slots = _slots(e["slots"])
        state.resize = dict(e)
        state.resizes.append({"kind": e["kind"], "from_nodes": int(e.get("from_nodes", 0)),
                              "to_nodes": int(e.get("to_nodes", 0)), "added": list(e.get("added", ())),
                              "new_batches": [int(k) for k in e.get("new_batches", ())],
                              "released": sorted(e.get("released", {})),
                              "released_blocks": [int(b) for b in e.get("released_blocks", ())],
                              "status": "started" if e.get("released") else "finished"})
        for number in e.get("new_batches", ()):
            state.batch(int(number))
        if e.get("new_batches"):
            state.finished = False
        for slot in e.get("released", {}):
            n = state.nodes.pop(slot, None)
            state.released[slot] = n if n is not None else NodeState(slot=slot, batch=int(e["released"][slot][2]))
            state.releasing[slot] = "pending"
        if not state.releasing:
            state.resize = None  # a grow is done with this event: its batches run like any other
    elif to == "finished":
        if state.resize is None or state.releasing:
            raise IllegalTransition(f"no resize to finish ({len(state.releasing)} slot(s) still being released)")
        state.resize = None
        state.resizes[-1]["status"] = "finished"
    else:
        raise IllegalTransition(f"resize cannot go to {to!r}")


RELEASE_STEPS = ("pending", "drained", "released", "terminated")


def _release(state: RolloutState, e: Mapping[str, Any]) -> None:
    """One step of a shrink over released slots: drained (no new work, jobs ended), released (out of
    the pool), terminated (the instance gone: the slot is done)."""
    step = e["step"]
    if step not in RELEASE_STEPS[1:]:
        raise IllegalTransition(f"release step {step!r} is not one of {', '.join(RELEASE_STEPS[1:])}")
    for slot in e["nodes"]:
        now = state.releasing.get(slot)
        if now is None:
            raise IllegalTransition(f"{slot}: not being released")
        if RELEASE_STEPS.index(step) != RELEASE_STEPS.index(now) + 1:
            raise IllegalTransition(f"{slot}: release {now} -> {step} is not allowed")
        if step == "terminated":
            del state.releasing[slot]
        else:
            state.releasing[slot] = step


_HANDLERS = {"rollout": _rollout, "batch": _batch, "nodes": _nodes, "decided": _decided, "retest": _retest,
             "gated": _gated, "network": _network, "stage": _stage, "reconciled": _reconciled,
             "acceptance": _acceptance, "resize": _resize, "release": _release}
