"""The orchestrator's rules over fake ports: halts, remediate once, spares, link faults, resume."""

from __future__ import annotations

import pytest

from gpufleet.pool.protocol import NodeState
from gpufleet.rollout.journal import Journal, LocalJournalStore
from gpufleet.rollout.state import BatchStage, NodeStage
from gpufleet.rollout.timeline import BatchTimes, timeline

from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator, small_spec

SLOT = "tst-b{0:04d}-n{0:05d}".format


def stages(out) -> dict[str, str]:
    return {s: n.stage.value for s, n in out.state.nodes.items()}


def test_a_healthy_fleet_is_admitted_batch_by_batch(tmp_path):
    cloud = FakeCloud()
    o = orchestrator(tmp_path, cloud)
    out = o.run()
    assert out.finished and not out.halted and out.short == []
    assert set(stages(out).values()) == {"admitted"}
    pool = o.ports.pool.state()
    assert {n.state for n in pool.nodes.values()} == {NodeState.ADMITTED} and len(pool.nodes) == 12
    assert [op for op, *_ in cloud.ledger] == ["launch"] * 12
    # every admitted node carries the multi-node check and figures in its record
    rec = out.state.nodes[SLOT(0)].record
    assert any(c["check_id"] == "nccl.multinode" and c["verdict"] == "PASS" for c in rec["checks"])
    assert rec["busbw"]["multi_node_gbs"] and rec["instance_id"] == out.state.nodes[SLOT(0)].instance_id
    assert all(b.stage is BatchStage.PASSED for b in out.state.batches.values())
    baseline = (tmp_path / "state" / "baselines" / "communication.json").read_text()
    assert '"2"' in baseline and '"schema_version": 1' in baseline


def test_a_systemic_fault_halts_after_the_canary_and_nothing_else_is_provisioned(tmp_path):
    cloud = FakeCloud(systemic=True)
    out = orchestrator(tmp_path, cloud).run()
    assert out.halted and "the canary failed 3 of 3 nodes" in out.halt_reason
    assert "version" in out.halt_reason
    canary = {SLOT(i) for i in range(3)}
    assert {slot for _, slot, _ in cloud.ledger} == canary
    assert out.state.batches[2].stage is BatchStage.PENDING


def test_the_canary_has_its_own_bar(tmp_path):
    spec = small_spec(maxFailureRate=0.5, canaryMaxFailureRate=0.0)
    cloud = FakeCloud(faults={SLOT(1): frozenset({"nvlink_down"})})
    out = orchestrator(tmp_path, cloud, spec).run()
    assert out.halted and "the canary failed 1 of 3" in out.halt_reason
    assert {slot for _, slot, _ in cloud.ledger} == {SLOT(i) for i in range(3)}


def test_a_batch_above_max_failure_rate_halts_the_rollout(tmp_path):
    spec = small_spec(maxFailureRate=0.25, pipelining=False)
    bad = {SLOT(3): frozenset({"nvlink_down"}), SLOT(4): frozenset({"efa_missing"})}
    cloud = FakeCloud(faults=bad)
    out = orchestrator(tmp_path, cloud, spec).run()
    assert out.halted and out.halt_reason.startswith("batch 2 failed 2 of 4 nodes (50% > 25%)")
    assert max(int(s[-5:]) for _, s, _ in cloud.ledger) == 6  # batch 3 never provisioned
    assert [op for op, *_ in cloud.ledger].count("stop-and-report") == 0  # no spares spent on a halted batch


def test_remediate_gets_one_retest_and_a_second_failure_quarantines(tmp_path):
    spec = small_spec(maxFailureRate=0.5)
    cloud = FakeCloud(flaky={SLOT(5)}, missing={SLOT(6)})
    out = orchestrator(tmp_path, cloud, spec).run()
    flaky, stuck = out.state.nodes[SLOT(5)], out.state.nodes[SLOT(6)]
    assert flaky.stage is NodeStage.ADMITTED and flaky.replacements == 0
    assert [s for s, _ in cloud.remediations].count(SLOT(5)) == 1
    assert ("retest", flaky.instance_id, None) in flaky.history
    # the stuck node: remediated once, failed again, quarantined, then replaced from the spares
    assert [s for s, _ in cloud.remediations].count(SLOT(6)) == 1
    first = [h for h in stuck.history if h[0] == "quarantined"][0]
    assert first[2] == "missing-fi_info-efa" and stuck.replacements == 1 and stuck.stage is NodeStage.ADMITTED


def test_quarantined_nodes_are_replaced_from_spares_into_their_slots(tmp_path):
    spec = small_spec(maxFailureRate=0.5, replaceAction="terminate")
    cloud = FakeCloud(faults={SLOT(2): frozenset({"nvlink_down"})}, configure_fail={SLOT(7)},
                      unreachable={SLOT(8)})
    o = orchestrator(tmp_path, cloud, spec, replace_action="terminate")
    out = o.run()
    assert out.short == [] and out.finished and out.state.spares_used == 3
    codes = {s: [h[2] for h in n.history if h[0] == "quarantined"] for s, n in out.state.nodes.items()}
    assert codes[SLOT(2)] == ["nvlink-down"] or codes[SLOT(2)][0].startswith("nvlink")
    assert codes[SLOT(7)] == ["configure-failed"] and codes[SLOT(8)] == ["unreachable"]
    assert [x for x in cloud.ledger if x[0] == "terminate"] == [
        ("terminate", SLOT(2), "i-0000201"), ("terminate", SLOT(7), "i-0000701"), ("terminate", SLOT(8), "i-0000801")]
    pool = o.ports.pool.state()
    assert pool.nodes[SLOT(2)].state is NodeState.ADMITTED and pool.nodes[SLOT(2)].instance_id == "i-0000202"


def test_spares_exhausted_before_the_target_ends_short(tmp_path):
    spec = small_spec(spare_fraction=0.08, maxFailureRate=0.5)  # one spare
    cloud = FakeCloud(faults={SLOT(4): frozenset({"nvlink_down"}), SLOT(9): frozenset({"efa_missing"})})
    out = orchestrator(tmp_path, cloud, spec).run()
    assert out.state.spares_used == 1 and out.spares_exhausted
    assert out.short == [SLOT(9)] and out.state.nodes[SLOT(9)].stage is NodeStage.QUARANTINED


def test_a_blacklisted_slot_is_not_retried(tmp_path):
    spec = small_spec(maxFailureRate=0.5, failuresBeforeBlacklist=2)
    cloud = FakeCloud(sticky={SLOT(5): frozenset({"nvlink_down"})})
    out = orchestrator(tmp_path, cloud, spec).run()
    n = out.state.nodes[SLOT(5)]
    assert n.blacklisted and n.replacements == 1 and out.short == [SLOT(5)]
    assert [op for op, s, _ in cloud.ledger if s == SLOT(5)] == ["launch", "stop-and-report", "launch"]


def test_a_bad_link_is_reported_as_a_pair_and_a_slow_node_is_quarantined(tmp_path):
    spec = small_spec(maxFailureRate=0.5)
    cloud = FakeCloud(bad_links={(SLOT(3), SLOT(4))}, slow_nodes={SLOT(9)})
    out = orchestrator(tmp_path, cloud, spec).run()
    assert out.state.batches[2].link_faults == [(SLOT(3), SLOT(4))]
    assert out.state.nodes[SLOT(3)].stage is NodeStage.ADMITTED and out.state.nodes[SLOT(4)].stage is NodeStage.ADMITTED
    slow = out.state.nodes[SLOT(9)]
    assert [h[2] for h in slow.history if h[0] == "quarantined"] == ["efa-pair-fail"]
    assert slow.stage is NodeStage.ADMITTED and slow.replacements == 1


def test_a_capacity_shortfall_is_asked_again(tmp_path):
    cloud = FakeCloud(shortfall_once={SLOT(6)})
    out = orchestrator(tmp_path, cloud).run()
    assert out.short == [] and out.state.nodes[SLOT(6)].provision_requests == 2


def test_until_batch_stops_there_and_resume_finishes(tmp_path):
    cloud = FakeCloud()
    out = orchestrator(tmp_path, cloud, until_batch=2).run()
    assert not out.finished and out.short == []
    assert out.state.batches[2].stage is BatchStage.PASSED and out.state.batches[3].stage is BatchStage.PENDING
    again = orchestrator(tmp_path, cloud).run()
    assert again.finished and len(cloud.ledger) == 12


class Crash(BaseException):
    """A stand-in for SIGKILL inside the process: nothing catches it."""


def run_with_crash(tmp_path, cloud, spec, crash_at):
    def boom(n):
        if n == crash_at:
            raise Crash()
    state_dir = tmp_path / "state"
    j = Journal(LocalJournalStore(state_dir / "journal.jsonl"), "t", now=cloud.clock.now, on_append=boom)
    j.load()
    with pytest.raises(Crash):
        orchestrator(tmp_path, cloud, spec, journal=j).run()
    j.close()
    return orchestrator(tmp_path, cloud, spec).run()


def summary(tmp_path, out, cloud, o):
    pool = {s: (n.state, n.instance_id, n.reason_code, n.failures) for s, n in o.ports.pool.state().nodes.items()}
    nodes = {s: (n.stage, n.instance_id, n.replacements, [h for h in n.history],
                 (n.record or {}).get("verdict"), tuple((n.record or {}).get("reason_codes", ())))
             for s, n in out.state.nodes.items()}
    return pool, nodes, sorted(cloud.ledger), out.halted, out.short


def test_a_crash_after_any_event_resumes_to_the_same_end(tmp_path):
    spec = small_spec(maxFailureRate=0.5)
    faults = dict(faults={SLOT(2): frozenset({"nvlink_down"})}, flaky={SLOT(5)}, configure_fail={SLOT(7)},
                  bad_links={(SLOT(3), SLOT(4))})
    ref_cloud = FakeCloud(**faults)
    ref_o = orchestrator(tmp_path / "ref", ref_cloud, spec)
    ref = summary(tmp_path, ref_o.run(), ref_cloud, ref_o)
    total = ref_o.journal.appended
    assert total > 30
    for crash_at in range(1, total, 3):
        d = tmp_path / f"c{crash_at}"
        cloud = FakeCloud(**faults)
        out = run_with_crash(d, cloud, spec, crash_at)
        o = orchestrator(d, cloud, spec)
        got = summary(d, out, cloud, o)
        assert got[0] == ref[0], crash_at
        assert got[2] == ref[2], crash_at  # nothing provisioned twice
        assert {s: v[:3] for s, v in got[1].items()} == {s: v[:3] for s, v in ref[1].items()}, crash_at
        assert {s: v[4:] for s, v in got[1].items()} == {s: v[4:] for s, v in ref[1].items()}, crash_at


def test_the_modelled_timeline_with_and_without_pipelining():
    b = [BatchTimes(1, 600, 900, 1500), BatchTimes(2, 600, 900, 1500), BatchTimes(3, 600, 900, 1500),
         BatchTimes(4, 600, 900, 1500)]
    t = timeline(b, pipelining=True)
    assert t.sequential_s == 4 * 3000
    # batch 3 and 4 provision while the previous batch is gated: 600 s saved each
    assert t.pipelined_s == 4 * 3000 - 2 * 600
    assert t.lower_bound_s == 6000 and t.lower_bound_s <= t.pipelined_s
    assert t.batch_end_s[-1] == t.pipelined_s


def test_threaded_provisioning_ahead_gives_the_same_rollout(tmp_path):
    spec = small_spec(maxFailureRate=0.5)

    def cloud():
        return FakeCloud(faults={SLOT(5): frozenset({"nvlink_down"}), SLOT(8): frozenset({"efa_missing"})},
                         shortfall_once={SLOT(9)})
    inline_cloud, threaded_cloud = cloud(), cloud()
    inline = orchestrator(tmp_path / "inline", inline_cloud, spec).run()
    threaded = orchestrator(tmp_path / "threaded", threaded_cloud, spec, threaded=True).run()
    assert stages(threaded) == stages(inline) and threaded.finished and threaded.short == []
    assert sorted(threaded_cloud.ledger) == sorted(inline_cloud.ledger)
    assert threaded_cloud.provisioner_overlaps == 0  # never two provisioner calls at once
    assert {k: b.durations for k, b in threaded.state.batches.items()} == \
        {k: b.durations for k, b in inline.state.batches.items()}


def test_a_halt_waits_for_the_batch_provisioned_ahead_and_records_it(tmp_path):
    spec = small_spec(maxFailureRate=0.2)
    cloud = FakeCloud(faults={SLOT(7): frozenset({"nvlink_down"}), SLOT(8): frozenset({"nvlink_down"})})
    out = orchestrator(tmp_path, cloud, spec, threaded=True).run()
    assert out.halted and "batch 3 failed 2 of 4" in out.halt_reason
    # batch 4 was being provisioned while batch 3 was gated: its instance is journaled, never configured
    ahead = out.state.nodes[SLOT(11)]
    assert ahead.stage is NodeStage.PROVISIONED and ahead.instance_id == "i-0001101"
    assert out.state.batches[4].stage is BatchStage.HALTED


def test_resuming_with_a_changed_layout_is_refused(tmp_path):
    from gpufleet.errors import ConfigError

    cloud = FakeCloud()
    orchestrator(tmp_path, cloud, small_spec(), until_batch=1).run()
    with pytest.raises(ConfigError, match="layout .* changed"):
        orchestrator(tmp_path, cloud, small_spec(batch_size=2)).run()


class Hooks:
    def __init__(self, before=None, after=None):
        self.before, self.after, self.calls = before, after, []

    def before_batches(self):
        self.calls.append("before")
        return self.before

    def after_canary(self, admitted):
        self.calls.append(("after", tuple(admitted)))
        return self.after


def test_a_failing_base_check_halts_before_any_node_is_provisioned(tmp_path):
    cloud = FakeCloud()
    hooks = Hooks(before="storage: 40% of the modelled throughput")
    o = orchestrator(tmp_path, cloud)
    o.hooks = hooks
    out = o.run()
    assert out.halted and out.halt_reason.startswith("storage") and cloud.ledger == []


def test_a_failing_smoke_job_halts_after_the_canary(tmp_path):
    cloud = FakeCloud()
    hooks = Hooks(after="smoke: loss did not fall")
    o = orchestrator(tmp_path, cloud)
    o.hooks = hooks
    out = o.run()
    assert out.halted and out.state.batches[1].stage is BatchStage.PASSED
    assert hooks.calls == ["before", ("after", (SLOT(0), SLOT(1), SLOT(2)))]
    assert {s for _, s, _ in cloud.ledger} == {SLOT(0), SLOT(1), SLOT(2)}
    passing = Hooks()
    o = orchestrator(tmp_path / "ok", FakeCloud())
    o.hooks = passing
    assert o.run().finished and passing.calls[0] == "before" and passing.calls[1][0] == "after"
