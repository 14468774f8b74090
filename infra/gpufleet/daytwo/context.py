"""A stack opened for a day-two operation: its spec and plan, the rollout's adapters, the lock,
the rollout's state (read only) and the day-two journal.

Why one place: blacklist, replace, patrol and upgrade all need the same things in the same order
(the lock first, so no rollout runs beside them; then both journals), and the same answer to
"what is this slot's current admission record" (a day-two admission wins over the rollout's).
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

from gpufleet.daytwo.actor import who as actor
from gpufleet.daytwo.journal import DayTwoJournal, daytwo_store
from gpufleet.gates.admission import AdmissionRecord
from gpufleet.gates.settings import GateSettings
from gpufleet.plan.model import ClusterPlan
from gpufleet.project import Project
from gpufleet.rollout.run_config import Adapters
from gpufleet.ports import Instance
from gpufleet.rollout.state import BatchStage, NodeStage, RolloutState
from gpufleet.spec import ClusterSpec


@dataclass
class DayTwo:
    project: Project
    spec: ClusterSpec
    plan: ClusterPlan
    stack: str
    state_dir: Path
    adapters: Adapters
    settings: GateSettings
    rollout: RolloutState
    journal: DayTwoJournal
    who: str
    simulator: Any | None = None  # gpufleet.sim.cloud.SimulatedCloud on a simulated stack

    @property
    def pool(self) -> Any:
        return self.adapters.pool

    def now(self) -> datetime:
        return self.adapters.clock.now()

    def advance(self, seconds: float) -> None:
        """Modelled time passes on a virtual clock (the simulator's); a wall clock moves by itself."""
        advance = getattr(self.adapters.clock, "advance", None)
        if advance is not None and seconds > 0:
            advance(seconds)

    def record(self, slot: str) -> AdmissionRecord | None:
        """The slot's current admission record: a day-two admission (replacement, upgrade) wins."""
        raw = self.journal.state.records.get(slot)
        if raw is None:
            n = self.rollout.nodes.get(slot)
            raw = n.record if n is not None and n.stage is NodeStage.ADMITTED else None
        return AdmissionRecord.model_validate(raw) if raw is not None else None

    def instance(self, slot: str, inventory: dict[str, Instance] | None = None) -> Instance | None:
        """The instance standing in the slot now (the provider's inventory)."""
        inv = inventory if inventory is not None else dict(self.adapters.provisioner.inventory())
        return inv.get(slot)

    def write_record(self, record: dict[str, Any]) -> None:
        """`<state_dir>/records/<slot>.json`, as the rollout writes it (audit and drift read these)."""
        out = self.state_dir / "records"
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / f".{record['slot']}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(record, indent=2), encoding="utf-8")
        os.replace(tmp, out / f"{record['slot']}.json")


def _resume_clock(clock: Any, rollout: RolloutState, pipelining: bool, latest: str | None) -> None:
    """A virtual clock continues after the rollout's modelled timeline and the last day-two event."""
    set_elapsed = getattr(clock, "set_elapsed", None)
    if set_elapsed is None:
        return
    from gpufleet.rollout.timeline import BatchTimes, StackStages, elapsed as modelled

    times = [BatchTimes.from_durations(n, b.durations) for n, b in sorted(rollout.batches.items())
             if b.stage is not BatchStage.PENDING]
    elapsed = modelled(times, pipelining, StackStages.from_state(rollout))
    if latest:
        elapsed = max(elapsed, (datetime.fromisoformat(latest) - clock.start).total_seconds())
    set_elapsed(elapsed)


def _pool_wiring(spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str) -> Any:
    from gpufleet.pool.factory import pool_for
    from gpufleet.ports import WallClock
    from gpufleet.rollout.wiring import Wiring

    pool = pool_for(spec, project, stack, plan=plan)
    # a simulated stack's pool change reads the job stream at the simulated clock's now, as patrol does
    # (resumed below from the journals); the change itself takes no modelled time
    clock = _simulated_clock() if spec.simulated else WallClock()
    return Wiring(Adapters(provisioner=None, executor=None, pool=pool, clock=clock),  # type: ignore[arg-type]
                  threaded=False)


def _simulated_clock() -> Any:
    from gpufleet.sim.clock import VirtualClock

    return VirtualClock()  # the simulator's own start (gpufleet.sim.fleet): its records' decided_at


def _streams(spec: ClusterSpec, pool: Any) -> bool:
    """The stack sets `gpufleet:simulator.jobStream` and its pool takes live work (the sim pool)."""
    return spec.simulator is not None and spec.simulator.job_stream and hasattr(pool, "work")


def _raw_record(records: dict[str, Any], rollout: RolloutState, slot: str) -> Any:
    """The slot's current admission record as stored: a day-two admission wins over the rollout's."""
    raw = records.get(slot)
    if raw is None:
        n = rollout.nodes.get(slot)
        raw = n.record if n is not None and n.stage is NodeStage.ADMITTED else None
    return raw


def _attach_stream(d: DayTwo) -> None:
    """The simulator's job stream as the sim pool's running work, at the day-two clock's now, each
    node from its current admission record's decision (`gpufleet.sim.jobs_pool`)."""
    from gpufleet.sim.jobs_pool import for_plan

    seen: dict[str, tuple[Any, datetime | None]] = {}  # slot -> (its raw record, decided_at): parse once

    def admitted_at(slot: str) -> datetime | None:
        raw = _raw_record(d.journal.state.records, d.rollout, slot)
        known = seen.get(slot)
        if known is None or known[0] is not raw:
            at = AdmissionRecord.model_validate(raw).decided_at if raw is not None else None
            seen[slot] = known = (raw, at)
        return known[1]

    d.pool.work = for_plan(d.plan, d.spec, d.now, admitted_at)


class _JournalStream:
    """The job stream for a reader that holds no lock (`pool_view`): each call reads both journals
    again, as they stand (another process may have admitted, quarantined or upgraded since), resumes
    the simulated clock from them as `open_day_two` does, and asks the stream at that now."""

    def __init__(self, spec: ClusterSpec, plan: ClusterPlan, store: Any, daytwo: Any) -> None:
        self.spec, self.plan, self.store, self.daytwo = spec, plan, store, daytwo

    def __call__(self, admitted: Any) -> Any:
        from gpufleet.daytwo.state import fold as fold_daytwo
        from gpufleet.rollout.state import fold as fold_rollout
        from gpufleet.sim.jobs_pool import for_plan

        rollout = fold_rollout(self.store.read(False) if self.store.exists() else [])
        daytwo = fold_daytwo(self.daytwo.read(False) if self.daytwo.exists() else [])
        records = daytwo.records
        clock = _simulated_clock()
        _resume_clock(clock, rollout, self.spec.rollout.pipelining, daytwo.clock)

        def admitted_at(slot: str) -> datetime | None:
            raw = _raw_record(records, rollout, slot)
            return AdmissionRecord.model_validate(raw).decided_at if raw is not None else None

        return for_plan(self.plan, self.spec, clock.now, admitted_at)(admitted)


def pool_view(spec: ClusterSpec, project: Project, stack: str, *, plan: ClusterPlan | None = None) -> Any:
    """The stack's pool as its day-two commands see it, for a reader that takes no lock (`ops serve`
    answers /metrics while an operator or a rollout holds the lock): `pool_for`'s adapter, with the
    job stream's running jobs on a stack that sets `gpufleet:simulator.jobStream`, so Prometheus's
    busy-gated alerts see what patrol yields to."""
    from gpufleet.plan import build_plan
    from gpufleet.pool.factory import pool_for
    from gpufleet.rollout.backends import open_backend
    from gpufleet.rollout.lock import LockInfo

    plan = plan or build_plan(spec)
    pool = pool_for(spec, project, stack, plan=plan)
    if _streams(spec, pool) and spec.simulated:
        state_dir = project.state_dir(stack)
        store, _lock = open_backend(spec.rollout.state_backend, state_dir, stack, LockInfo.mine(stack, "pool view"),
                                    region=spec.cluster.region)  # the lock is never taken: a reader
        pool.work = _JournalStream(spec, plan, store, daytwo_store(store, state_dir, stack))  # type: ignore[attr-defined]
    return pool


@contextmanager
def open_day_two(stack: str, command: str, *, force_unlock: bool = False,
                 warn: Callable[[str], None] = lambda _m: None, project: Project | None = None,
                 wiring: Any = None, pool_only: bool = False) -> Iterator[DayTwo]:
    """Lock the stack, load both journals, wire the adapters; release everything on the way out.

    `pool_only`: the operation only changes the pool (blacklist, clear): no provider or executor is
    opened (on a real stack those need Pulumi and SSH, which a pool change must not depend on)."""
    from gpufleet.plan import plan_stack
    from gpufleet.project import current_project
    from gpufleet.rollout.backends import open_backend
    from gpufleet.rollout.journal import Journal
    from gpufleet.rollout.lock import LockInfo
    from gpufleet.rollout.wiring import gate_settings, wire
    from gpufleet.spec import load_stack_path

    project = project or current_project()
    spec = load_stack_path(project.stack_file(stack))
    plan = plan_stack(spec)
    state_dir = project.state_dir(stack)
    store, lock = open_backend(spec.rollout.state_backend, state_dir, stack, LockInfo.mine(stack, command),
                               force=force_unlock, warn=warn, region=spec.cluster.region)
    with lock:
        rollout = Journal(store, stack).load(repair=False)
        from gpufleet.rollout.resize_plan import standing_plan

        plan = standing_plan(plan, rollout)  # grown or shrunk by whole blocks: the slots the cluster has
        if wiring is None:
            wiring = _pool_wiring(spec, plan, project, stack) if pool_only else wire(spec, plan, project, stack)
        stamp = None if pool_only else wiring.adapters.clock.now  # a pool change takes no modelled time
        journal = DayTwoJournal(daytwo_store(store, state_dir, stack, warn), stack, clock=stamp)
        try:
            state = journal.load(repair=True)
            _resume_clock(wiring.adapters.clock, rollout, spec.rollout.pipelining, state.clock)
            d = DayTwo(project=project, spec=spec, plan=plan, stack=stack, state_dir=state_dir,
                       adapters=wiring.adapters, settings=gate_settings(spec, project), rollout=rollout,
                       journal=journal, who=actor(spec.simulated), simulator=wiring.simulator)
            if _streams(spec, d.pool):
                _attach_stream(d)
            yield d
        finally:
            journal.close()
            store.close()
