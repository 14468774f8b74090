"""The job stream as the simulated pool's running work (`gpufleet.sim.jobs_pool`): nodes a stream job
holds at the simulated clock's now read busy, patrol skips them and checks the idle ones between jobs,
and a drained node leaves the stream at once."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.daytwo.patrol import select
from gpufleet.gates.admission import Action, AdmissionRecord, Verdict
from gpufleet.pool.protocol import NodeState, PendingNode
from gpufleet.pool.sim import SimPool
from gpufleet.sim.jobs import Unit, stream
from gpufleet.sim.jobs_pool import StreamWork

T0 = datetime(2026, 7, 14, 8, 0, tzinfo=timezone.utc)
UNITS = [Unit(f"u{i}", part, (f"n{2 * i}", f"n{2 * i + 1}"), 16)
         for i, part in enumerate(["train"] * 4 + ["infer"] * 4)]
SLOTS = [s for u in UNITS for s in u.slots]


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def now(self) -> datetime:
        return self.t


def _record(slot: str) -> AdmissionRecord:
    return AdmissionRecord(slot=slot, instance_type="p5.48xlarge", bom_digest="sha256:" + "0" * 64,
                           verdict=Verdict.PASS, action=Action.ADMIT, checks=(), decided_at=T0)


def _pool(tmp_path: Path, clock: Clock, seed: int) -> SimPool:
    pool = SimPool(tmp_path / "pool.json", None, slots=SLOTS, partitions=["train", "infer"])
    pool.register_pending([PendingNode(slot=s, block=0, partition=u.partition) for u in UNITS for s in u.slots])
    pool.admit_many([(s, _record(s)) for s in SLOTS])
    pool.work = StreamWork(UNITS, seed=seed, tenants=(), now=clock.now, admitted_at=lambda s: T0)
    return pool


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_nodes_read_busy_exactly_while_a_stream_job_holds_them_at_the_clocks_now(tmp_path: Path, seed: int) -> None:
    clock = Clock()
    pool = _pool(tmp_path / str(seed), clock, seed)
    admitted = {s: [(T0.timestamp(), float("inf"))] for s in SLOTS}
    seen_idle = seen_busy = 0
    for hour in range(0, 24 * 6, 3):
        clock.t = T0 + timedelta(hours=hour, minutes=7)
        now = clock.t.timestamp()
        running = {n for j in stream(UNITS, admitted, now, seed=seed) if j.end is None for n in j.nodes}
        state = pool.state()
        assert {s for s, n in state.nodes.items() if n.busy} == running
        sel = select(state)
        assert set(sel.busy) == running and set(sel.idle) == set(SLOTS) - running  # patrol's split
        seen_idle += len(sel.idle)
        seen_busy += len(sel.busy)
        held = pool.holders(sorted(running))
        assert {h.slot for h in held} == running and all(h.workload.startswith("sim-") for h in held)
    assert seen_idle and seen_busy  # gaps: over six days, patrol finds idle nodes; jobs hold others
    assert json.loads((tmp_path / str(seed) / "pool.json").read_text())["nodes"]["n0"]["busy"] is False  # not stored


def test_a_drained_or_quarantined_node_is_out_of_the_stream_at_once(tmp_path: Path) -> None:
    clock = Clock()
    clock.t = T0 + timedelta(minutes=1)  # every unit's first job started at admission
    pool = _pool(tmp_path, clock, 1)
    assert all(n.busy for n in pool.state().nodes.values())
    pool.register_pending([PendingNode(slot="n0", block=0, partition="train")])  # an upgrade's drain
    pool.quarantine("n5", "xid-79", "fell off the bus")
    state = pool.state()
    assert state.nodes["n0"].state is NodeState.PENDING and not state.nodes["n0"].busy
    assert not state.nodes["n5"].busy
    assert pool.holders(["n0", "n5"]) == []


def test_without_work_the_pool_reads_only_its_file(tmp_path: Path) -> None:
    pool = _pool(tmp_path, Clock(), 1)
    pool.work = None
    assert not any(n.busy for n in pool.state().nodes.values())


@pytest.mark.slow  # the quickstart's rollout of the shipped `local` stack (125 nodes)
def test_after_the_quickstart_patrol_yields_to_the_streams_jobs_and_checks_the_idle_nodes(tmp_path: Path) -> None:
    from gpufleet.cli import main

    root, run = tmp_path / "project", CliRunner()
    assert run.invoke(main, ["init", str(root), "--stack", "local"]).exit_code == 0
    rolled = run.invoke(main, ["--project", str(root), "rollout", "-s", "local"])
    assert rolled.exit_code in (0, 3), rolled.output
    pool = json.loads((root / ".gpufleet" / "local" / "pool.json").read_text())
    admitted = {s for s, n in pool["nodes"].items() if n["state"] == "admitted"}
    assert not any(n.get("busy") for n in pool["nodes"].values())  # nobody set busy by hand
    out = run.invoke(main, ["--project", str(root), "patrol", "-s", "local", "--json"])
    assert out.exit_code in (0, 3), out.output
    doc = json.loads(out.output[out.output.index("{"):out.output.rindex("}") + 1])
    checked, busy = {n["slot"] for n in doc["checked"]}, set(doc["skipped_busy"])
    assert busy and checked and not busy & checked and busy | checked == admitted
    # the busy ones are what the stream holds at the patrol's start, from each node's admission record
    from gpufleet.plan import build_plan
    from gpufleet.spec import load_stack_path

    plan = build_plan(load_stack_path(root / "stacks" / "Pulumi.local.yaml"))
    units = [Unit(str(u.id), u.partition or "-", tuple(plan.nodes[i].name for i in u.nodes), len(u.gpus))
             for u in plan.units]
    records = {p.stem: json.loads(p.read_text()) for p in (root / ".gpufleet" / "local" / "records").glob("*.json")}
    now = datetime.fromisoformat(doc["started"]).timestamp()
    spans = {s: [(datetime.fromisoformat(records[s]["decided_at"]).timestamp(), float("inf"))] for s in admitted}
    held = {n for j in stream(units, spans, now, seed=1) if j.end is None for n in j.nodes}
    assert busy == held
