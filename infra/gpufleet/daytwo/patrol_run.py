"""One patrol over a stack's pool: select idle admitted nodes, collect light bundles, judge each
against its own admission, quarantine the failing ones through the pool (journaled), remember
when each node was last patrolled.

The patrol yields to real work: it checks the idle nodes in rounds within a concurrency budget
computed from the plan (`patrol.concurrency_budget`: per partition, the nodes of the units the stack
lets it have out of service), and before each round re-reads the pool: a node a job took meanwhile
is left to the job (`yielded`) and rechecked by the next patrol.

Why re-read the pool before each quarantine: a job may have landed on a node while its bundle was
being collected; quarantining it then would evict that job (Kubernetes NoExecute) or drain it
under a running job. Such a node is reported as deferred and rechecked by the next patrol.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gpufleet.daytwo import lifecycle
from gpufleet.daytwo.collect import PatrolCollector
from gpufleet.daytwo.context import DayTwo
from gpufleet.daytwo.patrol import PatrolResult, batches, concurrency_budget, judge, select, since_for, worst_first
from gpufleet.daytwo.upgrade_plan import limits
from gpufleet.gates import bundle as B
from gpufleet.pool.protocol import NodeState
from gpufleet.durable import write_atomic
from gpufleet.ports import HostStatus

LAST = "last.json"


@runtime_checkable
class ReportsDisagreements(Protocol):
    """A pool whose scheduler keeps its own state beside gpufleet's (Slurm) and can say where they differ."""

    def disagreements(self) -> dict[str, str]:
        ...


@runtime_checkable
class HoldsForPatrol(Protocol):
    """A pool that runs the recheck as its lowest-priority job (Slurm: `pool.slurm.patrol_hold`;
    Kubernetes: `pool.kubernetes.patrol_hold`, a Job through Kueue at the gpufleet-patrol class):
    `patrol_holds()` is None where it cannot (no patrol QOS or class), else an object whose `hold(slot ->
    partition)` returns the slots it holds (slot -> job), `lost(holds)` those a real job preempted
    since, and `release(holds)` ends them."""

    def patrol_holds(self) -> Any:
        ...


@dataclass
class PatrolOutcome:
    stack: str
    started: datetime
    who: str
    checked: list[PatrolResult] = field(default_factory=list)
    skipped_busy: list[str] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)  # slot -> message
    quarantined: dict[str, dict[str, Any]] = field(default_factory=dict)  # slot -> code, reason, state, failures
    deferred: list[str] = field(default_factory=list)  # failed, but busy by the time of the verdict
    yielded: list[str] = field(default_factory=list)  # a job took it before its round: left to the job
    budget: dict[str, int] = field(default_factory=dict)  # partition -> nodes checked at once
    rounds: int = 0
    held: bool = False  # the rounds ran as the pool's lowest-priority jobs (Slurm patrol QOS, Kueue class)
    preempted: list[str] = field(default_factory=list)  # of `yielded`: held, then preempted by a real job
    disagreements: dict[str, str] = field(default_factory=dict)  # slot -> what the scheduler and gpufleet each say
    no_instance: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def blacklisted(self) -> list[str]:
        return sorted(s for s, q in self.quarantined.items() if q["state"] == NodeState.BLACKLISTED.value)


def load_last(path: Path) -> dict[str, dict[str, str]]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def run_patrol(d: DayTwo, collector: PatrolCollector) -> PatrolOutcome:
    started = d.now()
    out = PatrolOutcome(stack=d.stack, started=started, who=d.who)
    if isinstance(d.pool, ReportsDisagreements):  # reported, never fixed: the person who lifted it decides
        out.disagreements = d.pool.disagreements()
    selection = select(d.pool.state())
    out.skipped_busy = selection.busy
    inventory = dict(d.adapters.provisioner.inventory())
    last_path = d.state_dir / "patrol" / LAST
    last = load_last(last_path)
    instances, since, records = [], {}, {}
    for slot in selection.idle:
        inst = inventory.get(slot)
        if inst is None:
            out.no_instance.append(slot)
            continue
        record = d.record(slot)
        records[slot] = record
        seen = last.get(slot, {})
        last_at = datetime.fromisoformat(seen["at"]) if seen.get("at") else None
        since[slot] = since_for(last_at, seen.get("instance_id"), inst.instance_id,
                                record.decided_at if record is not None else None)
        instances.append(inst)
    dest = d.state_dir / "patrol" / "bundles"
    if dest.exists():
        shutil.rmtree(dest)  # the last patrol's bundles only: a patrol every hour must not fill the disk
    dest.mkdir(parents=True)
    out.budget = concurrency_budget(d.plan, limits(d.plan, d.spec.upgrade))
    partition_of = {s: n.partition for s, n in d.pool.state().nodes.items()}
    by_slot = {i.slot: i for i in instances}
    hosts: dict[str, Any] = {}
    taken: list[Any] = []
    holds = d.pool.patrol_holds() if isinstance(d.pool, HoldsForPatrol) else None
    out.held = holds is not None
    for round_slots in batches([i.slot for i in instances], partition_of, out.budget):
        now = d.pool.state()
        free = [s for s in round_slots if (n := now.get(s)) is not None and n.state is NodeState.ADMITTED
                and not n.busy]
        held: dict[str, str] = {}
        if holds is not None:  # a node outside every partition cannot be held: checked as before
            held = holds.hold({s: p for s in free if (p := partition_of.get(s)) is not None})
            free = [s for s in free if s in held or partition_of.get(s) is None]
        out.yielded.extend(s for s in round_slots if s not in free)
        if not free:
            continue
        out.rounds += 1
        try:
            result = collector.collect([by_slot[s] for s in free], {s: since[s] for s in free}, dest)
        finally:
            lost = holds.lost(held) if holds is not None else []
            if holds is not None:
                holds.release(held)
        out.seconds += result.duration_s
        d.advance(result.duration_s)
        out.preempted.extend(lost)  # a real job needed it mid-round: its bundle is not judged
        out.yielded.extend(lost)
        free = [s for s in free if s not in lost]
        hosts.update({s: h for s, h in result.hosts.items() if s not in lost})
        taken.extend(by_slot[s] for s in free)
    instances = taken
    fraction = d.spec.gates.drift_regression_fraction
    for inst in instances:
        h = hosts.get(inst.slot)
        if h is None or h.status is not HostStatus.OK:
            out.unreachable[inst.slot] = (h.message if h else None) or "no answer"
            continue
        try:
            bundle = B.read_bundle(dest / inst.slot)
        except B.BundleError as exc:
            out.unreachable[inst.slot] = f"the patrol bundle cannot be read: {exc}"
            continue
        record = records[inst.slot]
        out.checked.append(judge(bundle, d.settings, record.busbw.intra_node_gbs if record else None, fraction,
                                 since[inst.slot]))
    failing = {r.slot: (r.reason_code or "patrol-failed", r.reason) for r in out.checked if not r.passed}
    failing.update({s: ("unreachable", m) for s, m in out.unreachable.items()})
    now_state = d.pool.state()
    for slot, (code, reason) in sorted(failing.items()):
        node = now_state.get(slot)
        if node is None or node.state is not NodeState.ADMITTED:
            continue  # someone else moved it meanwhile (an operator, a drain)
        if node.busy:
            out.deferred.append(slot)
            continue
        after = lifecycle.quarantine(d, slot, code, f"patrol: {reason}", source="patrol")
        out.quarantined[slot] = {"reason_code": code, "reason": reason, "state": after.state.value,
                                 "failures": after.failures}
    collected = d.now().isoformat()
    for inst in instances:
        if inst.slot not in out.unreachable:
            last[inst.slot] = {"at": collected, "instance_id": inst.instance_id}
    last_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(last_path, json.dumps(last, indent=1, sort_keys=True))
    d.journal.append({"type": "patrol", "who": d.who, "checked": [r.slot for r in out.checked],
                      "skipped_busy": out.skipped_busy, "deferred": out.deferred, "yielded": out.yielded,
                      "budget": out.budget, "rounds": out.rounds,
                      "held": out.held, "preempted": out.preempted, "disagreements": out.disagreements,
                      "failed": {s: {"reason_code": c, "reason": r} for s, (c, r) in failing.items()}})
    out.checked = worst_first(out.checked)
    return out
