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

This module is the loop: which batch runs, the stack-level hooks between batches, halting, spares
and when the next batch is provisioned ahead. The stages of one batch are
`gpufleet.rollout.batch_stages`, the events journaled are built in `gpufleet.rollout.events`, and
one batch at a time's worker thread (pipelining) is `gpufleet.rollout.provision_ahead`; on a
real (threaded) stack the window's batches in flight each run in a worker thread of
`gpufleet.rollout.window_threads`, the same actions and events as on the simulator's ports.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Sequence

from gpufleet.errors import ConfigError
from gpufleet.gates.settings import GateSettings
from gpufleet.plan.model import ClusterPlan
from gpufleet.plan.resize import Resize, layout_digest, record_of
from gpufleet.rollout import baselines as bl
from gpufleet.rollout import events, reconcile
from gpufleet.rollout.batch_stages import BatchStages
from gpufleet.rollout.journal import Journal
from gpufleet.rollout.resize_run import run_shrink
from gpufleet.rollout.run_config import Adapters, Options
from gpufleet.rollout.state import BatchStage, NodeStage, RolloutState
from gpufleet.rollout.timeline import BatchTimes, StackStages, elapsed
from gpufleet.rollout.window_threads import Aborted, workers_for

S = NodeStage


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


class Orchestrator:
    def __init__(self, plan: ClusterPlan, stack: str, adapters: Adapters, journal: Journal, settings: GateSettings,
                 state_dir: Path, options: Options = Options(), hooks: StageHooks | None = None,
                 resize: Resize | None = None) -> None:
        self.plan, self.stack, self.ports, self.journal = plan, stack, adapters, journal
        self.resize = resize  # grow or shrink by whole blocks (gpufleet.plan.resize); `plan` is its effective plan
        self.hooks = hooks
        self.settings, self.state_dir, self.options = settings, state_dir, options
        # a real stack's window: a worker thread per batch in flight (gpufleet.rollout.window_threads)
        self.workers = (workers_for(adapters, options.window.fabric_tests)
                        if options.threaded and options.window is not None else None)
        ports = adapters if self.workers is None else self.workers.adapters
        self.stages = BatchStages(plan, stack, ports, journal, settings, state_dir, options)
        self.spares = plan.topology.spare_nodes
        self.last_batch = min(options.until_batch or len(plan.batches), len(plan.batches))
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
        set_elapsed(elapsed(times, self.options.pipelining, StackStages.from_state(self.state), self.options.window))

    @property
    def state(self) -> RolloutState:
        return self.journal.state

    # ------------------------------------------------------------------ the rollout

    def layout(self) -> str:
        """What a journal is only valid for: the slots, their batches and blocks."""
        return layout_digest(self.plan.nodes)

    def _check_identity(self) -> None:
        """A journal is this stack's and this cluster's only: one copied from another stack or cluster
        (every event names both) is refused, never resumed against a cloud that is not behind it."""
        st = self.state
        want = (self.stack, self.plan.cluster)
        have = st.identity
        if have is not None and (have[0] != want[0] or (have[1] is not None and have[1] != want[1])):
            raise ConfigError(f"the journal belongs to stack {have[0]!r}, cluster {have[1]!r}, not stack {want[0]!r}, "
                              f"cluster {want[1]!r}", field="journal",
                              expected="this stack's own journal, or --restart to archive it and start afresh")
        if st.foreign:
            seq, stack, cluster = st.foreign[0]
            raise ConfigError(f"the journal mixes rollouts: event {seq} belongs to stack {stack!r}, cluster "
                              f"{cluster!r}, the journal to stack {have and have[0]!r}, cluster {have and have[1]!r}",
                              field="journal", expected="one stack's and one cluster's events only, or --restart")

    def run(self) -> Outcome:
        self.journal.cluster = self.plan.cluster
        if not self.state.started:
            self.journal.append({"type": "rollout", "to": "started", "layout": self.layout(), "slots": record_of(self.plan),
                                 "batches": [b.number for b in self.plan.batches],
                                 "spare_nodes": self.spares, "instance_type": self.plan.instance_type})
        else:
            self._check_identity()
            self._settle_pending_creates()
            if self.resize is not None and self.resize.changed and self.state.layout != self.layout():
                self.journal.append(self.resize.event())  # before any node moves: a kill resumes it
        if self.state.releasing:  # a shrink's released slots, before anything else runs
            self._shrink()
        if self.state.started and self.state.layout not in (None, self.layout()):
            raise ConfigError("the stack's layout (slots, batches, blocks) changed since this rollout started",
                              field="gpufleet:cluster / gpufleet:rollout",
                              expected="the layout the journal was started with, or --restart to archive it")
        if self.state.events > 1:
            self._reconcile()
            self._rebuild_baselines()
        try:
            self._recheck()
            if self.options.window is not None:
                self._run_windowed()
                return self._finish()
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
            self.stages.ahead.join()
            self.stages.ahead.shutdown()
        return self._finish()

    def _finish(self) -> Outcome:
        everything = self.last_batch == len(self.plan.batches)
        if everything and not self.state.halted and not self.state.finished and all(
                self.state.batch(b.number).stage is BatchStage.PASSED for b in self.plan.batches):
            if len(self.plan.batches) == 1 and not self._hook_passes(2):
                return self.outcome()  # a canary-only plan has no batch 2 to run the smoke job before
            self.journal.append({"type": "rollout", "to": "finished"})
        return self.outcome()

    def _shrink(self) -> None:
        """Drain, wait for, release and terminate the slots a shrink released (gpufleet.rollout.resize_run)."""
        released = (self.state.resize or {}).get("released", {})
        blocks = {slot: (int(v[1]), v[3]) for slot, v in released.items()}
        run_shrink(self.journal, self.ports, blocks, self.options.drain_timeout_s,
                   poll_s=self.options.drain_poll_s)

    def _settle_pending_creates(self) -> None:
        """A real stack's creates an interrupted `up` left pending, settled before anything is bought
        again (gpufleet.rollout.pending_creates); what was found is journaled and shown."""
        settle = getattr(self.ports.provisioner, "settle_pending_creates", None)
        if settle is None:
            return
        found = settle()
        if found:
            self.journal.append({"type": "reconciled", "nodes": {
                slot: {"action": "cleared-pending-create", "terminated": ids} for slot, ids in found.items()}})

    def _reconcile(self) -> None:
        """The journal against the provider's inventory and the pool; differences journaled (and
        shown), the slots it can follow adopted (gpufleet.rollout.reconcile)."""
        if not self.state.nodes:
            return
        inventory = self.ports.provisioner.inventory()
        absent = reconcile.no_world_behind(self.state, inventory)
        if absent:
            raise ConfigError(f"the journal names {absent} instance(s) and the provider runs none of them: it is not "
                              f"this stack's world (a journal copied from another project or account, or a cloud "
                              f"torn down since)", field="journal",
                              expected=f"the journal of the instances stack {self.stack!r} runs, or --restart")
        pool = {slot: node.state.value for slot, node in self.ports.pool.state().nodes.items()}
        found = reconcile.differences(self.state, inventory, pool)
        if self.state.finished or self.state.halted:  # nothing runs on: on record and shown, never acted on
            found = {slot: {**d, "action": "report"} for slot, d in found.items()}
        # the spares bought, from the instances' generation tags where the journal knows fewer: the
        # budget below (`state.spares_used`) is then checked against what the provider launched
        spares = reconcile.spares(self.state, inventory, found, self.spares)
        if not found and spares is None:
            return
        for slot, d in found.items():
            if d["action"] == "adopt":
                self.ports.pool.release(slot)  # the old instance's registration, if the pool had one
        self.journal.append({"type": "reconciled", "nodes": found, **({"spares": spares} if spares else {})})

    def _rebuild_baselines(self) -> None:
        """On resume the communication baseline file is rewritten from the journal: a kill between a
        network round's journal line and the file's rename loses nothing."""
        if any(b.scales for b in self.state.batches.values()):
            bl.write_communication_baseline(self.state_dir / "baselines" / "communication.json", self.stack,
                                            self.plan.instance_type, self.state.batches, self.ports.clock.now())

    def _hook_passes(self, k: int) -> bool:
        """The stack-level stage due before batch k starts; a failing one halts the rollout."""
        if self.hooks is None or k > 2:
            return True
        if k == 1:
            reason = self.hooks.before_batches()
        else:
            canary = [n.slot for n in self.stages.nodes(1) if n.stage is S.ADMITTED]
            reason = self.hooks.after_canary(canary)
        if reason is None:
            return True
        self.journal.append(events.rollout_halted(reason))
        return False

    def _recheck(self) -> None:
        """The hooks' stages that must run again before anything else (`HostStageHooks.recheck`: the
        storage check after a storage change); a failing one halts the rollout."""
        recheck = getattr(self.hooks, "recheck", None)
        if recheck is None or self.state.halted:
            return
        reason = recheck()
        if reason is not None:
            self.journal.append(events.rollout_halted(reason))

    def _after_configure(self, k: int) -> bool:
        """The canary's configured hosts to the hooks' `after_configure` (a real stack's network check)
        once its configure step has settled; True when the hook halted the rollout."""
        hook = getattr(self.hooks, "after_configure", None)
        if hook is None or k != 1 or self.stages.provisioning_open(k) or any(
                n.decision is None for n in self.stages.at(k, S.PROVISIONED, S.CONFIGURING)):
            return False
        slots = [n.slot for n in self.stages.at(k, S.CONFIGURED) if n.decision is None]
        if not slots:
            return False
        reason = hook(k, slots)
        if reason is None:
            return False
        self.journal.append(events.rollout_halted(reason))
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
            todo = [n for n in self.stages.nodes(k) if n.stage is S.QUARANTINED and not n.blacklisted]
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

    # ------------------------------------------------------------------ batches in flight together

    def _run_windowed(self) -> None:
        """The canary alone (its bar decides), then up to `window.batches` batches in their first pass
        at once; a batch's replacements run beside the others (its late track holds no window slot).

        The failure-rate rule keeps its meaning: once any batch's first instances exceed the bar,
        nothing more is bought (no batch started, no replacement), the batches in flight finish
        their gates, and the rollout halts with the reason."""
        window = self.options.window
        assert window is not None
        numbers = [b.number for b in self.plan.batches[:self.last_batch]]
        if not numbers or self.state.halted:
            return
        canary = numbers[0]
        stage = self.state.batch(canary).stage
        if stage is BatchStage.PENDING and not self._hook_passes(canary):
            return
        if stage is not BatchStage.PASSED:
            self._run_batch(canary)
        if self.state.halted or self.state.batch(canary).stage is not BatchStage.PASSED:
            return
        rest = numbers[1:]
        if self.workers is not None:
            self._run_window_threads(rest)
            return
        while not self.state.halted:
            stage_of = {k: self.state.batch(k).stage for k in rest}
            halted = [k for k in rest if stage_of[k] is BatchStage.HALTED]
            in_flight = [k for k in rest if stage_of[k] is BatchStage.RUNNING]
            pending = [k for k in rest if stage_of[k] is BatchStage.PENDING]
            first_pass = [k for k in in_flight if not self._first_pass_done(k)]
            # first failures only grow: a batch over its bar stops all buying at once, before it is idle
            stopping = bool(halted) or any(self._failure_reason(k) is not None for k in in_flight)
            if not stopping and pending and len(first_pass) < window.batches:
                if not self._hook_passes(pending[0]):
                    return
                self.journal.append({"type": "batch", "batch": pending[0], "to": "running"})
                continue
            if any(self._act(k, stopping) for k in in_flight):
                continue
            if halted:  # every batch in flight has finished its gates
                first = halted[0]
                for k in in_flight:
                    self.journal.append(events.batch_halted(
                        k, f"batch {first} halted the rollout; this batch's gates had finished"))
                self.journal.append(events.rollout_halted(self.state.batch(first).reason))
                return
            if not pending:
                return

    def _stopping(self, rest: Sequence[int]) -> bool:
        """Nothing more is bought: a batch halted, or one's first instances are over its bar."""
        return any(self.state.batch(k).stage is BatchStage.HALTED or (
            self.state.batch(k).stage is BatchStage.RUNNING and self._failure_reason(k) is not None) for k in rest)

    def _run_window_threads(self, rest: Sequence[int]) -> None:
        """The window on real ports: the same decisions as `_run_windowed`'s loop, each batch in
        flight worked by its own thread, which lets go of the run's lock only for its port calls
        (gpufleet.rollout.window_threads). This thread starts batches and, once every worker is
        done, journals the halt; every event is appended under the lock."""
        w = self.workers
        window = self.options.window
        assert w is not None and window is not None
        lock = w.lock
        lock.aborted, w.idle, w.errors = False, set(), []
        self.stages.lent = set()

        def wait_for_partners() -> None:
            lock.wait(0.5)
            lock.check()
        self.stages.wait = wait_for_partners
        self.journal.listeners.append(lambda _e, _s: lock.notify())
        lock.acquire()
        try:
            while True:
                if w.errors:
                    lock.aborted = True
                    if not w.threads:
                        break
                    lock.wait(0.5)
                    continue
                stage_of = {k: self.state.batch(k).stage for k in rest}
                in_flight = [k for k in rest if stage_of[k] is BatchStage.RUNNING]
                pending = [k for k in rest if stage_of[k] is BatchStage.PENDING]
                first_pass = [k for k in in_flight if not self._first_pass_done(k)]
                if not self.state.halted and not self._stopping(rest) and pending \
                        and len(first_pass) < window.batches:
                    if not self._hook_passes(pending[0]):
                        break
                    self.journal.append({"type": "batch", "batch": pending[0], "to": "running"})
                    continue
                for k in in_flight:
                    if k not in w.threads and k not in w.idle:
                        w.threads[k] = threading.Thread(target=self._work, args=(k, rest),
                                                        name=f"batch-{k}", daemon=True)
                        w.threads[k].start()
                if w.threads:
                    lock.wait(0.5)
                    continue
                halted = [k for k in rest if stage_of[k] is BatchStage.HALTED]
                if halted and not self.state.halted:  # every batch in flight has finished its gates
                    first = halted[0]
                    for k in in_flight:
                        self.journal.append(events.batch_halted(
                            k, f"batch {first} halted the rollout; this batch's gates had finished"))
                    self.journal.append(events.rollout_halted(self.state.batch(first).reason))
                break
        finally:
            lock.aborted = True  # done or failing: a worker still in a port call journals nothing more
            threads = list(w.threads.values())
            if lock.held():
                lock.release()
            for t in threads:
                t.join()
        if w.errors:
            raise w.errors[0]

    def _work(self, k: int, rest: Sequence[int]) -> None:
        """Batch k's worker: its next action, again and again, until it passes, halts or is idle."""
        w = self.workers
        assert w is not None
        try:
            w.lock.acquire()
            while self.state.batch(k).stage is BatchStage.RUNNING:
                if not self._act(k, self._stopping(rest)):
                    w.idle.add(k)  # nothing is bought any more and its gates are done: final
                    break
        except Aborted:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the run's thread, which raises it
            w.errors.append(exc)
            w.lock.aborted = True
        finally:
            w.threads.pop(k, None)
            w.lock.notify()
            if w.lock.held():
                w.lock.release()

    def _act(self, k: int, stopping: bool) -> bool:
        """The next action of batch k: one stage that moves, else what its being idle calls for (halt
        when its first instances are over the bar, replacements, passed); False when it has none.

        Why one action at a time, the lowest batch first: the next action is then a function of the
        journal alone, so a rollout resumed after a crash takes the same actions in the same order
        as an uninterrupted one (the simulator's ledger proves it: tests/rollout/test_crash.py)."""
        if self._step(k, first_only=True):
            return True
        reason = self._failure_reason(k)
        if reason is not None:
            self.journal.append(events.batch_halted(k, reason))
            return True
        if stopping:
            return False  # nothing more is bought: no replacement, and the halt waits for the others
        if self._replace_some(k):
            return True
        self.journal.append({"type": "batch", "batch": k, "to": "passed"})
        return True

    def _first_pass_done(self, k: int) -> bool:
        """Every first instance of batch k decided or gone to its late track (a retest, a replacement):
        the batch no longer holds a window slot."""
        return all(n.stage in (S.ADMITTED, S.QUARANTINED, S.REPLACED) or self.stages.late(n)
                   for n in self.stages.nodes(k))

    def _step(self, k: int, first_only: bool = False) -> bool:
        """One pass of batch k's stages (or, `first_only`, up to the first that moves); whether any moved.

        The network round comes before the stages a late node is still in (it only runs once every
        first instance has passed its gates), so a retest never slips into its cohort's round."""
        stages = self.stages
        moved = False
        for stage in (stages.apply_decisions, stages.provision, stages.replace, stages.configure,
                      stages.network, stages.preflight, stages.remediate, stages.gate):
            moved |= stage(k)
            if moved and first_only:
                return True
        return moved

    def _replace_some(self, k: int) -> bool:
        """Journal replacements for batch k's quarantined slots, as far as the spares go."""
        todo = [n for n in self.stages.nodes(k) if n.stage is S.QUARANTINED and not n.blacklisted]
        if not todo:
            return False
        left = self.spares - self.state.spares_used
        if left <= 0:
            self.spares_exhausted = True
            return False
        self.journal.append({"type": "nodes", "batch": k, "to": "replaced", "stage": "replace",
                             "nodes": {n.slot: {"old_instance": n.instance_id} for n in todo[:left]}})
        return True

    def _failure_reason(self, k: int) -> str | None:
        """Why batch k's first instances exceed its bar, or None when they do not."""
        canary = self.plan.batches[k - 1].canary
        limit = self.options.max_failure_rate
        if canary and self.options.canary_max_failure_rate is not None:
            limit = self.options.canary_max_failure_rate
        nodes = self.stages.nodes(k)
        failed = sorted(self.state.batch(k).first_failures)
        rate = len(failed) / len(nodes) if nodes else 0.0
        if rate <= limit:
            return None
        codes: dict[str, int] = {}
        for slot in failed:
            code = self.state.nodes[slot].reason_code or "unknown"
            codes[code] = codes.get(code, 0) + 1
        top = ", ".join(f"{c} x{n}" for c, n in sorted(codes.items(), key=lambda x: (-x[1], x[0])))
        what = "the canary" if canary else f"batch {k}"
        return (f"{what} failed {len(failed)} of {len(nodes)} nodes ({rate:.0%} > {limit:.0%}): {top}; "
                "nothing further is provisioned")

    def _halt_check(self, k: int) -> bool:
        """The batch's first instances against its bar; halts (and journals why) when exceeded."""
        reason = self._failure_reason(k)
        if reason is None:
            return False
        self.stages.ahead.join()
        self.journal.append(events.batch_halted(k, reason))
        for other in sorted(self.state.batches):
            if other != k and self.state.batches[other].stage is BatchStage.RUNNING:
                self.journal.append(events.batch_halted(other, f"batch {k} halted the rollout"))
        self.journal.append(events.rollout_halted(reason))
        return True

    def _settle(self, k: int) -> None:
        """Run the stages until no node of batch k moves."""
        stages = self.stages
        while True:
            moved = stages.apply_decisions(k)
            moved |= stages.provision(k)
            moved |= stages.replace(k)
            moved |= stages.configure(k)
            if self._after_configure(k):
                return
            self._provision_ahead(k)
            moved |= stages.preflight(k)
            moved |= stages.remediate(k)
            moved |= stages.gate(k)
            moved |= stages.network(k)
            if not moved:
                return

    def _provision_ahead(self, k: int) -> None:
        """Pipelining: once batch k (not the canary) is configured, provision batch k+1 meanwhile."""
        nxt, stages = k + 1, self.stages
        if not self.options.pipelining or self.plan.batches[k - 1].canary or nxt > self.last_batch:
            return
        if stages.provisioning_open(k) or stages.at(k, S.PROVISIONED, S.CONFIGURING) or self.state.halted:
            return
        if nxt in stages.ahead:
            return
        if self.state.batch(nxt).stage is BatchStage.RUNNING:
            # resumed after a crash between starting the batch ahead and hearing the provider's answer:
            # ask at the same point, so the cloud sees the calls of an uninterrupted rollout
            if not self.options.threaded and any(n.stage is S.PLANNED or (n.stage is S.PROVISIONING
                                                                          and n.shortfall is None)
                                                 for n in stages.nodes(nxt)):
                stages.provision(nxt)
            return
        if self.state.batch(nxt).stage is not BatchStage.PENDING:
            return
        self.journal.append({"type": "batch", "batch": nxt, "to": "running"})
        if not self.options.threaded:
            stages.provision(nxt)
            return
        slots = [stages.slots[n.slot] for n in stages.nodes(nxt)]
        self.journal.append({"type": "nodes", "batch": nxt, "to": "provisioning", "stage": "provision",
                             "nodes": {s.name: {} for s in slots}})
        stages.ahead.submit(nxt, slots)
