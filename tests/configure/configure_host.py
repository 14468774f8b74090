"""Host helpers for node configuration tests: system packages, a cached Debian rootfs, overlays.

CI runs on a fresh machine as root: what a test needs from the OS (debootstrap, sshd,
iproute2) is apt-installed here when missing; without root those tests skip with the reason.
The debootstrap'd bookworm base (minbase + python3 + python3-apt, which the apt module needs) is built
once per machine under `.ci/.cache/configure/` and every test gets a throwaway overlay of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CACHE = PROJECT_ROOT / ".ci" / ".cache" / "configure"
BASE_PACKAGES = "python3,python3-apt"
BASE_STAMP = f"bookworm minbase +{BASE_PACKAGES} v1"
_apt_updated = False


def is_root() -> bool:
    return os.geteuid() == 0


def require_root(what: str) -> None:
    if not is_root():
        pytest.skip(f"{what} needs root (chroot, network namespaces, apt); CI runs as root")


def _installed(pkg: str) -> bool:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return out.returncode == 0 and "install ok installed" in out.stdout


def ensure_system_packages(*packages: str) -> None:
    """apt-get install whatever of `packages` is missing (root only; skips otherwise)."""
    global _apt_updated
    if shutil.which("dpkg-query") is None:
        pytest.skip("not a Debian-family host: cannot apt-install " + " ".join(packages))
    missing = [p for p in packages if not _installed(p)]
    if not missing:
        return
    require_root("installing " + " ".join(missing))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if not _apt_updated:
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True)
        _apt_updated = True
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
                   check=True, env=env, capture_output=True)


def build_base_rootfs(cache: Path = CACHE) -> Path:
    """The debootstrap'd base, built once (into a temp dir, renamed when complete)."""
    base = cache / "bookworm-base"
    stamp = base / ".gpufleet-stamp"
    if stamp.is_file() and stamp.read_text() == BASE_STAMP:
        return base
    ensure_system_packages("debootstrap")
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bookworm-", dir=cache))
    mirror = os.environ.get("GPUFLEET_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    proc = subprocess.run(["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}",
                           "bookworm", str(work), mirror], capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise RuntimeError(f"debootstrap failed: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    # policy-rc.d: package scripts must not start services inside a chroot
    (work / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")
    (work / "usr/sbin/policy-rc.d").chmod(0o755)
    subprocess.run(["rm", "-rf", str(work / "var/cache/apt/archives")], check=True)
    (work / "var/cache/apt/archives/partial").mkdir(parents=True)
    (work / ".gpufleet-stamp").write_text(BASE_STAMP)
    shutil.rmtree(base, ignore_errors=True)
    work.rename(base)
    return base


class Overlay:
    """A writable copy-on-write view of the base rootfs; `close()` unmounts and deletes it."""

    def __init__(self, base: Path, parent: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="node-", dir=parent))
        for sub in ("upper", "work", "root"):
            (self.dir / sub).mkdir()
        self.root = self.dir / "root"
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={base},upperdir={self.dir / 'upper'},workdir={self.dir / 'work'}",
                        str(self.root)], check=True)
        self._mounts = [self.root]
        for fs, target in (("proc", "proc"), ("sysfs", "sys")):
            subprocess.run(["mount", "-t", fs, fs, str(self.root / target)], check=True)
            self._mounts.append(self.root / target)

    def close(self) -> None:
        for m in reversed(self._mounts):
            subprocess.run(["umount", "-l", str(m)], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
