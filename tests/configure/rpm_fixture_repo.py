"""An Amazon Linux 2023 look-alike node with local dnf repositories of dummy RPMs.

No RPM-based base OS can be had offline, so the "node" is the cached Debian base plus a
cached layer with Debian's own dnf 4 (AL2023 runs dnf 4 too), python3-dnf and rpm, an
AL2023 /etc/os-release (Ansible then reports os_family RedHat, distribution Amazon 2023 and
pkg_mgr dnf: the roles take their dnf branches unaided) and an rpmdb at /var/lib/rpm. dpkg
and apt stay in the root but nothing of the node stack goes through them.

Three file:// repositories, named and split like the real ones, hold RPMs built with
rpmbuild (noarch, no automatic dependencies, so the empty rpmdb resolves them):
`amazonlinux` (the distribution: containerd, lustre-client, munge, the versionlock plugin),
`cuda` (NVIDIA's CUDA repository: driver, fabric manager, CUDA, GDRCopy, NCCL, DCGM) and
`libnvidia-container`. Only `amazonlinux` is configured up front; the roles must add the
other two. The versionlock plugin RPM carries Debian's real dnf versionlock plugin, moved
out of the layer, so `dnf versionlock` works only once a role installed it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from configure_host import BASE_STAMP, CACHE, FIXTURES, apt_get, chroot, ensure_system_packages
from configure_host import efa_installer_tarball as efa_tarball

from gpufleet import catalog
from gpufleet.bom import Bom
from gpufleet.configure.extravars import LustreMount, configure_extravars

RPM_FIXTURES = FIXTURES / "rpm"
REPO_IN_ROOT = "srv/gpufleet-rpm"
LAYER_PACKAGES = ("dnf", "python3-dnf", "rpm", "dnf-plugins-core")
LAYER_STAMP = f"{BASE_STAMP} | al2023 dnf layer: {' '.join(LAYER_PACKAGES)} v2"
# Debian's dnf plugin, shipped instead by the dummy python3-dnf-plugin-versionlock RPM
VERSIONLOCK_FILES = ("usr/lib/python3/dist-packages/dnf-plugins/versionlock.py",
                     "etc/dnf/plugins/versionlock.conf")
DIST = "amzn2023"
# an AL2023 kernel release as uname -r prints it (the chroot runs the host's kernel, named otherwise)
AL2023_KERNEL = "6.1.141-155.222.amzn2023.x86_64"


@dataclass
class Rpm:
    repo: str  # amazonlinux | cuda | libnvidia-container
    name: str
    version: str
    release: str
    epoch: int | None = None
    files: dict[str, Path | str] = field(default_factory=dict)  # path in package -> source file or text
    provides: tuple[str, ...] = ()

    @property
    def nevr(self) -> str:
        return f"{self.name}-{'%d:' % self.epoch if self.epoch is not None else ''}{self.version}-{self.release}"


def node_stack(bom: Bom, os_name: str, plugin_dir: Path) -> list[Rpm]:
    """The AL2023 node stack as the roles name it (nvidia_driver/vars, dcgm/vars, ...)."""
    c, o = bom.components, bom.for_os(os_name)
    drv = c.nvidia_driver.version
    cuda_dashed = "-".join(c.cuda.version.split(".")[:2])
    cuda_series = ".".join(c.cuda.version.split(".")[:2])
    ctk = c.nvidia_container_toolkit.version
    dcgm_major = c.dcgm.version.split(".")[0]
    cuda_major = c.cuda.version.split(".")[0]
    nccl = c.nccl.version
    plugin = {rel: plugin_dir / rel for rel in VERSIONLOCK_FILES}
    plugin["etc/dnf/plugins/versionlock.list"] = ""
    return [
        # the distribution
        Rpm("amazonlinux", "system-release", "2023.8.20250818", f"0.{DIST}",
            files={"etc/system-release": RPM_FIXTURES / "system-release"},
            provides=("system-release(releasever) = 2023",)),
        Rpm("amazonlinux", "python3-dnf-plugin-versionlock", "4.3.0", f"1.{DIST}.0.1", files=plugin),
        Rpm("amazonlinux", "containerd", o.containerd, f"1.{DIST}.0.1"),
        Rpm("amazonlinux", "lustre-client", o.lustre_client, f"1.{DIST}"),
        Rpm("amazonlinux", "munge", "0.5.15", f"1.{DIST}.0.1"),
        Rpm("amazonlinux", "slurm", o.slurm, "1"),  # stands in for the site's build of the BOM's pin
        Rpm("amazonlinux", "slurm-slurmd", o.slurm, "1"),
        Rpm("amazonlinux", "pmix", "4.2.9", "1"),
        # the running kernel's build (AL2023_KERNEL): what DKMS builds against
        *[Rpm("amazonlinux", n, *AL2023_KERNEL.rsplit(".", 1)[0].split("-", 1))
          for n in ("kernel-devel", "kernel-headers", "kernel-modules-extra")],
        # NVIDIA's CUDA repository (drivers carry epoch 3 there)
        Rpm("cuda", "nvidia-driver", drv, f"1.{DIST}", 3),
        Rpm("cuda", "nvidia-driver-cuda", drv, f"1.{DIST}", 3, {"usr/bin/nvidia-smi": FIXTURES / "nvidia-smi"}),
        Rpm("cuda", "nvidia-persistenced", drv, f"1.{DIST}", 3),
        Rpm("cuda", "kmod-nvidia-open-dkms", drv, f"1.{DIST}", 3),
        Rpm("cuda", "nvidia-fabric-manager", drv, "1"),
        Rpm("cuda", f"cuda-toolkit-{cuda_dashed}", c.cuda.version, "1"),
        Rpm("cuda", "gdrcopy", c.gdrcopy.version, f"1.{DIST}"),
        Rpm("cuda", "gdrcopy-kmod", c.gdrcopy.version, f"1dkms.{DIST}"),
        Rpm("cuda", "libnccl", nccl, f"1+cuda{cuda_series}"),
        Rpm("cuda", "libnccl-devel", nccl, f"1+cuda{cuda_series}"),
        Rpm("cuda", f"datacenter-gpu-manager-{dcgm_major}-core", c.dcgm.version, "1", 1),
        Rpm("cuda", f"datacenter-gpu-manager-{dcgm_major}-cuda{cuda_major}", c.dcgm.version, "1", 1),
        # decoys: a newer driver of the branch, and the same NCCL built for a newer CUDA:
        # "newest wins" would pick these, the pins must not
        Rpm("cuda", "nvidia-driver", f"{drv.split('.')[0]}.999.99", f"1.{DIST}", 3),
        Rpm("cuda", "nvidia-driver-cuda", f"{drv.split('.')[0]}.999.99", f"1.{DIST}", 3),
        Rpm("cuda", "libnccl", nccl, f"1+cuda{cuda_major}.99"),
        # libnvidia-container
        Rpm("libnvidia-container", "nvidia-container-toolkit", ctk, "1"),
        Rpm("libnvidia-container", "nvidia-container-toolkit-base", ctk, "1",
            files={"usr/bin/nvidia-ctk": FIXTURES / "nvidia-ctk"}),
        Rpm("libnvidia-container", "libnvidia-container-tools", ctk, "1"),
        Rpm("libnvidia-container", "libnvidia-container1", ctk, "1"),
    ]


def build_rpm(pkg: Rpm, out_dir: Path, work: Path) -> Path:
    top = Path(tempfile.mkdtemp(prefix="rpmbuild-", dir=work))
    tree = top / "tree"
    tree.mkdir()
    for rel, src in pkg.files.items():
        dest = tree / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(src, Path):
            shutil.copy2(src, dest)
        else:
            dest.write_text(src)
    listed = "\n".join("%config(noreplace) /" + rel if rel.startswith("etc/") else "/" + rel
                       for rel in sorted(pkg.files))
    spec = "\n".join([
        f"Name: {pkg.name}", f"Version: {pkg.version}", f"Release: {pkg.release}",
        *([f"Epoch: {pkg.epoch}"] if pkg.epoch is not None else []),
        f"Summary: dummy {pkg.name} for gpufleet tests", "License: Apache-2.0", "BuildArch: noarch",
        "AutoReqProv: no", *[f"Provides: {p}" for p in pkg.provides],
        "%description", f"dummy {pkg.name} for gpufleet tests",
        "%install", f"cp -a {tree}/. %{{buildroot}}/",
        "%files", listed, ""])
    (top / "pkg.spec").write_text(spec)
    out_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {top}", "--define", f"_rpmdir {top / 'out'}",
         "--define", "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm",
         "--define", "__os_install_post %{nil}", "--define", "debug_package %{nil}",
         "--define", "_binary_payload w1.gzdio", "--define", "_dbpath /nonexistent", str(top / "pkg.spec")],
        capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"rpmbuild {pkg.nevr} failed: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    [built] = (top / "out").glob("*.rpm")
    rpm = out_dir / built.name
    shutil.move(built, rpm)
    shutil.rmtree(top, ignore_errors=True)
    return rpm


def efa_installer_tarball(bom: Bom, dest: Path, work: Path) -> Path:
    """The EFA installer tarball, its libnccl-ofi an RPM installed with rpm."""
    c = bom.components
    ofi = build_rpm(Rpm("efa", "libnccl-ofi", c.aws_ofi_nccl.version, f"1.{DIST}"), work / "efa-rpms", work)
    return efa_tarball(c.efa_installer.version, dest, ofi, "rpm -U --replacepkgs",
                       RPM_FIXTURES / "efa_installed_packages")


def build_dnf_layer(base: Path, cache: Path = CACHE) -> Path:
    """The AL2023 look-alike layer over the Debian base, built once (an overlayfs upper dir).

    Returns the layer; `VERSIONLOCK_FILES` are kept beside it, under `<layer>.versionlock/`.
    """
    layer = cache / "al2023-dnf-layer"
    stamp = cache / "al2023-dnf-layer.stamp"
    if stamp.is_file() and stamp.read_text() == LAYER_STAMP and layer.is_dir():
        return layer
    work = Path(tempfile.mkdtemp(prefix="al2023-layer-", dir=cache))
    for sub in ("upper", "work", "root"):
        (work / sub).mkdir()
    root = work / "root"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir={base},upperdir={work / 'upper'},workdir={work / 'work'}", str(root)], check=True)
    try:
        shutil.copy2("/etc/resolv.conf", root / "etc/resolv.conf")
        apt_get("update", "-q", root=root)
        apt_get("install", "-y", "-q", "--no-install-recommends", *LAYER_PACKAGES, root=root)
        apt_get("clean", root=root)
        for lists in (root / "var/lib/apt/lists").iterdir():
            if lists.is_file():
                lists.unlink()
        plugin = work / "versionlock"
        for rel in VERSIONLOCK_FILES:
            (plugin / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(root / rel, plugin / rel)
        (root / "etc/dnf/plugins/versionlock.list").unlink(missing_ok=True)
        # Debian bundles every core plugin in one package and enables them all (`local`, for one,
        # re-signs nothing and breaks gpgcheck); AL2023 has none of them enabled: keep only the
        # library the versionlock plugin imports
        for extra in (root / "usr/lib/python3/dist-packages/dnf-plugins").glob("*.py"):
            extra.unlink()
        # Debian's rpm keeps its database in ~/.rpmdb (beside dpkg); an RPM system's is /var/lib/rpm
        (root / "etc/rpm").mkdir(exist_ok=True)
        (root / "etc/rpm/macros").write_text("%_dbpath /var/lib/rpm\n")
        chroot(root, "rpm", "--initdb")
        for rel in ("etc/os-release", "usr/lib/os-release"):
            (root / rel).unlink(missing_ok=True)
            shutil.copy2(RPM_FIXTURES / "os-release", root / rel)
        (root / "etc/dnf/dnf.conf").write_text(
            "[main]\ngpgcheck=True\ninstallonly_limit=3\nclean_requirements_on_remove=True\n"
            "best=True\nskip_if_unavailable=False\n")  # AL2023's dnf.conf
    finally:
        subprocess.run(["umount", str(root)], check=True)
    shutil.rmtree(layer, ignore_errors=True)
    shutil.rmtree(Path(f"{layer}.versionlock"), ignore_errors=True)
    (work / "upper").rename(layer)
    (work / "versionlock").rename(Path(f"{layer}.versionlock"))
    shutil.rmtree(work, ignore_errors=True)
    stamp.write_text(LAYER_STAMP)
    return layer


def install_into(root: Path, bom: Bom, os_name: str, layer: Path, work: Path) -> dict[str, str]:
    """Build the repositories into `root`, install system-release, configure `amazonlinux` only.

    Returns the file:// URL of each repository as seen from inside `root`.
    """
    ensure_system_packages("rpm", "createrepo-c")
    repo_root = root / REPO_IN_ROOT
    pkgs = node_stack(bom, os_name, Path(f"{layer}.versionlock"))
    for pkg in pkgs:
        build_rpm(pkg, repo_root / pkg.repo, work)
    for repo in sorted({p.repo for p in pkgs}):
        subprocess.run(["createrepo_c", "--quiet", "--no-database", str(repo_root / repo)],
                       check=True, capture_output=True)
    efa_installer_tarball(bom, repo_root, work)
    urls = {repo: f"file:///{REPO_IN_ROOT}/{repo}/" for repo in ("amazonlinux", "cuda", "libnvidia-container")}
    (root / "etc/yum.repos.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/yum.repos.d/amazonlinux.repo").write_text(
        f"[amazonlinux]\nname=Amazon Linux 2023 (gpufleet test stand-in)\nbaseurl={urls['amazonlinux']}\n"
        "enabled=1\ngpgcheck=0\n")
    [release] = (repo_root / "amazonlinux").glob("system-release-*.rpm")
    chroot(root, "rpm", "-i", f"/{REPO_IN_ROOT}/amazonlinux/{release.name}")
    shutil.copy2(FIXTURES / "aws", root / "usr/local/bin/aws")
    return urls


def publish(root: Path, bom: Bom, os_name: str, layer: Path, work: Path) -> list[Rpm]:
    """Add `bom`'s node stack to the repositories already in `root` (a second release beside the
    first: what a rollback moves between) and re-index them. Returns the RPMs that were new."""
    repo_root = root / REPO_IN_ROOT
    have = {p.name for repo in repo_root.iterdir() if repo.is_dir() for p in repo.glob("*.rpm")}
    added = []
    for pkg in node_stack(bom, os_name, Path(f"{layer}.versionlock")):
        if not any(name.startswith(f"{pkg.name}-{pkg.version}-{pkg.release}.") for name in have):
            build_rpm(pkg, repo_root / pkg.repo, work)
            added.append(pkg)
    for repo in sorted({p.repo for p in added}):
        subprocess.run(["createrepo_c", "--quiet", "--no-database", "--update", str(repo_root / repo)],
                       check=True, capture_output=True)
    return added


def local_site_vars(bom: Bom, os_name: str, urls: dict[str, str], lustre: LustreMount) -> dict:
    """site.yml's extravars for a node whose only package sources are these repositories."""
    ev = configure_extravars(bom, os_name, catalog.get("p5.48xlarge"), lustre=lustre,
                             munge_secret_id="gpufleet/dev/munge", region="us-east-1",
                             live=False, enable_services=False)
    ev |= {
        "nvidia_driver_repo_url": urls["cuda"], "nvidia_driver_repo_key_url": "",
        "container_runtime_rpm_repo_url": urls["libnvidia-container"], "container_runtime_repo_key_url": "",
        "efa_installer_url": f"file:///{REPO_IN_ROOT}/aws-efa-installer-{bom.components.efa_installer.version}.tar.gz",
        "container_runtime_generate_cdi": True,
        "nvidia_driver_kernel": AL2023_KERNEL,
        # these local repositories carry no module metadata (modules.yaml): no stream to enable
        "nvidia_driver_dnf_module_stream": "",
        "nccl_tuning_build_tests": False,  # no nvcc in the dummy CUDA packages, no network
    }
    return ev
