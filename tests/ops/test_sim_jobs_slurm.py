"""The simulated job stream as real Slurm jobs on a local Slurm with MariaDB and slurmdbd: after
`gpufleet pool up` and `gpufleet rollout` the stream's running jobs are `sbatch` jobs whose `srun`
holds their nodes, and `gpufleet cost` reads them back from real `sacct`: GPU-hours per partition
and per team (the default teams' accounts, the stack having no tenants)."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from gpufleet.plan import build_plan
from gpufleet.sim import jobs_slurm
from gpufleet.sim.jobs import DEFAULT_TEAMS
from gpufleet.spec import load_stack_path
from tests.daytwo.fleet import gpufleet
from tests.daytwo.test_patrol_slurm import sh
from tests.pool.conftest import ensure_slurm
from tests.rollout.project import make_project

REPO = Path(__file__).resolve().parents[2]
STACK = "psj"  # short: slurmstepd socket paths hold the slot name twice
STACK_FILE = """config:
  aws:region: us-east-1
  gpufleet:cluster:
    name: psj
    region: us-east-1
    availabilityZone: us-east-1a
    instanceType: p5.48xlarge
    targetGpus: 64
    spareFraction: 0.0
    unitGpus: 8
  gpufleet:partitions:
    - name: train
      mode: data-parallel
      units: 4
      quotaUnits: 4
    - name: sim
      mode: independent
      units: 4
      quotaUnits: 4
  gpufleet:rollout:
    canaryFraction: 0.5
    batchSize: 4
  gpufleet:pool:
    type: slurm
  gpufleet:image:
    os: al2023
    bom: images/bom.yaml
  gpufleet:simulator:
    seed: 1
    slurmJobSeconds: 20
"""


def _local_slurm_plan():
    return build_plan(load_stack_path(REPO / "stacks" / "Pulumi.local-slurm.yaml"))


def test_the_stream_now_is_one_job_per_running_stream_job_fitted_to_whole_units_and_blocks() -> None:
    plan = _local_slurm_plan()
    every = [n.name for n in plan.nodes]
    subs = jobs_slurm.plan_submissions(plan, every, 1_800_000_000.0, seed=1)
    by_part: dict[str, list[jobs_slurm.Submission]] = {}
    for s in subs:
        by_part.setdefault(s.partition, []).append(s)
    assert set(by_part) == {p.name for p in plan.partitions}
    per_block = plan.topology.units_per_block
    for s in subs:
        assert s.units <= per_block or s.units % per_block == 0, s  # past one block: whole blocks
        quota = next(p.quota_units for p in plan.partitions if p.name == s.partition)
        assert quota is None or s.units <= quota
    assert {s.account for s in subs} <= set(DEFAULT_TEAMS)
    # a unit with one node not admitted runs nothing: the debug partition's last unit
    debug_unit = [u for u in plan.units if u.partition == "debug"][-1]
    missing = plan.nodes[debug_unit.nodes[-1]].name
    fewer = jobs_slurm.plan_submissions(plan, [n for n in every if n != missing], 1_800_000_000.0, seed=1)
    assert len(fewer) < len(subs)
    assert not jobs_slurm.plan_submissions(plan, [], 1_800_000_000.0, seed=1)


def test_the_teams_get_accounts_and_the_user_an_association_only_where_missing() -> None:
    have = {("root", ""), ("root", "root"), ("research", ""), ("research", "alice")}
    cmds = jobs_slurm.account_commands(have, ["research", "platform", "research"], "alice", "c1")
    assert cmds == [["sacctmgr", "-i", "add", "account", "platform", "Cluster=c1",
                     "Description=gpufleet simulated team platform"],
                    ["sacctmgr", "-i", "add", "user", "alice", "Account=platform", "Cluster=c1"]]
    assert jobs_slurm.account_commands(have | {("platform", ""), ("platform", "alice")}, ["platform"], "alice",
                                       "c1") == []


def test_argv_holds_every_node_with_srun_for_the_seconds_and_names_the_team() -> None:
    cmd = jobs_slurm.argv(jobs_slurm.Submission("train-train", "train", "research", 4), ["--partition=train"], 20)
    assert cmd[:2] == ["sbatch", "--parsable"] and "--account=research" in cmd and "--partition=train" in cmd
    assert cmd[-1].startswith("srun --ntasks-per-node=1 ") and "sleep 20" in cmd[-1]


@pytest.mark.slow  # real MariaDB, slurmdbd, slurmctld and 8 slurmd; a rollout; jobs of 20 s
def test_after_pool_up_and_rollout_cost_reads_real_sacct_gpu_hours_per_partition_and_team() -> None:
    ensure_slurm()
    if shutil.which("slurmdbd") is None and not Path("/usr/sbin/slurmdbd").exists():
        from tests.ops.test_slurm_accounting import _install
        _install()
    short = Path(tempfile.mkdtemp(prefix="gfj", dir="/tmp"))  # slurmstepd's socket paths stay under 108 bytes
    root = make_project(short / "p")
    (root / "stacks" / f"Pulumi.{STACK}.yaml").write_text(STACK_FILE)
    conf = root / ".gpufleet" / STACK / "slurm" / "etc" / "slurm.conf"
    try:
        up = gpufleet(root, "pool", "up", "-s", STACK)
        assert up.exit_code == 0, up.output
        rolled = gpufleet(root, "rollout", "-s", STACK)
        assert rolled.exit_code == 0, rolled.output
        assert "simulated job stream:" in rolled.output, rolled.output
        deadline = time.monotonic() + 180
        while True:  # the stream's jobs run and end (20 s each)
            queued = sh(conf, "squeue", "-h", "-o", "%i|%T|%a|%P").split()
            done = sh(conf, "sacct", "-X", "-n", "-P", "-a", "-o", "JobID,State,Account,Partition,NNodes,JobName").split()
            if done and not queued or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert not queued, queued
        every = [r.split("|") for r in done]
        # the gates' runs and the smoke job are real srun jobs too (gpufleet.sim.srun_relay), CPU-only
        gates = [r for r in every if r[5].startswith("gpufleet-")]
        assert gates and all(r[1] == "COMPLETED" for r in gates), gates
        rows = [r for r in every if not r[5].startswith("gpufleet-")]  # the stream's
        assert rows and all(r[1] == "COMPLETED" for r in rows), rows
        assert {r[3] for r in rows} == {"train", "sim"} and {r[2] for r in rows} <= set(DEFAULT_TEAMS)
        result = gpufleet(root, "cost", "-s", STACK, "--since", "1h", "--json")
        assert result.exit_code == 0, result.output
        report = json.loads((root / "reports" / STACK / "cost.json").read_text())
        assert {g["name"] for g in report["by_partition"]} == {"train", "sim"}
        teams = {g["name"]: g for g in report["by_team"]}
        assert set(teams) == {r[2] for r in rows} | {r[2] for r in gates}  # the gates' runs: the user's account
        assert all(teams[r[2]]["gpu_hours"] == 0 for r in gates if r[2] not in {q[2] for q in rows})  # CPUs only
        assert all(teams[t]["gpu_hours"] > 0 and teams[t]["jobs"] > 0 for t in {r[2] for r in rows})
        assert all(g["gpu_hours"] > 0 and g["jobs"] > 0 for g in report["by_partition"])
        assert report["gpu_hours"] > 0 and report["cost_usd"] > 0  # priced from the shipped Price List snapshot
        assert "pricing.us-east-1.amazonaws.com" in report["price"]["source"]
        assert len(every) == sum(g["jobs"] for g in report["by_partition"])
    finally:
        gpufleet(root, "pool", "down", "-s", STACK)
        shutil.rmtree(short, ignore_errors=True)
