"""The Slurm adapter through the SSH transport, for real: an sshd on a free localhost port in front of
the session's local Slurm (conftest.py), every scontrol/sinfo/srun going through `ssh ... -- CMD`.

What a real stack does from a CI runner: the controller is only reachable over SSH (here the same
machine, so the local cluster's SLURM_CONF path means the same on both sides).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from gpufleet.errors import PoolError
from gpufleet.gates.launch import LaunchSpec
from gpufleet.pool.protocol import NodeState, PendingNode
from gpufleet.pool.slurm.adapter import SlurmPool
from gpufleet.pool.slurm.cli import SlurmCli
from gpufleet.pool.slurm.transport import SshTransport

from . import contract
from .conftest import Cluster
from .contract import record

SSHD = Path("/usr/sbin/sshd")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Sshd:
    port: int
    key: Path
    known_hosts: Path

    def transport(self, port: int | None = None, **kw: object) -> SshTransport:
        return SshTransport(host="127.0.0.1", user="root", port=port or self.port, key_file=self.key,
                            known_hosts=self.known_hosts, connect_timeout_s=5,
                            control_path=str(self.known_hosts.parent / "cm-%C"), **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """An sshd of its own (own config, host key, authorized_keys) on 127.0.0.1, root login by key."""
    if os.geteuid() != 0:
        pytest.skip("an sshd that logs in as root needs root; CI runs as root")
    if not SSHD.exists():
        from tests.configure.configure_host import ensure_system_packages

        ensure_system_packages("openssh-server", "openssh-client")
    d = tmp_path_factory.mktemp("sshd")
    for name in ("client", "host"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    port = _free_port()
    (d / "sshd_config").write_text("\n".join([
        f"ListenAddress 127.0.0.1:{port}", f"HostKey {d / 'host'}", f"PidFile {d / 'sshd.pid'}",
        "PermitRootLogin prohibit-password", "PasswordAuthentication no", f"AuthorizedKeysFile {d / 'authorized_keys'}",
        "StrictModes no", "UsePAM no"]) + "\n")  # sshd's default MaxSessions and MaxStartups, as on a controller
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while True:  # ready once it accepts a connection
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"sshd did not start: {proc.communicate()[1][-1000:]}")
            time.sleep(0.05)
    try:
        yield Sshd(port=port, key=d / "client", known_hosts=d / "known_hosts")
    finally:
        Sshd(port, d / "client", d / "known_hosts").transport().close()
        proc.terminate()
        proc.wait(timeout=10)


def _ssh_pool(c: Cluster, sshd: Sshd, failures: int = 2, timeout_s: float = 10, **kw: object) -> SlurmPool:
    cli = SlurmCli(conf=c.slurm.conf_path, timeout_s=timeout_s, transport=sshd.transport(**kw))
    return SlurmPool(cli, version=c.version, failures_before_blacklist=failures)


def _pending(c: Cluster, *indexes: int) -> list[PendingNode]:
    return [PendingNode(slot=c.plan.nodes[i].name, block=c.plan.nodes[i].block,
                        partition=c.plan.blocks[c.plan.nodes[i].block].partition) for i in indexes]


def test_register_admit_quarantine_through_ssh_as_sinfo_shows_it(cluster: Cluster, sshd: Sshd):
    pool = _ssh_pool(cluster, sshd)
    n0, n1 = _pending(cluster, 0, 1)
    pool.register_pending([n0, n1])
    pool.admit(n0.slot, record(n0))
    reason = 'GPU 3 "fell off the bus" (Xid 79) at it\'s $HOME; `date`'
    pool.quarantine(n1.slot, "xid-79", reason)

    # a trailing * (slurmd late to answer on a loaded machine) is no state of gpufleet's
    rows = dict(ln.replace("*|", "|").split("|", 1)
                for ln in cluster.sh("sinfo", "-h", "-N", "-o", "%N|%t|%E").splitlines() if ln)
    assert rows[n0.slot].startswith("idle|")
    # the adapter swaps double quotes for single ones (Slurm's own quoting); the rest, $ and ` included,
    # arrives literally: nothing was expanded by a shell on either side
    assert rows[n1.slot] == "drain|gpufleet quarantine xid-79: GPU 3 'fell off the bus' (Xid 79) at it's $HOME; `date`"
    state = pool.state()
    assert state.get(n0.slot).state is NodeState.ADMITTED
    assert state.get(n1.slot).state is NodeState.QUARANTINED and state.get(n1.slot).reason_code == "xid-79"
    assert pool.cli.calls >= 5


def test_srun_runs_through_ssh_with_its_exit_code_and_output(cluster: Cluster, sshd: Sshd):
    pool = _ssh_pool(cluster, sshd)
    pair = _pending(cluster, 2, 3)
    pool.register_pending(pair)
    nodes = ",".join(n.slot for n in pair)
    ok = LaunchSpec(kind="slurm", name="pair", nodes=tuple(n.slot for n in pair), ranks=2, env={},
                    argv=("srun", f"--nodelist={nodes}", "--nodes=2", "--ntasks-per-node=1", "bash", "-c",
                          "echo out-on-$SLURMD_NODENAME; echo err-on-$SLURMD_NODENAME >&2; exit 3"))
    [result] = pool.launcher().run([ok], timeout_s=30)
    assert result.exit_code == 3, result.output
    assert sorted(ln for ln in result.output.splitlines() if "-on-" in ln) == sorted(
        f"{kind}-on-{n.slot}" for n in pair for kind in ("out", "err"))  # stderr comes back too
    assert "No reservations" in cluster.sh("scontrol", "show", "reservation")


def test_a_closed_port_is_an_unreachable_controller_naming_the_node(cluster: Cluster, sshd: Sshd):
    pool = _ssh_pool(cluster, sshd, timeout_s=5, port=_free_port())
    slot = cluster.plan.nodes[0].name
    started = time.monotonic()
    with pytest.raises(PoolError, match=rf"{slot}.*cannot reach the Slurm controller \(ssh root@127.0.0.1:\d+\).*refused"):
        pool.admit(slot, record(slot))
    assert time.monotonic() - started < 5


def test_a_proxy_jump_gets_the_same_batch_options(cluster: Cluster, sshd: Sshd):
    """Through a bastion (the same sshd): the jump's own ssh must not prompt for its unknown host key."""
    cli = SlurmCli(conf=cluster.slurm.conf_path, transport=sshd.transport(proxy_jump=f"root@127.0.0.1:{sshd.port}"))
    assert cluster.plan.nodes[0].name in cli.run(["sinfo", "-h", "-N", "-o", "%N"])
    assert "via root@127.0.0.1" in cli.transport.where


def test_more_parallel_commands_than_sshd_allows_sessions_all_run(cluster: Cluster, sshd: Sshd):
    """The launcher runs up to 16 specs at once; sshd's default MaxSessions is 10 per connection."""
    cli = SlurmCli(conf=cluster.slurm.conf_path, transport=sshd.transport())
    with ThreadPoolExecutor(max_workers=14) as pool:
        outs = list(pool.map(lambda i: cli.run(["sh", "-c", f"sleep 1; echo done-{i}"], timeout_s=30), range(14)))
    assert outs == [f"done-{i}\n" for i in range(14)]


def test_command_failures_are_not_reported_as_unreachable(cluster: Cluster, sshd: Sshd):
    pool = _ssh_pool(cluster, sshd)
    with pytest.raises(PoolError, match="local-b9999-n99999.*no such node in Slurm"):
        pool.admit("local-b9999-n99999", record("local-b9999-n99999"))
    with pytest.raises(PoolError, match=r"sacctmgr-nope is not on PATH on ssh root@127.0.0.1"):
        pool.cli.run(["sacctmgr-nope", "show"])


def test_a_stopped_controller_times_out_on_the_far_side(cluster: Cluster, sshd: Sshd):
    pid = int((cluster.slurm.root / "run" / "slurmctld.pid").read_text())
    pool = _ssh_pool(cluster, sshd, timeout_s=2)
    slot = cluster.plan.nodes[0].name
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(PoolError, match=rf"{slot}.*did not answer .* within 2 s on ssh root@"):
            pool.admit(slot, record(slot))
        assert time.monotonic() - started < 2 + 2 + 5  # the limit, the kill grace, ssh's own start
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.fixture
def make_subject(slurm_cluster: Cluster, sshd: Sshd) -> contract.SubjectFactory:
    picked = _pending(slurm_cluster, 0, 1, 5, 6)

    def make(failures_before_blacklist: int) -> contract.Subject:
        slurm_cluster.reset()
        return contract.Subject(pool=_ssh_pool(slurm_cluster, sshd, failures_before_blacklist), nodes=picked,
                                missing_partition="inference",
                                down=lambda: _ssh_pool(slurm_cluster, sshd, timeout_s=3, port=_free_port()))

    return make


@pytest.mark.parametrize("check", contract.CHECKS, ids=contract.check_id)
def test_contract_through_ssh(check, make_subject):
    check(make_subject)
