"""The patrol's recheck as the lowest-priority job on real Slurm (issue 22 item 6): the local Slurm
with accounting as `gpufleet pool up` starts it (MariaDB, slurmdbd, slurmctld, one slurmd per node),
the stack's access applied (the patrol QOS, Priority 0, in every other QOS's Preempt= list), and
`pool.preemption` off: preempt/qos is on for the patrol's holds alone.

`run_patrol` over the real `SlurmPool`: debug's block of 5 idle admitted nodes, held by the patrol
one round at a time (debug's budget from the plan). While the first round collects, team bulk
submits a unit job that needs the whole block: Slurm cancels the patrol's hold, bulk's job runs on
the block, and the patrol records that node (and the rest, busy by their rounds) as yielded: no
verdict, no failure, no quarantine, every node still admitted."""

from __future__ import annotations

import shutil
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator, Mapping, Sequence

import pytest

from gpufleet.daytwo.patrol_report import build
from gpufleet.daytwo.patrol_run import run_patrol
from gpufleet.plan import build_plan
from gpufleet.plan.access import PATROL_QOS
from gpufleet.pool.protocol import NodeState, PendingNode
from gpufleet.pool.slurm.adapter import SlurmPool
from gpufleet.pool.slurm.conf import unit_request_args
from gpufleet.pool.slurm.local import LocalSlurm
from gpufleet.ports import HostOutcome, HostStatus, Instance, StageResult
from gpufleet.spec import ClusterSpec, Tenant

from .conftest import ensure_slurm, small_spec
from .contract import record

pytestmark = pytest.mark.slow  # real MariaDB, slurmdbd, slurmctld and 15 slurmd


def _stack() -> ClusterSpec:
    raw = small_spec().model_dump(by_alias=True, mode="json", exclude_none=True)
    for p in raw["partitions"]:
        if p["name"] == "debug":
            p.pop("quotaUnits")  # a job of the whole block
    raw["ops"] = {"tenants": [Tenant(name="bulk", partitions=("debug",), members=("root",)).model_dump(
        by_alias=True, mode="json")], "slurmAccounting": True}
    assert raw["pool"].get("preemption", "off") == "off"
    return ClusterSpec.from_raw(raw, source="tests/pool/test_slurm_patrol_real.py")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalSlurm, ClusterSpec]]:
    ensure_slurm()
    if shutil.which("slurmdbd") is None and not Path("/usr/sbin/slurmdbd").exists():
        from tests.ops.test_slurm_accounting import _install
        _install()
    spec = _stack()
    slurm = LocalSlurm(tmp_path_factory.mktemp("slurm-patrol"))
    slurm.up(spec, build_plan(spec), accounting=True)
    try:
        yield slurm, spec
    finally:
        slurm.down()


def _sh(slurm: LocalSlurm, *argv: str) -> str:
    proc = subprocess.run(["timeout", "30", *argv], env=slurm.cli().env(), capture_output=True, text=True, cwd="/tmp")
    assert proc.returncode == 0, f"{argv}: {proc.stdout}{proc.stderr}"
    return proc.stdout


class TeamArrives:
    """The patrol's collector: while the first round's nodes are held, bulk's whole-block job arrives
    and must start (it preempts the hold); the round's node gives no bundle (it is the job's now)."""

    def __init__(self, slurm: LocalSlurm, argv: list[str]) -> None:
        self.slurm, self.argv = slurm, argv
        self.round: list[str] = []
        self.holds: list[str] = []  # what squeue showed on the round's nodes: id|qos|state|node
        self.job = ""
        self.job_state = ""

    def collect(self, instances: Sequence[Instance], since: Mapping[str, Any], dest: Path) -> StageResult:
        self.round = [i.slot for i in instances]
        self.holds = _sh(self.slurm, "squeue", "-h", "-w", ",".join(self.round), "-o", "%i|%q|%T|%N").split()
        if not self.job:
            self.job = _sh(self.slurm, "sbatch", "--parsable", "-o", "/dev/null", "-A", "bulk", *self.argv,
                           "--wrap", "sleep 300").strip()
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                self.job_state = _sh(self.slurm, "squeue", "-h", "-j", self.job, "-o", "%T|%N").strip()
                if self.job_state.startswith("RUNNING|"):
                    break
                time.sleep(0.5)
        return StageResult(hosts={i.slot: HostOutcome(i.slot, HostStatus.OK) for i in instances}, duration_s=1.0)


def test_a_team_unit_preempts_the_patrols_hold_and_the_node_is_yielded(cluster, tmp_path: Path):
    slurm, spec = cluster
    plan = build_plan(spec)
    conf = (slurm.root / "etc" / "slurm.conf").read_text()
    assert "PreemptType=preempt/qos" in conf and "PreemptMode=CANCEL" in conf, conf
    qos = _sh(slurm, "sacctmgr", "-n", "-P", "show", "qos", "format=name,priority,preempt").splitlines()
    assert f"{PATROL_QOS}|0|" in qos and f"bulk-debug|0|{PATROL_QOS}" in qos and f"normal|0|{PATROL_QOS}" in qos, qos
    pool = SlurmPool(slurm.cli(timeout_s=30))
    blocks = [b for b in plan.blocks if b.partition == "debug"]
    pending = [PendingNode(slot=plan.nodes[i].name, block=b.id, partition="debug") for b in blocks for i in b.nodes]
    pool.register_pending(pending)
    pool.admit_many([(n.slot, record(n)) for n in pending])
    slots = [n.slot for n in pending]
    assert all(pool.state().get(s).state is NodeState.ADMITTED and not pool.state().get(s).busy for s in slots)

    team = TeamArrives(slurm, unit_request_args(plan, "debug", plan.topology.units_per_block, "tree"))
    now = datetime(2026, 12, 2, 3, 0, tzinfo=timezone.utc)
    inventory = {s: Instance(slot=s, instance_id=f"i-{k:04d}", batch=1, block=blocks[0].id) for k, s in enumerate(slots)}
    journal: list[dict] = []
    d = SimpleNamespace(stack="patrol-real", who="alice@ops", pool=pool, plan=plan, spec=spec, state_dir=tmp_path,
                        journal=journal, settings=None, now=lambda: now, advance=lambda s: None,
                        record=lambda slot: None,
                        adapters=SimpleNamespace(provisioner=SimpleNamespace(inventory=lambda: inventory)))
    out = run_patrol(d, team)  # type: ignore[arg-type]

    # the round: debug's budget of nodes, each held by its own running patrol job
    assert len(team.round) == min(len(slots), out.budget["debug"]) and set(team.round) < set(slots), team.round
    holds = [h.split("|") for h in team.holds]
    assert sorted(h[3] for h in holds) == sorted(team.round), holds
    assert all(h[1:3] == [PATROL_QOS, "RUNNING"] for h in holds), holds
    assert team.job_state.startswith("RUNNING|"), (team.job_state, _sh(slurm, "squeue", "-h", "-o", "%i|%q|%T|%r|%N"))
    ran_on = set(_sh(slurm, "scontrol", "show", "hostnames", team.job_state.split("|", 1)[1]).split())
    assert ran_on == set(slots), ran_on
    for job, *_ in holds:  # Slurm ended each hold for bulk's job (slurmctld's log says so)
        assert _sh(slurm, "sacct", "-n", "-P", "-X", "-j", job, "-o", "State").strip() == "PREEMPTED", job
    log = (slurm.root / "log" / "slurmctld.log").read_text(errors="replace")
    assert all(f"preempted JobId={job}" in log for job, *_ in holds), log[-3000:]
    assert out.held and out.rounds == 1
    assert out.preempted == sorted(team.round), out
    assert sorted(out.yielded) == sorted(slots), out  # the rest were busy with bulk's job by their round
    assert out.checked == [] and out.quarantined == {} and out.unreachable == {} and out.deferred == []
    report, _ = build(out)  # what `gpufleet patrol --json` and the report say of each node
    assert report.outcomes == dict.fromkeys(sorted(slots), "yielded") and report.counts == {"yielded": len(slots)}
    assert report.preempted == sorted(team.round) and report.held and report.quarantined == {}
    event = journal[-1]
    assert event["type"] == "patrol" and event["held"] and event["preempted"] == out.preempted and event["failed"] == {}
    state = pool.state()
    assert all(state.get(s).state is NodeState.ADMITTED for s in slots)
    assert _sh(slurm, "squeue", "-h", "-j", team.job, "-o", "%T").strip() == "RUNNING"  # never disturbed
    _sh(slurm, "scancel", team.job)
