"""The live view at scale (issue 21 item 5): 45 rows at 10k GPUs, per-batch time, counts that
survive a replacement, one greppable line per quarantine/replacement/capacity retry/halt, and a
redraw whose cost is one batch per event."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from gpufleet.plan import build_plan
from gpufleet.rollout import display as D
from gpufleet.rollout.state import AcceptanceState, BatchStage, NodeStage, RolloutState, StageStatus
from gpufleet.rollout.timeline import Window

from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator, small_spec

SLOT = "tst-b{0:04d}-n{0:05d}".format


class Tty(StringIO):
    def isatty(self) -> bool:
        return True


def test_the_live_view_of_a_10k_gpu_rollout_fits_45_rows():
    plan = build_plan(small_spec(nodes=1250, canary=0.1, batch_size=25))
    assert len(plan.batches) > 45
    state = RolloutState()
    for name in ("storage", "network", "smoke"):
        state.acceptance[name] = AcceptanceState(stage=name, status=StageStatus.RUNNING, attempt=1, nodes=["a", "b"])
    order = [NodeStage.PLANNED, NodeStage.CONFIGURING, NodeStage.PREFLIGHT, NodeStage.BASELINE]
    for b in plan.batches:  # the canary and 9 more passed, every other batch in flight at some stage
        bs = state.batch(b.number)
        bs.stage = BatchStage.PASSED if b.number <= 10 else BatchStage.RUNNING
        bs.durations = {"provision": 570.0, "configure": 800.0 + b.number}
        for s in plan.batch_nodes(b.number):
            n = state.node(s.name, b.number)
            n.stage = NodeStage.ADMITTED if b.number <= 10 else order[b.number % 4]
    view = D.RichDisplay(plan, lambda: 3600.0, Tty())
    for b in plan.batches:
        view.cache.update({"batch": b.number}, state)
    out = Console(file=StringIO(), width=140)
    out.print(view._table(state))
    lines = out.file.getvalue().splitlines()
    view.live.stop()
    assert len(lines) <= D.ROWS, len(lines)
    text = "\n".join(lines)
    assert "10 finished (1-10)" in text and "in flight" in text
    assert "0:23:" in text  # a batch's own time (570 + 800 + its number seconds), not the one clock
    rows = [r for r in D.view_rows(view.cache, 30)]
    assert sum(r["total"] for r in rows) == len(plan.nodes)  # nothing dropped by the summing up
    planned = [r for r in rows if r["stage"] == "planned"]  # the batches furthest behind stay one row each
    assert planned and all(isinstance(r["batch"], int) for r in planned)


def test_counts_survive_a_replacement_and_each_batch_has_its_own_time(tmp_path):
    spec = small_spec(maxFailureRate=0.5)
    cloud = FakeCloud(faults={SLOT(4): frozenset({"nvlink_down"})})
    o = orchestrator(tmp_path, cloud, spec, window=Window(batches=4, fabric_tests=4))
    out = o.run()
    row = D.batch_row(o.plan, out.state, 2)
    assert row["admitted"] == 4 and row["quarantined"] == 1 and row["replaced"] == 1
    assert row["took"] == sum(out.state.batches[2].durations.values())
    assert row["took"] != D.batch_row(o.plan, out.state, 3)["took"]


def test_a_plain_line_names_each_quarantine_replacement_capacity_retry_and_halt(tmp_path):
    spec = small_spec(maxFailureRate=0.5)
    cloud = FakeCloud(faults={SLOT(4): frozenset({"nvlink_down"})}, shortfall_once={SLOT(6)})
    buf = StringIO()
    o = orchestrator(tmp_path, cloud, spec, window=Window(batches=4, fabric_tests=4))
    o.journal.listeners.append(D.PlainDisplay(o.plan, lambda: 0.0, buf))
    o.run()
    lines = buf.getvalue().splitlines()
    assert any(x.startswith(f"gpufleet: quarantine node={SLOT(4)} batch=2 code=nvlink") and 'reason="' in x
               for x in lines)
    assert f"gpufleet: replacement node={SLOT(4)} batch=2 old=i-0000401 new=i-0000402" in lines
    assert f'gpufleet: capacity-retry node={SLOT(6)} batch=2 reason="InsufficientInstanceCapacity"' in lines
    halted = StringIO()
    o2 = orchestrator(tmp_path / "sys", FakeCloud(systemic=True))
    o2.journal.listeners.append(D.PlainDisplay(o2.plan, lambda: 0.0, halted))
    o2.run()
    assert any(x.startswith('gpufleet: halt rollout reason="the canary failed 3 of 3') for x in
               halted.getvalue().splitlines())


def test_a_redraw_costs_one_batch_per_event(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = D.batch_row

    def counted(*args):
        calls["n"] += 1
        return real(*args)

    monkeypatch.setattr(D, "batch_row", counted)
    spec = small_spec(nodes=24, canary=0.125, batch_size=3, maxFailureRate=0.5)  # 8 batches
    o = orchestrator(tmp_path, FakeCloud(faults={SLOT(7): frozenset({"nvlink_down"})}), spec,
                     window=Window(batches=7, fabric_tests=7))
    shown = D.PlainDisplay(o.plan, lambda: 0.0, StringIO())
    o.journal.listeners.append(shown)
    o.run()
    assert o.state.events > 3 * len(o.plan.batches)
    assert calls["n"] <= o.state.events  # never events x batches
