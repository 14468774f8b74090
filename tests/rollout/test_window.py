"""Post-canary batches in flight together (issue 21 items 1-3): the budget the plan gives, the
failure-rate rule under concurrency, replacements and retests on their own track, and the
time model's windowed schedule beside its two lower bounds."""

from __future__ import annotations

from gpufleet.plan import build_plan
from gpufleet.plan.render import render_summary
from gpufleet.plan.window import FABRIC_TEST_NODES, window_budget
from gpufleet.rollout.state import BatchStage, NodeStage
from gpufleet.rollout.timeline import BatchTimes, StackStages, Window, timeline

from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator, small_spec

SLOT = "tst-b{0:04d}-n{0:05d}".format
WIDE = Window(batches=8, fabric_tests=8)


def journal_order(o) -> list[tuple[str, int, str]]:
    """(type, batch, to) of every batch event, in journal order."""
    return [(e["type"], e["batch"], e["to"]) for e in o.journal.store.read(repair=False) if e.get("type") == "batch"]


def test_the_budget_is_every_remaining_batch_and_the_fabric_limit_from_the_largest_batch():
    plan = build_plan(small_spec(nodes=100, canary=0.1, batch_size=25))
    b = window_budget(plan)
    rest = [x for x in plan.batches if not x.canary]
    assert b.batches_in_flight == len(rest) and b.capacity_nodes == sum(x.node_count for x in rest)
    assert b.fabric_tests == FABRIC_TEST_NODES // 25 == 8 and b.fabric_is_physical
    low = window_budget(plan, max_batches_in_flight=2, max_fabric_tests=3)
    assert (low.batches_in_flight, low.fabric_tests, low.fabric_is_physical) == (2, 3, False)
    assert "lowered from 8" in low.describe() and "200 nodes under test" in b.describe()
    shown = render_summary(plan)  # `gpufleet plan` prints the budget and what the bound assumes
    assert b.describe() in shown and "lower bound: the larger of (a)" in shown


def test_batches_after_the_canary_are_in_flight_together(tmp_path):
    cloud = FakeCloud()
    o = orchestrator(tmp_path, cloud, window=WIDE)
    out = o.run()
    assert out.finished and not out.halted and {n.stage for n in out.state.nodes.values()} == {NodeStage.ADMITTED}
    order = journal_order(o)
    # the canary alone first; then batches 2 and 3 both running before either passes
    assert order.index(("batch", 1, "passed")) < order.index(("batch", 2, "running"))
    assert order.index(("batch", 3, "running")) < order.index(("batch", 2, "passed"))
    assert [op for op, *_ in cloud.ledger] == ["launch"] * 12


def test_a_batch_over_the_bar_halts_while_the_batch_beside_it_finishes_its_gates(tmp_path):
    spec = small_spec(nodes=15, canary=0.2, maxFailureRate=0.25)  # canary 3 nodes, then batches of 4: 2, 3, 4
    bad = {SLOT(3): frozenset({"nvlink_down"}), SLOT(4): frozenset({"efa_missing"})}
    cloud = FakeCloud(faults=bad, flaky={SLOT(8)})  # batch 3 still busy with a retest when batch 2 is judged
    o = orchestrator(tmp_path, cloud, spec, window=Window(batches=2, fabric_tests=8))
    out = o.run()
    assert out.halted and out.halt_reason.startswith("batch 2 failed 2 of 4 nodes (50% > 25%)")
    # batch 3 was in flight: its gates finished (the retest too) and its nodes are admitted, then it halted
    assert all(out.state.nodes[SLOT(i)].stage is NodeStage.ADMITTED for i in range(7, 11))
    assert ("retest", out.state.nodes[SLOT(8)].instance_id, None) in out.state.nodes[SLOT(8)].history
    assert out.state.batches[3].stage is BatchStage.HALTED
    assert "batch 2 halted the rollout" in out.state.batches[3].reason
    # nothing more bought: batch 4 never started, no spare spent
    assert out.state.batches[4].stage is BatchStage.PENDING
    assert max(int(s[-5:]) for _, s, _ in cloud.ledger) == 10
    assert [op for op, *_ in cloud.ledger].count("stop-and-report") == 0


def test_a_replacement_never_holds_the_next_batch(tmp_path):
    spec = small_spec(maxFailureRate=0.5)
    cloud = FakeCloud(faults={SLOT(4): frozenset({"nvlink_down"})})
    o = orchestrator(tmp_path, cloud, spec, window=Window(batches=1, fabric_tests=1))
    out = o.run()
    assert out.finished and out.short == [] and out.state.nodes[SLOT(4)].replacements == 1
    events = o.journal.store.read(repair=False)
    at = {k: i for i, e in enumerate(events) for k in [(e.get("type"), e.get("batch"), e.get("to"), e.get("stage"))]}
    # one batch in its first pass at a time, yet batch 3 starts before batch 2's replacement is even launched
    assert at[("batch", 3, "running", None)] < at[("nodes", 2, "provisioned", "replace")]
    durations = out.state.batches[2].durations
    assert "late:configure" in durations and "late:preflight" in durations and "late:baseline" in durations


def test_a_remediating_node_never_holds_its_cohorts_network_tests(tmp_path):
    spec = small_spec(maxFailureRate=0.5)
    cloud = FakeCloud(flaky={SLOT(5)})  # batch 2: its first preflight misses a file, then passes its retest
    o = orchestrator(tmp_path, cloud, spec, window=WIDE)
    out = o.run()
    assert out.state.nodes[SLOT(5)].stage is NodeStage.ADMITTED
    rounds = [e for e in o.journal.store.read(repair=False) if e.get("type") == "network" and e["batch"] == 2]
    assert SLOT(5) not in rounds[0]["nodes"] and set(rounds[0]["nodes"]) == {SLOT(3), SLOT(4), SLOT(6)}
    assert list(rounds[1]["nodes"]) == [SLOT(5)] and rounds[1].get("track") == "late"
    assert out.state.batches[2].durations.get("late:remediate") == 300


def test_the_windowed_schedule_and_its_bounds():
    stages = StackStages(storage=100, network=50, smoke=60)
    canary = BatchTimes(1, provision=500, configure=800, rest=700, fabric=300)
    rest = [BatchTimes(k, provision=500, configure=800, rest=700, late=900 if k == 3 else 0, fabric=300)
            for k in range(2, 8)]
    wide = timeline([canary, *rest], True, stages, Window(batches=6, fabric_tests=6))
    canary_end = 100 + 2000 + 50 + 60
    assert wide.bound_paths_s == canary_end + 2000 + 900  # the longest other path: batch 3's, its late track in
    assert wide.windowed_s == wide.bound_paths_s == wide.lower_bound_s and wide.binds == "a"
    assert wide.bound_fabric_s == canary_end + 6 * 300 / 6
    # two fabric tests at a time: six tests of 300 s queue in three waves
    narrow = timeline([canary, *rest], True, stages, Window(batches=6, fabric_tests=2))
    assert narrow.batch_end_s[-1] == canary_end + 1700 + 3 * 300  # the last batch's test waits two waves
    assert narrow.windowed_s == canary_end + 2000 + 900 >= narrow.lower_bound_s  # batch 3's late track ends last
    assert narrow.bound_fabric_s == canary_end + 6 * 300 / 2
    # a chosen (not physical) fabric figure gives no bound (b)
    chosen = timeline([canary, *rest], True, stages, Window(batches=6, fabric_tests=2, fabric_physical=False))
    assert chosen.bound_fabric_s is None and chosen.lower_bound_s == chosen.bound_paths_s
    # one batch at a time over the same durations: the old figures, the late track on the path
    assert wide.sequential_s == canary_end + 6 * 2000 + 900
    assert wide.to_dict()["window"] == {"batches": 6, "fabric_tests": 6, "fabric_physical": True}


def test_the_window_is_the_same_on_the_simulator_and_on_real_stacks():
    from gpufleet.rollout.wiring import options

    spec = small_spec(nodes=100, canary=0.1, batch_size=25)
    plan = build_plan(spec)
    sim = options(spec, None, threaded=False, plan=plan)
    assert sim.window == Window(batches=window_budget(plan).batches_in_flight, fabric_tests=8)
    real = options(spec, None, threaded=True, plan=plan)  # issue 21 item 4: worker threads, same budget
    assert real.window == sim.window and real.threaded
    assert options(small_spec(pipelining=False), None, threaded=False, plan=plan).window is None


def test_a_stack_lowers_the_window_and_bound_b_keeps_the_fabrics_own_limit():
    """rollout.maxBatchesInFlight / maxFabricTests lower the budget the plan computes; the bound's
    term (b) still divides by the fabric's derived limit (a chosen figure would make it look close)."""
    from gpufleet.plan.render import render_summary
    from gpufleet.rollout.wiring import options

    spec = small_spec(nodes=100, canary=0.1, batch_size=25, maxBatchesInFlight=2, maxFabricTests=1)
    plan = build_plan(spec)
    w = options(spec, None, threaded=False, plan=plan).window
    assert w == Window(batches=2, fabric_tests=1, fabric_physical=False, fabric_limit=8)
    stages = StackStages(storage=100, network=50, smoke=60)
    canary = BatchTimes(1, provision=500, configure=800, rest=700, fabric=300)
    rest = [BatchTimes(k, provision=500, configure=800, rest=700, fabric=300) for k in range(2, 5)]
    t = timeline([canary, *rest], True, stages, w)
    canary_end = 100 + 2000 + 50 + 60
    assert t.bound_fabric_s == canary_end + 3 * 300 / 8  # the fabric's 8, not the setting's 1
    # the run itself: batch 3's test waits for batch 2's; batch 4 waits for a window slot (batch 2's end)
    assert t.batch_end_s[1:] == (canary_end + 2000, canary_end + 2000 + 300, canary_end + 2 * 2000)
    assert t.to_dict()["window"]["fabric_limit"] == 8
    text = render_summary(plan, spec.rollout.max_batches_in_flight, spec.rollout.max_fabric_tests)
    assert "2 batch(es) in flight after the canary" in text and "lowered from 8 by the stack" in text
    assert "test time / 8 (the fabric's limit, not a setting)" in text
    assert "lowered" not in render_summary(plan)
