"""The stages of one batch: provision -> configure -> preflight -> gates -> multi-node baselines ->
admit or quarantine, with one remediation and retest and replacements from the spares.

Each stage is one method over the whole batch that returns whether any node moved; the
orchestrator runs them until none does (why each journals its result before the next runs, so a
crash resumes by running again: gpufleet.rollout.orchestrator).
"""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from gpufleet.gates import bundle as B
from gpufleet.gates.admission import AdmissionRecord, apply_isolation
from gpufleet.gates.evaluate import gate_cohort
from gpufleet.gates.settings import GateSettings
from gpufleet.plan.model import ClusterPlan, NodeSlot
from gpufleet.pool.protocol import NodeState as PoolNodeState
from gpufleet.pool.protocol import PendingNode, admit_all
from gpufleet.rollout import baselines as bl
from gpufleet.rollout import events
from gpufleet.rollout.journal import Journal
from gpufleet.ports import HostStatus, Instance, ProvisionResult
from gpufleet.rollout.provision_ahead import ProvisionAhead
from gpufleet.rollout.run_config import Adapters, Options
from gpufleet.rollout.state import NodeStage, NodeState, RolloutState

S = NodeStage
STAGE_CODE = {HostStatus.UNREACHABLE: "unreachable"}
PERF_CODES = ("busbw", "nccl", "multinode", "efa-pair", "ring")


def remediation_for(codes: Sequence[str]) -> str:
    """A GPU reset clears performance and NCCL symptoms; anything else (Xid, ECC, a missing device) reboots."""
    return "reset-gpu" if codes and all(c.startswith(PERF_CODES) for c in codes) else "reboot"


class BatchStages:
    def __init__(self, plan: ClusterPlan, stack: str, adapters: Adapters, journal: Journal, settings: GateSettings,
                 state_dir: Path, options: Options) -> None:
        self.plan, self.stack, self.ports, self.journal = plan, stack, adapters, journal
        self.settings, self.state_dir, self.options = settings, state_dir, options
        self.slots: dict[str, NodeSlot] = {s.name: s for s in plan.nodes}
        self.partition_of_block = {b.id: b.partition for b in plan.blocks}
        self.kind = bl.LAUNCH_KIND.get(adapters.pool.kind, "ssh")
        self.ahead = ProvisionAhead(adapters.provisioner, self._record_provision)
        # batches' rounds at the same time (gpufleet.rollout.window_threads): the admitted partners a
        # round in flight holds, never lent to a second one (two tests on one node measure each other)
        self.lent: set[str] | None = None
        self.wait: Callable[[], None] = lambda: None

    @property
    def state(self) -> RolloutState:
        return self.journal.state

    # ------------------------------------------------------------------ helpers

    def nodes(self, k: int) -> list[NodeState]:
        """Every slot of batch k in the journal's state (planned ones included)."""
        for s in self.plan.batch_nodes(k):
            self.state.node(s.name, k)
        return [self.state.nodes[s.name] for s in self.plan.batch_nodes(k)]

    def at(self, k: int, *stages: NodeStage) -> list[NodeState]:
        return [n for n in self.nodes(k) if n.stage in stages]

    def provisioning_open(self, k: int) -> bool:
        """Slots of batch k still waiting for an instance that may yet come (capacity retries left)."""
        limit = 1 + self.options.capacity_retries
        return any(n.stage is S.PLANNED or (n.stage is S.PROVISIONING and (n.shortfall is None
                                                                             or n.provision_requests < limit))
                   for n in self.nodes(k))

    def _instance(self, n: NodeState) -> Instance:
        slot = self.slots[n.slot]
        return Instance(slot=n.slot, instance_id=n.instance_id or "", batch=slot.batch, block=slot.block,
                        private_ip=n.address)

    def now(self) -> datetime:
        return self.ports.clock.now()

    def _seconds(self, reported: float, started: datetime) -> float:
        """The port's own duration when it gives one, else the clock's (virtual on the simulator)."""
        return reported if reported else max(0.0, (self.now() - started).total_seconds())

    @staticmethod
    def late(n: NodeState) -> bool:
        """A node on its batch's late track: a replacement, or an instance on its retest.

        Why apart: the batch's first pass (its cohort's gates and network tests) never waits for
        these; they are gated on their own and paired with admitted nodes."""
        return n.replacements > 0 or n.attempt > 1

    def _track(self, todo: Sequence[NodeState]) -> dict[str, str]:
        """The event key that puts a step's seconds on the late track (every node it worked is late)."""
        return {"track": "late"} if todo and all(self.late(n) for n in todo) else {}

    def _decide_quarantine(self, k: int, failures: Mapping[str, tuple[str, str, dict | None]]) -> None:
        """Journal quarantine verdicts {slot: (code, reason, record)}; `apply_decisions` tells the pool."""
        event = events.quarantine_decided(k, failures)
        if event is not None:
            self.journal.append(event)

    # ------------------------------------------------------------------ stages

    def apply_decisions(self, k: int) -> bool:
        """Tell the pool what the journal decided (again, after a crash: the pool ignores repeats)."""
        pending = [n for n in self.nodes(k) if n.decision is not None and not n.stage.terminal
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

    def provision(self, k: int) -> bool:
        limit = 1 + self.options.capacity_retries
        want = [n for n in self.at(k, S.PLANNED, S.PROVISIONING) if n.provision_requests < limit
                or (n.stage is S.PROVISIONING and n.shortfall is None)]
        if not want:
            return False
        future = self.ahead.take(k)
        self.ahead.join()  # one provisioner call at a time (two `pulumi up` on one stack collide)
        started = self.now()
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
        for event in events.provisioned(k, asked, result, seconds):
            self.journal.append(event)

    def replace(self, k: int) -> bool:
        todo = self.at(k, S.REPLACED)
        if not todo:
            return False
        self.ahead.join()  # one provisioner call at a time
        started = self.now()
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
        launch = getattr(self.ports.provisioner, "launch_duration_s", 0.0)  # a modelled launch (simulator)
        self.journal.append({"type": "nodes", "batch": k, "to": "provisioned", "stage": "replace",
                             "duration_s": self._seconds(launch, started), "track": "late", "nodes": new})
        return True

    def configure(self, k: int) -> bool:
        """Register and configure the batch once its provisioning has settled.

        Why wait for the capacity retries: the batch is gated as one cohort (the relative busbw
        gate compares it with its own median), and a resumed rollout must form the same cohort
        whatever the provider answered to a call the journal never heard back from."""
        if self.provisioning_open(k):
            return False
        moved = False
        fresh = self.at(k, S.PROVISIONED)
        if fresh:
            self.ports.pool.register_pending([
                PendingNode(slot=n.slot, block=self.slots[n.slot].block,
                            partition=self.partition_of_block.get(self.slots[n.slot].block),
                            instance_id=n.instance_id, address=n.address) for n in fresh])
            self.journal.append({"type": "nodes", "batch": k, "to": "configuring", "stage": "register",
                                 "nodes": {n.slot: {} for n in fresh}})
            moved = True
        todo = [n for n in self.at(k, S.CONFIGURING) if n.decision is None]
        if not todo:
            return moved
        started = self.now()
        result = self.ports.executor.configure([self._instance(n) for n in todo])
        seconds = self._seconds(result.duration_s, started)
        ok, failures = self._split(todo, result.hosts, "configure-failed")
        self._decide_quarantine(k, failures)
        self.journal.append({"type": "nodes", "batch": k, "to": "configured", "stage": "configure",
                             "duration_s": seconds, **self._track(todo), "nodes": {s: {} for s in ok}})
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

    def preflight(self, k: int) -> bool:
        todo = [n for n in self.at(k, S.CONFIGURED) if n.decision is None]
        if not todo:
            return False
        rnd = self.state.batch(k).preflight_rounds + 1
        rel = Path("bundles") / str(k) / str(rnd)
        dest = self.state_dir / rel
        if dest.exists():  # a round cut short by a crash: its bundles were never gated
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        started = self.now()
        result = self.ports.executor.preflight([self._instance(n) for n in todo], dest)
        seconds = self._seconds(result.duration_s, started)
        ok, failures = self._split(todo, result.hosts, "preflight-failed")
        self._decide_quarantine(k, failures)
        if ok:
            self.journal.append({"type": "nodes", "batch": k, "to": "preflight", "stage": "preflight",
                                 "duration_s": seconds, **self._track(todo),
                                 "nodes": {s: {"bundle": str(rel / s)} for s in ok}})
        return True

    def gate(self, k: int) -> bool:
        """Gate the batch's collected bundles as one cohort; every node's outcome in one event.

        Why one event: the relative busbw gate compares each node with the cohort's median, so a
        resumed rollout must never re-gate part of a cohort; all outcomes land together or none."""
        if self.at(k, S.CONFIGURED) or any(n.remediation is not None for n in self.nodes(k)):
            return False  # wait: nodes still being collected or remediated join this cohort
        todo = [n for n in self.at(k, S.PREFLIGHT) if n.decision is None and n.remediation is None]
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
        records = gate_cohort(bundles, self.settings, previous=previous, decided_at=self.now()) if bundles else []
        for r in records:
            n = by_slot.get(r.slot)
            if n is None:
                raise ValueError(f"a bundle's manifest names slot {r.slot}, which is not gated here")
            r = self._stamp(r, n)
            results[r.slot] = events.node_result(n, r, passed="pass")
        self.journal.append({"type": "gated", "batch": k, "stage": "gates", **self._track(todo), "nodes": results})
        self.remediate(k)
        return True

    def _stamp(self, r: AdmissionRecord, n: NodeState) -> AdmissionRecord:
        """The record names what the journal knows (a bundle's manifest may leave these out)."""
        s = self.slots[n.slot]
        return r.model_copy(update={"instance_id": n.instance_id, "batch": s.batch, "block": s.block,
                                    "stack": self.stack})

    def remediate(self, k: int) -> bool:
        """One reset or reboot for each node the gates sent to remediation, then its one retest."""
        todo = [n for n in self.nodes(k) if n.remediation is not None and n.decision is None]
        if not todo:
            return False
        again, failures = {}, {}
        started = self.now()
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
            again[n.slot] = events.retest_entry(action, n.remediation, codes)
        self._decide_quarantine(k, failures)
        if again:
            self.journal.append({"type": "retest", "batch": k, "nodes": again,
                                 "duration_s": self._seconds(seconds, started)})
        return True

    def _partners(self, testing: int) -> list[str]:
        """The admitted nodes a network round may pair with: all of them, or (rounds of several
        batches at once) up to max(2, nodes under test) that no other round holds, waiting for
        some where every one is held (never skipping the test for want of a free partner)."""
        while True:
            admitted = sorted(n.slot for n in self.state.nodes.values() if n.stage is S.ADMITTED)
            if self.lent is None:
                return admitted
            free = [a for a in admitted if a not in self.lent]
            if free or not admitted:
                take = free[:max(2, testing)]
                self.lent.update(take)
                return take
            self.wait()

    def network(self, k: int) -> bool:
        """The multi-node baselines of the nodes that passed their gates.

        The first pass waits for every first instance (one cohort, one round); a node on the late
        track (a retest, a replacement) never holds it: it is measured in a later round, with the
        nodes admitted by then as its partners."""
        first = [n for n in self.nodes(k) if not self.late(n)]
        if any(n.stage in (S.PROVISIONED, S.CONFIGURING, S.CONFIGURED, S.PREFLIGHT) or n.remediation is not None
               for n in first):
            return False  # wait: those may still join this round of baselines
        todo = [n for n in self.at(k, S.BASELINE) if n.decision is None]
        if not todo:
            return False
        records = [AdmissionRecord.model_validate(n.gate_record) for n in todo]
        admitted = self._partners(len(todo))
        try:
            if len(todo) + len(admitted) < 2:  # a one-node cluster: no partner to measure with
                final, event = records, events.network_skipped(k)
            else:
                runner = bl.NetworkRunner(self.ports.pool.launcher(), self.kind, self.settings,
                                          self.settings.expected_versions, self.options.message_bytes,
                                          self.options.launch_timeout_s)
                result = bl.run_network_gates(runner, [n.slot for n in todo], admitted)
                final, net = apply_isolation(records, result)
                event = events.network_measured(k, runner, net)
        finally:
            if self.lent is not None:
                self.lent.difference_update(admitted)
        event.update(self._track(todo))
        by_slot = {n.slot: n for n in todo}
        # the network's figures and every node's verdict in one event (a partial re-run would
        # test a different set of nodes)
        event["nodes"] = {r.slot: events.node_result(by_slot[r.slot], r, passed="admit") for r in final}
        self.journal.append(event)
        self.remediate(k)
        bl.write_communication_baseline(self.state_dir / "baselines" / "communication.json", self.stack,
                                        self.plan.instance_type, self.state.batches, self.now())
        return True
