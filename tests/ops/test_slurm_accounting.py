"""Slurm accounting for real: MariaDB and slurmdbd started by the test under a temp dir (Debian's
`mariadb-server` and `slurmdbd`), slurmctld on the slurm.conf gpufleet generates for a stack with
tenants and accounting (`gpufleet.pool.slurm.conf`: AllowAccounts per partition, EnforcePartLimits=ALL,
enforced associations), the accounts and QOS of `gpufleet ops access` created with its own sacctmgr
commands; a job from an account without access to a partition is refused at submission by the
partition's AllowAccounts, one with access is accepted. Every daemon is started here, on free
ports, and stopped by its process handle (no slurmd: the nodes stay drained, pending their gates,
and submission is what is tested)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from gpufleet.plan import access as acc
from gpufleet.plan import build_plan
from gpufleet.pool.slurm.access_apply import apply_access
from gpufleet.pool.slurm.cli import SlurmCli
from gpufleet.pool.slurm.conf import LocalFlavour, generate, unit_request_args
from gpufleet.pool.slurm.local import slurm_version
from gpufleet.spec import ClusterSpec, Tenant
from tests.pool.conftest import small_spec

TENANTS = (Tenant(name="vision", partitions=("train",), members=("root",)),
           Tenant(name="speech", partitions=("debug",), members=("nobody",)))
# Slurm lets root past AllowAccounts: the jobs are submitted as `nobody` (uid 65534, auth/none)
pytestmark = pytest.mark.slow  # real MariaDB, slurmdbd and slurmctld, installed and started here
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
QUOTAS = [acc.PartitionQuota("train", 8), acc.PartitionQuota("debug", 8)]


def _stack() -> ClusterSpec:
    """The pool tests' three-block stack with these tenants and Slurm accounting."""
    raw = small_spec().model_dump(by_alias=True, mode="json", exclude_none=True)
    raw["ops"] = {"tenants": [t.model_dump(by_alias=True, mode="json") for t in TENANTS], "slurmAccounting": True}
    return ClusterSpec.from_raw(raw, source="tests/ops/test_slurm_accounting.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _install() -> None:
    missing = [p for p, tool in (("slurmdbd", "slurmdbd"), ("mariadb-server", "mariadbd"), ("slurm-wlm", "slurmctld"))
               if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()]
    if not missing:
        return
    if os.geteuid() != 0:
        pytest.skip(f"{', '.join(missing)} not installed and installing needs root")
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=300"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run([*apt, "update"], check=False, env=env, capture_output=True, timeout=600)
    subprocess.run([*apt, "install", "-y", "--no-install-recommends", *missing], check=True, env=env,
                   capture_output=True, timeout=900)


def _wait(what: str, ok, log: Path, proc: subprocess.Popen | None = None, deadline_s: float = 60) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if ok():
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.3)
    pytest.fail(f"{what} did not come up: {log.read_text()[-2000:] if log.exists() else 'no log'}")


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _start_mariadb(root: Path, port: int) -> subprocess.Popen:
    """A throwaway MariaDB under `root` (db/, run/, log/) on 127.0.0.1:`port`, answering when returned."""
    subprocess.run(["mariadb-install-db", f"--datadir={root / 'db'}", "--user=root",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, capture_output=True, timeout=120)
    proc = subprocess.Popen(["mariadbd", f"--datadir={root / 'db'}", "--user=root", f"--port={port}",
                             "--bind-address=127.0.0.1", f"--socket={root / 'run' / 'mysql.sock'}",
                             f"--pid-file={root / 'run' / 'mysql.pid'}", f"--log-error={root / 'log' / 'mysql.log'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait("mariadbd", lambda: _listening(port), root / "log" / "mysql.log", proc)
    return proc


def _stop(procs: list[subprocess.Popen]) -> None:
    """Terminate the daemons, last started first; kill what does not leave within 15 s."""
    for p in reversed(procs):
        p.terminate()
    for p in reversed(procs):
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()


@pytest.fixture
def accounting(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """The submitter's environment and slurmctld's log."""
    _install()
    root = tmp_path
    for d in ("db", "state", "spool", "run", "log", "etc"):
        (root / d).mkdir()
    procs: list[subprocess.Popen] = []
    db_port, dbd_port, ctld_port, node_port = (_free_port() for _ in range(4))
    spec = _stack()
    cluster = spec.cluster.name
    try:
        procs.append(_start_mariadb(root, db_port))
        dbd_conf = root / "etc" / "slurmdbd.conf"
        dbd_conf.write_text("\n".join([
            "AuthType=auth/none", "DbdHost=localhost", "DbdAddr=127.0.0.1", f"DbdPort={dbd_port}", "SlurmUser=root",
            "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1", f"StoragePort={db_port}",
            "StorageUser=root", "StorageLoc=slurm_acct_db", f"PidFile={root / 'run' / 'slurmdbd.pid'}",
            f"LogFile={root / 'log' / 'slurmdbd.log'}", "DebugLevel=info"]) + "\n")
        dbd_conf.chmod(0o600)
        flavour = LocalFlavour(root=root, controller_port=ctld_port, first_node_port=node_port, slurmdbd_port=dbd_port)
        config = generate(spec, build_plan(spec), flavour, slurm_version())
        for name, text in config.files().items():
            (root / "etc" / name).write_text(text)
        slurm_conf = root / "etc" / "slurm.conf"
        env = dict(os.environ, SLURM_CONF=str(slurm_conf))
        # slurmdbd reads slurmdbd.conf beside $SLURM_CONF
        procs.append(subprocess.Popen(["slurmdbd", "-D"], env=env, stdout=subprocess.DEVNULL,
                                      stderr=(root / "log" / "slurmdbd.log").open("a")))
        _wait("slurmdbd", lambda: _listening(dbd_port), root / "log" / "slurmdbd.log", procs[-1])
        commands = acc.sacctmgr_commands(TENANTS, QUOTAS, cluster)
        assert commands[0][2:4] == ["add", "cluster"]

        def sacctmgr(argv: list[str]) -> None:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, (argv, done.stdout, done.stderr)

        sacctmgr(commands[0])
        for q in QUOTAS:  # slurmctld is fatal on a partition QOS slurmdbd lacks; its limit needs the TRES
            sacctmgr(["sacctmgr", "-i", "add", "qos", acc.partition_qos_name(q.name)])
        procs.append(subprocess.Popen(["slurmctld", "-D", "-c", "-i"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait("slurmctld", lambda: _listening(ctld_port), root / "log" / "slurmctld.log", procs[-1])
        # the gres/gpu TRES exists once slurmctld registered with AccountingStorageTRES=gres/gpu
        _wait("the gres/gpu TRES", lambda: "gres|gpu" in subprocess.run(
            ["sacctmgr", "-n", "-P", "show", "tres", "format=type,name"], env=env, capture_output=True, text=True,
            timeout=30).stdout, root / "log" / "slurmctld.log", procs[-1])
        # the rest of the script, as `gpufleet pool access apply` runs it: what slurmdbd lacks
        apply_access(SlurmCli(conf=slurm_conf, timeout_s=60), acc.slurm_access(TENANTS, QUOTAS, cluster))
        # a world-readable copy of slurm.conf for the unprivileged submitter (tmp_path is root-only)
        client = Path(tempfile.mkdtemp(prefix="gpufleet-acct-"))
        client.chmod(0o755)
        for name in config.files():
            shutil.copy(root / "etc" / name, client / name)
            (client / name).chmod(0o644)
        yield dict(env, SLURM_CONF=str(client / "slurm.conf")), root / "log" / "slurmctld.log"
        shutil.rmtree(client)
    finally:
        _stop(procs)


def test_an_account_without_access_to_a_partition_is_refused(accounting: tuple[dict[str, str], Path]) -> None:
    env, ctld_log = accounting

    def sbatch(account: str, partition: str) -> subprocess.CompletedProcess[str]:
        unit = unit_request_args(build_plan(_stack()), partition, 1, "tree")  # job_submit.lua takes whole units only
        return subprocess.run([*AS_NOBODY, "sbatch", "-A", account, *unit, "-o", "/dev/null", "--wrap", "true"],
                              env=env, capture_output=True, text=True, timeout=60, cwd="/tmp")

    conf = Path(env["SLURM_CONF"]).read_text()
    assert "EnforcePartLimits=ALL" in conf and "AccountingStorageEnforce=associations,limits,qos" in conf
    assert "AllowAccounts=root,gpufleet-patrol,vision " in conf and "AllowAccounts=root,gpufleet-patrol,speech " in conf
    qos = subprocess.run(["sacctmgr", "-n", "-P", "show", "qos", "format=name,grptres"], env=env,
                         capture_output=True, text=True, timeout=60).stdout
    assert "vision-train|gres/gpu=8" in qos
    # the same user and account: refused on a partition whose AllowAccounts lacks it, accepted on its own
    refused = sbatch("speech", "train")
    assert refused.returncode != 0, refused.stdout
    assert "Invalid account or account/partition combination" in refused.stderr, refused.stderr
    # refused by the partition's AllowAccounts (the association exists: speech may use debug)
    assert "not permitted to use this partition (train allows root,gpufleet-patrol,vision not speech)" in ctld_log.read_text()
    not_member = sbatch("vision", "train")
    assert not_member.returncode != 0, not_member.stdout
    accepted = sbatch("speech", "debug")
    assert accepted.returncode == 0 and accepted.stdout.startswith("Submitted batch job"), accepted.stderr
