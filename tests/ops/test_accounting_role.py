"""The head node's Slurm accounting role (`playbooks/roles/slurm_accounting`), for real.

Ansible applies the role to this machine with `--check --diff` (as root: apt, dpkg and the user
database are read for real), which must fail nothing and write nothing; the slurmdbd.conf it would
install is taken from its diff and USED: Debian's MariaDB and slurmdbd are started under a temp dir
on it, the database, its user and its password come from the role's own helper (the very script the
role installs and runs on the node, twice: the second run changes nothing), the cluster is
registered with it (again twice), and a slurmctld on gpufleet's generated slurm.conf registers
with that slurmdbd (its gres/gpu TRES appears in the accounting database).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import ansible_runner
import pytest
import yaml

from gpufleet.plan import build_plan
from gpufleet.pool.slurm.conf import LocalFlavour, generate, partition_qos_names
from gpufleet.pool.slurm.local import slurm_version
from tests.ops.test_monitoring_roles import _after
from tests.ops.test_slurm_accounting import _free_port, _install, _listening, _start_mariadb, _stop, _stack, _wait

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "playbooks" / "roles" / "slurm_accounting"
HELPER = ROLE / "files" / "gpufleet-slurm-accounting"
BIN = Path(sys.executable).parent
HOST = "slurm-controller"

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

# what the role would change on this host outside the temp dir, and Debian's own files it must keep
WATCHED = ("/etc/systemd/system/slurmctld.service.d/gpufleet-slurmdbd.conf",
           "/etc/mysql/mariadb.conf.d/60-gpufleet-slurmdbd.cnf", "/usr/local/sbin/gpufleet-slurm-accounting",
           "/etc/slurm/slurmdbd.conf", "/var/lib/mysql/slurm_acct_db")


def _state(paths: list[str]) -> dict[str, tuple[int, int, int] | None]:
    out: dict[str, tuple[int, int, int] | None] = {}
    for p in paths:
        try:
            st = Path(p).stat()
            out[p] = (st.st_mtime_ns, st.st_size, st.st_mode)
        except FileNotFoundError:
            out[p] = None
    return out


def _selection(package: str) -> str:
    return subprocess.run(["dpkg", "--get-selections", package], capture_output=True, text=True, timeout=60).stdout


def check_role(workdir: Path, role: str, extravars: dict[str, Any]) -> list[dict[str, Any]]:
    """`role` applied to this machine (host slurm-controller, group slurm_controller) with
    `--check --diff`; each task's result, with `failed` and `skipped`. The run itself must succeed."""
    playbook = workdir / f"{role}.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Head", "hosts": "slurm_controller", "gather_facts": True,
                                         "gather_subset": ["min"], "roles": [{"role": role}]}]))
    inventory = workdir / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "hosts": {HOST: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "children": {"slurm_controller": {"hosts": {HOST: None}}}}}))
    (workdir / "runner").mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(workdir / "runner"), project_dir=str(workdir), playbook=playbook.name,
        inventory=str(inventory), extravars=extravars, cmdline="--check --diff", quiet=True, timeout=300,
        suppress_env_files=True,
        envvars={"ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"), "ANSIBLE_NOCOLOR": "1",
                 "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    log = (workdir / "runner" / "artifacts").rglob("stdout")
    assert runner.rc == 0, "\n".join(p.read_text()[-6000:] for p in log)
    done = ("runner_on_ok", "runner_on_failed", "runner_on_skipped")
    return [{"task": e["event_data"].get("task"), **e["event_data"].get("res", {}),
             "failed": e["event"] == "runner_on_failed", "skipped": e["event"] == "runner_on_skipped"}
            for e in runner.events if e["event"] in done]


@dataclass(frozen=True)
class CheckRun:
    root: Path  # the temp dir the role's paths point into
    ports: dict[str, int]
    results: list[dict[str, Any]]
    ev: dict[str, Any]


@pytest.fixture(scope="module")
def check_run() -> Iterator[CheckRun]:
    """The role's --check --diff run, its inputs pointing into a world-readable temp dir (slurmdbd
    later runs on what it rendered there)."""
    if os.geteuid() != 0:
        pytest.skip("the check run reads apt, dpkg and the user database as root")
    _install()
    root = Path(tempfile.mkdtemp(prefix="gpufleet-acct-role-"))
    root.chmod(0o755)
    try:
        for d in ("etc", "log", "run", "db", "mariadb.conf.d"):
            (root / d).mkdir()
        ports = {"db": _free_port(), "dbd": _free_port(), "ctld": _free_port(), "node": _free_port()}
        spec = _stack()
        ev = {"slurm_accounting_cluster": spec.cluster.name, "slurm_accounting_version": slurm_version(),
              "slurm_accounting_port": ports["dbd"], "slurm_accounting_conf_dir": str(root / "etc"),
              "slurm_accounting_log_dir": str(root / "log"), "slurm_accounting_pid_file": str(root / "run" / "slurmdbd.pid"),
              "slurm_accounting_storage_host": "127.0.0.1", "slurm_accounting_storage_port": ports["db"],
              "slurm_accounting_mariadb_socket": str(root / "run" / "mysql.sock"),
              "slurm_accounting_mariadb_conf_dir": str(root / "mariadb.conf.d"),
              # the local Slurm's slurm.conf (gpufleet.pool.slurm.conf.LocalFlavour): root, no munge
              "slurm_accounting_slurm_user": "root", "slurm_accounting_auth_type": "auth/none",
              "gpufleet_enable_services": False, "gpufleet_live_system": False}
        watched = [*WATCHED, *(str(p) for p in root.rglob("*"))]
        before, held = _state(watched), _selection("slurmdbd")
        results = check_role(root, "slurm_accounting", ev)
        assert _state(watched) == before, "the check run changed files on the host"
        assert _selection("slurmdbd") == held, "the check run changed slurmdbd's dpkg selection"
        yield CheckRun(root, ports, results, ev)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_check_run_fails_nothing_and_only_plans_what_needs_the_live_host(check_run: CheckRun) -> None:
    results = check_run.results
    assert not [r["task"] for r in results if r.get("failed")]
    ran = {r["task"] for r in results if not r["skipped"]}
    skipped = {r["task"] for r in results if r["skipped"]}
    assert {"Install MariaDB and the pinned slurmdbd", "Install slurmdbd.conf", "Start slurmctld after slurmdbd",
            "Tune InnoDB for slurmdbd"} <= ran
    # the steps that need the live host (and its secret) never run in a check
    assert {"Generate the database password once", "Create the accounting database and its user",
            "Register the cluster with slurmdbd", "Create the partition QOS slurm.conf names",
            "Run slurmctld once slurmdbd holds the cluster and its QOS"} <= skipped
    installed = next(r for r in results if r["task"] == "Install MariaDB and the pinned slurmdbd")
    assert not installed.get("changed"), "this host has Debian's slurmdbd at the pin and MariaDB installed"


def test_the_rendered_files_hold_no_password_and_order_slurmctld_after_slurmdbd(check_run: CheckRun) -> None:
    root = check_run.root
    conf = _after(check_run.results, str(root / "etc" / "slurmdbd.conf"))
    assert "StoragePass" not in conf.replace("# StoragePass=,", "")  # only the comment names it
    assert f"\nInclude {root / 'etc' / 'slurmdbd-storage-pass.conf'}\n" in conf
    install = next(r for r in check_run.results if r["task"] == "Install slurmdbd.conf")
    assert install["invocation"]["module_args"]["mode"] == "0600"
    assert install["invocation"]["module_args"]["owner"] == "root"  # slurm_accounting_slurm_user of this test
    dropin = _after(check_run.results, "/etc/systemd/system/slurmctld.service.d/gpufleet-slurmdbd.conf")
    unit = dict(line.split("=", 1) for line in dropin.splitlines() if "=" in line and not line.startswith("#"))
    assert unit == {"Wants": "slurmdbd.service", "After": "slurmdbd.service"}
    cnf = _after(check_run.results, str(root / "mariadb.conf.d" / "60-gpufleet-slurmdbd.cnf"))
    assert "[mysqld]" in cnf and "innodb_lock_wait_timeout=900" in cnf


def _helper(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(HELPER), *args], capture_output=True, text=True, timeout=120, env=env)


def test_the_helper_refuses_bad_arguments_with_its_usage(tmp_path: Path) -> None:
    done = _helper("database", str(tmp_path / "pass"), "acct; DROP", "slurm", "/run/none.sock")
    assert done.returncode == 2 and "bad database or user name" in done.stderr
    done = _helper("cluster")
    assert done.returncode == 2 and "register the cluster with slurmdbd" in done.stderr
    done = _helper("qos")
    assert done.returncode == 2 and "create each QOS slurmdbd lacks" in done.stderr
    done = _helper("qos", "part-train", "bad;name")
    assert done.returncode == 2 and "bad QOS name: bad;name" in done.stderr
    (tmp_path / "pass").write_text("# no password here\n")
    done = _helper("database", str(tmp_path / "pass"), "slurm_acct_db", "slurm", "/run/none.sock")
    assert done.returncode == 1 and "holds no StoragePass= line" in done.stderr


def test_slurmdbd_runs_on_the_rendered_conf_and_slurmctld_registers_with_it(check_run: CheckRun) -> None:
    root, ports = check_run.root, check_run.ports
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(_start_mariadb(root, ports["db"]))

        # the role's own steps, as it runs them on the node; each a second time changes nothing
        pass_file = root / "etc" / "slurmdbd-storage-pass.conf"
        for expected in ("created", "present"):
            done = _helper("password", str(pass_file), "root")
            assert (done.returncode, done.stdout.strip()) == (0, expected), done.stderr
        assert stat.S_IMODE(pass_file.stat().st_mode) == 0o600
        password = pass_file.read_text().strip().removeprefix("StoragePass=")
        assert len(password) == 48
        for expected in ("created", "unchanged"):
            done = _helper("database", str(pass_file), "slurm_acct_db", "slurm", str(root / "run" / "mysql.sock"))
            assert (done.returncode, done.stdout.strip()) == (0, expected), done.stderr
            assert password not in done.stdout + done.stderr

        conf = root / "etc" / "slurmdbd.conf"
        conf.write_text(_after(check_run.results, str(conf)))
        conf.chmod(0o600)
        spec = _stack()
        flavour = LocalFlavour(root=root, controller_port=ports["ctld"], first_node_port=ports["node"],
                               slurmdbd_port=ports["dbd"])
        for d in ("state", "spool"):
            (root / d).mkdir(exist_ok=True)
        config = generate(spec, build_plan(spec), flavour, slurm_version())
        for name, text in config.files().items():
            (root / "etc" / name).write_text(text)
        env = dict(os.environ, SLURM_CONF=str(root / "etc" / "slurm.conf"))  # slurmdbd.conf beside it
        procs.append(subprocess.Popen(["slurmdbd", "-D"], env=env, stdout=subprocess.DEVNULL,
                                      stderr=(root / "log" / "slurmdbd.stderr").open("a")))
        _wait("slurmdbd", lambda: _listening(ports["dbd"]), root / "log" / "slurmdbd.log", procs[-1])
        assert "StorageUser=slurm" in conf.read_text()  # it logged into MariaDB as the role's user

        for expected in ("added", "present"):
            done = _helper("cluster", spec.cluster.name, env=env)
            assert (done.returncode, done.stdout.strip()) == (0, expected), done.stderr
        # slurm.conf names a partition QOS per partition: the role creates them (its next step) before
        # it starts slurmctld, which is fatal on one slurmdbd lacks
        names = partition_qos_names(spec, build_plan(spec), flavour)
        assert names == ["part-train", "part-debug"] and "QOS=part-debug" in config.slurm_conf
        for expected in ("added", "present"):
            done = _helper("qos", *names, env=env)
            assert (done.returncode, done.stdout.strip()) == (0, expected), done.stderr
        procs.append(subprocess.Popen(["slurmctld", "-D", "-c", "-i"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait("slurmctld", lambda: _listening(ports["ctld"]), root / "log" / "slurmctld.log", procs[-1])
        _wait("slurmctld's registration (the gres/gpu TRES)", lambda: "gres|gpu" in subprocess.run(
            ["sacctmgr", "-n", "-P", "show", "tres", "format=type,name"], env=env, capture_output=True, text=True,
            timeout=30).stdout, root / "log" / "slurmctld.log", procs[-1])
        clusters = subprocess.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster,rpc"], env=env,
                                  capture_output=True, text=True, timeout=30).stdout
        assert any(line.startswith(f"{spec.cluster.name}|") for line in clusters.splitlines()), clusters
        for log in (root / "log").iterdir():
            assert password not in log.read_text(errors="replace"), log.name
    finally:
        _stop(procs)
