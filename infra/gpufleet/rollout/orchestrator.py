"""The staged, gated rollout: batches canary first, each node through provision -> configure ->
preflight -> gates -> multi-node baselines -> admit or quarantine, driven through the ports.

Why this shape (DESIGN.md sections 3 and 6): every decision is made here from the folded journal
and the gates' pure functions; the adapters only carry. Each step reads which nodes sit in which
stage, does one action over all of them, and journals the result before the next step, so a
crash at any point resumes by simply running again: ports are idempotent (provision returns what
exists, the pool ignores repeated calls), a verdict is journaled before the pool hears of it, and
the one action that is not idempotent (replacing an instance) is journaled as an intent first and
checked against the provider's inventory on resume.

Halting: the first instances of a batch failing above `maxFailureRate` (the canary: above
`canaryMaxFailureRate`, default the same) halt the rollout; nothing is provisioned after that.
"""

from __future__ import annotations

import hashlib
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from gpufleet.errors import ConfigError
from gpufleet.gates import bundle as B
from gpufleet.gates.admission import AdmissionRecord, apply_isolation
from gpufleet.gates.evaluate import gate_cohort
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import Action, Verdict
from gpufleet.plan.model import ClusterPlan, NodeSlot
from gpufleet.pool.protocol import NodeState as PoolNodeState
from gpufleet.pool.protocol import PendingNode, Pool, admit_all, record_digest
from gpufleet.rollout import baselines as bl
from gpufleet.rollout.journal import Journal
from gpufleet.rollout.ports import Clock, Executor, HostStatus, Instance, ProvisionResult, Provisioner
from gpufleet.rollout.state import BatchStage, NodeStage, NodeState, RolloutState
from gpufleet.rollout.timeline import BatchTimes, StackStages, elapsed

S = NodeStage
STAGE_CODE = {HostStatus.UNREACHABLE: "unreachable"}
PERF_CODES = ("busbw", "nccl", "multinode", "efa-pair", "ring")


@dataclass
class Adapters:
    provisioner: Provisioner
    executor: Executor
    pool: Pool
    clock: Clock


@dataclass(frozen=True)
class Options:
    until_batch: int | None = None
    pipelining: bool = True
    threaded: bool = False  # provision the next batch in a worker thread (real adapters)
    capacity_retries: int = 2  # extra provision requests for slots the provider could not fill
    launch_timeout_s: float = 1800.0
    replace_action: str = "stop-and-report"
    max_failure_rate: float = 0.1
    canary_max_failure_rate: float | None = None
    message_bytes: int = 16 * 2**30


class StageHooks(Protocol):
    """Stack-level stages around the batches (the acceptance checks): each returns a halt reason or None.

    Called again on resume until the next batch has started, so they must journal their own outcomes
    and not collect twice (as `gpufleet.rollout.acceptance.AcceptanceRunner` does)."""

    def before_batches(self) -> str | None:
        """The base checks due before the first GPU node is provisioned (the simulator: storage and
        network; a Pulumi stack: storage, on its own client instances)."""
        ...

    def after_canary(self, admitted: Sequence[str]) -> str | None:
        """A training smoke job on admitted canary nodes, before batch 2 is provisioned."""
        ...


class HostStageHooks(StageHooks, Protocol):
    """StageHooks whose base checks need GPU hosts: a real stack's network base check (the nodes'
    own links and EFA), and its storage check too where the stack has no storage clients (static
    hosts: nothing but the fleet exists before the first batch).

    Optional: the orchestrator calls `after_configure` and `recheck` only on hooks that have them."""

    def recheck(self) -> str | None:
        """Stages to run again at the start of every run, past the point where `before_batches` runs
        them (the storage check after a storage change); journaled like any verdict."""
        ...

    def after_configure(self, batch: int, slots: Sequence[str]) -> str | None:
        """Stages on the canary's configured hosts, after its configure step and before its preflight
        and gates; called again on resume and after replacements are configured (journaled verdicts
        are not collected again). A halt here stops the rollout before any later batch is bought."""
        ...


@dataclass
class Outcome:
    state: RolloutState
    halted: bool
    halt_reason: str
    finished: bool  # every batch of the plan has been worked (passed or halted)
    short: list[str] = field(default_factory=list)  # slots without an admitted node
    spares_exhausted: bool = False


def remediation_for(codes: Sequence[str]) -> str:
    """A GPU reset clears performance and NCCL symptoms; anything else (Xid, ECC, a missing device) reboots."""
    return "reset-gpu" if codes and all(c.startswith(PERF_CODES) for c in codes) else "reboot"


class Orchestrator:
    def __init__(self, plan: ClusterPlan, stack: str, adapters: Adapters, journal: Journal, settings: GateSettings,
                 state_dir: Path, options: Options = Options(), hooks: StageHooks | None = None) -> None:
        self.plan, self.stack, self.ports, self.journal = plan, stack, adapters, journal
        self.hooks = hooks
        self.settings, self.state_dir, self.options = settings, state_dir, options
        self.slots: dict[str, NodeSlot] = {s.name: s for s in plan.nodes}
        self.partition_of_block = {b.id: b.partition for b in plan.blocks}
        self.spares = plan.topology.spare_nodes
        self.kind = bl.LAUNCH_KIND.get(adapters.pool.kind, "ssh")
        self.last_batch = min(options.until_batch or len(plan.batches), len(plan.batches))
        self._worker: ThreadPoolExecutor | None = None
        self._ahead: dict[int, Future[ProvisionResult]] = {}
        self.spares_exhausted = False
        journal.listeners.append(lambda _event, _state: self._sync_clock())
        self._sync_clock()

    def _sync_clock(self) -> None:
        """A virtual clock (the simulator's) reads the modelled timeline so far; resume restores it.

        Why here: only the orchestrator knows what ran in parallel (pipelining), so it, not the
        simulator, turns the ports' modelled durations into "now"."""
        set_elapsed = getattr(self.ports.clock, "set_elapsed", None)
        if set_elapsed is None:
            return
        times = [BatchTimes.from_durations(n, b.durations) for n, b in sorted(self.state.batches.items())
                 if b.stage is not BatchStage.PENDING]
        set_elapsed(elapsed(times, self.options.pipelining, StackStages.from_state(self.state)))

    @property
    def state(self) -> RolloutState:
        return self.journal.state

    # ------------------------------------------------------------------ the rollout

    def layout(self) -> str:
        """What a journal is only valid for: the slots, their batches and blocks."""
        text = "\n".join(f"{s.name} {s.batch} {s.block}" for s in self.plan.nodes)
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    def run(self) -> Outcome:
        if not self.state.started:
            self.journal.append({"type": "rollout", "to": "started", "layout": self.layout(),
                                 "batches": [b.number for b in self.plan.batches],
                                 "spare_nodes": self.spares, "instance_type": self.plan.instance_type})
        elif self.state.layout not in (None, self.layout()):
            raise ConfigError("the stack's layout (slots, batches, blocks) changed since this rollout started",
                              field="gpufleet:cluster / gpufleet:rollout",
                              expected="the layout the journal was started with, or --restart to archive it")
        try:
            self._recheck()
            for b in self.plan.batches[:self.last_batch]:
                if self.state.halted:
                    break
                stage = self.state.batch(b.number).stage
                if stage is BatchStage.PASSED:
                    continue
                if stage is BatchStage.PENDING and not self._hook_passes(b.number):
                    break
                self._run_batch(b.number)
        finally:
            self._join_ahead()
            if self._worker is not None:
                self._worker.shutdown(wait=True)
        everything = self.last_batch == len(self.plan.batches)
        if everything and not self.state.halted and not self.state.finished and all(
                self.state.batch(b.number).stage is BatchStage.PASSED for b in self.plan.batches):
            self.journal.append({"type": "rollout", "to": "finished"})
        return self.outcome()

    def _hook_passes(self, k: int) -> bool:
        """The stack-level stage due before batch k starts; a failing one halts the rollout."""
        if self.hooks is None or k > 2:
            return True
        if k == 1:
            reason = self.hooks.before_batches()
        else:
            canary = [n.slot for n in self._nodes(1) if n.stage is S.ADMITTED]
            reason = self.hooks.after_canary(canary)
        if reason is None:
            return True
        self.journal.append({"type": "rollout", "to": "halted", "reason": reason})
        return False

    def _recheck(self) -> None:
        """The hooks' stages that must run again before anything else (`HostStageHooks.recheck`: the
        storage check after a storage change); a failing one halts the rollout."""
        recheck = getattr(self.hooks, "recheck", None)
        if recheck is None or self.state.halted:
            return
        reason = recheck()
        if reason is not None:
            self.journal.append({"type": "rollout", "to": "halted", "reason": reason})

    def _after_configure(self, k: int) -> bool:
        """The canary's configured hosts to the hooks' `after_configure` (a real stack's network check)
        once its configure step has settled; True when the hook halted the rollout."""
        hook = getattr(self.hooks, "after_configure", None)
        if hook is None or k != 1 or self._provisioning_open(k) or any(
                n.decision is None for n in self._at(k, S.PROVISIONED, S.CONFIGURING)):
            return False
        slots = [n.slot for n in self._at(k, S.CONFIGURED) if n.decision is None]
        if not slots:
            return False
        reason = hook(k, slots)
        if reason is None:
            return False
        self.journal.append({"type": "rollout", "to": "halted", "reason": reason})
        return True

    def outcome(self) -> Outcome:
        st = self.state
        worked = [b.number for b in self.plan.batches[:self.last_batch]]
        short = sorted(s.name for s in self.plan.nodes if s.batch in worked
                       and (st.nodes.get(s.name) is None or st.nodes[s.name].stage is not S.ADMITTED))
        exhausted = self.spares_exhausted or (st.spares_used >= self.spares and any(
            n.stage is S.QUARANTINED and not n.blacklisted for n in st.nodes.values()))
        return Outcome(state=st, halted=st.halted, halt_reason=st.halt_reason, finished=st.finished, short=short,
                       spares_exhausted=exhausted)

    def _run_batch(self, k: int) -> None:
        if self.state.batch(k).stage is BatchStage.PENDING:
            self.journal.append({"type": "batch", "batch": k, "to": "running"})
        self._settle(k)
        if self.state.halted or self._halt_check(k):
            return
        while True:
            todo = [n for n in self._nodes(k) if n.stage is S.QUARANTINED and not n.blacklisted]
            if not todo:
                break
            left = self.spares - self.state.spares_used
            if left <= 0:
                self.spares_exhausted = True
                break
            take = todo[:left]
            self.journal.append({"type": "nodes", "batch": k, "to": "replaced", "stage": "replace",
                                 "nodes": {n.slot: {"old_instance": n.instance_id} for n in take}})
            self._settle(k)
        self.journal.append({"type": "batch", "batch": k, "to": "passed"})

    def _halt_check(self, k: int) -> bool:
        """The batch's first instances against its bar; halts (and journals why) when exceeded."""
        canary = self.plan.batches[k - 1].canary
        limit = self.options.max_failure_rate
        if canary and self.options.canary_max_failure_rate is not None:
            limit = self.options.canary_max_failure_rate
        nodes = self._nodes(k)
        failed = sorted(self.state.batch(k).first_failures)
        rate = len(failed) / len(nodes) if nodes else 0.0
        if rate <= limit:
            return False
        codes: dict[str, int] = {}
        for slot in failed:
            code = self.state.nodes[slot].reason_code or "unknown"
            codes[code] = codes.get(code, 0) + 1
        top = ", ".join(f"{c} x{n}" for c, n in sorted(codes.items(), key=lambda x: (-x[1], x[0])))
        what = "the canary" if canary else f"batch {k}"
        reason = (f"{what} failed {len(failed)} of {len(nodes)} nodes ({rate:.0%} > {limit:.0%}): {top}; "
                  "nothing further is provisioned")
        self._join_ahead()
        self.journal.append({"type": "batch", "batch": k, "to": "halted", "reason": reason})
        for other in sorted(self.state.batches):
            if other != k and self.state.batches[other].stage is BatchStage.RUNNING:
                self.journal.append({"type": "batch", "batch": other, "to": "halted",
                                     "reason": f"batch {k} halted the rollout"})
        self.journal.append({"type": "rollout", "to": "halted", "reason": reason})
        return True

    def _settle(self, k: int) -> None:
        """Run the steps until no node of batch k moves."""
        while True:
            moved = self._apply_decisions(k)
            moved |= self._provision(k)
            moved |= self._replace(k)
            moved |= self._configure(k)
            if self._after_configure(k):
                return
            self._provision_ahead(k)
            moved |= self._preflight(k)
            moved |= self._remediate(k)
            moved |= self._gate(k)
            moved |= self._network(k)
            if not moved:
                return

    # ------------------------------------------------------------------ helpers

    def _nodes(self, k: int) -> list[NodeState]:
        """Every slot of batch k in the journal's state (planned ones included)."""
        for s in self.plan.batch_nodes(k):
            self.state.node(s.name, k)
        return [self.state.nodes[s.name] for s in self.plan.batch_nodes(k)]

    def _at(self, k: int, *stages: NodeStage) -> list[NodeState]:
        return [n for n in self._nodes(k) if n.stage in stages]

    def _instance(self, n: NodeState) -> Instance:
        slot = self.slots[n.slot]
        return Instance(slot=n.slot, instance_id=n.instance_id or "", batch=slot.batch, block=slot.block,
                        private_ip=n.address)

    def _now(self) -> datetime:
        return self.ports.clock.now()

    def _seconds(self, reported: float, started: datetime) -> float:
        """The port's own duration when it gives one, else the clock's (virtual on the simulator)."""
        return reported if reported else max(0.0, (self._now() - started).total_seconds())

    def _decide_quarantine(self, k: int, failures: Mapping[str, tuple[str, str, dict | None]]) -> None:
        """Journal quarantine verdicts {slot: (code, reason, record)}; `_apply_decisions` tells the pool."""
        if not failures:
            return
        nodes = {}
        for slot, (code, reason, record) in failures.items():
            entry: dict[str, Any] = {"action": "quarantine", "reason_code": code, "reason": reason}
            if record is not None:
                entry["record"] = record
                entry["record_digest"] = record_digest(AdmissionRecord.model_validate(record))
            nodes[slot] = entry
        self.journal.append({"type": "decided", "batch": k, "nodes": nodes})

    # ------------------------------------------------------------------ steps

    def _apply_decisions(self, k: int) -> bool:
        """Tell the pool what the journal decided (again, after a crash: the pool ignores repeats)."""
        pending = [n for n in self._nodes(k) if n.decision is not None and not n.stage.terminal
                   and n.stage is not S.REPLACED]
        if not pending:
            return False
        pool = self.ports.pool
        admitted, quarantined = {}, {}
        admit_all(pool, [(n.slot, AdmissionRecord.model_validate(n.decision.record))
                         for n in pending if n.decision.action == "admit"])
        for n in pending:
            d = n.decision
            if d.action == "admit":
                admitted[n.slot] = {}
            else:
                node = pool.quarantine(n.slot, d.reason_code or "quarantined", d.reason or d.reason_code or "")
                quarantined[n.slot] = {"reason_code": d.reason_code, "reason": d.reason,
                                       "blacklisted": node.state is PoolNodeState.BLACKLISTED}
        if admitted:
            self.journal.append({"type": "nodes", "batch": k, "to": "admitted", "nodes": admitted})
        if quarantined:
            self.journal.append({"type": "nodes", "batch": k, "to": "quarantined", "nodes": quarantined})
        return True

    def _provision(self, k: int) -> bool:
        limit = 1 + self.options.capacity_retries
        want = [n for n in self._at(k, S.PLANNED, S.PROVISIONING) if n.provision_requests < limit
                or (n.stage is S.PROVISIONING and n.shortfall is None)]
        if not want:
            return False
        future = self._ahead.pop(k, None)
        self._join_ahead()  # one provisioner call at a time (two `pulumi up` on one stack collide)
        started = self._now()
        if future is None:
            fresh = [n for n in want if not (n.stage is S.PROVISIONING and n.shortfall is None)]
            if fresh:
                self.journal.append({"type": "nodes", "batch": k, "to": "provisioning", "stage": "provision",
                                     "nodes": {n.slot: {} for n in fresh}})
            result = self.ports.provisioner.provision(k, [self.slots[n.slot] for n in want])
        else:
            result = future.result()
        self._record_provision(k, [n.slot for n in want], result, self._seconds(result.duration_s, started))
        return True

    def _record_provision(self, k: int, asked: Sequence[str], result: ProvisionResult, seconds: float) -> None:
        up = {s: result.instances[s] for s in asked if s in result.instances}
        if up:
            self.journal.append({"type": "nodes", "batch": k, "to": "provisioned", "stage": "provision",
                                 "duration_s": seconds,
                                 "nodes": {s: {"instance_id": i.instance_id, "private_ip": i.private_ip}
                                           for s, i in up.items()}})
        short = {s: result.shortfall.get(s, "the provider returned no instance") for s in asked if s not in up}
        if short:
            self.journal.append({"type": "nodes", "batch": k, "to": "provisioning", "stage": "provision",
                                 "duration_s": 0 if up else seconds,
                                 "nodes": {s: {"shortfall": why} for s, why in short.items()}})

    def _provision_ahead(self, k: int) -> None:
        """Pipelining: once batch k (not the canary) is configured, provision batch k+1 meanwhile."""
        nxt = k + 1
        if not self.options.pipelining or self.plan.batches[k - 1].canary or nxt > self.last_batch:
            return
        if self._provisioning_open(k) or self._at(k, S.PROVISIONED, S.CONFIGURING) or self.state.halted:
            return
        if nxt in self._ahead:
            return
        if self.state.batch(nxt).stage is BatchStage.RUNNING:
            # resumed after a crash between starting the batch ahead and hearing the provider's answer:
            # ask at the same point, so the cloud sees the calls of an uninterrupted rollout
            if not self.options.threaded and any(n.stage is S.PLANNED or (n.stage is S.PROVISIONING
                                                                          and n.shortfall is None)
                                                 for n in self._nodes(nxt)):
                self._provision(nxt)
            return
        if self.state.batch(nxt).stage is not BatchStage.PENDING:
            return
        self.journal.append({"type": "batch", "batch": nxt, "to": "running"})
        if not self.options.threaded:
            self._provision(nxt)
            return
        slots = [self.slots[n.slot] for n in self._nodes(nxt)]
        self.journal.append({"type": "nodes", "batch": nxt, "to": "provisioning", "stage": "provision",
                             "nodes": {s.name: {} for s in slots}})
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="provision-ahead")
        self._ahead[nxt] = self._worker.submit(self.ports.provisioner.provision, nxt, slots)

    def _join_ahead(self) -> None:
        """Record what a worker provisioned ahead (a halt never forgets instances it bought)."""
        for k, future in sorted(self._ahead.items()):
            result = future.result()
            self._record_provision(k, [s.name for s in self.plan.batch_nodes(k)], result, result.duration_s)
        self._ahead.clear()

    def _replace(self, k: int) -> bool:
        todo = self._at(k, S.REPLACED)
        if not todo:
            return False
        self._join_ahead()  # one provisioner call at a time
        started = self._now()
        inventory = self.ports.provisioner.inventory()
        new: dict[str, dict[str, Any]] = {}
        for n in todo:
            self.ports.pool.release(n.slot)
            current = inventory.get(n.slot)
            if current is not None and current.instance_id != n.instance_id:
                inst = current  # replaced before a crash; the journal had not heard yet
            else:
                inst = self.ports.provisioner.replace(self.slots[n.slot], self.options.replace_action)  # type: ignore[arg-type]
            new[n.slot] = {"instance_id": inst.instance_id, "private_ip": inst.private_ip, "replacement": True}
        self.journal.append({"type": "nodes", "batch": k, "to": "provisioned", "stage": "replace",
                             "duration_s": self._seconds(0.0, started), "nodes": new})
        return True

    def _provisioning_open(self, k: int) -> bool:
        """Slots of batch k still waiting for an instance that may yet come (capacity retries left)."""
        limit = 1 + self.options.capacity_retries
        return any(n.stage is S.PLANNED or (n.stage is S.PROVISIONING and (n.shortfall is None
                                                                             or n.provision_requests < limit))
                   for n in self._nodes(k))

    def _configure(self, k: int) -> bool:
        """Register and configure the batch once its provisioning has settled.

        Why wait for the capacity retries: the batch is gated as one cohort (the relative busbw
        gate compares it with its own median), and a resumed rollout must form the same cohort
        whatever the provider answered to a call the journal never heard back from."""
        if self._provisioning_open(k):
            return False
        moved = False
        fresh = self._at(k, S.PROVISIONED)
        if fresh:
            self.ports.pool.register_pending([
                PendingNode(slot=n.slot, block=self.slots[n.slot].block,
                            partition=self.partition_of_block.get(self.slots[n.slot].block),
                            instance_id=n.instance_id, address=n.address) for n in fresh])
            self.journal.append({"type": "nodes", "batch": k, "to": "configuring", "stage": "register",
                                 "nodes": {n.slot: {} for n in fresh}})
            moved = True
        todo = [n for n in self._at(k, S.CONFIGURING) if n.decision is None]
        if not todo:
            return moved
        started = self._now()
        result = self.ports.executor.configure([self._instance(n) for n in todo])
        seconds = self._seconds(result.duration_s, started)
        ok, failures = self._split(todo, result.hosts, "configure-failed")
        self._decide_quarantine(k, failures)
        self.journal.append({"type": "nodes", "batch": k, "to": "configured", "stage": "configure",
                             "duration_s": seconds, "nodes": {s: {} for s in ok}})
        return True

    @staticmethod
    def _split(todo: Sequence[NodeState], hosts: Mapping[str, Any], failed_code: str
               ) -> tuple[list[str], dict[str, tuple[str, str, None]]]:
        ok: list[str] = []
        failures: dict[str, tuple[str, str, None]] = {}
        for n in todo:
            h = hosts.get(n.slot)
            if h is None:
                failures[n.slot] = ("unreachable", "the executor returned no result for this host", None)
            elif h.status is HostStatus.OK:
                ok.append(n.slot)
            else:
                code = STAGE_CODE.get(h.status, failed_code)
                detail = f"task {h.task!r}: " if h.task else ""
                failures[n.slot] = (code, f"{detail}{h.message or h.status.value}", None)
        return ok, failures

    def _preflight(self, k: int) -> bool:
        todo = [n for n in self._at(k, S.CONFIGURED) if n.decision is None]
        if not todo:
            return False
        rnd = self.state.batch(k).preflight_rounds + 1
        rel = Path("bundles") / str(k) / str(rnd)
        dest = self.state_dir / rel
        if dest.exists():  # a round cut short by a crash: its bundles were never gated
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        started = self._now()
        result = self.ports.executor.preflight([self._instance(n) for n in todo], dest)
        seconds = self._seconds(result.duration_s, started)
        ok, failures = self._split(todo, result.hosts, "preflight-failed")
        self._decide_quarantine(k, failures)
        if ok:
            self.journal.append({"type": "nodes", "batch": k, "to": "preflight", "stage": "preflight",
                                 "duration_s": seconds, "nodes": {s: {"bundle": str(rel / s)} for s in ok}})
        return True

    def _gate(self, k: int) -> bool:
        """Gate the batch's collected bundles as one cohort; every node's outcome in one event.

        Why one event: the relative busbw gate compares each node with the cohort's median, so a
        resumed rollout must never re-gate part of a cohort; all outcomes land together or none."""
        if self._at(k, S.CONFIGURED) or any(n.remediation is not None for n in self._nodes(k)):
            return False  # wait: nodes still being collected or remediated join this cohort
        todo = [n for n in self._at(k, S.PREFLIGHT) if n.decision is None and n.remediation is None]
        if not todo:
            return False
        bundles, results = [], {}
        for n in todo:
            try:
                bundles.append(B.read_bundle(self.state_dir / (n.bundle or "")))
            except B.BundleError as exc:
                results[n.slot] = {"result": "quarantine", "reason_code": "bundle-unreadable",
                                   "reason": f"the preflight bundle cannot be read: {exc}"}
        by_slot = {n.slot: n for n in todo}
        previous = {n.slot: n.previous for n in todo if n.previous is not None}
        records = gate_cohort(bundles, self.settings, previous=previous, decided_at=self._now()) if bundles else []
        for r in records:
            n = by_slot.get(r.slot)
            if n is None:
                raise ValueError(f"a bundle's manifest names slot {r.slot}, which is not gated here")
            r = self._stamp(r, n)
            results[r.slot] = self._result(n, r, passed="pass")
        self.journal.append({"type": "gated", "batch": k, "stage": "gates", "nodes": results})
        self._remediate(k)
        return True

    @staticmethod
    def _result(n: NodeState, r: AdmissionRecord, passed: str) -> dict[str, Any]:
        """One node's journaled outcome: `passed` ("pass" to the baselines, "admit"), quarantine, or
        remediate; a node that already had its retest is quarantined instead of a second one."""
        if r.action is Action.RETEST and n.previous is not None:
            r = r.model_copy(update={"verdict": Verdict.QUARANTINE, "action": Action.QUARANTINE,
                                     "message": "failed again after remediation: " + r.message})
        record = r.model_dump(mode="json")
        if r.action is Action.ADMIT:
            out: dict[str, Any] = {"result": passed, "record": record}
            if passed == "admit":
                out["record_digest"] = record_digest(r)
            return out
        code = r.reason_codes[0] if r.reason_codes else ("retest" if r.action is Action.RETEST else "quarantined")
        result = "quarantine" if r.action is Action.QUARANTINE else "remediate"
        return {"result": result, "record": record, "reason_code": code, "reason": r.message}

    def _stamp(self, r: AdmissionRecord, n: NodeState) -> AdmissionRecord:
        """The record names what the journal knows (a bundle's manifest may leave these out)."""
        s = self.slots[n.slot]
        return r.model_copy(update={"instance_id": n.instance_id, "batch": s.batch, "block": s.block,
                                    "stack": self.stack})

    def _remediate(self, k: int) -> bool:
        """One reset or reboot for each node the gates sent to remediation, then its one retest."""
        todo = [n for n in self._nodes(k) if n.remediation is not None and n.decision is None]
        if not todo:
            return False
        again, failures = {}, {}
        started = self._now()
        seconds = 0.0  # remediations run on their nodes in parallel
        for n in todo:
            codes = tuple(n.remediation.get("reason_codes", ()))
            action = remediation_for(codes)
            outcome = self.ports.executor.remediate(self._instance(n), action)  # type: ignore[arg-type]
            seconds = max(seconds, outcome.duration_s)
            if outcome.status is not HostStatus.OK:
                code = STAGE_CODE.get(outcome.status, "remediation-failed")
                failures[n.slot] = (code, f"{action} failed: {outcome.message or outcome.status.value}",
                                    n.remediation)
                continue
            r = n.remediation
            again[n.slot] = {"action": action, "outcome": {"verdict": r["verdict"], "action": r["action"],
                                                          "attempt": r.get("attempt", 1),
                                                          "reason_codes": list(codes), "message": r.get("message", "")}}
        self._decide_quarantine(k, failures)
        if again:
            self.journal.append({"type": "retest", "batch": k, "nodes": again,
                                 "duration_s": self._seconds(seconds, started)})
        return True

    def _network(self, k: int) -> bool:
        if self._at(k, S.PROVISIONED, S.CONFIGURING, S.CONFIGURED, S.PREFLIGHT, S.REPLACED) or any(
                n.remediation is not None for n in self._nodes(k)):
            return False  # wait: those may still join this round of baselines
        todo = [n for n in self._at(k, S.BASELINE) if n.decision is None]
        if not todo:
            return False
        records = [AdmissionRecord.model_validate(n.gate_record) for n in todo]
        admitted = sorted(n.slot for n in self.state.nodes.values() if n.stage is S.ADMITTED)
        if len(todo) + len(admitted) < 2:  # a one-node cluster: no partner to measure with
            final, event = records, {"type": "network", "batch": k, "skipped": "no second node to pair with"}
        else:
            runner = bl.NetworkRunner(self.ports.pool.launcher(), self.kind, self.settings,
                                      self.settings.expected_versions, self.options.message_bytes,
                                      self.options.launch_timeout_s)
            result = bl.run_network_gates(runner, [n.slot for n in todo], admitted)
            final, net = apply_isolation(records, result)
            scales: dict[str, list[dict[str, Any]]] = {}
            for run in runner.runs:
                scales.setdefault(str(run.scale), []).append(run.model_dump(mode="json"))
            event = {"type": "network", "batch": k, "link_faults": [list(p) for p in net.link_faults],
                     "ring_faults": [list(g) for g in net.ring_faults], "unresolved": list(net.unresolved),
                     "rounds": net.rounds, "runs": net.runs, "scales": scales, "duration_s": runner.seconds}
        by_slot = {n.slot: n for n in todo}
        # the network's figures and every node's verdict in one event (a partial re-run would
        # test a different set of nodes)
        event["nodes"] = {r.slot: self._result(by_slot[r.slot], r, passed="admit") for r in final}
        self.journal.append(event)
        self._remediate(k)
        bl.write_communication_baseline(self.state_dir / "baselines" / "communication.json", self.stack,
                                        self.plan.instance_type, self.state.batches, self._now())
        return True
