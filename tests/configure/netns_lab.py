"""Hosts for real-SSH tests: network namespaces on a private bridge, each running its own sshd.

Every name (bridge, namespaces, veths) carries a token unique to this run, and the subnet is a
/24 no interface of this machine uses, so two runs at once never collide. Each run records its
resources under `REGISTRY/<token>.json` with its pid: a later run first removes what a run whose
pid is dead left behind (a crash, a SIGKILL), and `close()` (also at interpreter exit) removes
this run's own. A host can be given a root directory: its sshd then chroots every session
there (sshd's ChrootDirectory), so the host has its own filesystem: its own tools, packages
and /proc/driver, while the test machine stays untouched.
"""

from __future__ import annotations

import atexit
import fcntl
import ipaddress
import json
import os
import random
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

REGISTRY = Path("/run/gpufleet-test-netns")
SUPERNET = ipaddress.IPv4Network("10.213.0.0/16")  # one /24 per run, chosen among the free ones


def sh(*argv: str) -> str:
    """Run a command; a failure raises with the command's own stderr."""
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-1500:]}")
    return proc.stdout


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    netns: str
    veth: str  # the bridge side: set it down and the host goes dark
    root: Path | None = None  # the host's filesystem when chrooted


def _remove(record: dict) -> None:
    """Kill every process in the run's namespaces, then delete links, namespaces and mounts."""
    for ns in record.get("namespaces", []):
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            subprocess.run(["kill", "-9", pid], capture_output=True)
    for link in [*record.get("veths", []), record.get("bridge")]:
        if link:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
    for ns in record.get("namespaces", []):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    for mount in reversed(record.get("mounts", [])):
        subprocess.run(["umount", "-l", mount], capture_output=True)
    for directory in record.get("dirs", []):
        shutil.rmtree(directory, ignore_errors=True)


def sweep_stale() -> list[str]:
    """Remove what runs whose process is gone left behind; returns their tokens."""
    swept = []
    for path in sorted(REGISTRY.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            record = {}
        if record.get("pid") and _pid_alive(int(record["pid"])):
            continue
        _remove(record)
        path.unlink(missing_ok=True)
        swept.append(path.stem)
    return swept


class NetnsLab:
    """A private bridge and hosts on it; use as a context manager (or call `close()`)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.token = secrets.token_hex(3)  # 6 hex: names stay under the kernel's 15-character limit
        self.bridge = f"gf{self.token}br"
        self.hosts: dict[str, Host] = {}
        self.roots_dir = REGISTRY / self.token  # chroot roots: sshd wants every path component root-owned, not world-writable
        self._record: dict = {"pid": os.getpid(), "bridge": self.bridge, "namespaces": [], "veths": [], "mounts": [],
                              "dirs": [str(self.roots_dir)]}
        self._record_path = REGISTRY / f"{self.token}.json"
        REGISTRY.mkdir(parents=True, exist_ok=True)
        self.swept = sweep_stale()
        self.net = self._claim_subnet()
        self.key = self.workdir / "id_ed25519"
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key))
        (self.workdir / "authorized_keys").write_text((self.workdir / "id_ed25519.pub").read_text())
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
        atexit.register(self.close)

    def _save(self) -> None:
        tmp = self._record_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._record))
        tmp.replace(self._record_path)

    def _claim_subnet(self) -> ipaddress.IPv4Network:
        """A /24 of SUPERNET no address on this machine is in, claimed under a lock (concurrent runs)."""
        with open(REGISTRY / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = [ipaddress.IPv4Interface(line.split()[3]).network
                    for line in sh("ip", "-o", "-4", "addr", "show").splitlines()]
            free = [n for n in SUPERNET.subnets(new_prefix=24) if not any(n.overlaps(u) for u in used)]
            if not free:
                raise RuntimeError(f"no free /24 left in {SUPERNET} for a test bridge")
            net = random.choice(free)
            self._save()  # recorded before it exists: a crash from here on is swept next time
            sh("ip", "link", "add", self.bridge, "type", "bridge")
            sh("ip", "addr", "add", f"{net[1]}/24", "dev", self.bridge)
            sh("ip", "link", "set", self.bridge, "up")
        return net

    def address(self, index: int) -> str:
        return str(self.net[10 + index])

    def dead_address(self) -> str:
        """An address on the bridge's subnet with nobody behind it."""
        return str(self.net[250])

    def add_host(self, name: str, *, root: Path | None = None) -> Host:
        """A namespace with one veth on the bridge and an sshd (chrooting sessions into `root`)."""
        index = len(self.hosts)
        ns, veth = f"gf{self.token}-{name}", f"gf{self.token}v{index}"
        host = Host(name=name, address=self.address(index), netns=ns, veth=veth, root=root)
        self._record["namespaces"].append(ns)
        self._record["veths"].append(veth)
        self._save()
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", veth, "master", self.bridge, "up")
        sh("ip", "-n", ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        hostkey = self.workdir / f"hostkey-{name}"
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey))
        cfg = self.workdir / f"sshd_config-{name}"
        lines = [f"ListenAddress {host.address}", f"HostKey {hostkey}", f"PidFile {self.workdir}/sshd-{name}.pid",
                 "PermitRootLogin prohibit-password", "PasswordAuthentication no",
                 f"AuthorizedKeysFile {self.workdir}/authorized_keys", "StrictModes no", "UsePAM no",
                 "MaxStartups 100", "MaxSessions 100", "Subsystem sftp internal-sftp"]
        if root is not None:
            lines.append(f"ChrootDirectory {root}")
        cfg.write_text("\n".join(lines) + "\n")
        sh("ip", "netns", "exec", ns, "/usr/sbin/sshd", "-f", str(cfg))
        self.hosts[name] = host
        return host

    def overlay_root(self, name: str, layers: Sequence[Path]) -> Path:
        """A throwaway copy-on-write root over read-only `layers` (topmost first), with /proc and /sys."""
        base = self.roots_dir / name
        for sub in ("upper", "work", "root"):
            (base / sub).mkdir(parents=True)
        root = base / "root"
        lower = ":".join(str(p) for p in layers)
        self.mount("-t", "overlay", "overlay", "-o", f"lowerdir={lower},upperdir={base / 'upper'},workdir={base / 'work'}",
                   str(root))
        self.mount("-t", "proc", "proc", str(root / "proc"))
        self.mount("-t", "sysfs", "sysfs", str(root / "sys"))
        return root

    def mount(self, *argv: str) -> None:
        """`mount ARGV...` (last argument the mount point), recorded so that cleanup unmounts it."""
        self._record["mounts"].append(argv[-1])
        self._save()
        sh("mount", *argv)

    def cut(self, name: str) -> None:
        """Take the host's link away: its TCP sessions stall and new ones time out."""
        sh("ip", "link", "set", self.hosts[name].veth, "down")

    def close(self) -> None:
        if not self._record_path.exists():
            return
        _remove(self._record)
        self._record_path.unlink(missing_ok=True)

    def __enter__(self) -> "NetnsLab":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
