"""Partition QOS and team access on real slurmdbd: the local Slurm started with accounting
(`LocalSlurm.up(accounting=True)`, as `gpufleet pool up` does: MariaDB, slurmdbd, slurmctld, one
slurmd per node), the stack's access applied by `gpufleet.pool.slurm.access_apply`.

Two teams share debug (quota one unit, 10 GPUs): vision (also on train, jobs as root) and speech
(jobs as `nobody`, uid 65534; Slurm lets root past AllowAccounts, so the refusals are shown with
nobody). Read back with squeue, scontrol and sacctmgr as an operator would."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
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
TENANTS = (Tenant(name="vision", partitions=("train", "debug"), members=("root",)),
           Tenant(name="speech", partitions=("debug",), members=("nobody",)))
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _stack() -> ClusterSpec:
    raw = small_spec().model_dump(by_alias=True, mode="json", exclude_none=True)
    raw["ops"] = {"tenants": [t.model_dump(by_alias=True, mode="json") for t in TENANTS], "slurmAccounting": True}
    return ClusterSpec.from_raw(raw, source="tests/pool/test_slurm_access_real.py")


class Accounted:
    def __init__(self, slurm: LocalSlurm, spec: ClusterSpec, client: Path) -> None:
        self.slurm, self.spec, self.plan = slurm, spec, build_plan(spec)
        self.env = dict(slurm.cli().env(), SLURM_CONF=str(client / "slurm.conf"))

    def sh(self, *argv: str, nobody: bool = False, check: bool = True) -> str:
        proc = subprocess.run([*(AS_NOBODY if nobody else []), "timeout", "30", *argv], env=self.env,
                              capture_output=True, text=True, cwd="/tmp")
        if check:
            assert proc.returncode == 0, f"{argv}: {proc.stdout}{proc.stderr}"
        return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def accounted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Accounted]:
    ensure_slurm()
    if shutil.which("slurmdbd") is None and not Path("/usr/sbin/slurmdbd").exists():
        from tests.ops.test_slurm_accounting import _install
        _install()
    spec = _stack()
    slurm = LocalSlurm(tmp_path_factory.mktemp("slurm-acct"))
    slurm.up(spec, build_plan(spec), accounting=True)
    client = Path(tempfile.mkdtemp(prefix="gpufleet-acct-"))  # a world-readable slurm.conf for nobody
    client.chmod(0o755)
    try:
        for name in ("slurm.conf", "gres.conf", "topology.conf"):
            shutil.copy(slurm.root / "etc" / name, client / name)
            (client / name).chmod(0o644)
        yield Accounted(slurm, spec, client)
    finally:
        slurm.down()
        shutil.rmtree(client)


def _job_fields(c: Accounted, job: str, fmt: str = "%P|%q|%T|%r") -> str:
    return c.sh("squeue", "-h", "-j", job, "-o", fmt).strip()


def _wait(c: Accounted, job: str, state: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    got = _job_fields(c, job)
    while state not in got and time.monotonic() < deadline:
        time.sleep(0.5)
        got = _job_fields(c, job)
    return got


def test_debugs_limit_applies_to_every_accounts_job_there(accounted: Accounted):
    c = accounted
    debug = [n.name for b in c.plan.blocks if b.partition == "debug" for n in (c.plan.nodes[i] for i in b.nodes)]
    c.sh("scontrol", "update", f"NodeName={','.join(debug)}", "State=RESUME")
    shown = c.sh("scontrol", "show", "partition", "debug")
    assert "QoS=part-debug" in shown and "AllowQos=normal,gpufleet-patrol,speech-debug,vision-debug" in shown, shown
    qos = c.sh("sacctmgr", "-n", "-P", "show", "qos", "format=name,grptres").splitlines()
    # train's quota is its capacity: its nodes cap it, and a QOS limit there would stop a job from
    # preempting the patrol's holds (Slurm never preempts for a QOS limit)
    assert "part-debug|gres/gpu=10" in qos and "part-train|" in qos, qos
    unit = unit_request_args(c.plan, "debug", 1, "tree")
    first = c.sh("sbatch", "--parsable", "-o", "/dev/null", "-A", "vision", *unit, "--wrap", "sleep 120").strip()
    # the team's debug QOS, not its default (train's): the plugin sets it, AllowQos admits only it
    assert _wait(c, first, "RUNNING").startswith("debug|vision-debug|RUNNING"), _job_fields(c, first)
    # the other team's one-unit job on debug: within its own QOS, but debug's 10 GPUs are taken
    second = c.sh("sbatch", "--parsable", "-o", "/dev/null", "-A", "speech", *unit, "--wrap", "sleep 5",
                  nobody=True).strip()
    time.sleep(5)
    got = _job_fields(c, second)
    assert got.startswith("debug|speech-debug|PENDING|QOSGrpGRES"), got
    # and the first team's second job, too: the partition's limit, not a team's
    third = c.sh("sbatch", "--parsable", "-o", "/dev/null", "-A", "vision", *unit, "--wrap", "sleep 5").strip()
    time.sleep(3)
    assert _job_fields(c, third).startswith("debug|vision-debug|PENDING|QOSGrpGRES"), _job_fields(c, third)
    # naming the team's train QOS on debug is refused: AllowQos binds QOS to the partition
    wrong = c.sh("sbatch", "-o", "/dev/null", "-A", "speech", "--qos=vision-train", *unit, "--wrap", "true",
                 nobody=True, check=False)
    assert "Batch job submission failed" in wrong, wrong
    c.sh("scancel", first)  # debug's GPUs free: a waiting job starts (sacct: it may have ended already)
    deadline = time.monotonic() + 90
    ran = ""
    while not ran.startswith(("RUNNING", "COMPLETED", "FAILED")) and time.monotonic() < deadline:
        time.sleep(0.5)
        ran = c.sh("sacct", "-j", f"{second},{third}", "-X", "-n", "-P", "--format=state,qos,partition").strip()
    # allocated and started (speech's job as nobody may fail on the root-only spool; it ran)
    assert ran.startswith(("RUNNING", "COMPLETED", "FAILED")) and "debug" in ran, ran
    c.sh("scancel", "-u", "root")
    c.sh("scancel", second)


def test_access_apply_is_idempotent_and_repairs_an_edited_limit(accounted: Accounted):
    c = accounted
    cli = c.slurm.cli(timeout_s=60)
    want = desired_access(c.spec, c.plan)
    assert apply_access(cli, want) == []  # pool up applied it already
    c.sh("sacctmgr", "-i", "modify", "qos", "where", "name=part-debug", "set", "GrpTRES=gres/gpu=40")
    fixed = apply_access(cli, want)
    assert fixed == [["sacctmgr", "-i", "modify", "qos", "where", "name=part-debug", "set", "GrpTRES=gres/gpu=10"]]
    assert "part-debug|gres/gpu=10" in c.sh("sacctmgr", "-n", "-P", "show", "qos", "format=name,grptres")
    assert apply_access(cli, want) == []


def test_sacct_reads_the_jobs_that_ran(accounted: Accounted):
    c = accounted
    train = [c.plan.nodes[i].name for i in range(2)]
    c.sh("scontrol", "update", f"NodeName={','.join(train)}", "State=RESUME")
    c.sh("srun", "-A", "vision", *unit_request_args(c.plan, "train", 1, "tree"), "hostname")
    deadline = time.monotonic() + 30
    rows = ""
    while "vision|train|vision-train|COMPLETED" not in rows and time.monotonic() < deadline:  # slurmdbd lags
        rows = c.sh("sacct", "-a", "-X", "-n", "-P", "--format=account,partition,qos,state,alloctres")
        time.sleep(0.5)
    assert any(r.startswith("vision|train|vision-train|COMPLETED") and "gres/gpu=10" in r for r in rows.splitlines()), rows
