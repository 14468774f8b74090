"""End to end on the simulated cloud: `gpufleet rollout` against the seeded truth of `local`.

The simulator knows where it put every fault (`SimulatedCloud.truth()`); the real gates decide.
These tests compare the two: exactly the faulty nodes quarantined with the right codes, the bad
link reported as a pair, spares used, every partition whole; the same seed gives the same result;
a systemic fault halts after the canary with nothing else provisioned.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from gpufleet.plan import plan_stack
from gpufleet.project import load_project
from gpufleet.sim.cloud import SimulatedCloud
from gpufleet.spec import load_stack_path

from tests.rollout.e2e import journal_state, ledger_events, rollout, snapshot
from tests.rollout.project import make_project, seed_program_cache

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("e2e") / "p")
    result = rollout(project, "local")
    return project, result


def truth_of(project, stack):
    p = load_project(project)
    spec = load_stack_path(p.stack_file(stack))
    return SimulatedCloud.open(spec, plan_stack(spec), p, stack).truth(), plan_stack(spec)


def test_local_admits_the_healthy_and_quarantines_exactly_the_faulty(local_run):
    project, result = local_run
    assert result.exit_code == 0, result.output
    truth, plan = truth_of(project, "local")
    state = journal_state(project, "local")
    assert state.finished and not state.halted
    first_quarantine = {s: [h[2] for h in n.history if h[0] == "quarantined"][:1] for s, n in state.nodes.items()}
    quarantined = {s for s, codes in first_quarantine.items() if codes}
    expected = {s for s, t in truth.faulty.items() if t.effect.final != "admitted"}
    assert quarantined == expected and expected
    for slot in expected:
        effect = truth.faulty[slot].effect
        code = first_quarantine[slot][0]
        assert code == (effect.final if effect.stage == "configure" else effect.reason_codes[0]), slot
    cleared = {s for s, t in truth.faulty.items() if t.effect.final == "admitted"}
    for slot in cleared:  # remediated once, retested, admitted on its first instance
        n = state.nodes[slot]
        assert any(h[0] == "retest" for h in n.history) and n.replacements == 0, slot
    healthy = {s.name for s in plan.nodes} - set(truth.faulty)
    assert all(not any(h[0] in ("retest", "quarantined") for h in state.nodes[s].history) for s in healthy)
    # the bad link: reported as a pair, both nodes admitted
    links = sorted(tuple(p) for b in state.batches.values() for p in b.link_faults)
    assert links == sorted(truth.bad_links)
    # replaced from spares into their slots; the pool ends whole
    assert state.spares_used == len(expected) <= plan.topology.spare_nodes
    pool = json.loads((project / ".gpufleet" / "local" / "pool.json").read_text())["nodes"]
    assert len(pool) == len(plan.nodes) and {n["state"] for n in pool.values()} == {"admitted"}
    report = json.loads((project / "reports" / "local" / "rollout.json").read_text())
    assert report["status"] == "complete" and report["admitted_gpus"] == 1000
    assert all(p["units_available"] == p["units_planned"] for p in report["partitions"])
    assert sorted(tuple(x) for x in report["link_faults"]) == sorted(truth.bad_links)
    assert {q["slot"] for q in report["quarantined"]} == expected and all(q["replaced"] for q in report["quarantined"])
    # nothing provisioned twice: one launch per slot, plus one per replacement
    launches = [e for e in ledger_events(project, "local") if e["event"] == "launch"]
    assert len(launches) == len(plan.nodes) + len(expected)
    assert len({(e["slot"], e["generation"]) for e in launches}) == len(launches)
    # the communication baseline: pairs, groups of 4, 8, 16 and the rings, per batch
    baseline = json.loads((project / ".gpufleet" / "local" / "baselines" / "communication.json").read_text())
    assert {"2", "4", "8", "16"} <= set(baseline["scales"]) and baseline["schema_version"] == 1
    # each scale judged against the instance type's measured curve at that node count (issue 19 item 6)
    from gpufleet.gates.settings import GateSettings
    assert all(s["floor_gbs"] == GateSettings().busbw_floor(int(n)) for n, s in baseline["scales"].items())
    junit = (project / "reports" / "local" / "rollout-junit.xml").read_text()
    assert 'name="target.local"' in junit and "efa-pair-fail" in junit
    assert "admitted 125/125 nodes" in result.output


def test_the_same_seed_gives_the_same_rollout(local_run, tmp_path):
    project, first = local_run
    again = make_project(tmp_path / "again")
    seed_program_cache(project, again, "local")
    result = rollout(again, "local")
    assert result.exit_code == 0, result.output
    assert snapshot(again, "local") == snapshot(project, "local")
    a = json.loads((project / "reports" / "local" / "rollout.json").read_text())
    b = json.loads((again / "reports" / "local" / "rollout.json").read_text())
    for key in ("quarantined", "replacements", "link_faults", "timeline", "batches", "partitions"):
        assert a[key] == b[key], key


def test_a_systemic_fault_halts_after_the_canary(tmp_path):
    project = make_project(tmp_path / "p")
    result = rollout(project, "systemic")
    assert result.exit_code == 3, result.output
    assert "the canary failed" in result.output and "efa-socket-fallback" in result.output
    _, plan = truth_of(project, "systemic")
    canary = {s.name for s in plan.batch_nodes(1)}
    launched = {e["slot"] for e in ledger_events(project, "systemic") if e["event"] == "launch"}
    assert launched == canary
    # a second run without --restart says so and does nothing
    again = rollout(project, "systemic", "--resume")
    assert again.exit_code == 3 and "--restart" in again.output
    assert {e["slot"] for e in ledger_events(project, "systemic") if e["event"] == "launch"} == canary


def test_an_unfinished_journal_needs_resume_and_dry_run_changes_nothing(tmp_path):
    project = make_project(tmp_path / "p")
    first = rollout(project, "crash40", "--until-batch", "2")
    assert first.exit_code == 0, first.output
    journal = project / ".gpufleet" / "crash40" / "journal.jsonl"
    before = journal.read_bytes()
    refused = rollout(project, "crash40")
    assert refused.exit_code == 2 and "--resume" in refused.output
    dry = rollout(project, "crash40", "--dry-run")
    assert dry.exit_code == 0 and "batch 1 (canary)" in dry.output and "passed" in dry.output
    assert "nothing was provisioned" in dry.output and journal.read_bytes() == before
    done = rollout(project, "crash40", "--resume")
    assert done.exit_code == 0, done.output
    assert journal_state(project, "crash40").finished


def test_resume_with_no_journal_starts_fresh_and_restart_archives(tmp_path):
    project = make_project(tmp_path / "p")
    result = rollout(project, "systemic", "--resume")
    assert result.exit_code == 3 and "starting a new rollout" in result.output
    restarted = rollout(project, "systemic", "--restart")
    assert restarted.exit_code == 3 and "archived the previous journal" in restarted.output
    assert list((project / ".gpufleet" / "systemic").glob("journal.*.jsonl"))


def test_a_live_holder_of_the_lock_stops_a_second_rollout(tmp_path):
    project = make_project(tmp_path / "p")
    lock = project / ".gpufleet" / "crash40" / "lock"
    hold = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from gpufleet.rollout.lock import FileLock, LockInfo
        FileLock(Path({str(lock)!r}), LockInfo.mine("crash40")).acquire()
        print("held", flush=True)
        time.sleep(60)
    """)
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = rollout(project, "crash40")
        assert result.exit_code == 1
        assert f"pid {holder.pid}" in result.output and "still running" in result.output
    finally:
        holder.kill()
        holder.wait()
    assert not (project / ".gpufleet" / "crash40" / "journal.jsonl").exists()


def test_the_local_rollout_runs_batches_together_within_its_bound(local_run):
    """Issue 21: after the canary the batches are in flight together, a replacement's launch is on
    the clock like any launch, and the modelled time-to-pool is stated beside its bound."""
    project, result = local_run
    state = journal_state(project, "local")
    spec = load_stack_path(load_project(project).stack_file("local"))
    launch = spec.simulator.durations.provision_api + spec.simulator.durations.boot
    replaced = {n.batch for n in state.nodes.values() if n.replacements}
    assert replaced
    for batch in replaced:  # every replace step of the batch: one modelled launch (a step replaces in parallel)
        seconds = state.batches[batch].durations["late:replace"]
        assert seconds >= launch and seconds % launch == 0, batch
    t = json.loads((project / "reports" / "local" / "rollout.json").read_text())["timeline"]
    assert t["window"]["batches"] > 1 and t["windowed_s"] <= 1.2 * t["lower_bound_s"]
    assert t["lower_bound_s"] == max(t["bound_paths_s"], t["bound_fabric_s"]) and t["binds"] in ("a", "b")
    assert t["windowed_s"] < t["pipelined_s"]  # the one-batch-at-a-time figure of the same run
    assert "lower bound" in result.output and f"({t['binds']}) binds" in result.output
    md = (project / "reports" / "local" / "rollout.md").read_text()
    assert f"bound ({t['binds']}) binds" in md and "one batch at a time" in md and "Modelled windowed" in md
