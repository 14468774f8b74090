"""Preemption between the teams' priorities on real slurmdbd (`pool.preemption: requeue`): the local
Slurm started with accounting as `gpufleet pool up` does (MariaDB, slurmdbd, slurmctld, one slurmd
per node), the stack's QOS (Priority, Preempt) applied by `gpufleet.pool.slurm.access_apply`.

Two teams share debug (one block, 4 units, no quota below it, so nodes are what runs out): `bulk`
(priority 0) fills the block; `urgent` (priority 10) submits one unit, Slurm requeues bulk's job and
starts urgent's in the same block. Equal priorities never preempt: a second bulk job waits."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from gpufleet.plan import build_plan
from gpufleet.pool.slurm.access_apply import apply_access, desired_access
from gpufleet.pool.slurm.conf import unit_request_args
from gpufleet.pool.slurm.local import LocalSlurm
from gpufleet.spec import ClusterSpec, Tenant

from .conftest import ensure_slurm, small_spec

pytestmark = pytest.mark.slow  # real MariaDB, slurmdbd, slurmctld and 15 slurmd
TENANTS = (Tenant(name="bulk", partitions=("debug",), members=("root",), priority=0),
           Tenant(name="urgent", partitions=("debug",), members=("root",), priority=10))


def _stack() -> ClusterSpec:
    raw = small_spec().model_dump(by_alias=True, mode="json", exclude_none=True)
    for p in raw["partitions"]:
        if p["name"] == "debug":
            p.pop("quotaUnits")  # the whole block: the nodes run out, not a QOS limit
    raw["pool"]["preemption"] = "requeue"
    raw["ops"] = {"tenants": [t.model_dump(by_alias=True, mode="json") for t in TENANTS], "slurmAccounting": True}
    return ClusterSpec.from_raw(raw, source="tests/pool/test_slurm_preemption_real.py")


class Preempting:
    def __init__(self, slurm: LocalSlurm, spec: ClusterSpec) -> None:
        self.slurm, self.spec, self.plan = slurm, spec, build_plan(spec)
        self.env = slurm.cli().env()

    def sh(self, *argv: str) -> str:
        proc = subprocess.run(["timeout", "30", *argv], env=self.env, capture_output=True, text=True, cwd="/tmp")
        assert proc.returncode == 0, f"{argv}: {proc.stdout}{proc.stderr}"
        return proc.stdout

    def fields(self, job: str) -> str:
        return self.sh("squeue", "-h", "-j", job, "-o", "%q|%T|%N").strip()

    def wait(self, job: str, state: str, timeout_s: float = 60) -> str:
        deadline = time.monotonic() + timeout_s
        got = self.fields(job)
        while f"|{state}|" not in got and time.monotonic() < deadline:
            time.sleep(0.5)
            got = self.fields(job)
        return got


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Preempting]:
    ensure_slurm()
    if shutil.which("slurmdbd") is None and not Path("/usr/sbin/slurmdbd").exists():
        from tests.ops.test_slurm_accounting import _install
        _install()
    spec = _stack()
    slurm = LocalSlurm(tmp_path_factory.mktemp("slurm-preempt"))
    slurm.up(spec, build_plan(spec), accounting=True)
    try:
        yield Preempting(slurm, spec)
    finally:
        slurm.down()


def test_a_higher_teams_unit_preempts_a_lower_teams_job_and_equals_wait(cluster: Preempting):
    c = cluster
    conf = (c.slurm.root / "etc" / "slurm.conf").read_text()
    assert "PreemptType=preempt/qos" in conf and "PreemptMode=REQUEUE" in conf, conf
    qos = c.sh("sacctmgr", "-n", "-P", "show", "qos", "format=name,grptres,priority,preempt").splitlines()
    # every team QOS preempts the patrol's holds too (gpufleet.pool.slurm.patrol_hold)
    assert "urgent-debug|gres/gpu=40|10|bulk-debug,gpufleet-patrol" in qos, qos
    assert "bulk-debug|gres/gpu=40|0|gpufleet-patrol" in qos, qos
    # debug's quota is its whole block: no QOS limit of its own, or a wait for nodes would be a wait
    # on the QOS (QOSGrpGRES), which Slurm never preempts for (seen here before this was so)
    assert "part-debug||0|" in qos, qos
    assert apply_access(c.slurm.cli(timeout_s=60), desired_access(c.spec, c.plan)) == []  # idempotent
    block = [n for b in c.plan.blocks if b.partition == "debug" for n in (c.plan.nodes[i].name for i in b.nodes)]
    c.sh("scontrol", "update", f"NodeName={','.join(block)}", "State=RESUME")
    whole = unit_request_args(c.plan, "debug", c.plan.topology.units_per_block, "tree")
    low = c.sh("sbatch", "--parsable", "-o", "/dev/null", "-A", "bulk", *whole, "--wrap", "sleep 300").strip()
    assert c.wait(low, "RUNNING").startswith("bulk-debug|RUNNING"), c.fields(low)
    # the same priority: a second bulk unit waits for nodes, nothing is preempted
    unit = unit_request_args(c.plan, "debug", 1, "tree")
    equal = c.sh("sbatch", "--parsable", "-o", "/dev/null", "-A", "bulk", *unit, "--wrap", "sleep 300").strip()
    time.sleep(5)
    assert c.fields(low).startswith("bulk-debug|RUNNING"), c.fields(low)
    assert c.fields(equal).startswith("bulk-debug|PENDING"), c.fields(equal)
    c.sh("scancel", equal)
    # urgent's unit: bulk's job is requeued, urgent's runs inside debug's block
    high = c.sh("sbatch", "--parsable", "-o", "/dev/null", "-A", "urgent", *unit, "--wrap", "sleep 300").strip()
    got = c.wait(high, "RUNNING", timeout_s=90)
    assert got.startswith("urgent-debug|RUNNING|"), (got, c.fields(low))
    assert set(c.sh("scontrol", "show", "hostnames", got.rsplit("|", 1)[1]).split()) <= set(block), got
    shown = c.sh("scontrol", "show", "job", low)
    assert "JobState=PENDING" in shown and "Restarts=1" in shown, shown
    log = (c.slurm.root / "log" / "slurmctld.log").read_text(errors="replace")
    assert f"preempted JobId={low} has been requeued to reclaim resources for JobId={high}" in log, log[-3000:]
    c.sh("scancel", high, low)


def test_turning_preemption_off_clears_the_qos_preempt_lists(cluster: Preempting):
    """A stack that drops pool.preemption: access apply takes Priority and the other teams off the
    team QOS, which keep preempting the patrol's holds only, then changes nothing more."""
    c = cluster
    off = c.spec.model_copy(update={"pool": c.spec.pool.model_copy(update={"preemption": "off"})})
    cli = c.slurm.cli(timeout_s=60)
    ran = apply_access(cli, desired_access(off, c.plan), reconfigure=False)
    assert ["sacctmgr", "-i", "modify", "qos", "where", "name=urgent-debug", "set", "Preempt=gpufleet-patrol"] in ran, ran
    qos = c.sh("sacctmgr", "-n", "-P", "show", "qos", "format=name,grptres,priority,preempt").splitlines()
    assert "urgent-debug|gres/gpu=40|0|gpufleet-patrol" in qos and "part-debug||0|" in qos, qos
    assert apply_access(cli, desired_access(off, c.plan), reconfigure=False) == []
    assert apply_access(cli, desired_access(c.spec, c.plan), reconfigure=False)  # and back on
    assert "urgent-debug|gres/gpu=40|10|bulk-debug,gpufleet-patrol" in c.sh("sacctmgr", "-n", "-P", "show", "qos",
                                                             "format=name,grptres,priority,preempt").splitlines()


def test_with_requeue_preemption_the_patrols_holds_are_cancelled_never_requeued(cluster: Preempting):
    """pool.preemption requeue: the lowest team (bulk, priority 0) still preempts the patrol's holds,
    and Slurm cancels them (--no-requeue), so no hold comes back to take the node after the job."""
    from gpufleet.pool.slurm.patrol_hold import SlurmPatrolHolds

    c = cluster
    block = [n for b in c.plan.blocks if b.partition == "debug" for n in (c.plan.nodes[i].name for i in b.nodes)]
    # resumed already where the first test ran; an idle node refuses RESUME ("Invalid node state")
    subprocess.run(["scontrol", "update", f"NodeName={','.join(block)}", "State=RESUME"], env=c.env,
                   capture_output=True, timeout=30)
    holds = SlurmPatrolHolds(c.slurm.cli(timeout_s=30))
    assert holds.available()
    held = holds.hold({n: "debug" for n in block})
    assert sorted(held) == sorted(block), held
    whole = unit_request_args(c.plan, "debug", c.plan.topology.units_per_block, "tree")
    job = c.sh("sbatch", "--parsable", "-o", "/dev/null", "-A", "bulk", *whole, "--wrap", "sleep 300").strip()
    got = c.wait(job, "RUNNING", timeout_s=90)
    assert got.startswith("bulk-debug|RUNNING|"), (got, holds.lost(held))
    assert holds.lost(held) == sorted(block)
    for j in held.values():
        shown = c.sh("scontrol", "show", "job", j)
        assert "JobState=PREEMPTED" in shown and "Restarts=0" in shown, shown
    holds.release(held)  # nothing left to cancel: returns at once
    c.sh("scancel", job)
