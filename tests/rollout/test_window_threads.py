"""Issue 21 item 4: a real (threaded) stack runs the window too, each batch in flight in its own
worker thread whose port calls overlap the others', every journal append under one lock.

The ports are tests/rollout/fakes.py's FakeCloud with calls that take real time, so the threads
do overlap; what a batch in flight is doing is counted by the cloud itself. The same cloud run on
the simulator's path (one action at a time) gives the reference: a real and a simulated rollout
differ only in their ports (and the journal's order, which is the order port calls completed)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpufleet.rollout import state as st
from gpufleet.rollout.backends import LocalJournalStore
from gpufleet.rollout.journal import Journal
from gpufleet.rollout.state import BatchStage, NodeStage
from gpufleet.rollout.timeline import Window

from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator, small_spec

SLOT = "tst-b{0:04d}-n{0:05d}".format
WINDOW = Window(batches=8, fabric_tests=2)


@dataclass
class TimedCloud(FakeCloud):
    """FakeCloud whose executor calls and multi-node rounds take `pause` seconds, counting which
    batches are inside a port call at once and how many rounds run together."""

    pause: float = 0.03
    round_pause: float = 0.1  # a multi-node round lasts longer: rounds of batches in flight meet
    inside: Counter = field(default_factory=Counter)  # batch -> port calls in progress
    most_batches: int = 0  # the most distinct batches inside port calls at one moment
    rounds: int = 0
    most_rounds: int = 0
    testing: Counter = field(default_factory=Counter)  # node -> rounds it is in right now
    shared: int = 0  # a node in two rounds at once (they would measure each other)
    _count: threading.Lock = field(default_factory=threading.Lock)

    def _batch_in(self, batch: int, delta: int) -> None:
        with self._count:
            self.inside[batch] += delta
            if self.inside[batch] == 0:
                del self.inside[batch]
            self.most_batches = max(self.most_batches, len(self.inside))

    def _timed(self, batch: int, call: Any, *args: Any, pause: float | None = None) -> Any:
        self._batch_in(batch, 1)
        try:
            time.sleep(self.pause if pause is None else pause)
            return call(*args)
        finally:
            self._batch_in(batch, -1)

    def provision(self, batch, slots):
        return self._timed(batch, FakeCloud.provision, self, batch, slots)

    def configure(self, instances):
        return self._timed(instances[0].batch, FakeCloud.configure, self, instances)

    def preflight(self, instances, dest):
        return self._timed(instances[0].batch, FakeCloud.preflight, self, instances, dest)

    def run(self, specs, timeout_s):
        batch = max(self.instances[n].batch for s in specs for n in s.nodes)  # the batch under test
        nodes = [n for s in specs for n in s.nodes]
        with self._count:
            self.rounds += 1
            self.most_rounds = max(self.most_rounds, self.rounds)
            self.shared += sum(1 for n in nodes if self.testing[n])
            self.testing.update(nodes)
        try:
            return self._timed(batch, FakeCloud.run, self, specs, timeout_s, pause=self.round_pause)
        finally:
            with self._count:
                self.rounds -= 1
                self.testing.subtract(nodes)


def faults() -> dict[str, Any]:
    """A fault mix that quarantines, remediates, replaces and retries capacity across batches."""
    return dict(faults={SLOT(6): frozenset({"nvlink_down"}), SLOT(13): frozenset({"efa_missing"})},
                flaky={SLOT(9)}, configure_fail={SLOT(17)}, slow_nodes={SLOT(21)}, shortfall_once={SLOT(10)})


def pool_of(out) -> dict[str, tuple[str, str | None, int]]:
    """Each slot's stage, reason code and replacements: the pool a rollout ends with."""
    return {s: (n.stage.value, n.reason_code, n.replacements) for s, n in sorted(out.state.nodes.items())}


def events_of(o) -> Counter:
    """The journal's events by kind, order aside."""
    return Counter((e["type"], e.get("batch"), e.get("to"), e.get("stage"), tuple(sorted(e.get("nodes", {}))))
                   for e in o.journal.store.read(repair=False))


SPEC = dict(nodes=24, canary=1 / 6, batch_size=4, maxFailureRate=0.5)  # the canary, then 5 batches of 4


def test_real_ports_run_the_window_with_batches_in_flight_together_and_the_same_outcome(tmp_path):
    spec = small_spec(**SPEC)
    sim_cloud, real_cloud = FakeCloud(**faults()), TimedCloud(**faults())
    sim = orchestrator(tmp_path / "sim", sim_cloud, spec, window=WINDOW)
    real = orchestrator(tmp_path / "real", real_cloud, spec, window=WINDOW, threaded=True)
    sim_out, real_out = sim.run(), real.run()
    assert real.workers is not None and sim.workers is None
    assert real_out.finished and not real_out.halted and real_out.short == []
    # batches in flight together: several batches inside port calls at the same moment
    assert real_cloud.most_batches >= 3, real_cloud.most_batches
    assert 2 <= real_cloud.most_rounds <= WINDOW.fabric_tests  # rounds side by side, within the fabric budget
    assert real_cloud.provisioner_overlaps == 0  # still one provisioner call at a time (one `pulumi up`)
    assert real_cloud.shared == 0  # an admitted partner is lent to one round at a time
    # the same admitted set, quarantines with their reasons, replacements, cloud calls, journal events
    assert pool_of(real_out) == pool_of(sim_out)
    assert {n.stage for n in real_out.state.nodes.values()} == {NodeStage.ADMITTED}
    assert sum(n.replacements for n in real_out.state.nodes.values()) == 4  # 6, 13, 17, 21; 9 retested
    assert sorted(real_cloud.ledger) == sorted(sim_cloud.ledger)
    assert events_of(real) == events_of(sim)
    assert real_out.state.nodes[SLOT(10)].provision_requests == 2


def test_a_batch_over_the_bar_stops_all_buying_while_the_batches_in_flight_finish(tmp_path):
    spec = small_spec(nodes=24, canary=1 / 6, batch_size=4, maxFailureRate=0.25)
    bad = {SLOT(i): frozenset({"nvlink_down"}) for i in (5, 6)}  # batch 2: 2 of 4 (50% > 25%)
    cloud = TimedCloud(faults=bad, flaky={SLOT(9)})
    o = orchestrator(tmp_path, cloud, spec, window=Window(batches=2, fabric_tests=2), threaded=True)
    out = o.run()
    assert out.halted and out.halt_reason.startswith("batch 2 failed 2 of 4 nodes (50% > 25%)")
    journal = o.journal.store.read(repair=False)
    # the point the bar was exceeded, replayed from the journal: nothing is bought after it
    state, at = st.RolloutState(), None
    for i, e in enumerate(journal):
        st.apply(state, e)
        if len(state.batch(2).first_failures) > 1:
            at = i
            break
    assert at is not None
    after = journal[at + 1:]
    assert not [e for e in after if e.get("to") in ("running", "provisioning", "replaced")]
    # every batch that was in flight finished its gates before the rollout halted (exit 3)
    in_flight = [k for k, b in state.batches.items() if k != 2 and b.stage is BatchStage.RUNNING]
    assert in_flight == [3]  # its retest keeps it busy past batch 2's verdicts
    for k in in_flight:
        assert out.state.batches[k].stage is BatchStage.HALTED
        assert all(n.stage in (NodeStage.ADMITTED, NodeStage.QUARANTINED)
                   for n in out.state.nodes.values() if n.batch == k)
    assert journal[-1]["type"] == "rollout" and journal[-1]["to"] == "halted"
    assert [op for op, *_ in cloud.ledger if op != "launch"] == []  # no replacement bought
    assert all(out.state.batch(k).stage is BatchStage.PENDING for k in (5, 6))


class Crash(BaseException):
    """Stands in for SIGKILL: nothing in the orchestrator catches it."""


@pytest.mark.parametrize("kill_after", [13, 24, 37, 52, 68, 85, 101])  # of ~107 events; the window's from 12
def test_killed_with_batches_in_flight_and_resumed_buys_nothing_twice(tmp_path, kill_after):
    spec = small_spec(**SPEC)
    ref_cloud = FakeCloud(**faults())
    ref = orchestrator(tmp_path / "ref", ref_cloud, spec, window=WINDOW).run()

    cloud = TimedCloud(**faults())
    state_dir = tmp_path / "run" / "state"

    def killed(n: int) -> None:
        if n >= kill_after:
            raise Crash()
    journal = Journal(LocalJournalStore(state_dir / "journal.jsonl"), "t", now=cloud.clock.now, on_append=killed)
    journal.load()
    with pytest.raises(Crash):
        orchestrator(tmp_path / "run", cloud, spec, journal=journal, window=WINDOW, threaded=True).run()
    lines = (state_dir / "journal.jsonl").read_text().splitlines()
    assert len(lines) == kill_after  # nothing journaled after the kill, whatever the other workers were doing
    assert cloud.most_batches >= 2 or kill_after < 16  # killed with batches inside port calls together
    out = orchestrator(tmp_path / "run", cloud, spec, window=WINDOW, threaded=True).run()  # the journal replayed
    assert out.finished and pool_of(out) == pool_of(ref)
    # nothing bought twice: the cloud's own ledger equals the uninterrupted run's
    assert sorted(cloud.ledger) == sorted(ref_cloud.ledger)
    assert Counter(slot for op, slot, _ in cloud.ledger if op == "launch") == \
        Counter(slot for op, slot, _ in ref_cloud.ledger if op == "launch")


def test_the_real_executor_is_built_once_and_plays_service_hosts_one_configure_at_a_time():
    from gpufleet.rollout.wiring import _FirstUseExecutor

    class Executor:
        def __init__(self, service_hosts):
            self.service_hosts, self.now, self.most = service_hosts, 0, 0
            self._count = threading.Lock()

        def configure(self, instances):
            with self._count:
                self.now += 1
                self.most = max(self.most, self.now)
            time.sleep(0.05)
            with self._count:
                self.now -= 1

    def run(service_hosts):
        built = []

        def build():
            built.append(Executor(service_hosts))
            time.sleep(0.02)  # a second caller arrives while it is built
            return built[-1]
        port = _FirstUseExecutor(build)
        threads = [threading.Thread(target=port.configure, args=([],)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return len(built), built[0].most

    assert run(("slurm-controller",)) == (1, 1)  # the controller's play: one batch's configure at a time
    assert run(()) == (1, 4)  # no shared host: batches configure side by side
