"""Host helpers for node configuration tests: system packages, a cached Debian rootfs, overlays.

CI runs on a fresh machine as root: what a test needs from the OS (debootstrap, sshd,
iproute2) is apt-installed here when missing; without root those tests skip with the reason.
The debootstrap'd bookworm base (minbase + python3 + python3-apt, which the apt module needs) is built
once per machine under `.ci/.cache/configure/` and every test gets a throwaway overlay of it.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "configure"
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
    if not _apt_updated:
        apt_get("update", "-q")
        _apt_updated = True
    apt_get("install", "-y", "-q", "--no-install-recommends", *missing)


APT_LOCK_TIMEOUT_S = 300  # another apt (a concurrent test run, unattended-upgrades) may hold the lock


def apt_get(*args: str, root: Path | None = None) -> str:
    """`apt-get ARGS` on the host, or inside the chroot `root`: waits for the dpkg and lists locks
    instead of failing on them, and a failure raises with apt's own stderr."""
    argv = ["apt-get", "-o", f"DPkg::Lock::Timeout={APT_LOCK_TIMEOUT_S}", *args]
    if root is not None:
        argv = ["chroot", str(root), *argv]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-3000:] or proc.stdout[-3000:]}")
    return proc.stdout


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
    """A writable copy-on-write view of read-only `layers` (topmost first); `close()` unmounts and
    deletes it."""

    def __init__(self, layers: Sequence[Path], parent: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="node-", dir=parent))
        for sub in ("upper", "work", "root"):
            (self.dir / sub).mkdir()
        self.root = self.dir / "root"
        lower = ":".join(str(p) for p in layers)
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={lower},upperdir={self.dir / 'upper'},workdir={self.dir / 'work'}",
                        str(self.root)], check=True)
        self._mounts = [self.root]
        for fs, target in (("proc", "proc"), ("sysfs", "sys")):
            subprocess.run(["mount", "-t", fs, fs, str(self.root / target)], check=True)
            self._mounts.append(self.root / target)

    def close(self) -> None:
        for m in reversed(self._mounts):
            subprocess.run(["umount", "-l", str(m)], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def chroot(root: Path, *argv: str, env: dict[str, str] | None = None) -> str:
    """Run a command inside `root`; a failure raises with the command's own output."""
    proc = subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"chroot {' '.join(argv)} failed: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    return proc.stdout


def efa_installer_tarball(version: str, dest: Path, package: Path, install_command: str,
                          efa_installed_packages: Path) -> Path:
    """aws-efa-installer-<v>.tar.gz whose efa_installer.sh installs the bundled libnccl-ofi
    package with `install_command` (dpkg or rpm) and lays down fi_info and the packages file."""
    script = f"""#!/bin/sh
set -e
[ "$1" = "-y" ] || {{ echo "usage: efa_installer.sh -y" >&2; exit 2; }}
{install_command} "$(dirname "$0")/{package.name}"
mkdir -p /opt/amazon/efa/bin
cp "$(dirname "$0")/fi_info" /opt/amazon/efa/bin/fi_info
cp "$(dirname "$0")/efa_installed_packages" /opt/amazon/efa_installed_packages
"""
    out = dest / f"aws-efa-installer-{version}.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for name, data, mode in (("efa_installer.sh", script.encode(), 0o755),
                                 (package.name, package.read_bytes(), 0o644),
                                 ("fi_info", (FIXTURES / "fi_info").read_bytes(), 0o755),
                                 ("efa_installed_packages", efa_installed_packages.read_bytes(), 0o644)):
            info = tarfile.TarInfo(f"aws-efa-installer/{name}")
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return out


def converge(conf: Any, nodes: list, extravars: dict, root: Path, snapshot: Callable[[Path], object]) -> dict:
    """The three runs every role test makes: --check --diff, the real run, and a second run.

    `check_touched` says whether the check run changed what `snapshot` looks at."""
    from gpufleet.configure.inventory import ChrootConnection

    before = snapshot(root)
    check = conf.run(nodes, ChrootConnection(), extravars, check=True, run_id="check")
    after_check = snapshot(root)
    first = conf.run(nodes, ChrootConnection(), extravars, run_id="apply")
    second = conf.run(nodes, ChrootConnection(), extravars, run_id="again")
    return {"check": check, "first": first, "second": second, "check_touched": before != after_check}
