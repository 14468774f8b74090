"""A real Slurm on this machine for a simulated stack: one slurmctld and one slurmd per planned node.

Why real: the local-slurm stack proves the Slurm adapter, the generated configuration and the
unit requests against Slurm itself, not a model of it. Everything lives under
`<state dir>/slurm/` (config, state, spool, logs, pids, fake GPU device files), every daemon
listens on 127.0.0.1 on ports found free at start, and every command gets SLURM_CONF pointing
at this config: nothing global is read or changed. The Debian build runs many slurmd on one host
(`slurmd -N <node>`), and auth/none needs no munge key.

`up` is a clean start (`slurmctld -c`): every node comes back drained as "pending gates".

Nodes can also live elsewhere than 127.0.0.1: given a `NodeHost` per node (its address and the
command that enters it, e.g. `ip netns exec NS`), each slurmd runs inside its host with that
address as its NodeAddr, and slurmctld is named by an address those hosts reach (a bridge's).
That is how the rehearsal (tests/integration) runs one slurmd inside each network-namespace
host, so `srun` really lands on the hosts the playbooks configured.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from gpufleet.durable import write_atomic
from gpufleet.errors import PoolError
from gpufleet.plan.model import ClusterPlan
from gpufleet.plan.access import partition_qos_name
from gpufleet.pool.slurm import local_dbd
from gpufleet.pool.slurm.access_apply import apply_access, desired_access, partition_quotas
from gpufleet.pool.slurm.cli import INSTALL_HINT, SlurmCli
from gpufleet.pool.slurm.conf import SOCKET_PATH_MAX, LocalFlavour, generate, SlurmConfig, socket_path_length, spool_dir
from gpufleet.spec import ClusterSpec

PORT_RANGE = (10000, 65535)  # narrowed to what the kernel never hands out as a client port (listen_range)
SLURMD_PIDFILE_GRACE_S = 5.0  # a slurmd silent this long in its log, without a live pid file, has exited
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PORTS_FILE = "ports.json"  # the ports `up` chose: `reshape` regenerates slurm.conf with the same ones


@dataclass(frozen=True)
class NodeHost:
    """Where one node's slurmd runs: `address` becomes its NodeAddr, and slurmd is started as
    `[*enter, "slurmd", "-N", node]` (e.g. `enter=("ip", "netns", "exec", NS)`)."""

    address: str
    enter: Sequence[str] = ()


class LocalSlurm:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def conf_path(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    def cli(self, timeout_s: float = 10.0) -> SlurmCli:
        return SlurmCli(conf=self.conf_path, timeout_s=timeout_s)

    # --- lifecycle ------------------------------------------------------------------------

    def up(self, spec: ClusterSpec, plan: ClusterPlan, *, wait_s: float = 90.0, with_nodes: bool = True,
           hosts: Mapping[str, NodeHost] | None = None, controller_address: str | None = None,
           accounting: bool | None = None) -> float:
        """Start the cluster for this plan; return the seconds until every node answered.

        `with_nodes=False` starts slurmctld alone (the benchmark's 1,250-node configuration: its
        nodes stay unresponsive, which admission does not need, and no 7 GB of slurmd run).
        `hosts`: every node's slurmd in its own host (see NodeHost), which reach slurmctld at
        `controller_address` (an address of this machine; slurmctld listens on all of them).
        `accounting`: MariaDB and slurmdbd too (`local_dbd`), the stack's access applied (partition
        QOS, teams) once slurmctld registered; None: when the stack asks for Slurm accounting."""
        accounting = spec.ops.slurm_accounting if accounting is None else accounting
        for tool in ("slurmctld", "slurmd", "sinfo", "scontrol"):
            if shutil.which(tool) is None:
                raise PoolError(f"{tool} is not installed; {INSTALL_HINT}")
        started = time.monotonic()
        self.down()
        for sub in ("etc", "state", "spool", "log", "run", "fakedev", "db"):
            path = self.root / sub
            if path.is_symlink():  # the spool, when it lives under /tmp (LocalFlavour.spool)
                path.unlink()
            elif sub in ("state", "spool", "run", "db") and path.exists():
                shutil.rmtree(path)
            path.mkdir(parents=True, exist_ok=True)
        nodes = [n.name for n in plan.nodes]
        if hosts is not None:
            missing = [n for n in nodes if n not in hosts]
            if missing or not controller_address:
                raise PoolError(f"slurmd in their own hosts need a host for every node (missing: "
                                f"{', '.join(missing[:5]) or 'none'}) and the controller's address "
                                f"(given: {controller_address or 'none'})")
        controller, first = free_ports(len(nodes) + 1)
        spool = spool_dir(self.root)
        longest = max(nodes, key=len, default="")
        if nodes and socket_path_length(spool, longest) > SOCKET_PATH_MAX:
            raise PoolError(f"slurmstepd's socket paths would exceed {SOCKET_PATH_MAX} bytes for node {longest} "
                            f"({socket_path_length(spool, longest)} under {spool}): every srun on it would fail; "
                            "a shorter gpufleet:cluster.name makes shorter node names")
        self._fresh_spool(spool)
        dbd_port, db_port = free_ports(2) if accounting else (None, None)
        flavour = LocalFlavour(root=self.root, controller_port=controller, first_node_port=first, slurmdbd_port=dbd_port,
                               controller_address=controller_address if hosts is not None else None,
                               node_addresses={n: hosts[n].address for n in nodes} if hosts is not None else None)
        self._write_config(spec, plan, flavour)
        write_atomic(self.root / "etc" / PORTS_FILE, json.dumps(
            {"controller": controller, "first_node": first, "slurmdbd": dbd_port, "db": db_port}) + "\n")
        for i in range(spec.cluster.instance.gpus):
            link = flavour.fakedev / f"nvidia{i}"
            if not link.is_symlink():
                link.symlink_to("/dev/null")
        env = self.cli().env()
        if accounting:
            assert dbd_port is not None and db_port is not None
            local_dbd.start(self.root, self.root / "etc", env, dbd_port, db_port)
            self._before_controller(spec, plan)
        self._start(["slurmctld", "-c", "-i"], env, "slurmctld")
        if accounting:
            self._wait_controller(started + wait_s)
            self._apply_access(spec, plan, started + wait_s)
        if not with_nodes:
            self._wait_controller(started + wait_s)
            return time.monotonic() - started
        for name in nodes:
            (flavour.spool / name).mkdir(parents=True, exist_ok=True)
        enter = {n: tuple(hosts[n].enter) for n in nodes} if hosts is not None else {n: () for n in nodes}
        procs = [subprocess.Popen([*enter[name], "slurmd", "-N", name], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for name in nodes]
        failed = [(n, p.communicate()[1]) for n, p in zip(nodes, procs) if p.wait() != 0]
        if failed:
            self.down()
            name, err = failed[0]
            raise PoolError(f"slurmd would not start: {err.strip()[-300:]} (log: {self.root}/log/slurmd-{name}.log)",
                            node=name)
        self.wait_registered(nodes, wait_s)
        return time.monotonic() - started

    def reshape(self, spec: ClusterSpec, plan: ClusterPlan, *, wait_s: float = 90.0) -> tuple[list[str], list[str]]:
        """Make the running cluster hold exactly `plan`'s nodes, keeping every node's state: a grow's
        new nodes join drained as "pending gates", a shrink's released ones leave slurm.conf (their
        slurmd stopped), the partitions follow the plan. Returns (added, removed).

        Why a restart: Slurm 22.05 takes node definitions only at slurmctld start. `slurmctld -R`
        recovers the full saved state (the default restart keeps only DOWN and DRAIN nodes: every
        admitted node would come back "pending gates", the config's State=DRAIN, and an `scontrol
        reconfigure` drains them so too); but -R also recovers the partitions as they were, so each
        partition line of the new slurm.conf is then applied with `scontrol update`. Running jobs
        survive. Shown on a real slurmctld by tests/rollout/test_resize_slurm.py."""
        if not self.running():
            raise PoolError(f"the local Slurm under {self.root} is not running; start it with `gpufleet pool up`")
        flavour = self._flavour()
        had = set(self.health())
        wanted = [n.name for n in plan.nodes]
        added = [n for n in wanted if n not in had]
        removed = sorted(had - set(wanted))
        if not added and not removed:
            return [], []
        if added and removed:  # a grow or a shrink, never both (gpufleet.plan.resize)
            raise PoolError(f"the plan adds {len(added)} and removes {len(removed)} node(s) at once; this local Slurm "
                            "reshapes one way at a time: `gpufleet pool up --clean` restarts it at the plan's size")
        taken = [flavour.first_node_port + s.index for s in plan.nodes if s.name in added]
        busy = [port for port in taken if not _port_free(port)]
        if busy:
            raise PoolError(f"the new nodes' slurmd ports are taken ({', '.join(map(str, busy[:5]))}): this local "
                            f"Slurm cannot grow in place; `gpufleet pool up --clean` restarts it at the new size "
                            "(every node drained until gated again)")
        env = self.cli().env()
        started = time.monotonic()
        for name in removed:
            pid = _read_pid(self.root / "run" / f"slurmd-{name}.pid")
            if _alive(pid) and _is_slurm(pid):
                _signal(pid, signal.SIGTERM)
        if flavour.slurmdbd_port is not None:
            self._before_controller(spec, plan, only_missing=True)
        config = self._write_config(spec, plan, flavour)
        updates = partition_updates(config.slurm_conf)
        if removed:  # -R recovers the saved partitions: a saved one naming a removed node is fatal at start
            for argv in updates:
                self.cli(timeout_s=60).run(argv)
        self._stop_controller()
        self._start(["slurmctld", "-R", "-i"], env, "slurmctld")
        self._wait_controller(started + wait_s)
        for argv in updates:
            self.cli(timeout_s=60).run(argv)
        if flavour.slurmdbd_port is not None:
            self._apply_access(spec, plan, started + wait_s)
        for name in added:
            (flavour.spool / name).mkdir(parents=True, exist_ok=True)
        procs = [subprocess.Popen(["slurmd", "-N", name], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True) for name in added]
        failed = [(n, p.communicate()[1]) for n, p in zip(added, procs) if p.wait() != 0]
        if failed:
            name, err = failed[0]
            raise PoolError(f"slurmd would not start: {err.strip()[-300:]} (log: {self.root}/log/slurmd-{name}.log)",
                            node=name)
        self.wait_registered(wanted, wait_s, stop_on_failure=False)
        return added, removed

    def down(self, grace_s: float = 5.0) -> int:
        """Stop every daemon this cluster started (TERM, then KILL after `grace_s`); return how many."""
        pids = self._pids()
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        alive = pids
        while alive and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = [p for p in alive if _alive(p)]
        for pid in alive:  # slurmd ignores TERM while it retries a missing controller
            _signal(pid, signal.SIGKILL)
        for f in (self.root / "run").glob("*.pid") if (self.root / "run").is_dir() else ():
            f.unlink(missing_ok=True)
        return len(pids)

    def health(self) -> dict[str, str]:
        """Node -> Slurm state as sinfo prints it (a trailing '*' means not responding)."""
        out = self.cli(timeout_s=5).run(["sinfo", "-h", "-N", "-o", "%N|%T"])
        states: dict[str, str] = {}
        for line in out.splitlines():
            if "|" in line:
                name, state = line.split("|", 1)
                states[name.strip()] = state.strip()
        return states

    def unregistered(self) -> list[str]:
        """Nodes whose slurmd has not registered since slurmctld started (base state UNKNOWN)."""
        out = self.cli(timeout_s=5).run(["scontrol", "-o", "show", "node"])
        return unregistered_nodes(out)

    def problems(self, nodes: Sequence[str], settle_s: float = 10.0, drains: bool = True) -> list[str]:
        """What keeps this cluster from serving `nodes` (the plan's), empty when healthy: slurmctld
        down, a node Slurm lacks or that does not answer, its slurmd gone, a node Slurm itself
        drained or downed (gpufleet's own drains, pending gates or quarantine, are its state, not a fault).
        A node whose slurmd runs but that reads not responding is asked again for up to `settle_s`:
        right after an `scontrol reconfigure` (the rollout's last step) every node reads `idle*` until
        its slurmd answers the next ping, well under a second on an idle machine. `drains=False`
        leaves out the nodes drained outside gpufleet: the pool shows those itself (quarantined
        slurm-drain with their reason), and a person's drain is a state to keep, not a broken cluster."""
        if not self.running():
            return ["slurmctld is not running"]
        deadline = time.monotonic() + settle_s
        while True:
            try:
                out = self.cli(timeout_s=5).run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"])
            except PoolError as exc:
                return [f"slurmctld does not answer: {exc}"]
            rows = {ln.split("|")[0]: ln.split("|", 2)[1:] for ln in out.splitlines() if ln.count("|") >= 2}
            alive = {n for n in nodes if _alive(_read_pid(self.root / "run" / f"slurmd-{n}.pid"))}
            found = health_problems(nodes, {n: (state, reason) for n, (state, reason) in rows.items()}, alive,
                                    drains=drains)
            settling = any(n in alive and rows.get(n, [""])[0].endswith("*") for n in nodes)
            if not (found and settling) or time.monotonic() >= deadline:
                return found
            time.sleep(0.3)

    def running(self) -> bool:
        pid = self.root / "run" / "slurmctld.pid"
        return pid.is_file() and _alive(_read_pid(pid))

    # --- helpers --------------------------------------------------------------------------

    def _before_controller(self, spec: ClusterSpec, plan: ClusterPlan, only_missing: bool = False) -> None:
        """The cluster and the partition QOS slurm.conf names, so slurmctld resolves them at start
        (their GPU limits need the gres/gpu TRES, which exists once slurmctld registered).
        `only_missing`: a running cluster's database, which holds some already (sacctmgr refuses
        to add what exists)."""
        cli = self.cli(timeout_s=60)
        have: set[str] = set()
        if only_missing:
            have = set(cli.run(["sacctmgr", "-n", "-P", "show", "qos", "format=name"]).split())
        else:
            cli.run(["sacctmgr", "-i", "add", "cluster", spec.cluster.name])
        for q in partition_quotas(plan):
            if partition_qos_name(q.name) not in have:
                cli.run(["sacctmgr", "-i", "add", "qos", partition_qos_name(q.name)])

    def _fresh_spool(self, spool: Path) -> None:
        """An empty spool for a clean start; one outside the state dir is linked from it (`spool`)."""
        inside = self.root / "spool"
        if spool == inside:
            return
        if spool.exists():
            shutil.rmtree(spool)
        spool.mkdir(parents=True)
        if inside.is_symlink() or inside.is_file():
            inside.unlink()
        elif inside.is_dir():
            shutil.rmtree(inside)
        inside.symlink_to(spool, target_is_directory=True)

    def _write_config(self, spec: ClusterSpec, plan: ClusterPlan, flavour: LocalFlavour) -> SlurmConfig:
        config = generate(spec, plan, flavour, slurm_version())
        for name, text in config.files().items():
            write_atomic(self.root / "etc" / name, text)
        return config

    def _flavour(self) -> LocalFlavour:
        """The ports `up` chose, from its record beside slurm.conf."""
        path = self.root / "etc" / PORTS_FILE
        try:
            ports = json.loads(path.read_text(encoding="utf-8"))
            return LocalFlavour(root=self.root, controller_port=int(ports["controller"]),
                                first_node_port=int(ports["first_node"]),
                                slurmdbd_port=None if ports.get("slurmdbd") is None else int(ports["slurmdbd"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PoolError(f"this local Slurm has no readable record of its ports ({path}: {exc}); it was started "
                            "by an older gpufleet or by hand: `gpufleet pool up --clean` restarts it") from None

    def _stop_controller(self, grace_s: float = 15.0) -> None:
        pid = _read_pid(self.root / "run" / "slurmctld.pid")
        if not (_alive(pid) and _is_slurm(pid)):
            return
        _signal(pid, signal.SIGTERM)  # slurmctld saves its state on TERM
        deadline = time.monotonic() + grace_s
        while _alive(pid):
            if time.monotonic() > deadline:
                raise PoolError(f"slurmctld (pid {pid}) did not stop within {grace_s:.0f} s; its log: "
                                f"{self.root}/log/slurmctld.log")
            time.sleep(0.1)

    def _apply_access(self, spec: ClusterSpec, plan: ClusterPlan, deadline: float) -> None:
        cli = self.cli(timeout_s=60)
        while "gres|gpu" not in cli.run(["sacctmgr", "-n", "-P", "show", "tres", "format=type,name"]):
            if time.monotonic() > deadline:
                self.down()
                raise PoolError(f"slurmctld never registered the gres/gpu TRES with slurmdbd; logs under {self.root}/log")
            time.sleep(0.3)
        apply_access(cli, desired_access(spec, plan))

    def _start(self, argv: list[str], env: dict[str, str], what: str) -> None:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise PoolError(f"{what} would not start: {(proc.stderr or proc.stdout).strip()[-300:]} "
                            f"(log: {self.root}/log/{what}.log)")

    def _wait_controller(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                self.health()
                return
            except PoolError:
                time.sleep(0.2)
        self.down()
        raise PoolError(f"slurmctld never answered; its log: {self.root}/log/slurmctld.log")

    def wait_registered(self, nodes: list[str], wait_s: float, stop_on_failure: bool = True) -> None:
        """Until every slurmd has registered. sinfo alone cannot tell: a node the configuration
        drains reads "drained" before its slurmd ever registered (UNKNOWN+DRAIN), and Slurm 22.05
        refuses State=RESUME on it ("Invalid node state specified"), so the base state comes from
        `scontrol show node` too.

        The budget counts from the slurmd start (not from `up`'s: MariaDB and slurmdbd may have
        taken most of it), and a cluster still registering nodes is given more: 125 slurmd on two
        busy cores register over minutes, each retrying every second, and failing a start that is
        progressing would only make the user start it again (see registration_deadline)."""
        last: dict[str, str] = {}
        waiting: list[str] = list(nodes)
        began = now = time.monotonic()
        progressed_at, fewest = began, len(nodes)
        while now < registration_deadline(began, progressed_at, wait_s):
            try:
                last = self.health()
                unregistered = set(self.unregistered())
            except PoolError:
                last, unregistered = {}, set(nodes)
            waiting = [n for n in nodes if n not in last or n in unregistered or last[n].endswith("*")
                       or last[n].startswith(("unk", "down", "inval"))]
            if not waiting:
                return
            now = time.monotonic()
            dead = [n for n in waiting if self._slurmd_exited(n)] if now - began > 2 * SLURMD_PIDFILE_GRACE_S else []
            if dead:
                if stop_on_failure:
                    self.down()
                raise PoolError(f"{len(dead)} of {len(nodes)} slurmd exited before registering (first: "
                                f"{', '.join(dead[:3])}): {_last_error(self.root / 'log' / f'slurmd-{dead[0]}.log')}")
            if len(waiting) < fewest:
                progressed_at, fewest = now, len(waiting)
            time.sleep(0.2)
        if stop_on_failure:
            self.down()
        raise PoolError(f"{len(waiting)} of {len(nodes)} slurmd never registered within "
                        f"{time.monotonic() - began:.0f} s of their start (first: {', '.join(sorted(waiting)[:3]) or 'none'}; "
                        f"states: {sorted({last[n] for n in waiting if n in last}) or ['absent from sinfo']}); "
                        f"logs under {self.root}/log")

    def _slurmd_exited(self, node: str) -> bool:
        """A slurmd that started (it has logged) and is gone: the launcher exits 0 once it forked, so
        a slurmd that cannot bind its port or read its config is seen only so. Its log's age guards
        the moment between its first line and its pid file (and the caller, one from an earlier run
        before this slurmd's first line)."""
        if _alive(_read_pid(self.root / "run" / f"slurmd-{node}.pid")):
            return False
        try:
            logged = (self.root / "log" / f"slurmd-{node}.log").stat().st_mtime
        except OSError:
            return False  # not started yet (or not by us): the budget decides
        return time.time() - logged > SLURMD_PIDFILE_GRACE_S

    def _pids(self) -> list[int]:
        run = self.root / "run"
        if not run.is_dir():
            return []
        pids = []
        for f in run.glob("*.pid"):
            pid = _read_pid(f)
            if pid and _alive(pid) and _is_slurm(pid):
                pids.append(pid)
        return pids


def registration_deadline(began: float, progressed_at: float, wait_s: float) -> float:
    """Pure: when a wait for slurmd registration gives up. `wait_s` from the start; while nodes keep
    registering, `wait_s` from the last one that did too, but never past four times `wait_s`
    (a slurmd that cannot reach slurmctld never will)."""
    return min(progressed_at + wait_s, began + 4 * wait_s)


def partition_updates(slurm_conf: str) -> list[list[str]]:
    """`scontrol update` argv for every PartitionName line of a slurm.conf: what a `slurmctld -R`
    (which recovers the saved partitions) needs to serve the file's partitions instead."""
    out = []
    for line in slurm_conf.splitlines():
        if line.startswith("PartitionName="):
            out.append(["scontrol", "update", *line.split()])
    return out


def health_problems(nodes: Sequence[str], rows: Mapping[str, tuple[str, str]], slurmd_alive: set[str],
                    drains: bool = True) -> list[str]:
    """Pure: the plan's `nodes` against sinfo's (state, reason) per node and the slurmd that run
    (with `drains`, the nodes drained or downed outside gpufleet too)."""
    missing = [n for n in nodes if n not in rows]
    dead = [n for n in nodes if n not in slurmd_alive]
    silent = [n for n in nodes if n in rows and (rows[n][0].endswith("*") or rows[n][0].startswith(("down", "unk")))]
    faulted = [n for n in nodes if n in rows and rows[n][0].startswith(("drain", "down", "fail"))
               and not rows[n][1].startswith("gpufleet") and n not in silent and drains]
    out = []
    for what, names in (("not in Slurm", missing), ("without a running slurmd", dead), ("not responding", silent),
                        ("drained by Slurm itself", faulted)):
        if names:
            reason = f" ({rows[names[0]][1]})" if what.startswith("drained") else ""
            out.append(f"{len(names)} of {len(nodes)} node(s) {what}: {', '.join(names[:3])}"
                       f"{' ...' if len(names) > 3 else ''}{reason}")
    return out


def unregistered_nodes(show_node: str) -> list[str]:
    """From `scontrol -o show node`: the nodes whose base state is UNKNOWN (`State=UNKNOWN+DRAIN`)."""
    found: list[str] = []
    for line in show_node.splitlines():
        name = re.search(r"\bNodeName=(\S+)", line)
        state = re.search(r"\bState=(\S+)", line)
        if name and state and state.group(1).split("+")[0].upper() == "UNKNOWN":
            found.append(name.group(1))
    return found


def slurm_version() -> str:
    """The installed Slurm's version, e.g. '22.05.8' (from `slurmctld -V`)."""
    try:
        out = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True, timeout=10).stdout
    except FileNotFoundError:
        raise PoolError(f"slurmctld is not installed; {INSTALL_HINT}") from None
    parts = out.split()
    if len(parts) < 2:
        raise PoolError(f"`slurmctld -V` printed {out!r}, not a version")
    return parts[-1]


def free_ports(count: int, attempts: int = 50) -> tuple[int, int]:
    """(a free controller port, the first of `count - 1` consecutive free node ports) on 127.0.0.1.

    Consecutive because slurm.conf gives a block's nodes one Port=[a-b] range. Free means nothing
    listens now; the daemons bind them a moment later (a clash fails the health check, loudly).
    """
    low, high = listen_range(_ephemeral_range(), count)
    rng = random.Random()
    for _ in range(attempts):
        base = rng.randrange(low, high - count + 1)
        if all(_port_free(p) for p in range(base, base + count)):
            return base, base + 1
    raise PoolError(f"no {count} consecutive free TCP ports on 127.0.0.1 between {low} and {high}")


def listen_range(ephemeral: tuple[int, int] | None, count: int) -> tuple[int, int]:
    """Pure: the widest stretch of PORT_RANGE outside the kernel's client (ephemeral) ports that
    holds `count` consecutive ports, as (first, last). Why: 125 slurmd each connect to slurmctld
    from an ephemeral port while the others are still starting; one that drew a port a later
    slurmd was configured to listen on left that slurmd unable to bind, and its node never
    registered (5 of 125 on a loaded CI runner). Inside the ephemeral range only when nothing
    outside holds `count`."""
    low, high = PORT_RANGE
    if ephemeral is None:
        return low, high
    e_low, e_high = ephemeral
    gaps = [(low, min(high, e_low - 1)), (max(low, e_high + 1), high)]
    fits = [g for g in gaps if g[1] - g[0] + 1 >= count]
    if not fits:
        return low, high
    return max(fits, key=lambda g: g[1] - g[0])


def _ephemeral_range() -> tuple[int, int] | None:
    try:
        first, last = EPHEMERAL_RANGE_FILE.read_text(encoding="utf-8").split()[:2]
        return int(first), int(last)
    except (OSError, ValueError):
        return None


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _last_error(log: Path) -> str:
    """The last `error:` line of a daemon's log, for a message that says why it stopped."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return f"no log at {log}"
    errors = [ln.split("error:", 1)[1].strip() for ln in lines if "error:" in ln]
    return f"{errors[-1]} (log: {log})" if errors else f"its log says no error: {log}"


def _read_pid(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _is_slurm(pid: int) -> bool:
    """Only signal our own daemons: a stale pid file may name a process reused by something else."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() in ("slurmctld", "slurmd", "slurmstepd", "slurmdbd",
                                                                  "mariadbd")
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
