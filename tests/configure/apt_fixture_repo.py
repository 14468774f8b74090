"""A local apt repository of dummy packages named and versioned like the real node stack.

Built with `dpkg-deb` into a flat repository (`deb [trusted=yes] file:/srv/gpufleet-repo ./`)
inside a test rootfs, so the roles' apt path really resolves, pins, installs and holds
packages. The EFA installer tarball is faked the same way: its script installs a
libnccl-ofi .deb and writes /opt/amazon/efa_installed_packages, as the real one does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import configure_host
from gpufleet import catalog
from gpufleet.bom import Bom
from gpufleet.configure.extravars import LustreMount, configure_extravars

FIXTURES = configure_host.FIXTURES
REPO_IN_ROOT = "srv/gpufleet-repo"
FSX = LustreMount("fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com", "abcdefgh", "/fsx")


@dataclass
class Pkg:
    name: str
    version: str
    files: dict[str, Path | str] = field(default_factory=dict)  # path in package -> source file or text


def node_stack(bom: Bom, os_name: str, kernel: str) -> list[Pkg]:
    c, o = bom.components, bom.for_os(os_name)
    drv, br = c.nvidia_driver.version, c.nvidia_driver.branch
    cuda_dashed = "-".join(c.cuda.version.split(".")[:2])
    cuda_series = ".".join(c.cuda.version.split(".")[:2])
    ctk = c.nvidia_container_toolkit.version
    dcgm_major = c.dcgm.version.split(".")[0]
    return [
        Pkg(f"nvidia-driver-{br}-open", f"{drv}-0ubuntu1", {"usr/bin/nvidia-smi": FIXTURES / "nvidia-smi"}),
        Pkg(f"nvidia-fabricmanager-{br}", f"{drv}-1"),
        Pkg(f"cuda-toolkit-{cuda_dashed}", f"{c.cuda.version}-1"),
        Pkg("gdrdrv-dkms", f"{c.gdrcopy.version}-1"),
        Pkg("libgdrapi", f"{c.gdrcopy.version}-1"),
        Pkg("libnccl2", f"{c.nccl.version}-1+cuda{cuda_series}"),
        Pkg("libnccl-dev", f"{c.nccl.version}-1+cuda{cuda_series}"),
        Pkg("containerd", f"{o.containerd}-0ubuntu1~22.04.1"),
        Pkg("nvidia-container-toolkit", f"{ctk}-1", {"usr/bin/nvidia-ctk": FIXTURES / "nvidia-ctk"}),
        Pkg("nvidia-container-toolkit-base", f"{ctk}-1"),
        Pkg("libnvidia-container-tools", f"{ctk}-1"),
        Pkg("libnvidia-container1", f"{ctk}-1"),
        Pkg(f"lustre-client-modules-{kernel}", f"{o.lustre_client}-1fsx18"),
        Pkg("lustre-client-utils", f"{o.lustre_client}-1fsx18"),
        Pkg(f"datacenter-gpu-manager-{dcgm_major}-core", f"1:{c.dcgm.version}-1"),
        Pkg(f"datacenter-gpu-manager-{dcgm_major}-cuda12", f"1:{c.dcgm.version}-1"),
        Pkg("munge", "0.5.15-2gpufleet1"),
        Pkg("slurmd", f"{o.slurm}-1gpufleet1"),
        Pkg("slurm-client", f"{o.slurm}-1gpufleet1"),
        Pkg("libpmix2", "5.0.1-4"),
        Pkg("gcc-12", "12.3.0-1ubuntu1~22.04"),  # jammy-updates' gcc-12, the 6.x AWS kernels' compiler
        # an older driver too, so the pin (not "newest wins") is what picks the version
        Pkg(f"nvidia-driver-{br}-open", f"{br}.999.99-0ubuntu1"),
    ]


def build_deb(pkg: Pkg, out_dir: Path, work: Path) -> Path:
    tree = work / f"{pkg.name}_{pkg.version}".replace(":", "_")
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {pkg.name}\nVersion: {pkg.version}\nArchitecture: all\n"
        f"Maintainer: gpufleet tests <tests@gpufleet.invalid>\nDescription: dummy {pkg.name} for gpufleet tests\n")
    for rel, src in pkg.files.items():
        dest = tree / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(src, Path):
            shutil.copy2(src, dest)
        else:
            dest.write_text(src)
    deb = out_dir / (tree.name + ".deb")
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb)],
                   check=True, capture_output=True)
    return deb


def write_packages_index(repo: Path) -> None:
    """What dpkg-scanpackages writes, without needing dpkg-dev."""
    stanzas = []
    for deb in sorted(repo.glob("*.deb")):
        control = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True,
                                 text=True).stdout.strip()
        data = deb.read_bytes()
        stanzas.append(f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                       f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
    (repo / "Packages").write_text("\n".join(stanzas))


def efa_installer_tarball(bom: Bom, dest: Path, work: Path) -> Path:
    """The EFA installer tarball, its libnccl-ofi a .deb installed with dpkg."""
    c = bom.components
    ofi = build_deb(Pkg("libnccl-ofi", f"{c.aws_ofi_nccl.version}-1"), work, work)
    return configure_host.efa_installer_tarball(c.efa_installer.version, dest, ofi, "dpkg -i >/dev/null",
                                                FIXTURES / "efa_installed_packages")


def build_repo(bom: Bom, os_name: str, repo: Path, work: Path) -> Path:
    """The flat repository (dummy packages, Packages index, EFA installer tarball) in `repo`."""
    repo.mkdir(parents=True)
    for pkg in node_stack(bom, os_name, os.uname().release):
        build_deb(pkg, repo, work)
    write_packages_index(repo)
    efa_installer_tarball(bom, repo, work)
    return repo


def install_into(root: Path, bom: Bom, os_name: str, work: Path, prebuilt: Path | None = None) -> None:
    """Put the repo (built here, or a copy of `prebuilt`) and the installer into `root`, and make it
    the only apt source."""
    repo = root / REPO_IN_ROOT
    if prebuilt is None:
        build_repo(bom, os_name, repo, work)
    else:
        shutil.copytree(prebuilt, repo)
    for src in (root / "etc/apt/sources.list", root / "etc/apt/sources.list.d/debian.sources"):
        src.unlink(missing_ok=True)
    # stands in for the distribution archive a real node has (munge comes from there)
    (root / "etc/apt/sources.list.d/distro.list").write_text(f"deb [trusted=yes] file:/{REPO_IN_ROOT} ./\n")
    configure_host.apt_get("update", "-q", root=root)
    shutil.copy2(FIXTURES / "aws", root / "usr/local/bin/aws")
    # the booted kernel's packages, as every Ubuntu EC2 node has them (the rolling meta and the build)
    kernel = os.uname().release
    # its config names its compiler as Ubuntu 22.04's 6.8 AWS kernels' /boot/config-* do
    (root / "boot").mkdir(exist_ok=True)
    (root / "boot" / f"config-{kernel}").write_text(
        'CONFIG_CC_VERSION_TEXT="x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0"\nCONFIG_CC_IS_GCC=y\n')
    kernel_work = Path(tempfile.mkdtemp(prefix="kernel-debs-", dir=work))  # one per root: callers share `work`
    for pkg in (Pkg(f"linux-image-{kernel}", f"{kernel}.1"), Pkg("linux-aws", f"{kernel}.1")):
        deb = build_deb(pkg, kernel_work, kernel_work)
        shutil.copy2(deb, root / "tmp" / deb.name)
        configure_host.chroot(root, "dpkg", "-i", f"/tmp/{deb.name}")


def local_site_vars(bom: Bom, os_name: str, instance_type: str = "p5.48xlarge") -> dict:
    """site.yml's extravars for a node whose only package source is this repo (no vendor keys)."""
    ev = configure_extravars(bom, os_name, catalog.get(instance_type), lustre=FSX,
                             munge_secret_id="gpufleet/dev/munge", region="us-east-1",
                             live=False, enable_services=False)
    local = f"deb [trusted=yes] file:/{REPO_IN_ROOT} ./"
    ev |= {
        "nvidia_driver_apt_source": local, "nvidia_driver_repo_key_url": "",
        "container_runtime_apt_source": local, "container_runtime_repo_key_url": "",
        "lustre_client_apt_source": local, "lustre_client_repo_key_url": "",
        "efa_installer_url": f"file:///{REPO_IN_ROOT}/aws-efa-installer-{bom.components.efa_installer.version}.tar.gz",
        "container_runtime_generate_cdi": True,
        "nccl_tuning_build_tests": False,  # no nvcc in the dummy CUDA packages, no network
    }
    return ev


def publish(root: Path, bom: Bom, os_name: str, work: Path) -> list[Pkg]:
    """Add `bom`'s node stack to the repo already in `root` (a second release beside the first: what a
    rollback moves between), re-index it and refresh apt. Returns the packages that were new."""
    repo = root / REPO_IN_ROOT
    have = {(p.name, p.version) for p in _published(repo)}
    added = [p for p in node_stack(bom, os_name, os.uname().release) if (p.name, p.version) not in have]
    for pkg in added:
        build_deb(pkg, repo, work)
    write_packages_index(repo)
    configure_host.apt_get("update", "-q", root=root)
    return added


def _published(repo: Path) -> list[Pkg]:
    out = []
    for deb in repo.glob("*.deb"):
        fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version"], check=True,
                                capture_output=True, text=True).stdout
        name, version = (line.split(": ", 1)[1] for line in fields.splitlines())
        out.append(Pkg(name, version))
    return out
