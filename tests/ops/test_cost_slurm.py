"""`gpufleet cost` on real Slurm accounting: MariaDB, slurmdbd, slurmctld and one slurmd with four
fake GPUs (symlinks to /dev/null, the only GRES slurmd accepts without hardware) started here;
jobs from two accounts (root submits for both: its association covers them) run, then the command reads sacct and attributes their GPU-hours per team
and partition, one still running. With slurmdbd out of reach it says so and exits 1.

The daemons' start helpers are those of the accounting test (tests/ops/test_slurm_accounting.py);
the cluster is its own because that one has no slurmd (its jobs never run)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from tests.ops.cost_helpers import project_with_stack
from tests.ops.test_slurm_accounting import _free_port, _install, _listening, _start_mariadb, _stop, _wait

CLUSTER = "gpufleetcost"
pytestmark = pytest.mark.slow  # real MariaDB, slurmdbd, slurmctld and slurmd
PRICE = 80.0


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    _install()
    root = tmp_path_factory.mktemp("cost-slurm")
    for d in ("db", "state", "spool", "run", "log", "fakedev"):
        (root / d).mkdir()
    for i in range(4):
        (root / "fakedev" / f"nvidia{i}").symlink_to("/dev/null")
    procs: list[subprocess.Popen] = []
    db_port, dbd_port, ctld_port, slurmd_port = (_free_port() for _ in range(4))
    try:
        procs.append(_start_mariadb(root, db_port))
        dbd_conf = root / "slurmdbd.conf"
        dbd_conf.write_text("\n".join([
            "AuthType=auth/none", "DbdHost=localhost", "DbdAddr=127.0.0.1", f"DbdPort={dbd_port}", "SlurmUser=root",
            "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1", f"StoragePort={db_port}",
            "StorageUser=root", "StorageLoc=slurm_acct_db", f"PidFile={root / 'run' / 'slurmdbd.pid'}",
            f"LogFile={root / 'log' / 'slurmdbd.log'}"]) + "\n")
        dbd_conf.chmod(0o600)
        conf = "\n".join([
            f"ClusterName={CLUSTER}", "SlurmctldHost=localhost", f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}",
            "SlurmUser=root", "AuthType=auth/none", "CredType=cred/none", f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}", f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'run' / 'slurmd.pid'}", f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd.log'}", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "SlurmdParameters=config_overrides",
            "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
            f"AccountingStoragePort={dbd_port}", "AccountingStorageEnforce=associations", "AccountingStorageTRES=gres/gpu",
            "JobAcctGatherType=jobacct_gather/none", "GresTypes=gpu", "JobCompType=jobcomp/none", "ReturnToService=2",
            "MinJobAge=600", "NodeName=gpu1 NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=4 Gres=gpu:4 State=UNKNOWN",
            "PartitionName=train Nodes=gpu1 State=UP", "PartitionName=debug Nodes=gpu1 State=UP"]) + "\n"
        (root / "slurm.conf").write_text(conf)
        (root / "gres.conf").write_text(f"NodeName=gpu1 Name=gpu File={root / 'fakedev'}/nvidia[0-3]\n")
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_CONF": str(root / "slurm.conf")}
        procs.append(subprocess.Popen(["slurmdbd", "-D"], env=env, stdout=subprocess.DEVNULL,
                                      stderr=(root / "log" / "slurmdbd.log").open("a")))
        _wait("slurmdbd", lambda: _listening(dbd_port), root / "log" / "slurmdbd.log", procs[-1])
        for argv in (["add", "cluster", CLUSTER], ["add", "account", "vision,speech", f"cluster={CLUSTER}"],
                     ["add", "user", "root", "account=vision,speech", f"cluster={CLUSTER}"]):
            done = subprocess.run(["sacctmgr", "-i", *argv], env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, (argv, done.stdout, done.stderr)
        procs.append(subprocess.Popen(["slurmctld", "-D", "-c", "-i"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait("slurmctld", lambda: _listening(ctld_port), root / "log" / "slurmctld.log", procs[-1])
        procs.append(subprocess.Popen(["slurmd", "-D", "-N", "gpu1"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait("slurmd", lambda: "idle" in subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True,
                                                         text=True, timeout=10).stdout, root / "log" / "slurmd.log",
              procs[-1])
        yield env
    finally:
        _stop(procs)


def _sbatch(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", *args],
                          env=env, capture_output=True, text=True, timeout=60, cwd="/tmp")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def _sacct(env: dict[str, str], fmt: str) -> list[list[str]]:
    out = subprocess.run(["sacct", "-a", "-X", "-P", "-n", f"--format={fmt}", "-S", "now-1hour"], env=dict(env, TZ="UTC"),
                         capture_output=True, text=True, timeout=60).stdout
    return [line.split("|") for line in out.splitlines() if line]


def _cost(project: Path, env: dict[str, str], *args: str):
    return CliRunner(env={"SLURM_CONF": env["SLURM_CONF"]}).invoke(
        main, ["--project", str(project), "cost", "-s", "acct", "--since", "1h", "--format", "json,md", *args])


def test_sacct_feeds_the_cost_report_per_team_and_partition(slurm: dict[str, str], tmp_path: Path) -> None:
    done = [_sbatch(slurm, "-A", "vision", "-p", "train", "--gres=gpu:2", "--wrap", "sleep 3"),
            _sbatch(slurm, "-A", "speech", "-p", "debug", "--gres=gpu:1", "--wrap", "sleep 2")]
    running = _sbatch(slurm, "-A", "vision", "-p", "train", "--gres=gpu:1", "--wrap", "sleep 300")
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # poll the accounting itself: done when slurmdbd has both ends
            states = {r[0]: r[1] for r in _sacct(slurm, "JobID,State")}
            if all(states.get(j) == "COMPLETED" for j in done) and states.get(running) == "RUNNING":
                break
            if any(states.get(j) not in (None, "PENDING", "RUNNING", "COMPLETED") for j in [*done, running]):
                pytest.fail(f"a job ended badly: {states}")
            time.sleep(0.5)
        else:
            pytest.fail(f"jobs did not complete in slurmdbd: {states}")
        # what sacct itself says each finished job held: ElapsedRaw seconds x its gres/gpu
        truth = {r[0]: int(r[1]) * int(r[2].split("gres/gpu=")[1].split(",")[0]) / 3600
                 for r in _sacct(slurm, "JobID,ElapsedRaw,AllocTRES") if r[0] in done}
        result = _cost(project := project_with_stack(tmp_path, "acct", price=PRICE), slurm)
        assert result.exit_code == 0, result.output
        report = json.loads((project / "reports" / "acct" / "cost.json").read_text())
        jobs = {j["job_id"]: j for j in report["jobs"]}
        for job in done:
            assert jobs[job]["gpu_hours"] == pytest.approx(truth[job], abs=1e-3)
        assert jobs[done[0]]["team"] == "vision" and jobs[done[0]]["partition"] == "train" and jobs[done[0]]["gpus"] == 2
        assert jobs[done[1]]["team"] == "speech" and jobs[done[1]]["partition"] == "debug"
        assert jobs[running]["end"] is None and jobs[running]["gpu_hours"] > 0
        teams = {g["name"]: g for g in report["by_team"]}
        assert teams["speech"]["gpu_hours"] == pytest.approx(truth[done[1]], abs=1e-3)
        assert teams["vision"]["gpu_hours"] == pytest.approx(truth[done[0]] + jobs[running]["gpu_hours"], abs=1e-3)
        assert report["cost_usd"] == pytest.approx(report["gpu_hours"] * PRICE / 8, abs=0.02)
        assert report["price"]["source"].startswith("gpufleet:cost.pricePerInstanceHour")
        assert "no rollout journal" in report["idle_unavailable"]  # this stack was never rolled out
        assert "speech" in (project / "reports" / "acct" / "cost.md").read_text()
    finally:
        subprocess.run(["scancel", running], env=slurm, capture_output=True, timeout=30)


def test_slurmdbd_out_of_reach_makes_the_report_say_so_and_exit_1(slurm: dict[str, str], tmp_path: Path) -> None:
    conf = Path(slurm["SLURM_CONF"]).read_text()
    port = next(line.split("=")[1] for line in conf.splitlines() if line.startswith("AccountingStoragePort="))
    down = tmp_path / "down"
    down.mkdir()
    (down / "slurm.conf").write_text(conf.replace(f"AccountingStoragePort={port}", f"AccountingStoragePort={_free_port()}"))
    result = _cost(project := project_with_stack(tmp_path / "p", "acct", price=PRICE), dict(slurm, SLURM_CONF=str(down / "slurm.conf")))
    assert result.exit_code == 1, result.output
    assert "Slurm accounting unreachable" in result.output
    report = json.loads((project / "reports" / "acct" / "cost.json").read_text())
    assert report["gpu_hours"] is None and report["cost_usd"] is None and report["jobs"] == []
    assert any("Slurm accounting unreachable" in p for p in report["problems"])
